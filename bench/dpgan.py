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

import argparse
import json
import sys
import time

import numpy as np
import torch

import dpsynth
from dpsynth.generators import make_generator
from dpsynth.metrics import tvd
from dpsynth.missing import ampute

EPS, DELTA = 3.0, 1e-6


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--methods", default="dp-misgan,dpautogan,dpctgan")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    df, schema = dpsynth.load_dataset("adult")
    truth = df.dropna().sample(n=8000, random_state=0).reset_index(drop=True)
    runs = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        mcar = ampute(truth, mechanism="MCAR", p=0.2, seed=seed)
        for method in args.methods.split(","):
            t0 = time.perf_counter()
            gen = make_generator(method, EPS, DELTA).fit(mcar, schema, seed=seed)
            syn = gen.sample(n=len(truth), seed=seed + 1).datasets[0]
            r = {"method": method, "seed": seed, "seconds": round(time.perf_counter() - t0, 1),
                 "tvd2": round(tvd(truth, syn, schema, k=2), 4), "tvd1": round(tvd(truth, syn, schema, k=1), 4),
                 "epsilon_spent": gen.ledger.total_epsilon(),
                 "within_budget": bool(gen.ledger.total_epsilon() <= EPS * (1 + 1e-9)),
                 "rows_trained_on_released": round(float(gen.n_), 1)}
            runs.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
    summary = {m: {k: round(float(np.mean([r[k] for r in runs if r["method"] == m])), 4) for k in ("tvd2", "tvd1", "seconds")}
               for m in dict.fromkeys(r["method"] for r in runs)}
    out = {"runs": runs, "summary": summary, "all_within_budget": all(r["within_budget"] for r in runs)}
    if "dp-misgan" in summary and "dpautogan" in summary:
        out["dp-misgan_better_than_dpautogan"] = summary["dp-misgan"]["tvd2"] < summary["dpautogan"]["tvd2"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
