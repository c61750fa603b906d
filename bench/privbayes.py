"""PrivBayes vs PrivBayesE on incomplete data (the seed paper, §6.2), plus MCAR amplification.

Ground truth = the complete rows of each bundled dataset (Adult: 30,162). For each missingness
mechanism (MCAR, MAR, MNAR at 20 %) and seed, the truth is masked with ``dpsynth.missing.ampute``,
PrivBayesE (``missing="partial"``) and PrivBayes on complete rows are fitted at ε = 1 and sampled
(n = number of rows), and the paper-compatible 1- and 2-way TVD against the complete ground truth is
computed with ``dpsynth.metrics.tvd`` (16 equal-width bins, rows with missing cells dropped, mean
over all combinations). Seconds = fit + sample of n rows (seeded runs). For MCAR the ledger's
ground-truth ε (``ledger.ground_truth_epsilon``, replace-one) is reported next to the paper's
Algorithm 4 figure. ``schema_binning_floor``: the TVD of the truth itself after the public schema's
binning and uniform de-binning (the C++ binned by data-derived .domain bounds, which the paper's TVD
also uses). ``speed``: Adult MCAR PrivBayesE fit + sample of 30,162 rows in the default private mode
(seed=None, OpenDP noise), after one warm-up run; the one-off OpenDP import is reported apart.

Reference (upstream C++, missing-data.md §8, 2-way TVD): Adult PrivBayesE MCAR 0.221, MAR 0.180,
MNAR 0.227; complete rows 0.425 / 0.208 / 0.445; C++ PrivBayesE Adult 3.9 s.

Usage: python bench/privbayes.py [--datasets adult,bank,national] [--seeds 3] [--epsilon 1]
Prints progress to stderr and one JSON object on the last line of stdout.
"""
from __future__ import annotations

import time

import numpy as np
from _common import complete_truth, emit, fit_sample, log, machine, parse_list, parser, tvd_figures

from dpsynth.generators.privbayes import PrivBayes
from dpsynth.metrics import tvd
from dpsynth.missing import ampute
from dpsynth.privacy import mcar_amplification

MODES = {"privbayes-e": "partial", "privbayes": "complete-rows"}
UPSTREAM_2WAY = {  # missing-data.md §8, mean over 3 runs
    ("adult", "MCAR"): (0.221, 0.425), ("adult", "MAR"): (0.180, 0.208), ("adult", "MNAR"): (0.227, 0.445),
    ("bank", "MCAR"): (0.157, 0.338), ("bank", "MAR"): (0.113, 0.154), ("bank", "MNAR"): (0.153, 0.355),
    ("national", "MCAR"): (0.198, 0.752), ("national", "MAR"): (0.186, 0.316), ("national", "MNAR"): (0.200, 0.668),
}


def run_one(truth, masked, schema, mode, epsilon, seed, rates=None):
    gen, synth, _, seconds = fit_sample(PrivBayes(epsilon, missing=mode), masked, schema, seed, seed + 1000)
    out = {"seconds": seconds, **tvd_figures(truth, synth, schema, ks=(1, 2), digits=None),
           "ledger_epsilon": gen.ledger.total_epsilon(), "rows": len(synth)}
    if rates is not None:  # the guarantee (ex ante); the paper's Algorithm 4 figure is the ex-post diagnostic's
        eps_bar, det = gen.ledger.ground_truth_epsilon(rates, return_details=True)
        out.update(ground_truth_epsilon=eps_bar, algorithm4=det["ex_post"]["algorithm4"])
    return out


def schema_floor(truth, schema):
    """TVD of the truth passed through the schema's binning and uniform de-binning: what any
    generator that works on schema bins pays under the paper's data-bounded 16-bin TVD."""
    from dpsynth.schema import cast_to_schema

    rt = cast_to_schema(schema.decode(schema.encode(truth), np.random.default_rng(0)), schema)
    return {"tvd1": round(tvd(truth, rt, schema, k=1), 4), "tvd2": round(tvd(truth, rt, schema, k=2), 4)}


