"""NAPSU-MQ at full width (issue "NAPSU-MQ at full width"): the bundled Adult, all 15 columns, real NAs.

Two parts, both on the bundled Adult (32,561 rows, its public binning, its own missing values in
workclass, occupation and native-country, completed under MAR by the ICIN model) at ε = 1 with
``analyses=[("income", ["age", "education-num", "hours-per-week", "sex", "race"])]`` (the predictors
present at each width):

- **growth** (``--widths 5 10 15``): the first k columns of :data:`ORDER`; the model NAPSU-MQ builds
  (its MST selection run privately, as in a fit); seconds per evaluation of the noise-aware log
  density by junction-tree messages (:class:`dpsynth.graphical.gaussian_tree.GaussianTree`, the
  default) and by the reduced form it replaced (a clamped pass over D × tree cells and a (D+1)²
  Cholesky), one point at a time; the sampler's surrogate gradient at 16 chains (V frozen, and V
  expanded where the model has incomplete columns); and — at the ``--fit-widths`` — a whole fit's ESS per second (min
  bulk ESS of the released cells after importance weighting over the MCMC seconds; ``mixed`` says whether the
  fit met its R̂, ESS and k̂ targets: an unmixed fit's ESS per second is no measure). The growth exponent
  is the slope of log(seconds) on log(columns).

The bundled schema declares ``education`` derived from ``education-num`` (a recoding of it,
adult.names): at 15 columns NAPSU-MQ models 14 and writes ``education`` after sampling
(:mod:`dpsynth.schema.derived`); ``columns`` counts the data's columns, ``modelled_columns`` the model's.

- **coverage** (``--reps``): fit + 20 datasets at 15 columns, seconds and peak memory (the
  process's maximum resident set, and its chain helper's: :data:`dpsynth.generators.napsu_sampling.CHAIN_PROCESSES`), split R̂ / ESS of the released cells, and whether the pooled 95 %
  intervals of the logistic regression income ~ age + education-num + hours-per-week (bin index)
  + sex + race cover the coefficients of the same regression on the real data (all 32,561 rows,
  the same binning); ``per_rep`` lists each fit (seed, coefficients covered and missed, seconds,
  and :func:`sampler_summary`: gradients, ESS before and after weighting, the R̂ of every check and
  its ESS where R̂ met its target, each run's step, acceptance and seconds, each check's seconds),
  so that studies run in pieces (``--seed0``) can be pooled; ``rhat_max_cells_kept_draws``, computed
  after the timing, is the released cells' split R̂ over the draws the fit keeps
  (:func:`rhat_kept_draws`). R̂ ≤ 1.01, a maximum over the 1,391 released cells, is what sets the
  draws a fit needs, not the ESS.

Usage: python bench/napsu_scale.py [--widths 5 10 15] [--fit-widths 5 10] [--reps 1] [--seed0 0] [--chain-processes 1|2] [--inside-checks N] [--[no-]selection-penalty] [--reference auto|first|largest]
Prints progress on stderr and one JSON object on the last line of stdout.
"""
from __future__ import annotations

import resource
import time
import warnings

import numpy as np
import torch

import _common

#: column order of the growth study: the analysis' columns first, the rest in the file's order
ORDER = ["age", "sex", "race", "income", "hours-per-week", "education-num", "workclass", "marital-status",
         "occupation", "relationship", "fnlwgt", "education", "capital-gain", "capital-loss", "native-country"]
PREDICTORS = ["age", "education-num", "hours-per-week", "sex", "race"]
NUMERIC = ["age", "education-num", "hours-per-week"]


def analysis(cols):
    return ("income", [c for c in PREDICTORS if c in cols])


def generator(n: int, cols, **options):
    from dpsynth.generators.napsu import NAPSUMQ

    return NAPSUMQ(1.0, 1 / n ** 2, analyses=[analysis(cols)], **options)


def built_model(df, schema, cols, seed, **options):
    """The likelihood NAPSU-MQ builds on the first columns ``cols`` (selection and measurement run
    as in a fit; the posterior is not sampled)."""
    from dpsynth.generators.napsu import NAPSUMQ

    captured = {}

    def keep(self, measurements, source):
        captured["measurements"] = measurements
        captured["gen"] = self
        self.diagnostics_ = {}

    gen = generator(len(df), cols, **options)
    gen._fit_posterior = keep.__get__(gen, NAPSUMQ)
    gen.fit(df[cols], schema.subset(cols), seed=seed)
    return captured["gen"], captured["measurements"]


