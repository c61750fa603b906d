"""NAPSU-MQ benchmark: toy and Adult timings, MCMC ESS/s, coverage.

Toy (Räisä et al. 2023, Sec. 5.1): n = 2000, x1, x2 ~ Bernoulli(½), y ~ Bernoulli(expit(x1)), the
full 3-way marginal, δ = n⁻²; time of fit + 20 datasets; coverage of (1, 0) by the 95 % intervals of
the no-intercept logistic regression pooled with the fully synthetic rule (m = 20).
Adult (Sec. 5.2): the paper's 10 discretised columns, complete rows, ε = 1, δ = n⁻², MST forcing the
analysis marginals; time of MST + posterior + 20 datasets of n rows; coverage of the real-data
coefficients of income ~ age + race + sex and the median ratio of interval widths to the real-data
ones. Inference: the default (Laplace-referenced elliptical slice sampling), the plain Laplace
approximation, and HMC preconditioned by the Laplace covariance (short run). ESS/s = min bulk ESS
(over θ, and over the released cells' probabilities) per second of sampling.

Usage: python bench/napsu.py [--toy-reps 100] [--adult-reps 3] [--quick]
Prints one JSON object on its last line. Timings are wall-clock on whatever machine runs it (the
development machine has 2 cores shared with other jobs: expect contention).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
import warnings

import numpy as np
import pandas as pd

import dpsynth
from dpsynth.generators.napsu import ADULT_FORCED_QUERIES, NAPSUMQ, adult_reduced

TOY_SCHEMA = dpsynth.Schema.from_dict({c: {"type": "categorical", "categories": [0, 1]} for c in ["x1", "x2", "y"]})
ADULT_FORMULA = "income ~ agemid + C(race, Treatment('White')) + C(sex, Treatment('Female'))"


def toy_data(n, rng):
    x1, x2 = rng.integers(0, 2, n), rng.integers(0, 2, n)
    y = (rng.random(n) < 1 / (1 + np.exp(-x1))).astype(int)
    return pd.DataFrame({"x1": x1, "x2": x2, "y": y})


def pooled(frames, formula, rule="synthetic"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dpsynth.fit_pooled(frames, formula, family="binomial", rule=rule).to_frame().set_index("term")


def _mcmc_figures(diag):
    keys = ("mcmc_seconds", "rhat_max", "ess_bulk_min", "ess_per_second", "rhat_max_cells", "ess_bulk_min_cells",
            "accept_rate", "n_leapfrog", "log_density_evaluations", "gradient_evaluations")
    out = {k: round(float(np.median([d[k] for d in diag])), 4) for k in keys if k in diag[0]}
    if "ess_bulk_min_cells" in out and "mcmc_seconds" in out:
        out["ess_cells_per_second"] = round(out["ess_bulk_min_cells"] / out["mcmc_seconds"], 3)
    return out


def toy(eps, reps, inference="slice", **options):
    cover, secs, width, diag = [], [], [], []
    for r in range(reps):
        df = toy_data(2000, np.random.default_rng(50_000 + r))
        t0 = time.perf_counter()
        gen = NAPSUMQ(eps, 1 / 2000 ** 2, queries=[("x1", "x2", "y")], inference=inference,
                      **options).fit(df, TOY_SCHEMA, seed=r)
        res = gen.sample(m=20, seed=r + 1)
        secs.append(time.perf_counter() - t0)
        diag.append(gen.diagnostics_)
        tab = pooled(res.datasets, "y ~ x1 + x2 - 1").loc[["x1", "x2"]]
        truth = np.array([1.0, 0.0])
        cover.append(((tab["conf.low"] <= truth) & (truth <= tab["conf.high"])).to_numpy())
        width.append((tab["conf.high"] - tab["conf.low"]).to_numpy())
    out = {"inference": inference, "reps": reps, "coverage_x1": float(np.mean(cover, 0)[0]),
           "coverage_x2": float(np.mean(cover, 0)[1]),
           "median_width": [round(float(w), 3) for w in np.median(width, 0)],
           "median_seconds_fit_plus_20": round(float(np.median(secs)), 3),
           "max_seconds_fit_plus_20": round(float(np.max(secs)), 3)}
    if inference != "laplace":
        out.update(_mcmc_figures(diag))
    return out


def adult_data():
    df, schema = dpsynth.load_dataset("adult")
    d, s = adult_reduced(df, schema)
    return d.dropna().reset_index(drop=True), s


def adult(reps, inference="slice", **options):
    d, s = adult_data()
    frames = lambda fs: [f.assign(agemid=f["age"].astype(str).astype(float)) for f in fs]
    real_tab = pooled(frames([d, d]), ADULT_FORMULA, rule="mi")
    real, real_width = real_tab["estimate"], 2 * 1.959964 * np.sqrt(real_tab["ubar"])
    cover, secs, diag, ratio = [], [], [], []
    for r in range(reps):
        t0 = time.perf_counter()
        gen = NAPSUMQ(1.0, 1 / len(d) ** 2, queries="mst", forced_queries=ADULT_FORCED_QUERIES,
                      inference=inference, **options).fit(d, s, seed=r)
        res = gen.sample(m=20, seed=r + 1)
        secs.append(time.perf_counter() - t0)
        tab = pooled(frames(res.datasets), ADULT_FORMULA).reindex(real.index)
        cover.append(((tab["conf.low"] <= real) & (real <= tab["conf.high"])).to_numpy())
        ratio.append(((tab["conf.high"] - tab["conf.low"]) / real_width).to_numpy())
        diag.append(gen.diagnostics_)
    short = [t.replace("C(race, Treatment('White'))[T.", "race:").replace("C(sex, Treatment('Female'))[T.", "sex:")
             .rstrip("]") for t in real.index]
    out = {"inference": inference, "n": len(d), "reps": reps, "coverage": round(float(np.mean(cover)), 3),
           "coverage_per_term": dict(zip(short, np.round(np.mean(cover, 0), 3).tolist())),
           "median_width_ratio_per_term": dict(zip(short, np.round(np.median(ratio, 0), 2).tolist())),
           "median_seconds_mst_posterior_20": round(float(np.median(secs)), 2),
           "max_seconds_mst_posterior_20": round(float(np.max(secs)), 2),
           "D": diag[0]["D"], "P": diag[0]["P"],
           "laplace_seconds": round(float(np.median([x["laplace_seconds"] for x in diag])), 2)}
    if inference != "laplace":
        out.update(_mcmc_figures(diag))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--toy-reps", type=int, default=100)
    ap.add_argument("--adult-reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="few repetitions (smoke run)")
    args = ap.parse_args()
    if args.quick:
        args.toy_reps, args.adult_reps = 10, 1
    t0 = time.perf_counter()
    out = {"bench": "napsu", "machine": f"{platform.machine()} {os.cpu_count()} cores (shared; timings under contention)"}
    for eps in (0.1, 1.0, 10.0):
        out[f"toy_eps{eps:g}"] = toy(eps, args.toy_reps)
        print(f"toy eps={eps:g}", out[f"toy_eps{eps:g}"], flush=True)
    out["toy_laplace_eps1"] = toy(1.0, args.toy_reps, inference="laplace")
    print("toy laplace", out["toy_laplace_eps1"], flush=True)
    out["toy_hmc_eps1"] = toy(1.0, max(2, args.toy_reps // 10), inference="mcmc")
    print("toy hmc", out["toy_hmc_eps1"], flush=True)
    out["adult_eps1"] = adult(args.adult_reps)
    print("adult (default: slice)", out["adult_eps1"], flush=True)
    out["adult_laplace_eps1"] = adult(args.adult_reps, inference="laplace")
    print("adult laplace", out["adult_laplace_eps1"], flush=True)
    if not args.quick:
        out["adult_hmc_eps1_short"] = adult(1, inference="mcmc", mcmc_warmup=60, mcmc_draws=60)
        print("adult hmc (60 + 60 iterations)", out["adult_hmc_eps1_short"], flush=True)
    out["total_seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
