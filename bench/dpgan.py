"""DPautoGAN and DP-CTGAN against DP-MisGAN on incomplete Adult (issue 17; the seed paper's Figure 3 pair).

8,000 complete Adult rows (``df.dropna().sample(8000, random_state=0)``) with 20 % MCAR cells
(``dpsynth.missing.ampute``, seed = run seed); ε = 3, δ = 1e-6, default settings. DP-MisGAN uses
every row (adaptive); DPautoGAN and DP-CTGAN use the complete rows only (the seed's baselines; with
15 columns at 20 % MCAR about 0.8¹⁵ ≈ 3.5 % of the rows are complete). 2-way (and 1-way) TVD
against the 8,000 complete rows (``dpsynth.metrics.tvd``, paper mode), seconds, ledger ε. Target:
DP-MisGAN better than DPautoGAN on complete rows; every ledger within budget.

Usage: ``python bench/dpgan.py [--seeds 1] [--methods dp-misgan,dpautogan,dpctgan]``; one JSON object
on the last line.
"""
from __future__ import annotations

import json

import torch
from _common import adult_8000, emit, fit_sample, group, log, means, parse_list, parser, tvd_figures, within_budget

from dpsynth.generators import make_generator
from dpsynth.missing import ampute

EPS, DELTA = 3.0, 1e-6


def main(argv=None):
    ap = parser(__doc__)
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--methods", default="dp-misgan,dpautogan,dpctgan")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    truth, schema = adult_8000()
    runs = []
    for seed in parse_list(args.seeds, int):
        mcar = ampute(truth, mechanism="MCAR", p=0.2, seed=seed)
        for method in args.methods.split(","):
            gen, syn, _, secs = fit_sample(make_generator(method, EPS, DELTA), mcar, schema, seed, seed + 1,
                                           n=len(truth))
            r = {"method": method, "seed": seed, "seconds": round(secs, 1), **tvd_figures(truth, syn, schema),
                 "epsilon_spent": gen.ledger.total_epsilon(), "within_budget": within_budget(gen.ledger, EPS),
                 "rows_trained_on_released": round(float(gen.n_), 1)}
            runs.append(r)
            log(json.dumps(r))
    summary = {m: means(rs, {"tvd2": 4, "tvd1": 4, "seconds": 4})
               for m, rs in group(runs, lambda r: r["method"]).items()}
    out = {"runs": runs, "summary": summary, "all_within_budget": all(r["within_budget"] for r in runs)}
    if "dp-misgan" in summary and "dpautogan" in summary:
        out["dp-misgan_better_than_dpautogan"] = summary["dp-misgan"]["tvd2"] < summary["dpautogan"]["tvd2"]
    emit(out)


if __name__ == "__main__":
    main()