def per_evaluation(gen, measurements, points: int = 10):
    """Seconds per exact log-density evaluation, tree and reduced form, at ``points`` random θ, with
    glibc keeping freed memory as inside a fit (:func:`dpsynth.graphical.chunks.reused_memory`: by
    default each evaluation's few-MB matrices may pay a page fault per 4 kB, and 3 points of the
    5-column model once took 0.0157 s each against 0.0045 s an hour before)."""
    from dpsynth.graphical import reused_memory

    with reused_memory():
        return _per_evaluation(gen, measurements, points)


def _per_evaluation(gen, measurements, points):
    tree = gen.likelihood(measurements)
    reduced = gen.likelihood(measurements, tree=False)
    model = tree.model
    x = torch.as_tensor(np.random.default_rng(0).normal(0, 0.1, (points + 1, tree.dim)))
    out = {"columns": len(gen.output_schema_), "modelled_columns": len(gen.domain_), "D": model.D, "released_cells": model.P,
           "tree_cells": model.jt.size(), "largest_clique_cells": max(model.jt.clique_domain(i).size()
                                                                      for i in range(len(model.jt.cliques)))}
    with torch.no_grad():
        for name, lik in (("tree", tree), ("reduced", reduced)):
            lik.log_posterior(x[0])  # plans and caches built outside the timing
            t0 = time.perf_counter()
            for p in x[1:]:
                lik.log_posterior(p)
            out[f"seconds_per_eval_{name}"] = round((time.perf_counter() - t0) / points, 4)
    xr = x[1].clone().requires_grad_(True)
    t0 = time.perf_counter()
    torch.autograd.grad(tree.log_posterior(xr), xr)
    out["seconds_per_gradient_tree"] = round(time.perf_counter() - t0, 4)
    out.update(surrogate_gradients(tree, x[1]))
    return out


def surrogate_gradients(lik, x_ref, chains: int = 16, repeats: int = 10) -> dict:
    """Milliseconds per batched value-and-gradient of the sampler's surrogates at ``chains`` points
    near ``x_ref`` (what one leapfrog step costs): V frozen (warm-up) and, under missing data, V
    expanded (sampling; its linear term is the exact gradient at x_ref here, as too few draws are
    passed for the ridge fit, which costs nothing per gradient; complete data keep V frozen)."""
    from dpsynth.graphical.posterior import value_and_grad

    rng = np.random.default_rng(1)
    points = x_ref + torch.as_tensor(rng.normal(0, 0.01, (chains, lik.dim)))
    out = {"likelihood_form": lik.form}
    expands = lik.form == "reduced" and hasattr(lik.model, "incomplete")  # V is expanded only under missing data
    for name, draws in (("frozen", None), ("expanded", points[:4])) if expands else (("frozen", None),):
        guide = lik.surrogate(x_ref, draws)
        for _ in range(2):
            value_and_grad(guide, points)
        t0 = time.perf_counter()
        for _ in range(repeats):
            value_and_grad(guide, points)
        out[f"ms_per_surrogate_gradient_{name}_{chains}_chains"] = round(1e3 * (time.perf_counter() - t0) / repeats, 2)
    return out


def one_fit(df, schema, cols, seed, **options):
    """Fit + 20 datasets on ``cols``; (generator, pooled table, seconds)."""
    import dpsynth

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gen = generator(len(df), cols, **options).fit(df[cols], schema.subset(cols), seed=seed)
        res = gen.sample(m=20, seed=seed + 1)
    seconds = time.perf_counter() - t0
    frames = [bin_index(d, schema) for d in res.datasets]
    tab = dpsynth.fit_pooled(frames, regression(cols), family="binomial", rule="synthetic",
                             n_orig=res.n_private).to_frame().set_index("term")
    return gen, tab, seconds


def rhat_kept_draws(gen) -> float | None:
    """The largest split R̂ of the released cells over the draws the fit keeps (``gen.draws_``: those
    given importance weights, every 2ʲ-th draw of each chain, from which the synthetic data are
    made), computed after the fit and its timing. The fit's own check (``rhat_max_cells``) is the
    split R̂ of every draw of the chains (:data:`dpsynth.generators.napsu_sampling.DIAGNOSTIC_DRAWS`
    None; until 2026-12-06 each chain was thinned by a stride of ⌈draws/400⌉ first, which lowers it:
    R̂ − 1 ≈ (τ − 1)/draws at stationarity, ≈ (τ/k − 1)/(draws/k) with a stride k; docs/napsu-measurements.md,
    "ninth"). The kept draws are fewer, so their R̂ is noisier. None for a fit without MCMC draws."""
    from dpsynth.graphical.mixing import finite_extreme, split_rhat

    draws = getattr(gen, "draws_", None)
    if draws is None or draws.dim() != 3:
        return None
    # the largest finite R̂, as the fit's own check takes it (_cell_diagnostics)
    return round(finite_extreme(np.max, np.atleast_1d(split_rhat(gen._cell_probs(draws)))), 4)


