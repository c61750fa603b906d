"""Fit one statsmodels model per synthetic (or imputed) dataset and pool the coefficients.

`fit_pooled` is the Python counterpart of mice's ``with(imp, glm(...)) |> pool()`` and synthpop's
``glm.synds() |> summary()``: the same formula is fitted to each of the m datasets (OLS for
``family="gaussian"``, a GLM for "binomial" / "poisson" or any statsmodels family), and each
coefficient's estimates and squared standard errors are combined with a rule from `rules.py`.
The default rule is "synthetic" (fully synthetic data, Raghunathan, Reiter & Rubin 2003), the
setting of noise-aware DP synthesis (NAPSU-MQ); use "mi" for multiply imputed real data,
"reiter2003" for partially synthetic data, "two-stage" / "two-stage-synthetic" with a nested list
(M imputations × r syntheses).

Outcome coding for binomial models: a two-level categorical (or string, or bool) outcome is
coded 0/1 with the second level = 1, as R's ``glm`` does (levels: the categories of a pandas
Categorical, else the sorted distinct values). E.g. Adult's ``income`` with levels "<=50K", ">50K"
models P(income = ">50K").

Rows with a missing value in a model variable are dropped per dataset (statsmodels' and R's
default); the counts are reported in ``PooledResult.fits`` and in the summary.

Degenerate fits: the policy (counted and reported in ``.dropped`` and the summary, and announced
with a warning; nothing is dropped silently):

1. a fit that raises, or a GLM that does not converge → the whole dataset is dropped;
2. singular design → the aliased columns (those in the span of earlier columns, relative
   tolerance 1e-7, as R's ``lm``/``glm``, which report them as NA) are removed before fitting; the
   coefficient is missing for that dataset (typical cause: a category absent from one synthetic
   dataset);
3. a coefficient whose standard error is not finite or not positive, or "explodes": more than
   ``se_ratio`` (default 100) times the median of that coefficient's standard errors over the
   datasets, or above the absolute ``se_limit`` if given (Räisä et al. 2023 drop Adult fits with
   variance ≥ 1000). Typical cause: (quasi-)separation in a logistic regression, which is also
   noted per dataset when statsmodels detects it.
Each term is then pooled over the datasets where it is valid (its ``m`` column says how many); a
term valid in fewer than 2 datasets (2 nests for the two-stage rules, where a nest counts only if
all its syntheses are valid) gets NaN. The joint covariance (``cov_params``, ``wald_test``) covers
the terms estimated in at least one dataset and uses the datasets valid for all of them. With
very few datasets (m ≤ 2) the median screen cannot single out one exploded fit: use ``se_limit``.

Example
-------
>>> import numpy as np, pandas as pd, dpsynth
>>> rng = np.random.default_rng(1)
>>> frames = [pd.DataFrame({"x": rng.normal(size=50)}).assign(y=lambda d: 1 + 2 * d.x + rng.normal(size=50))
...           for _ in range(5)]
>>> res = dpsynth.fit_pooled(frames, "y ~ x", rule="mi")
>>> list(res.to_frame()["term"])
['Intercept', 'x']
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..analyses import quote_columns
from ..validation import check_number
from .caveats import NotNoiseAwareWarning, check_congeniality, warn_not_mixed, warn_not_noise_aware
from .dataset_fit import DatasetFit, estimable_columns, fit_one
from .formula import Family, code_outcome, outcome_coding, outcome_column, resolve_family
from .result import SMALL_DF, PooledResult
from .rules import (NESTED_RULES, ScalarPool, check_level, check_rule, pool_terms, scalar_table, size_ratio,
                    total_covariance, wald_test)
from .screen import DegenerateFitWarning, screen_fits, warn_dropped


def frames_of(data, rule):
    """The datasets of ``data`` (a SynthResult, a list of DataFrames, or nested for the two-stage rules):
    a flat list of (index, frame) and the nesting (M, r) or None."""
    def as_list(obj):
        if hasattr(obj, "datasets") and not isinstance(obj, pd.DataFrame):
            return list(obj.datasets)
        if isinstance(obj, pd.DataFrame):
            raise TypeError("give a list of DataFrames (one per synthetic dataset) or a SynthResult, "
                            "not a single DataFrame")
        if isinstance(obj, (list, tuple)):
            return list(obj)
        raise TypeError(f"expected a SynthResult or a list of DataFrames; got {type(obj).__name__}")

    items = as_list(data)
    if not items:
        raise ValueError("no datasets to fit")
    nested = not isinstance(items[0], pd.DataFrame)
    if rule in NESTED_RULES:
        if not nested:
            raise ValueError(f"rule {rule!r} needs nested data: a list of M imputations, each a list "
                             "(or SynthResult) of r synthetic DataFrames")
        nests = [as_list(x) for x in items]
        r = len(nests[0])
        if any(len(n) != r for n in nests):
            raise ValueError("every imputation needs the same number r of synthetic datasets; got "
                             f"{[len(n) for n in nests]}")
        if rule == "two-stage" and r < 2:
            raise ValueError("rule 'two-stage' needs at least 2 syntheses per imputation (r ≥ 2)")
        if len(nests) < 2:
            raise ValueError(f"rule {rule!r} needs at least 2 imputations; got {len(nests)}")
        flat = [((l, i), f) for l, nest in enumerate(nests) for i, f in enumerate(nest)]
        shape = (len(nests), r)
    else:
        if nested:
            raise ValueError(f"nested data (a list of lists) needs rule='two-stage' or "
                             f"'two-stage-synthetic'; for rule {rule!r} give a flat list of DataFrames")
        flat = list(enumerate(items))
        shape = None
    for idx, f in flat:
        if not isinstance(f, pd.DataFrame):
            raise TypeError(f"dataset {idx} is a {type(f).__name__}, not a pandas DataFrame")
    return flat, shape



def _pool_one_term(rule, q, u, valid, shape, dfcom, ratio):
    """Pool one term over its valid datasets; returns (ScalarPool or None, m used, (M, r) or None)."""
    if shape is None:
        keep = valid
        if keep.sum() < 2:
            return None, int(keep.sum()), None
        return pool_terms(rule, q[keep][:, None], u[keep][:, None], dfcom=dfcom, ratio=ratio), int(keep.sum()), None
    M, r = shape
    qn, un, vn = q.reshape(M, r), u.reshape(M, r), valid.reshape(M, r)
    nests = vn.all(axis=1)
    if nests.sum() < 2 or (rule == "two-stage" and r < 2):
        return None, int(nests.sum() * r), (int(nests.sum()), r)
    res = pool_terms(rule, qn[nests][..., None], un[nests][..., None], dfcom=dfcom, ratio=ratio)
    return res, int(nests.sum() * r), (int(nests.sum()), r)



def _check_se_ratio(se_ratio) -> None:
    if se_ratio is not None:
        check_number(se_ratio, "se_ratio", 1.0, low_open=True, what="> 1 (or None to disable the screen)")


def fit_pooled(data, formula: str, family="gaussian", rule: str = "synthetic", *, dfcom=None,
               n_orig=None, conf_level: float = 0.95, se_ratio: float | None = 100.0,
               se_limit: float | None = None, fit_kwds=None, eval_env: int = 0) -> PooledResult:
    """Fit ``formula`` to each dataset with statsmodels and pool the coefficients.

    Parameters
    ----------
    data : a SynthResult (its ``.datasets``) or a list of DataFrames; for rule "two-stage" /
        "two-stage-synthetic" a nested list: M imputations, each a list (or SynthResult) of r
        synthetic DataFrames.
    formula : patsy formula, e.g. ``"income ~ age + C(race) + sex"``; a column name that is not a
        Python name may be written plainly (``hours-per-week``), in R's backticks or as ``Q("...")``.
        When ``data`` is a SynthResult whose ``queries`` are known, the formula is checked against
        them: a dependency no released table carries gives an ``UncongenialAnalysisWarning`` and
        is listed in ``.congeniality`` and the summary.
    family : "gaussian" (OLS, default), "binomial" (logit GLM), "poisson" (log GLM) or a
        statsmodels family instance.
    rule : "synthetic" (default: fully synthetic data, the noise-aware DP setting), "mi",
        "reiter2003", "two-stage", "two-stage-synthetic".
    dfcom : complete-data df for "mi" (default: the first valid fit's residual df, as mice).
    n_orig : rows of the original data, for the synthetic rules' fallback (n_syn/n_orig) ū with
        n_syn the mean rows used per dataset; None → a SynthResult's ``n_private``, else ratio 1
        (the fallback is ū).
    conf_level : level of the intervals.
    se_ratio, se_limit : the degenerate-coefficient screens (module docstring); None disables.
    fit_kwds : passed to statsmodels' ``fit`` (GLM default tol=1e-10, maxiter=100).
    eval_env : patsy eval_env depth relative to the caller (0: the caller's namespace).

    Returns
    -------
    PooledResult (``.summary()``, ``.to_frame()``, ``.dropped``, ...).
    """
    import patsy

    rule = check_rule(rule)
    fam = resolve_family(family)
    level = check_level(conf_level)
    _check_se_ratio(se_ratio)
    env = patsy.EvalEnvironment.capture(eval_env + 1)
    gen = getattr(data, "generator", None)
    if gen is not None:
        warn_not_noise_aware(rule, getattr(gen, "noise_aware", False), data.m, data.method, stacklevel=3)
    warn_not_mixed(data, stacklevel=2)
    flat, shape = frames_of(data, rule)
    if n_orig is None:
        n_orig = getattr(data, "n_private", None)  # a SynthResult knows its released n
    frames = [f for _, f in flat]
    congeniality = check_congeniality(data, formula, frames[0].columns)
    formula_in = formula
    formula = quote_columns(formula, frames[0].columns)  # plain names such as hours-per-week
    outcome = outcome_column(formula, frames[0].columns)
    coding = outcome_coding(frames, outcome, fam) if outcome is not None else None
    outcome_note = (f"Outcome {outcome!r} coded 0/1 with {coding[1]!r} = 1 (second level, as R's glm)."
                    if coding is not None else "")

    fits, terms = [], []
    for idx, frame in flat:
        fit, names = fit_one(frame, formula, fam, env, idx, coding, outcome, fit_kwds)
        fits.append(fit)
        terms += [n for n in names if n not in terms]
    return pool_dataset_fits(fits, terms, rule=rule, shape=shape, dfcom=dfcom, n_orig=n_orig, level=level,
                              se_ratio=se_ratio, se_limit=se_limit, formula=formula_in, family=fam,
                              outcome_note=outcome_note, congeniality=congeniality, stacklevel=3)



def wald_per_dataset(qhat, uhat, names, rule: str = "synthetic", *, terms=None, null=None, dfcom=None, nobs=None,
                     n_orig=None) -> dict:
    """`PooledResult.wald_test` from the pieces of `PooledResult.per_dataset` kept elsewhere (dpsynthr's
    ``dp_wald`` on its pooled object): ``qhat`` (m x p; NaN = not estimated or screened out), ``uhat``
    (m p x p covariance matrices; None for a dropped dataset), ``names`` (the p terms).

    ``terms``: the tested coefficients' names, or one string that is not a name, matched as a prefix
    (``"race"``: every race dummy); default: all but the intercept. As `PooledResult.wald_test`, the
    test uses the datasets valid for every term estimated somewhere; the synthetic rule's fallback
    uses n_syn = their mean ``nobs`` when ``n_orig`` is given. Returns `wald_test`'s dict (statistic,
    df1, df2, p.value, riv, rule, m, fallback) with ``terms``, the tested names joined by ", ".

    >>> q = [[1.0, 0.5, 0.2], [1.1, 0.4, 0.3], [0.9, 0.6, float("nan")], [1.0, 0.5, 0.25]]
    >>> res = wald_per_dataset(q, [np.eye(3) * 0.01] * 4, ["(Intercept)", "gb", "gc"], rule="mi", terms="g")
    >>> res["terms"], res["m"], res["df1"]
    ('gb, gc', 3, 2)
    """
    names = [str(n) for n in names]
    qhat = np.asarray(qhat, dtype=float).reshape(len(uhat), len(names))
    if terms is None:
        terms = [n for n in names if n not in ("(Intercept)", "Intercept")]
    elif isinstance(terms, str):
        terms = [terms] if terms in names else [n for n in names if n.startswith(terms)]
    terms = [str(t) for t in terms]
    if not terms or any(t not in names for t in terms):
        raise ValueError("`terms` must name coefficients of the model: " + ", ".join(names))
    idx = [names.index(t) for t in terms]
    joint = np.flatnonzero(np.isfinite(qhat).any(axis=0))
    ok = np.array([u is not None and np.isfinite(q[joint]).all()
                   and np.isfinite(np.asarray(u, dtype=float)[np.ix_(joint, joint)]).all()
                   for q, u in zip(qhat, uhat)], dtype=bool)
    if ok.sum() < 2:
        raise ValueError("fewer than 2 data sets are valid for every estimated term")
    covs = [np.asarray(u, dtype=float)[np.ix_(idx, idx)].tolist() for u, keep in zip(uhat, ok) if keep]
    n_syn = float(np.mean(np.asarray(nobs, dtype=float)[ok])) if nobs is not None and n_orig is not None else None
    out = wald_test(qhat[ok][:, idx].tolist(), covs, rule=rule, null=null, dfcom=dfcom, n_syn=n_syn,
                    n_orig=n_orig if n_syn is not None else None, names=terms)
    out["terms"] = ", ".join(terms)
    return out



def pool_dataset_fits(fits, terms, *, rule, shape, dfcom, n_orig, level, se_ratio, se_limit, formula, family,
                       outcome_note="", congeniality=(), stacklevel=2) -> "PooledResult":
    """The pooling policy, once: screens (`screen.screen_fits`), per-term pooling over the valid datasets, the
    joint moments, the DegenerateFitWarning. Used by `fit_pooled` (statsmodels fits) and by
    `pool_fits` (fits made elsewhere, e.g. R's lm/glm through dpsynthr)."""
    est, se, valid, dropped = screen_fits(fits, terms, se_ratio, se_limit)
    if not valid.any():
        raise ValueError("no dataset gave a usable fit; see the reasons:\n" + dropped.to_string())

    good = [f for f in fits if f.error is None]
    dfcom_used = float(dfcom) if dfcom is not None else (good[0].df_resid if good else np.inf)
    n_ratio = size_ratio(float(np.mean([f.nobs for f in good])), n_orig) if n_orig is not None else 1.0

    rows = []
    for j, term in enumerate(terms):
        res, m_term, nested = _pool_one_term(rule, est[:, j], se[:, j] ** 2, valid[:, j], shape,
                                             dfcom_used, n_ratio)
        if res is None:
            nan = np.array([np.nan])
            res = ScalarPool(nan, nan, nan, nan, nan, nan, nan, nan, np.array([False]),
                             w=nan if shape is not None else None)
        rows.append(scalar_table([term], res, rule, m_term, dfcom_used, level, nested))
    table = pd.concat(rows, ignore_index=True)

    # joint moments: the terms estimated somewhere, over the datasets valid for all of them
    joint = [t for t, ok in zip(terms, valid.any(axis=0)) if ok]
    cols = [terms.index(t) for t in joint]
    if shape is None:
        rows_ok = valid[:, cols].all(axis=1)
    else:
        rows_ok = np.repeat(valid[:, cols].reshape(*shape, -1).all(axis=(1, 2)), shape[1])
    n_ok = int(rows_ok.sum() if shape is None else rows_ok.sum() // shape[1])
    cov = moments = None
    if n_ok >= 2:
        q = est[rows_ok][:, cols]
        covs = np.array([fits[i].cov.loc[joint, joint].to_numpy() for i in np.flatnonzero(rows_ok)])
        cov = total_covariance(rule, q, covs, None if shape is None else (n_ok, shape[1]))
        moments = (joint, q, covs)

    warn_dropped(dropped, stacklevel=stacklevel)
    return PooledResult(table=table, rule=rule, formula=formula, family=family, fits=fits, dropped=dropped,
                        dfcom=dfcom_used, n_ratio=n_ratio, conf_level=level, shape=shape, cov=cov,
                        complete_moments=moments, outcome_note=outcome_note, congeniality=congeniality,
                        screened=(est, valid))



def pool_fits(params, covs, rule: str = "synthetic", *, nobs=None, df_resid=None, errors=None, notes=None,
              n_missing=None, dfcom=None, n_orig=None, conf_level: float = 0.95, se_ratio: float | None = 100.0,
              se_limit: float | None = None, formula: str = "", family: str = "model", noise_aware=None,
              method=None, congeniality=()) -> PooledResult:
    """Pool m fits made elsewhere (R's ``lm``/``glm`` through dpsynthr, any other software) with the
    same policy as `fit_pooled`: the same screens, per-term pooling, notes and warnings.

    Parameters
    ----------
    params : m entries, one per dataset: a dict (or Series) term → estimate, where NaN/None marks a
        coefficient aliased in that dataset (R's ``coef()`` gives NA); None for a fit that failed.
    covs : m covariance matrices (nested lists, arrays or DataFrames) over that dataset's non-aliased
        terms, in the order of ``params`` (None for a failed fit).
    rule : "synthetic" (default), "mi" or "reiter2003" (the nested rules need `fit_pooled`).
    nobs, df_resid, n_missing : per dataset, rows used, residual df and rows dropped for missing values.
    errors : per dataset, None or why the fit is unusable (failed, did not converge): the dataset is dropped.
    notes : per dataset, a list of the fit's warnings (reported, as for statsmodels fits).
    dfcom : complete-data df for "mi"; default the first usable fit's ``df_resid`` (as mice).
    n_orig, conf_level, se_ratio, se_limit : as `fit_pooled`.
    formula, family : labels for the summary.
    noise_aware : False when the datasets came from one fitted noisy model (then the "synthetic" rule
        warns, NotNoiseAwareWarning); None when unknown.
    method : the generator's name, for that warning.
    congeniality : messages of the congeniality check, to carry into the notes.

    >>> res = pool_fits([{"a": 1.0, "b": 2.0}, {"a": 1.2, "b": float("nan")}, {"a": 0.9, "b": 2.2}],
    ...                 [[[0.04, 0.0], [0.0, 0.09]], [[0.05]], [[0.04, 0.0], [0.0, 0.08]]], rule="mi",
    ...                 df_resid=[50, 50, 50])
    >>> res.to_frame()["m"].tolist(), res.dropped["reason"].tolist()
    ([3, 2], ['aliased (singular design; not estimable in this dataset)'])
    """
    rule = check_rule(rule)
    if rule in NESTED_RULES:
        raise ValueError(f"rule {rule!r} needs nested data (M imputations x r syntheses): use fit_pooled with "
                         "nested data, or pool() with nested estimates (dp_pool() with nested lists in R)")
    level = check_level(conf_level)
    _check_se_ratio(se_ratio)
    params, covs = list(params), list(covs)
    m = len(params)
    if m < 2:
        raise ValueError(f"pooling needs at least 2 fits (m >= 2); got {m}")
    if len(covs) != m:
        raise ValueError(f"params has {m} entries but covs has {len(covs)}; give one covariance matrix per fit")

    def per_fit(x, what, default):
        if x is None:
            return [default] * m
        x = list(x)
        if len(x) != m:
            raise ValueError(f"{what} has {len(x)} entries for {m} fits")
        return x

    nobs, df_resid = per_fit(nobs, "nobs", 0), per_fit(df_resid, "df_resid", np.nan)
    errors, notes, n_missing = per_fit(errors, "errors", None), per_fit(notes, "notes", ()), per_fit(n_missing, "n_missing", 0)
    fits, terms = [], []
    for i in range(m):
        fit = DatasetFit(i, nobs=int(nobs[i] or 0), df_resid=float(np.nan if df_resid[i] is None else df_resid[i]),
                         n_missing=int(n_missing[i] or 0), notes=list(notes[i] or ()))
        p = params[i]
        if errors[i] is not None or p is None:
            fit.error = str(errors[i] or "the fit failed")
            fits.append(fit)
            continue
        p = pd.Series(dict(p) if not isinstance(p, pd.Series) else p, dtype=float)
        terms += [str(t) for t in p.index if str(t) not in terms]
        fit.aliased = [str(t) for t, v in p.items() if np.isnan(v)]
        cov = covs[i]
        names = [str(t) for t in p.index if str(t) not in fit.aliased]
        cov = cov.to_numpy(dtype=float) if isinstance(cov, pd.DataFrame) else np.asarray(cov, dtype=float)
        cov = np.atleast_2d(cov) if cov.size else np.zeros((0, 0))
        if cov.shape != (len(names), len(names)):
            raise ValueError(f"fit {i + 1}: the covariance matrix is {cov.shape[0]}x{cov.shape[1] if cov.ndim > 1 else 0} "
                             f"but it has {len(names)} estimable coefficients {names}; give the covariance of the "
                             "non-aliased coefficients, in their order")
        fit.params = pd.Series(p[names].to_numpy(), index=names)
        fit.cov = pd.DataFrame(cov, index=names, columns=names)
        fits.append(fit)
    if not terms:
        raise ValueError("no synthetic data set gave a usable fit; the reasons:\n" +
                         "\n".join(f"  data set {f.index + 1}: {f.error}" for f in fits))
    if noise_aware is not None:
        warn_not_noise_aware(rule, bool(noise_aware), m, method, stacklevel=2)
    fam = Family(str(family), str(family), None)
    return pool_dataset_fits(fits, terms, rule=rule, shape=None, dfcom=dfcom, n_orig=n_orig, level=level,
                              se_ratio=se_ratio, se_limit=se_limit, formula=str(formula), family=fam,
                              congeniality=list(congeniality or ()), stacklevel=3)


__all__ = ["fit_pooled", "pool_fits", "wald_per_dataset", "frames_of", "pool_dataset_fits", "PooledResult",
           "DatasetFit", "Family", "resolve_family", "fit_one", "estimable_columns", "outcome_column",
           "outcome_coding", "code_outcome", "NotNoiseAwareWarning", "DegenerateFitWarning",
           "warn_not_noise_aware", "SMALL_DF", "ScalarPool"]
