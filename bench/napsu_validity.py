"""NAPSU-MQ validity benchmark (issue "Valid by default"): coverage, interval width, mixing and time.

- Adult, the paper's 10 discretised columns (Räisä et al. 2023, Sec. 5.2; complete rows, n = 30,162),
  ``analyses=["income ~ age + race + sex"]`` and otherwise default settings, δ = n⁻², m = 20: coverage
  of the real-data coefficients of the logistic regression income ~ age (bin midpoint) + race (White
  baseline) + sex by the pooled 95 % intervals (rule "synthetic"), median ratio of their widths to
  the real-data Wald intervals, max split R̂ and min bulk ESS of the released cells' probabilities,
  seconds per fit + 20 datasets.
- Toy (Sec. 5.1): n = 2000, y ~ Bernoulli(expit(x1)), the 3-way marginal, coverage of (1, 0)
  (``--toy-m``: datasets per repeat; the paper used 100).
- A linear model on Adult: hours-per-week bin midpoint ~ age + sex, on the same 10-column
  discretisation, with ``analyses=["hours-per-week ~ age + sex"]``.
- A linear model on a second dataset, Bank (``--bank-reps``): six of its columns (age, marital,
  education, housing, loan, y; a public choice), age at the midpoint of its public bin (the same
  binning applied to the real data) ~ marital + education + housing, named in ``analyses=``.

Usage: python bench/napsu_validity.py [--reps 20] [--eps 0.5 1] [--toy-reps 50] [--lm-reps 10]
Prints one JSON object on its last line. Timings are wall-clock on the machine that runs it.
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
from dpsynth.generators.napsu import NAPSUMQ, adult_reduced

import _common  # noqa: E402

ANALYSIS = "income ~ age + race + sex"
FORMULA = "income ~ agemid + C(race, Treatment('White')) + C(sex, Treatment('Female'))"
LM_ANALYSIS = "hours-per-week ~ age + sex"
LM_FORMULA = "hours ~ agemid + C(sex, Treatment('Female'))"
TOY_SCHEMA = dpsynth.Schema.from_dict({c: {"type": "categorical", "categories": [0, 1]} for c in ["x1", "x2", "y"]})


def numeric_midpoints(frame: pd.DataFrame) -> pd.DataFrame:
    """Bin midpoints of the discretised age and hours as numbers (the paper's coding of age)."""
    return frame.assign(agemid=frame["age"].astype(str).astype(float),
                        hours=frame["hours-per-week"].astype(str).astype(float))


def pooled(frames, formula, family, transform, rule="synthetic", n_orig=None) -> pd.DataFrame:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dpsynth.fit_pooled([transform(f) for f in frames], formula, family=family,
                                  rule=rule, n_orig=n_orig).to_frame().set_index("term")


def study(d, s, analysis, formula, family, eps, reps, seed0=0, transform=numeric_midpoints, label=None, **options):
    """Fit NAPSU-MQ ``reps`` times with ``analyses=[analysis]``; coverage of the real-data
    coefficients of ``formula`` (both sides passed through ``transform``), width ratio, mixing."""
    real_tab = pooled([d, d], formula, family, transform, rule="mi")
    real, real_width = real_tab["estimate"], 2 * 1.959964 * np.sqrt(real_tab["ubar"])
    cover, ratio, seconds, rhat, ess, mixed, eff = [], [], [], [], [], [], []
    for r in range(reps):
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gen = NAPSUMQ(eps, 1 / len(d) ** 2, analyses=[analysis], **options).fit(d, s, seed=seed0 + r)
            res = gen.sample(m=20, seed=seed0 + r + 1)
        seconds.append(time.perf_counter() - t0)
        tab = pooled(res.datasets, formula, family, transform, n_orig=res.n_private).reindex(real.index)
        cover.append(((tab["conf.low"] <= real) & (real <= tab["conf.high"])).to_numpy())
        ratio.append(((tab["conf.high"] - tab["conf.low"]) / real_width).to_numpy())
        diag = gen.diagnostics_
        rhat.append(diag.get("rhat_max_cells", np.nan))
        ess.append(diag.get("ess_bulk_min_cells", np.nan))
        mixed.append(bool(diag.get("mixed", False)))
        eff.append(diag.get("importance_efficiency", np.nan))
        print(f"  {label or f'eps {eps}'} rep {r}: covered {int(cover[-1].sum())}/{len(real)} "
              f"(missed: {list(real.index[~cover[-1]])}), median width ratio {np.median(ratio[-1]):.2f}, "
              f"R-hat {rhat[-1]:.3f}, ESS {ess[-1]:.0f}, importance efficiency {eff[-1]:.2f}, {seconds[-1]:.0f} s", flush=True)
    return {"epsilon": eps, "reps": reps, "seed0": seed0, "coverage": round(float(np.mean(cover)), 3),
            "covered": int(np.sum(cover)), "intervals": int(np.size(cover)),
            "coverage_by_term": dict(zip(real.index, np.round(np.mean(cover, axis=0), 3).tolist())),
            "median_width_ratio": round(float(np.median(ratio)), 3),
            "median_of_repeat_median_width_ratios": round(float(np.median(np.median(ratio, axis=1))), 3),
            "median_width_ratio_by_term": dict(zip(real.index, np.round(np.median(ratio, axis=0), 2).tolist())),
            "max_rhat_cells": round(float(np.nanmax(rhat)), 4), "median_rhat_cells": round(float(np.nanmedian(rhat)), 4),
            "min_ess_cells": round(float(np.nanmin(ess)), 1), "median_ess_cells": round(float(np.nanmedian(ess)), 1),
            "share_mixed": round(float(np.mean(mixed)), 3),
            "median_importance_efficiency": round(float(np.nanmedian(eff)), 3),
            "median_seconds_fit_plus_20": round(float(np.median(seconds)), 1),
            "max_seconds_fit_plus_20": round(float(np.max(seconds)), 1)}


BANK_COLUMNS = ["age", "marital", "education", "housing", "loan", "y"]
BANK_ANALYSIS = "age ~ marital + education + housing"
BANK_FORMULA = "agebin ~ C(marital) + C(education) + C(housing)"


def bank_study(eps, reps, seed0=2000):
    """Linear model on Bank: coverage of the real-data coefficients (age binned on both sides)."""
    df, schema = dpsynth.load_dataset("bank")
    d = df[BANK_COLUMNS].reset_index(drop=True)
    s = dpsynth.Schema.from_dict({"name": "bank-6", "columns": {c: schema.to_dict()["columns"][c] for c in BANK_COLUMNS}})
    edges = schema["age"].edges()
    mids = 0.5 * (edges[:-1] + edges[1:])

    def binned(frame):
        code = np.clip(np.searchsorted(edges, frame["age"].to_numpy(dtype=float), side="right") - 1, 0, len(mids) - 1)
        return frame.assign(agebin=mids[code])

    return study(d, s, BANK_ANALYSIS, BANK_FORMULA, "gaussian", eps, reps, seed0=seed0, transform=binned, label="bank")


def toy(eps, reps, m=20):
    cover, seconds, rhat = [], [], []
    for r in range(reps):
        rng = np.random.default_rng(50_000 + r)
        x1, x2 = rng.integers(0, 2, 2000), rng.integers(0, 2, 2000)
        y = (rng.random(2000) < 1 / (1 + np.exp(-x1))).astype(int)
        df = pd.DataFrame({"x1": x1, "x2": x2, "y": y})
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gen = NAPSUMQ(eps, 1 / 2000 ** 2, queries=[("x1", "x2", "y")]).fit(df, TOY_SCHEMA, seed=r)
            res = gen.sample(m=m, seed=r + 1)
            tab = dpsynth.fit_pooled(res, "y ~ x1 + x2 - 1", family="binomial").to_frame().set_index("term")
        seconds.append(time.perf_counter() - t0)
        tab = tab.loc[["x1", "x2"]]
        truth = np.array([1.0, 0.0])
        cover.append(((tab["conf.low"] <= truth) & (truth <= tab["conf.high"])).to_numpy())
        rhat.append(gen.diagnostics_.get("rhat_max_cells", np.nan))
    return {"epsilon": eps, "reps": reps, "m": m, "coverage": round(float(np.mean(cover)), 3),
            "coverage_by_term": np.round(np.mean(cover, axis=0), 3).tolist(),
            "max_rhat_cells": round(float(np.nanmax(rhat)), 4),
            "median_seconds_fit_plus_20": round(float(np.median(seconds)), 2)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--seed0", type=int, default=0, help="first seed of the Adult repeats (to split a study)")
    ap.add_argument("--eps", type=float, nargs="*", default=[0.5, 1.0])
    ap.add_argument("--toy-reps", type=int, default=50)
    ap.add_argument("--lm-reps", type=int, default=10)
    ap.add_argument("--bank-reps", type=int, default=5)
    ap.add_argument("--toy-m", type=int, default=20, help="synthetic datasets per toy repeat (the paper: 100)")
    ap.add_argument("--analysis-weight", type=float, default=None,
                    help="NAPSU-MQ's analysis_weight for the Adult studies (default: the generator's default)")
    args = ap.parse_args(argv)
    df, schema = dpsynth.load_dataset("adult")
    d, s = adult_reduced(df, schema)
    d = d.dropna().reset_index(drop=True)
    s = s.declare_missing([])  # the complete rows: no column may be missing
    options = {} if args.analysis_weight is None else {"analysis_weight": args.analysis_weight}
    out = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, {_common.cpu_model()}", "adult": [], "toy": [], "linear_model": None,
           "options": options}
    for eps in args.eps:
        out["adult"].append(study(d, s, ANALYSIS, FORMULA, "binomial", eps, args.reps, seed0=args.seed0, **options))
    for eps in (0.1, 1.0, 10.0) if args.toy_reps else ():
        out["toy"].append(toy(eps, args.toy_reps, args.toy_m))
    if args.lm_reps:
        out["linear_model"] = study(d, s, LM_ANALYSIS, LM_FORMULA, "gaussian", 1.0, args.lm_reps, seed0=1000)
    if args.bank_reps:
        out["bank_linear_model"] = bank_study(1.0, args.bank_reps, seed0=2000 + args.seed0)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
