"""The missing-data evaluation grid: generator × mechanism × rate × ε → TVD (and F1 on Adult).

Protocol of the seed paper (Mohapatra et al., PVLDB 2024, §6.1; artifact ``utils.create_missing`` and
``evaluation.py``): the ground truth is the table's complete rows; missingness is injected with
:func:`dpsynth.missing.ampute` (Muzellec et al. presets); each generator is fitted on the incomplete
table and draws its default number of rows; the synthetic table is compared with the complete ground
truth by the paper-compatible k-way TVD (16 bins + the max's bin, incomplete rows dropped, mean over
all column sets) and, for Adult, by the mean F1 of the 9 classifiers (train synthetic, test real).
Rate 0 runs the generator on the complete ground truth (the paper's "no missing" red line).

Methods are registry names (``independent``, ``privbayes``, ``privbayes-e``, ...) or a vanilla
strategy around one: ``complete-rows:independent``, ``impute-random:privbayes``,
``impute-dp-mean:privbayes`` (25 % of ε to imputation). The upstream PrivBayes/PrivBayesE C++
reference (missing-data.md §8: ε = 1, 20 % masks, 3 runs) is attached where a row matches it.

Usage::

    python bench/missing_grid.py --quick
    python bench/missing_grid.py --methods figure3 --datasets adult --mechanisms MCAR --rates 0.1,0.2,0.3
    python bench/missing_grid.py --methods privbayes,privbayes-e --datasets adult --mechanisms MCAR,MAR,MNAR \\
        --rates 0.2 --epsilons 1 --seeds 1,2,3

F1 defaults to Adult's income target only (9 classifiers, ≈ 10 s per run); ``--f1-targets paper``
gives the paper's mean over 14 targets (≈ 3 min per Adult run on a shared 2-core machine).

Writes ``bench/out/missing_grid.csv`` (one row per run) and ``bench/out/missing_grid_summary.csv``
(mean ± sd over seeds) and prints one JSON object on its last line.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
from _common import CONTENTION, complete_truth, emit, fit_sample, log, parse_list, parser, tvd_figures

from dpsynth.generators import available_methods, generator_class, make_generator
from dpsynth.metrics import f1_average
from dpsynth.metrics.f1 import PAPER_TARGETS
from dpsynth.missing import ampute
from dpsynth.schema import atomic_write_text

OUT = Path(__file__).resolve().parent / "out"
DEFAULT_METHODS = ("independent", "privbayes", "privbayes-e")
#: ``--methods figure3``: the seed paper's Figure 3 — each adaptive method next to its complete-row
#: baseline (PrivBayesE/PrivBayes, AIM-E/AIM, KaminoI/Kamino, DP-MisGAN/DPautoGAN, DPCTGAN), plus MST;
#: those not available in this version are skipped
FIGURE3_METHODS = ("privbayes", "privbayes-e", "aim", "aim-e", "mst", "kamino", "kamino-i", "dp-misgan",
                   "dpautogan", "dpctgan")
STRATEGIES = {"complete-rows": {}, "impute-random": {}, "impute-dp-mean": {"impute_share": 0.25}}

#: upstream C++ PrivBayesE / complete-row PrivBayes, ε = 1, 20 % masks (missing-data.md §8): (tvd1, tvd2)
REFERENCE = {
    ("adult", "MCAR"): {"privbayes-e": (0.122, 0.221), "privbayes": (0.255, 0.425)},
    ("adult", "MAR"): {"privbayes-e": (0.094, 0.180), "privbayes": (0.106, 0.208)},
    ("adult", "MNAR"): {"privbayes-e": (0.125, 0.227), "privbayes": (0.274, 0.445)},
    ("bank", "MCAR"): {"privbayes-e": (0.092, 0.157), "privbayes": (0.201, 0.338)},
    ("bank", "MAR"): {"privbayes-e": (0.061, 0.113), "privbayes": (0.089, 0.154)},
    ("bank", "MNAR"): {"privbayes-e": (0.088, 0.153), "privbayes": (0.215, 0.355)},
    ("national", "MCAR"): {"privbayes-e": (0.110, 0.198), "privbayes": (0.528, 0.752)},
    ("national", "MAR"): {"privbayes-e": (0.100, 0.186), "privbayes": (0.183, 0.316)},
    ("national", "MNAR"): {"privbayes-e": (0.112, 0.200), "privbayes": (0.458, 0.668)},
}


def parse_args(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--methods", default=None, help="comma list (default: those of %s available), or 'figure3' "
                    "(the seed paper's Figure 3 methods)" % ",".join(DEFAULT_METHODS))
    ap.add_argument("--datasets", default="adult,bank,national")
    ap.add_argument("--mechanisms", default="MCAR,MAR,MNAR,MNARQ")
    ap.add_argument("--rates", default="0.1,0.2", help="missing rates; 0 = the complete ground truth")
    ap.add_argument("--epsilons", default="1")
    ap.add_argument("--seeds", default="1,2,3", help="comma list of seeds (mask and generator)")
    ap.add_argument("--tvd3", action="store_true", help="also the 3-way TVD (slower)")
    ap.add_argument("--f1-targets", default="income",
                    help="'paper' (the mean over Adult's 14 targets, the paper's figure: about 3 min per Adult "
                         "run on a shared 2-core machine), 'none', or a comma list of Adult targets")
    ap.add_argument("--f1-classifiers", default="all", help="'all' (the paper's 9) or a comma list")
    ap.add_argument("--quick", action="store_true",
                    help="one seed, rate 0.2, ε = 1 (datasets, mechanisms and F1 targets as given)")
    ap.add_argument("--out", default=str(OUT / "missing_grid.csv"))
    args = ap.parse_args(argv)
    if args.quick:
        args.rates, args.epsilons, args.seeds = "0.2", "1", "1"
    return args


def resolve_methods(text):
    avail = available_methods()
    if text is None:
        methods = [m for m in DEFAULT_METHODS if m in avail]
    elif text == "figure3":
        methods = [m for m in FIGURE3_METHODS if m in avail]
    else:
        methods = parse_list(text)
    for m in methods:
        base = m.split(":", 1)[-1]
        if ":" in m and m.split(":", 1)[0] not in STRATEGIES:
            raise SystemExit(f"unknown strategy in {m!r}; use one of {sorted(STRATEGIES)}")
        if base not in avail:
            raise SystemExit(f"method {base!r} is not available; available: {avail}")
    return methods


def build(method: str, epsilon: float, n_rows: int):
    delta = 10.0 ** -(len(str(n_rows)) + 1)  # the paper's δ: one magnitude below 1/n
    if ":" in method:
        strategy, inner = method.split(":", 1)
        cls = generator_class(inner)[0]
        d = delta if cls.needs_delta else None
        return make_generator(strategy, epsilon, d, generator=inner, **STRATEGIES[strategy])
    cls = generator_class(method)[0]
    return make_generator(method, epsilon, delta if cls.needs_delta else None)


def run(args) -> dict:
    t_start = time.time()
    methods = resolve_methods(args.methods)
    datasets = parse_list(args.datasets)
    mechanisms = [m.upper() for m in parse_list(args.mechanisms)]
    rates = parse_list(args.rates, float)
    epsilons = parse_list(args.epsilons, float)
    seeds = parse_list(args.seeds, int)
    classifiers = None if args.f1_classifiers == "all" else parse_list(args.f1_classifiers)
    rows = []
    for ds in datasets:
        truth, schema = complete_truth(ds)
        targets = None
        if ds == "adult" and args.f1_targets != "none":
            targets = PAPER_TARGETS["adult"] if args.f1_targets == "paper" else parse_list(args.f1_targets)
        cells = [("none", 0.0)] if 0.0 in rates else []
        cells += [(m, r) for m in mechanisms for r in rates if r > 0]
        for mech, rate in cells:
            for seed in seeds:
                data = truth if rate == 0 else ampute(truth, mech, rate, seed=seed, schema=schema)
                realised = float(data.isna().to_numpy().mean())
                complete = int(len(data.dropna()))
                for method in methods:
                    for eps in epsilons:
                        row = {"dataset": ds, "method": method, "mechanism": mech, "rate": rate, "epsilon": eps,
                               "seed": seed, "cell_missing": round(realised, 4), "complete_rows": complete}
                        try:
                            gen, synth, _, secs = fit_sample(build(method, eps, len(truth)), data, schema, seed,
                                                             seed + 10_000)
                        except Exception as err:  # one failing cell must not sink the grid
                            row.update({"error": f"{type(err).__name__}: {err}"})
                            rows.append(row)
                            log(f"[missing_grid] {ds} {method} {mech} {rate} ε={eps} seed={seed}: {row['error']}")
                            continue
                        row.update(fit_sample_s=round(secs, 2), n_synth=len(synth),
                                   epsilon_spent=gen.ledger.total_epsilon())
                        row.update(tvd_figures(truth, synth, schema, ks=(1, 2, 3) if args.tvd3 else (1, 2), digits=None))
                        if targets is not None:
                            t1 = time.time()
                            row["f1"] = f1_average(truth, synth, targets, classifiers, schema=schema, seed=42).f1
                            row["f1_s"] = round(time.time() - t1, 1)
                        rows.append(row)
                        log(f"[missing_grid] {ds} {method} {mech} p={rate} ε={eps} seed={seed}: "
                            f"tvd1={row['tvd1']:.3f} tvd2={row['tvd2']:.3f}" + (f" f1={row['f1']:.3f}" if "f1" in row else ""))
    table = pd.DataFrame(rows)
    out = Path(args.out)
    atomic_write_text(out, table.to_csv(index=False))
    summary = summarise(table)
    atomic_write_text(out.with_name(out.stem + "_summary.csv"), summary.to_csv(index=False))
    return {
        "bench": "missing_grid",
        "csv": str(out),
        "runs": int(len(table)),
        "errors": int(table["error"].notna().sum()) if "error" in table else 0,
        "seconds": round(time.time() - t_start, 1),
        "settings": {"methods": methods, "datasets": datasets, "mechanisms": mechanisms, "rates": rates,
                     "epsilons": epsilons, "seeds": seeds, "tvd": "paper mode (16 bins + max bin, dropna)",
                     "truth": "complete rows of the real data",
                     "f1": None if args.f1_targets == "none" else
                     f"adult targets={args.f1_targets}, classifiers={args.f1_classifiers} "
                     "(HistGradientBoosting substitutes XGBoost)"},
        "summary": _records(summary),
        "note": CONTENTION,
    }


def summarise(table: pd.DataFrame) -> pd.DataFrame:
    keys = ["dataset", "method", "mechanism", "rate", "epsilon"]
    ok = table[table["error"].isna()] if "error" in table else table
    if ok.empty:
        return pd.DataFrame(columns=keys)
    metrics = [m for m in ("tvd1", "tvd2", "tvd3", "f1") if m in ok]
    agg = ok.groupby(keys, sort=False).agg(
        n_seeds=("seed", "count"), cell_missing=("cell_missing", "mean"), complete_rows=("complete_rows", "mean"),
        n_synth=("n_synth", "mean"), **{f"{m}": (m, "mean") for m in metrics},
        **{f"{m}_sd": (m, "std") for m in metrics}).reset_index()
    ref1, ref2 = [], []
    for _, r in agg.iterrows():
        ref = REFERENCE.get((r["dataset"], r["mechanism"]), {}).get(r["method"])
        match = ref is not None and math.isclose(r["rate"], 0.2) and math.isclose(r["epsilon"], 1.0)
        ref1.append(ref[0] if match else np.nan)
        ref2.append(ref[1] if match else np.nan)
    agg["ref_cpp_tvd1"], agg["ref_cpp_tvd2"] = ref1, ref2
    return agg


def _records(frame: pd.DataFrame) -> list:
    out = []
    for rec in frame.to_dict(orient="records"):
        clean = {}
        for k, v in rec.items():
            if isinstance(v, (float, np.floating)):
                clean[k] = None if not np.isfinite(v) else round(float(v), 4)
            elif isinstance(v, np.integer):
                clean[k] = int(v)
            else:
                clean[k] = v
        out.append(clean)
    return out


def main(argv=None):
    result = run(parse_args(argv))
    emit(result)


if __name__ == "__main__":
    main()
