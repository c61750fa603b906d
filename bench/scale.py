"""Data bigger than memory (issue 18): PrivBayesE on Adult resampled to 1M, 3M and 10M rows in Parquet.

Adult (the bundled 32,561 rows, real missing values kept) is resampled with replacement into one
Parquet file per size by DuckDB (a deterministic hash of the row number picks the source row), so
no large frame is ever built in Python. Each size is then run in a fresh process:
``dpsynth.synthesize(path, schema, "privbayes-e", epsilon=1, n=100_000, seed=1)``; ``seconds`` runs
from ``import dpsynth`` to the synthetic data (import, validation and counting in DuckDB, fit,
sampling), ``process_seconds`` is the whole child process's wall time (with interpreter start-up and
the bookkeeping after), ``fit_seconds`` validation + synthesize (fit and sampling), of which
``scan_seconds`` is the validation and grouping scan in the backend, ``peak_mib`` the process's peak
resident memory (ru_maxrss, DuckDB included). ``distinct_rows``: the distinct encoded rows DuckDB hands back (the counting works on
them; see dpsynth.marginals). With ``--pandas``, the 1M run is repeated from a DataFrame for
comparison (the data read into pandas first; that read is outside ``fit_seconds``).

``import``: wall seconds of ``python -c "import pandas"`` and ``python -c "import dpsynth"`` (median
of 7 fresh processes each, in this run, with the bare interpreter's start-up for reference), and
whether a PrivBayesE run imports torch or statsmodels.

Acceptance (issue 18): 10M rows ≤ 60 s and ≤ 1 GB peak on 2 cores; import dpsynth ≤ 1.5× import pandas.
Measured on the shared 2-core development machine (load average ≈ 3, so upper bounds): 1M rows 4.4 s /
222 MiB, 3M 10.4 s / 258 MiB, 10M 24.8 s / 277 MiB (DuckDB scan 6.0 s of it); import pandas 0.94 s,
import dpsynth 0.95 s (ratio 1.00). At load ≈ 5 the 10M run took 47–57 s. Before issue 18, PrivBayesE
on 1M rows from a DataFrame took 22.9 s and 686 MiB; from a DataFrame it now takes 7–8 s.

Usage: python bench/scale.py [--sizes 1000000,3000000,10000000] [--pandas] [--workdir DIR]
Prints progress to stderr and one JSON object on the last line of stdout.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import emit, log, machine, parser

HERE = Path(__file__).resolve().parent
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent / "python"), os.environ.get("PYTHONPATH", "")]))

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import dpsynth
from dpsynth.marginals import open_table
path, source = sys.argv[1], sys.argv[2]
df, schema = dpsynth.load_dataset("adult")
data = path
if source == "pandas":
    import duckdb
    data = duckdb.read_parquet(path).df()
t1 = time.perf_counter()
table = open_table(data, schema)
table.validate(schema)  # the schema checks and the grouping of the encoded rows (one scan in DuckDB)
t_scan = time.perf_counter()
res = dpsynth.synthesize(table, schema, "privbayes-e", epsilon=1.0, n=100_000, seed=1)
t2 = time.perf_counter()
rows = table.rows(schema) if source == "parquet" else None  # cached by validate: no new scan
out = {"rows": table.count(schema), "seconds": t2 - t0, "fit_seconds": t2 - t1, "scan_seconds": t_scan - t1,
       "import_seconds": t1 - t0,
       "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "synthetic_rows": len(res.datasets[0]),
       "epsilon": res.ledger.total_epsilon(), "distinct_rows": None if rows is None else int(rows.codes.shape[0]),
       "torch_imported": "torch" in sys.modules, "statsmodels_imported": "statsmodels" in sys.modules}
print(json.dumps(out))
"""


def make_parquet(rows: int, path: Path) -> float:
    """Adult resampled with replacement to ``rows`` rows, written by DuckDB; returns seconds."""
    import duckdb

    import dpsynth

    t = time.perf_counter()
    df, _ = dpsynth.load_dataset("adult")
    con = duckdb.connect(config={"memory_limit": "1GB"})
    con.register("adult_frame", df)
    con.execute("CREATE TABLE adult AS SELECT row_number() OVER () - 1 AS i, * FROM adult_frame")
    n0 = len(df)
    cols = ", ".join(f'a."{c}"' for c in df.columns)
    con.execute(f"COPY (SELECT {cols} FROM range({rows}) r JOIN adult a ON a.i = hash(r.range) % {n0}) "
                f"TO '{path}' (FORMAT parquet, ROW_GROUP_SIZE 1000000)")
    con.close()
    return time.perf_counter() - t


def run_child(path: Path, source: str) -> dict:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path), source], env=ENV, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(proc.stderr)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_seconds"] = time.perf_counter() - t
    return out


def import_seconds(statement: str, repeats: int = 7) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", statement], env=ENV, check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--sizes", default="1000000,3000000,10000000")
    ap.add_argument("--pandas", action="store_true", help="also run the 1M rows from a DataFrame")
    ap.add_argument("--workdir", default=None, help="folder for the Parquet files (default: a temporary one)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="dpsynth-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    out = {"bench": "scale", "method": "privbayes-e", "epsilon": 1.0, "synthetic_rows": 100_000,
           "machine": {**machine(("cpus", "python")), "load_average_before": os.getloadavg()}, "runs": {}}
    try:
        base = import_seconds("pass")
        pandas_s = import_seconds("import pandas")
        dpsynth_s = import_seconds("import dpsynth")
        out["import"] = {"python_seconds": base, "pandas_seconds": pandas_s, "dpsynth_seconds": dpsynth_s,
                         "ratio": dpsynth_s / pandas_s,
                         "ratio_without_interpreter": (dpsynth_s - base) / max(pandas_s - base, 1e-9)}
        log(f"import: python {base:.3f} s, pandas {pandas_s:.3f} s, dpsynth {dpsynth_s:.3f} s")
        for n in sizes:
            path = work / f"adult_{n}.parquet"
            made = make_parquet(n, path) if not path.exists() else 0.0
            r = run_child(path, "parquet")
            r["parquet_seconds"], r["parquet_mib"] = made, path.stat().st_size / 2 ** 20
            out["runs"][f"{n}"] = r
            log(f"{n:>10,} rows: {r['seconds']:.1f} s (scan {r['scan_seconds']:.1f} s), peak {r['peak_mib']:.0f} "
                f"MiB ({r['distinct_rows']} distinct encoded rows)")
        if args.pandas:
            n = sizes[0]
            r = run_child(work / f"adult_{n}.parquet", "pandas")
            out["runs"][f"{n}_dataframe"] = r
            log(f"{n:>10,} rows from a DataFrame: fit {r['fit_seconds']:.1f} s, peak {r['peak_mib']:.0f} MiB")
        out["machine"]["load_average_after"] = os.getloadavg()
        big = out["runs"].get("10000000")
        out["acceptance"] = {
            "10M_within_60s": None if big is None else big["seconds"] <= 60,
            "10M_within_1GB": None if big is None else big["peak_mib"] <= 1024,
            "import_within_1.5x_pandas": out["import"]["ratio"] <= 1.5,
            "no_torch_or_statsmodels": all(not (r["torch_imported"] or r["statsmodels_imported"])
                                           for r in out["runs"].values()),
        }
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    emit(out)


if __name__ == "__main__":
    main()
