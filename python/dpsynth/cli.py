"""The ``dpsynth`` command line.

    dpsynth synthesize DATA.csv --schema S.json --method privbayes-e --epsilon 1 --m 5 --out DIR
    dpsynth synthesize DATA.parquet --schema S.json --method privbayes-e --epsilon 1 --out DIR
    dpsynth synthesize DATA.csv --schema S.json --method napsu-mq --epsilon 1 --delta 1e-9 --m 20 \
        --analysis "income ~ age + sex" --out DIR
    dpsynth report DIR --formula "y ~ x1 + x2" --family binomial [--real DATA.csv]
    dpsynth demo
    dpsynth audit --method privbayes-e --epsilon 1
    dpsynth audit --leaks
    dpsynth datasets
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _open_data(path: str, schema, method: str):
    """A Parquet file (or folder of them) stays in DuckDB; so does a CSV file for the methods that only
    count marginals (read with the same missing-value cells); otherwise the CSV is read by pandas."""
    from dpsynth.datasets import read_csv
    from dpsynth.generators import generator_class
    from dpsynth.marginals import open_table

    name = path.lower()
    if not Path(path).exists():
        raise ValueError(f"no such file or folder: {path!r}")
    csv = name.endswith((".csv", ".tsv", ".csv.gz", ".tsv.gz"))
    if csv and not generator_class(method)[0].counts_only:
        return open_table(read_csv(path, schema))
    return open_table(path, schema)


def cmd_synthesize(args) -> int:
    import dpsynth

    schema = dpsynth.Schema.from_json(args.schema)
    table = _open_data(args.data, schema, args.method)
    if not args.quiet:
        print(f"fitting {args.method} on {table.count(schema)} rows at epsilon={args.epsilon} ...", file=sys.stderr)
    options = {"analyses": args.analysis} if args.analysis else {}
    res = dpsynth.synthesize(table, schema, args.method, epsilon=args.epsilon, delta=args.delta, m=args.m,
                             seed=args.seed, n=args.n, **options)
    out = Path(args.out)
    res.to_csv(out)
    res.generator.save(out / GENERATOR_FILE)
    if not args.quiet:
        print(res.ledger)
        print(f"wrote {res.m} datasets, ledger.csv and {GENERATOR_FILE} to {out}")
    return 0


def cmd_datasets(args) -> int:
    from dpsynth.datasets import DATASETS, data_dir

    for name in DATASETS:
        print(f"{name}\t{data_dir() / name}")
    return 0


GENERATOR_FILE = "generator.npz"  # a saved generator: data only (dpsynth.persist), no pickle


def cmd_demo(args) -> int:
    """Adult with its real missing values, the best available noise-aware generator, ε = 1, m = 20,
    a pooled logistic regression of income on age, sex and race (named to NAPSU-MQ), both reports."""
    import time

    import dpsynth
    from dpsynth.datasets import DEMO_FORMULA, demo_analysis_frame, demo_data
    from dpsynth.report import analyst_report, holder_report

    t0 = time.time()
    say = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
    methods = dpsynth.available_methods()
    method = args.method or next(m for m in ("napsu-mq", "privbayes-e", "independent") if m in methods)
    data, schema, options = demo_data(method)
    delta = 1e-9 if method == "napsu-mq" else None
    say(f"Adult: {data.shape[0]} rows x {data.shape[1]} columns, {int(data.isna().sum().sum())} missing cells; "
        f"{method}, epsilon=1{f', delta={delta:g}' if delta else ''}, m={args.m}")
    res = dpsynth.synthesize(data, schema, method, epsilon=1.0, delta=delta, m=args.m, seed=args.seed, **options)
    say(res)
    say(res.ledger)
    out = Path(args.out)
    res.to_csv(out / "synthetic")
    res.generator.save(out / GENERATOR_FILE)
    ap = analyst_report(res, DEMO_FORMULA, family="binomial", path=out / "report.html", transform=demo_analysis_frame)
    say(f"analyst report (releasable): {ap}")
    hp = holder_report(data, res, schema, DEMO_FORMULA, family="binomial", path=out / "holder-report.html",
                       target="income", transform=demo_analysis_frame)
    say(f"data holder report (PRIVATE, not for release): {hp}")
    say(f"done in {time.time() - t0:.0f} s")
    return 0


def _load_synth_dir(folder: Path):
    from dpsynth.datasets import read_csv
    from dpsynth.generators.base import Generator
    from dpsynth.result import SynthResult

    if not (folder / GENERATOR_FILE).exists() and (folder / "generator.pkl").exists():
        raise ValueError(f"{folder} holds a generator.pkl from an older dpsynth; pickle files are no longer "
                         "loaded (loading one can run code): run 'dpsynth synthesize' again")
    gen = Generator.load(folder / GENERATOR_FILE)
    files = sorted(folder.glob("synthetic_*.csv"), key=lambda p: int(p.stem.split("_")[1]))
    if not files:
        raise FileNotFoundError(f"no synthetic_*.csv files in {folder}; run 'dpsynth synthesize' first")
    frames = [gen.schema_.coerce(read_csv(str(f), gen.schema_)) for f in files]
    return SynthResult(datasets=frames, ledger=gen.ledger, method=gen.method, schema=gen.schema_, generator=gen)


def cmd_report(args) -> int:
    from dpsynth.datasets import read_csv
    from dpsynth.report import analyst_report, holder_report

    folder = Path(args.synth)
    res = _load_synth_dir(folder)
    out = Path(args.out)
    p = analyst_report(res, args.formula, family=args.family, rule=args.rule, path=out)
    if not args.quiet:
        print(f"analyst report (releasable): {p}")
    if args.real:
        real = res.schema.coerce(read_csv(args.real, res.schema))
        hp = holder_report(real, res, res.schema, args.formula, family=args.family, rule=args.rule,
                           path=out.with_name(out.stem + "-holder.html"), target=args.target)
        if not args.quiet:
            print(f"data holder report (PRIVATE, not for release): {hp}")
    return 0


def cmd_audit(args) -> int:
    if args.leaks:
        return _audit_leaks(args)
    from dpsynth.audit import distinguishing_audit

    if args.method is None or args.epsilon is None:
        raise ValueError("the distinguishing audit needs --method and --epsilon (or use --leaks)")
    res = distinguishing_audit(args.method, epsilon=args.epsilon, delta=args.delta, runs=args.runs, seed=args.seed,
                               pair=args.pair)
    what = "one row replaced by" if res["pair"] == "replace" else "one row added:"
    print(f"distinguishing audit of {res['method']} (D = 40 identical rows, D' = {what} a unique row)")
    print(f"  runs per side: {res['runs_per_side']} (threshold on half, {res['evaluated_per_side']} evaluated)")
    print(f"  false positives {res['false_positives']}, false negatives {res['false_negatives']}")
    print(f"  epsilon lower bound (95%, Clopper-Pearson): {res['eps_lo']:.3f}")
    print(f"  epsilon in the ledger:                      {res['eps_claimed']:.3f}")
    print(f"  claim for this pair under {res['relation']}: {res['claim_epsilon']:.3f}"
          f"{' (group privacy: two steps)' if res['claim_epsilon'] > res['eps_claimed'] + 1e-12 else ''}")
    print(f"  largest lower bound these runs can show:    {res['max_power']:.3f}")
    print("  PASSED: no evidence of leakage beyond the claim" if res["passed"] else
          "  FAILED: the generator leaks more than its ledger claims")
    return 0 if res["passed"] else 1


def _audit_leaks(args) -> int:
    """``dpsynth audit --leaks``: the non-noise leak audit of every registered generator (or --method)."""
    import warnings

    import pandas as pd

    from dpsynth.audit import leak_audit_all

    methods = None if args.method is None else [args.method]
    with warnings.catch_warnings():
        warnings.simplefilter("once")
        report = leak_audit_all(methods, errors="report", seed=0 if args.seed is None else args.seed)
    leaks = report[report["leak"]]
    failed = report[report["item"] == "fit"]
    print("leak audit: each generator on a 12-row table and its neighbours (a value set to NA, a row removed, "
          "an all-NA row added, a row replaced),\nthe same seed, D's noise transcript replayed on D': "
          "everything released must be identical")
    with pd.option_context("display.width", 200, "display.max_colwidth", 100):
        for name, rows in report.groupby("generator", sort=False):
            bad = rows[rows["leak"]]
            if (rows["item"] == "fit").any():
                print(f"  {name}: ERROR {rows['difference'].iloc[0]}")
                continue
            print(f"  {name}: {'PASSED' if bad.empty else 'LEAKS'} ({rows['neighbour'].nunique()} neighbours, "
                  f"{len(rows)} comparisons)")
            for r in bad.itertuples():
                print(f"      {r.neighbour}: {r.item}: {r.difference}")
    if len(failed):
        print(f"ERROR: {len(failed)} configuration(s) could not be audited")
    print("PASSED: nothing differs outside the ledger" if leaks.empty else
          f"FAILED: {leaks['generator'].nunique()} generator configuration(s) release information outside the ledger")
    return 0 if leaks.empty and failed.empty else 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dpsynth", description="Differentially private synthetic data with "
                                "missing values, and valid inference from it.")
    p.add_argument("--version", action="version", version="dpsynth 0.1.0")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("synthesize", help="fit a generator on a CSV or Parquet file and write m synthetic datasets")
    s.add_argument("data", help="private CSV file (empty cells, NA or ? are missing) or Parquet file/folder; the "
                                "marginal-based methods count it in DuckDB without loading it")
    s.add_argument("--schema", required=True, help="public schema JSON (categories, bounds, bins)")
    s.add_argument("--method", default="privbayes-e", help="generator (default privbayes-e); any of dpsynth.available_methods(), e.g. mst, aim, aim-e, dpautogan, dpctgan")
    s.add_argument("--epsilon", type=float, required=True, help="privacy budget epsilon > 0")
    s.add_argument("--delta", type=float, default=None, help="delta (needed by napsu-mq, mst, aim, aim-e, dp-misgan, dpautogan, dpctgan, kamino)")
    s.add_argument("--m", type=int, default=1, help="number of synthetic datasets")
    s.add_argument("--n", type=int, default=None, help="rows per dataset (default: released n)")
    s.add_argument("--seed", type=int, default=None, help="seed for a repeatable run (not for privacy)")
    s.add_argument("--analysis", action="append", default=None, metavar="FORMULA",
                   help="an analysis the data must serve, e.g. \"income ~ age + sex\" (repeatable; "
                        "napsu-mq measures the tables it needs)")
    s.add_argument("--out", required=True, help="output folder")
    s.add_argument("--quiet", action="store_true")
    s.set_defaults(func=cmd_synthesize)

    d = sub.add_parser("demo", help="synthesise Adult (epsilon 1, m 20), pool a logistic regression, write both reports")
    d.add_argument("--m", type=int, default=20)
    d.add_argument("--seed", type=int, default=None)
    d.add_argument("--out", default="demo-output")
    d.add_argument("--method", default=None, help="generator (default: the best noise-aware one available)")
    d.add_argument("--quiet", action="store_true")
    d.set_defaults(func=cmd_demo)

    r = sub.add_parser("report", help="analyst report (and, with --real, the private holder report)")
    r.add_argument("synth", help="folder written by 'dpsynth synthesize' (generator.npz, synthetic_*.csv)")
    r.add_argument("--formula", required=True, help="model formula, e.g. \"income ~ age + sex\"")
    r.add_argument("--family", default="gaussian", help="gaussian, binomial or poisson")
    r.add_argument("--rule", default="synthetic", help="combining rule: synthetic, mi or reiter2003")
    r.add_argument("--real", default=None, help="private CSV: also write the holder report (NOT for release)")
    r.add_argument("--target", default=None, help="column for the classifier F1 in the holder report")
    r.add_argument("--out", default="report.html")
    r.add_argument("--quiet", action="store_true")
    r.set_defaults(func=cmd_report)

    a = sub.add_parser("audit", help="distinguishing audit of a generator on worst-case toy data, or (--leaks) the "
                       "audit of what every generator releases outside its noise")
    a.add_argument("--leaks", action="store_true", help="audit every registered generator (or --method) for "
                   "releases outside the ledger: row counts, dtypes, categories, saved file, diagnostics, ledger")
    a.add_argument("--method", default=None, help="generator (required without --leaks)")
    a.add_argument("--epsilon", type=float, default=None,
                   help="epsilon of the distinguishing audit (--leaks runs each generator at its own)")
    a.add_argument("--delta", type=float, default=None)
    a.add_argument("--pair", choices=["replace", "add"], default="replace",
                   help="D' = D with one row replaced (default) or one row added")
    a.add_argument("--runs", type=int, default=300, help="runs per side (default 300)")
    a.add_argument("--seed", type=int, default=None)
    a.set_defaults(func=cmd_audit)

    ds = sub.add_parser("datasets", help="list the bundled datasets")
    ds.set_defaults(func=cmd_datasets)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "quiet", True):
        from dpsynth.progress import enable

        enable()
    try:
        return args.func(args)
    except (ValueError, TypeError, FileNotFoundError) as err:
        print(f"dpsynth: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