def sampler_summary(d: dict) -> dict:
    """A fit's sampler figures from its ``diagnostics_``: R̂ and least ESS of the released cells
    (after importance weighting, and of the chains before it), the R̂ / ESS at every check
    (``mixing_path``: draws per chain, R̂, ESS or None where R̂ missed its target), each run (``runs``:
    draws per chain after it, step, acceptance, leapfrog steps, seconds) and the seconds of each check
    and each extension's map and metric, cost (gradients; seconds of the fit and of its
    chains) and ESS per second, and the first run's adapted step size, acceptance rate, leapfrog
    steps per draw, warm-up restarts of stray chains and divergences (the last run's step too).

    >>> sampler_summary({"rhat_max_cells": 1.00912, "mixing_path": [(200, 1.04351, 263.4)]})["mixing_path"]
    [[200, 1.0435, 263]]
    """
    def num(key, digits):
        value = d.get(key, np.nan)
        return round(float(value), digits) if value is not None else None

    return {"rhat_max_cells": num("rhat_max_cells", 4), "ess_bulk_min_cells": num("ess_bulk_min_cells", 1),
            "ess_bulk_min_cells_chains": num("ess_bulk_min_cells_chains", 1),
            "importance_efficiency": num("importance_efficiency", 4), "pareto_k": num("pareto_k", 3),
            "mixed": bool(d.get("mixed", False)), "restarts": d.get("restarts"),
            "draws_per_chain": d.get("draws_per_chain"), "gradient_evaluations": d.get("gradient_evaluations"),
            "mcmc_seconds": num("mcmc_seconds", 1), "fit_seconds": num("fit_seconds", 1),
            "step_size": num("step_size", 4), "step_size_last": num("step_size_last", 4),
            "accept_rate": num("accept_rate", 3), "n_leapfrog": num("n_leapfrog", 1),
            "warmup_restarts": d.get("warmup_restarts"), "divergences": d.get("divergences"),
            "ess_per_second": round(d.get("ess_bulk_min_cells", np.nan) / d.get("mcmc_seconds", np.nan), 3),
            "mixing_path": [[int(n), round(float(r), 4), round(float(e)) if np.isfinite(e) else None]
                            for n, r, e in d.get("mixing_path", [])],
            "runs": [list(r) for r in d.get("runs", [])], "check_seconds": d.get("check_seconds"),
            "prepare_seconds": d.get("prepare_seconds"), "inside_seconds": d.get("inside_seconds")}


def regression(cols) -> str:
    terms = {"age": "age", "education-num": "Q('education-num')", "hours-per-week": "Q('hours-per-week')",
             "sex": "C(sex, Treatment('Female'))", "race": "C(race, Treatment('White'))"}
    return "income ~ " + " + ".join(terms[c] for c in analysis(cols)[1])


def bin_index(frame, schema):
    """The numeric predictors replaced by their public bin's index (0, 1, …)."""
    from dpsynth.schema.codes import encode_column

    return frame.assign(**{c: encode_column(frame[c], schema[c]).astype(float) for c in NUMERIC if c in frame})


def exponent(rows, key) -> float:
    """Slope of log(seconds) on log(columns) over the widths measured (that have ``key``)."""
    rows = [r for r in rows if key in r]
    x = np.log([r["columns"] for r in rows])
    y = np.log([r[key] for r in rows])
    return round(float(np.polyfit(x, y, 1)[0]), 2) if len(rows) > 1 else float("nan")


