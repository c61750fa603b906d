"""NAPSU-MQ on incomplete private data (issue "Valid intervals when the private data are missing at random").

Adult, the paper's 10 discretised columns (complete rows, n = 30,162) as the complete truth; 20 % of
the cells are removed by ``dpsynth.missing.ampute`` (its presets: MCAR, MAR, MNARQ) with a seed per
repeat. NAPSU-MQ at ε = 1 with ``analyses=["income ~ age + race + sex"]`` and ``missing="mar"``
(``incomplete=`` the columns the simulation made incomplete: the simulation design is public) gives
m = 20 completed datasets; the pooled 95 % intervals (rule "synthetic") are checked against the
logistic regression on the complete truth. The same fit with ``missing="available-case"`` is the
comparison (``--compare``). For MNARQ the δ-adjusted fits (``mnar_shift``) show how far the
sensitivity option moves each estimate.

Usage: python bench/napsu_missing.py [--reps 20] [--mechanisms MCAR MAR] [--mnar-reps 2] [--compare] [--[no-]selection-penalty]
(``--reps 0`` runs the MNAR part alone.)
Prints one line per repeat and one JSON object on its last line. Timings are wall-clock: "fit + 20
datasets" is the synthesis (as in bench/napsu_validity.py), the pooling of the 20 logistic fits apart.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings

import numpy as np

import dpsynth
from dpsynth.generators.napsu import NAPSUMQ, adult_reduced

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402
from napsu_validity import ANALYSIS, FORMULA, numeric_midpoints, pooled  # noqa: E402


def one_fit(d_missing, s, eps, seed, **kw):
    """(generator, pooled table, seconds for fit + 20 datasets, seconds for the analyst's pooling):
    the synthesis is timed as in bench/napsu_validity.py; the 20 logistic fits and their pooling,
    the analyst's side, are timed apart."""
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gen = NAPSUMQ(eps, 1 / len(d_missing) ** 2, analyses=[ANALYSIS], **kw).fit(d_missing, s, seed=seed)
        res = gen.sample(m=20, seed=seed + 1)
    t1 = time.perf_counter()
    tab = pooled(res.datasets, FORMULA, "binomial", numeric_midpoints, n_orig=res.n_private)
    return gen, tab, t1 - t0, time.perf_counter() - t1


#: the sampler's diagnostics reported for every fit
PER_FIT = ("gradient_evaluations", "mcmc_seconds", "draws_per_chain", "transient_draws", "step_retuned", "extended",
           "restarts", "importance_efficiency")


def study(d, s, mechanism, eps, reps, mode, seed0=0, **options):
    truth = pooled([d, d], FORMULA, "binomial", numeric_midpoints, rule="mi")
    real, real_width = truth["estimate"], 2 * 1.959964 * np.sqrt(truth["ubar"])
    cover, ratio, seconds, pool_seconds, rhat, ess, rate, mixed, fits = [], [], [], [], [], [], [], [], []
    for r in range(reps):
        seed = seed0 + r
        dm = dpsynth.missing.ampute(d, mechanism, p=0.2, seed=10_000 + seed, schema=s)
        incomplete = [c for c in dm.columns if dm[c].isna().any()]
        rate.append(float(dm.isna().to_numpy().mean()))
        kw = {"missing": mode, "incomplete": incomplete} if mode == "mar" else {"missing": mode}
        kw.update(options)
        gen, tab, sec, sec_pool = one_fit(dm, s, eps, seed, **kw)
        pool_seconds.append(sec_pool)
        tab = tab.reindex(real.index)
        cover.append(((tab["conf.low"] <= real) & (real <= tab["conf.high"])).to_numpy())
        ratio.append(((tab["conf.high"] - tab["conf.low"]) / real_width).to_numpy())
        seconds.append(sec)
        rhat.append(gen.diagnostics_.get("rhat_max_cells", np.nan))
        ess.append(gen.diagnostics_.get("ess_bulk_min_cells", np.nan))
        mixed.append(bool(gen.diagnostics_.get("mixed", False)))
        fits.append({"seed": seed, "seconds": round(sec, 1), **{k: gen.diagnostics_.get(k) for k in PER_FIT}})
        print(f"  {mechanism} {mode} rep {r}: covered {int(cover[-1].sum())}/{len(real)} "
              f"(missed: {list(real.index[~cover[-1]])}), R-hat {rhat[-1]:.4f}, ESS {ess[-1]:.0f}, fit + 20 datasets {sec:.0f} s, pooling {sec_pool:.0f} s",
              flush=True)
    return {"mechanism": mechanism, "missing": mode, "epsilon": eps, "reps": reps,
            "missing_rate": round(float(np.mean(rate)), 3), "coverage": round(float(np.mean(cover)), 3),
            "covered": int(np.sum(cover)), "intervals": int(np.size(cover)),
            "coverage_by_term": dict(zip(real.index, np.round(np.mean(cover, axis=0), 3).tolist())),
            "median_width_ratio": round(float(np.median(ratio)), 3),
            "max_rhat_cells": round(float(np.nanmax(rhat)), 4), "min_ess_cells": round(float(np.nanmin(ess)), 1),
            "fits_mixed": int(np.sum(mixed)), "median_seconds_fit_plus_20": round(float(np.median(seconds)), 1),
            "max_seconds_fit_plus_20": round(float(np.max(seconds)), 1),
            "fits_within_90_s": int(np.sum(np.asarray(seconds) <= 90)),
            "fits_rhat_le_1.01": int(np.sum(np.asarray(rhat) <= 1.01)),
            "median_seconds_pooling_20": round(float(np.median(pool_seconds)), 1), "fits": fits}


#: columns of the paper's Adult-10 whose levels are in increasing order (bins of age and hours, the
#: education ladder, zero < positive, <=50K < >50K): a δ-shift per level step is a direction there,
#: while on race or marital status it only reorders the levels
ORDERED = ("age", "education", "capital-gain", "capital-loss", "hours-per-week", "income")


def mnar_sensitivity(d, s, eps, reps, shifts=(-1.0, 0.0, 1.0), cut="both", columns="all"):
    """MNARQ (``cut="both"``: the preset, both tails censored; ``"upper"``: the upper tail only):
    pooled estimates with each δ-shift on the incomplete columns, next to the complete-data truth;
    the distance to the truth per shift, averaged over repeats. A shift per level moves filled-in
    values one way, so it can undo one-sided censoring, not the preset's two-sided one."""
    truth = pooled([d, d], FORMULA, "binomial", numeric_midpoints, rule="mi")["estimate"]
    dist, cover = {str(k): [] for k in shifts}, {str(k): [] for k in shifts}
    for r in range(reps):
        dm = dpsynth.missing.ampute(d, "MNARQ", p=0.2, seed=20_000 + r, schema=s, cut=cut)
        incomplete = [c for c in dm.columns if dm[c].isna().any()]
        for k in shifts:
            shifted = [c for c in incomplete if columns == "all" or c in ORDERED]
            shift = {c: k for c in shifted} if k and shifted else None
            _, tab, _, _ = one_fit(dm, s, eps, 500 + r, missing="mar", incomplete=incomplete, mnar_shift=shift)
            tab = tab.reindex(truth.index)
            dist[str(k)].append(float(np.abs(tab["estimate"] - truth).mean()))
            cover[str(k)].append(float(((tab["conf.low"] <= truth) & (truth <= tab["conf.high"])).mean()))
            print(f"  MNARQ ({cut}) rep {r} shift {k} on {shifted if k else []}: mean |estimate - truth| "
                  f"{dist[str(k)][-1]:.3f}", flush=True)
    return {"mechanism": "MNARQ", "cut": cut, "reps": reps, "shifted_columns": columns,
            "mean_abs_error_by_shift": {k: round(float(np.mean(v)), 4) for k, v in dist.items()},
            "coverage_by_shift": {k: round(float(np.mean(v)), 3) for k, v in cover.items()}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--seed0", type=int, default=0)
    ap.add_argument("--eps", type=float, default=1.0)
    ap.add_argument("--mechanisms", nargs="*", default=["MCAR", "MAR"])
    ap.add_argument("--compare", action="store_true", help="also run missing='available-case'")
    _common.add_selection_penalty(ap)
    _common.add_reference(ap)
    ap.add_argument("--mnar-reps", type=int, default=2)
    ap.add_argument("--mnar-cut", nargs="*", default=["both", "upper"], help="MNARQ tails censored, one study each")
    ap.add_argument("--mnar-shifts", nargs="*", type=float, default=[-1.0, 0.0, 1.0])
    ap.add_argument("--mnar-columns", choices=["all", "ordered"], default="all",
                    help="shift every incomplete column, or only those with ordered levels (ORDERED)")
    args = ap.parse_args(argv)
    options = _common.napsu_options(args)
    df, schema = dpsynth.load_dataset("adult")
    d, s = adult_reduced(df, schema)
    d = d.dropna().reset_index(drop=True)
    s = s.declare_missing([])  # incomplete= names the simulated columns per repeat
    out = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, {_common.cpu_model()}", "studies": [], "options": options}
    for mech in args.mechanisms if args.reps > 0 else []:  # --reps 0: the MNAR part alone
        for mode in ["mar"] + (["available-case"] if args.compare else []):
            out["studies"].append(study(d, s, mech, args.eps, args.reps, mode, args.seed0, **options))
    if args.mnar_reps:
        out["mnar"] = [mnar_sensitivity(d, s, args.eps, args.mnar_reps, tuple(args.mnar_shifts), cut=cut,
                                        columns=args.mnar_columns)
                       for cut in args.mnar_cut]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