def summarise(runs):
    s = {}
    for key in runs[0]:
        vals = np.array([r[key] for r in runs], dtype=float)
        s[key] = round(float(vals.mean()), 4)
        if key in ("tvd1", "tvd2", "seconds"):
            s[key + "_sd"] = round(float(vals.std(ddof=1)), 4) if len(vals) > 1 else 0.0
    return s


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--datasets", default="adult,bank,national")
    ap.add_argument("--mechanisms", default="MCAR,MAR,MNAR")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--p", type=float, default=0.2)
    args = ap.parse_args(argv)

    results, floors = {}, {}
    for ds in parse_list(args.datasets):
        truth, schema = complete_truth(ds)
        floors[ds] = schema_floor(truth, schema)
        for mech in args.mechanisms.split(","):
            runs = {name: [] for name in MODES}
            for seed in range(args.seeds):
                masked = ampute(truth, mech, p=args.p, seed=seed, schema=schema)
                rates = {c: args.p for c in schema.names} if mech == "MCAR" else None
                for name, mode in MODES.items():
                    r = run_one(truth, masked, schema, mode, args.epsilon, seed, rates)
                    runs[name].append(r)
                    log(f"{ds} {mech} seed {seed} {name}: tvd2 {r['tvd2']:.4f} tvd1 {r['tvd1']:.4f} "
                        f"{r['seconds']:.2f} s")
            key = f"{ds}/{mech}"
            results[key] = {name: summarise(rs) for name, rs in runs.items()}
            results[key]["complete_rows_in_masked"] = int(masked.dropna().shape[0])
            if (ds, mech) in UPSTREAM_2WAY:
                results[key]["upstream_cpp_tvd2"] = dict(zip(MODES, UPSTREAM_2WAY[(ds, mech)]))

    speed = {}
    if "adult" in args.datasets.split(","):
        # the default, private mode (seed=None: OpenDP exact noise from OS entropy) after a warm-up;
        # importing OpenDP is a one-off cost of the process, reported apart
        t0 = time.perf_counter()
        import opendp.prelude  # noqa: F401  (timed: the one-off import)
        speed["opendp_import_seconds"] = round(time.perf_counter() - t0, 3)
        truth, schema = complete_truth("adult")
        masked = ampute(truth, "MCAR", p=args.p, seed=0, schema=schema)
        times = []
        for _ in range(4):
            t0 = time.perf_counter()
            PrivBayes(args.epsilon, missing="partial").fit(masked, schema).sample(n=len(truth))
            times.append(time.perf_counter() - t0)
        speed["adult_mcar_privbayes_e_fit_sample_seconds_os_entropy"] = [round(t, 3) for t in times[1:]]
        speed["median_seconds"] = round(float(np.median(times[1:])), 3)

    amp = {}
    e, det = mcar_amplification([["a"]], [3.0], {"a": 0.5})
    amp["one_marginal_eps3_mcar50"] = {"exact": round(e, 4), "algorithm4": det["algorithm4"]}
    sets = [["state"], ["occupation"], ["gender"], ["gender", "income"]]
    rates = {"state": 0.25, "occupation": 0.0, "gender": 0.25, "income": 0.25}
    e, det = mcar_amplification(sets, [0.25] * 4, rates)
    e_ro, _ = mcar_amplification(sets, [0.25] * 4, rates, relation="replace-one")
    amp["example_5_11"] = {"exact_add_remove": round(e, 4), "exact_replace_one": round(e_ro, 4),
                           "algorithm4": det["algorithm4"]}

    checks = {"ledger_le_epsilon": all(v[m]["ledger_epsilon"] <= args.epsilon + 1e-9
                                       for v in results.values() for m in MODES)}
    targets = {"MCAR": 0.20, "MAR": 0.180, "MNAR": 0.227}  # issue 4 (upstream C++ 0.221 / 0.180 / 0.227)
    for mech, target in targets.items():
        r = results.get(f"adult/{mech}")
        if r:
            checks[f"adult_{mech.lower()}_privbayes_e_tvd2_le_{target}"] = r["privbayes-e"]["tvd2"] <= target
            checks[f"adult_{mech.lower()}_complete_rows_worse"] = r["privbayes"]["tvd2"] > r["privbayes-e"]["tvd2"]
    if speed:
        checks["adult_mcar_privbayes_e_fit_sample_le_2s"] = speed["median_seconds"] <= 2.0
    summary = {"bench": "privbayes", "epsilon": args.epsilon, "p": args.p, "seeds": args.seeds,
               "machine": "{arch}, {cpus} cores shared with other jobs (timings under contention)".format(**machine()),
               "results": results, "schema_binning_floor": floors, "speed": speed, "amplification": amp,
               "checks": checks}
    emit(summary)


if __name__ == "__main__":
    main()