def main(argv=None):
    import dpsynth

    ap = _common.parser(__doc__)
    ap.add_argument("--widths", type=int, nargs="*", default=[5, 10, 15])
    ap.add_argument("--fit-widths", type=int, nargs="*", default=[], help="widths also fitted, for ESS per second")
    ap.add_argument("--reps", type=int, default=1, help="fits + 20 datasets at 15 columns (coverage)")
    ap.add_argument("--seed0", type=int, default=0)
    ap.add_argument("--chain-processes", type=int, default=None, choices=(1, 2),
                    help="1 or 2 processes for the chains' gradients (default: napsu_sampling.CHAIN_PROCESSES)")
    ap.add_argument("--inside-checks", type=int, default=None,
                    help="check the draws every N draws per chain inside each extension (default: "
                         "napsu_sampling.INSIDE_CHECK_DRAWS, 0: between extensions only)")
    _common.add_selection_penalty(ap)
    _common.add_reference(ap)
    args = ap.parse_args(argv)
    options = _common.napsu_options(args)
    torch.set_num_threads(1)
    from dpsynth.generators import napsu_sampling

    if args.chain_processes is not None:
        napsu_sampling.CHAIN_PROCESSES = args.chain_processes
    if args.inside_checks is not None:
        napsu_sampling.INSIDE_CHECK_DRAWS = args.inside_checks
    df, schema = dpsynth.load_dataset("adult")
    out = {"machine": _common.machine(), "note": _common.CONTENTION, "growth": [], "options": options,
           "chain_processes": napsu_sampling.CHAIN_PROCESSES, "inside_check_draws": napsu_sampling.INSIDE_CHECK_DRAWS}
    for k in args.widths:
        cols = ORDER[:k]
        gen, measurements = built_model(df, schema, cols, seed=args.seed0, **options)
        row = per_evaluation(gen, measurements)
        if k in args.fit_widths:
            fitted, _, seconds = one_fit(df, schema, cols, args.seed0, **options)
            row.update({"fit_plus_20_seconds": round(seconds, 1), **sampler_summary(fitted.diagnostics_)})
        _common.log(row)
        out["growth"].append(row)
    for key in ("seconds_per_eval_tree", "seconds_per_eval_reduced", "seconds_per_gradient_tree",
                "ms_per_surrogate_gradient_frozen_16_chains", "ms_per_surrogate_gradient_expanded_16_chains"):
        out[f"exponent_{key}"] = exponent(out["growth"], key)
    if args.reps:
        real = dpsynth.fit_pooled([bin_index(df, schema)] * 2, regression(ORDER), family="binomial",
                                  rule="mi").to_frame().set_index("term")["estimate"]
        cover, seconds, per_rep, peak = [], [], [], 0
        for r in range(args.reps):
            gen, tab, sec = one_fit(df, schema, ORDER, args.seed0 + r, **options)
            peak = max(peak, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # before the check below
            tab = tab.reindex(real.index)
            cover.append(((tab["conf.low"] <= real) & (real <= tab["conf.high"])).to_numpy())
            seconds.append(sec)
            d = gen.diagnostics_
            fit = {"seed": args.seed0 + r, "covered": int(cover[-1].sum()),
                   "missed": list(real.index[~cover[-1]]), "seconds_fit_plus_20": round(sec, 1),
                   **sampler_summary(d), "rhat_max_cells_kept_draws": rhat_kept_draws(gen)}
            per_rep.append(fit)
            _common.log(f"15 columns rep {r}: covered {fit['covered']}/{len(real)} (missed {fit['missed']}), "
                        f"R-hat {d.get('rhat_max_cells', np.nan):.3f}, ESS {d.get('ess_bulk_min_cells', np.nan):.0f}, "
                        f"{sec:.0f} s")
        # the study's extremes from the fits' rows (rounding is monotone: the same as rounding the extremes)
        rhat, ess = [f["rhat_max_cells"] for f in per_rep], [f["ess_bulk_min_cells"] for f in per_rep]
        out["full_width"] = {
            "reps": args.reps, "coverage": round(float(np.mean(cover)), 3), "covered": int(np.sum(cover)),
            "intervals": int(np.size(cover)), "median_seconds_fit_plus_20": round(float(np.median(seconds)), 1),
            "max_seconds_fit_plus_20": round(float(np.max(seconds)), 1),
            "peak_memory_gb": round(peak / 2 ** 20, 2),
            # the largest helper process's (napsu_sampling.CHAIN_PROCESSES = 2), its pages shared
            # with this process (copy-on-write after fork) counted again: an upper bound
            "peak_memory_helper_gb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2 ** 20, 2),
            "max_rhat_cells": round(float(np.nanmax(rhat)), 4), "min_ess_cells": round(float(np.nanmin(ess)), 1),
            "max_rhat_cells_kept_draws": max((f["rhat_max_cells_kept_draws"] for f in per_rep
                                              if f["rhat_max_cells_kept_draws"] is not None), default=None),
            "fits_mixed": sum(f["mixed"] for f in per_rep), "per_rep": per_rep}
    _common.emit(out)


if __name__ == "__main__":
    main()
