"""Compare a pooled synthetic-data fit with the same model fitted to the real data.

As synthpop's ``compare.fit.synds`` (Raab, Nowok & Dibben 2016), for each coefficient:

* ``std.diff`` = (q̄ − β̂_obs) / se_obs, the pooled synthetic estimate's distance from the real
  estimate in units of the real standard error (synthpop's "Std. coef diff");
* ``ci.overlap`` (Karr, Kohnen, Oganian, Reiter & Sanil 2006):
  J = ½ [ (min(U_o, U_s) − max(L_o, L_s)) / (U_o − L_o) + (min(U_o, U_s) − max(L_o, L_s)) / (U_s − L_s) ]
  with (L_o, U_o) the real-data interval and (L_s, U_s) the pooled interval at the same level.
  J = 1 for identical intervals; it is negative when they do not overlap (how far apart), as in
  synthpop.
The synthetic interval is the pooled one (the rule's T and ν), i.e. inference to the population.
The real-data interval is statsmodels' own: t(df_resid) for OLS, normal for GLMs. The real fit
uses the same formula, family and outcome coding, and drops rows with missing model variables
(the count is reported).

Example
-------
>>> import numpy as np, pandas as pd, dpsynth
>>> rng = np.random.default_rng(2)
>>> real = pd.DataFrame({"x": rng.normal(size=200)}).assign(y=lambda d: d.x + rng.normal(size=200))
>>> syn = [real.sample(frac=1.0, replace=True, random_state=i) for i in range(5)]
>>> cmp = dpsynth.compare_fit(dpsynth.fit_pooled(syn, "y ~ x", rule="synthetic"), real)
>>> list(cmp.to_frame().columns[:3])
['term', 'estimate.syn', 'std.error.syn']
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from .dataset_fit import fit_one
from .formula import outcome_coding, outcome_column
from .result import PooledResult
from .rules import check_level


def ci_overlap(low_obs, high_obs, low_syn, high_syn):
    """Karr et al. (2006) interval overlap J (vectorised)."""
    low_obs, high_obs, low_syn, high_syn = (np.asarray(a, float) for a in (low_obs, high_obs, low_syn, high_syn))
    inner = np.minimum(high_obs, high_syn) - np.maximum(low_obs, low_syn)
    with np.errstate(divide="ignore", invalid="ignore"):
        return 0.5 * (inner / (high_obs - low_obs) + inner / (high_syn - low_syn))


class CompareFit:
    """Real-data fit beside the pooled one. ``to_frame()`` gives one row per term; ``real_fit`` is
    the statsmodels results on the real data; ``mean_abs_std_diff`` and ``mean_ci_overlap``
    summarise (over the terms present in both fits)."""

    def __init__(self, table, pooled, real_fit, n_real, n_dropped):
        self._table = table
        self.pooled = pooled
        self.real_fit = real_fit
        self.n_real = n_real
        self.n_dropped = n_dropped
        self.mean_abs_std_diff, self.mean_ci_overlap = _means(table)

    def to_frame(self) -> pd.DataFrame:
        return self._table.copy()

    def summary(self) -> str:
        cols = ["term", "estimate.syn", "estimate.obs", "diff", "std.diff", "ci.overlap"]
        lines = [
            f"Fit to {self.pooled.m} synthetic datasets (rule {self.pooled.rule!r}) compared with the real data",
            f"Model: {self.pooled.family.label}; formula: {self.pooled.formula}",
            f"Real data: {self.n_real} rows used, {self.n_dropped} dropped for missing model variables",
            "",
            self._table[cols].to_string(index=False, float_format=lambda v: f"{v:.4f}"),
            "",
            f"Mean |standardised difference| (in real-data SEs): {self.mean_abs_std_diff:.4f}",
            f"Mean confidence-interval overlap (Karr et al. 2006): {self.mean_ci_overlap:.4f}",
        ]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"<CompareFit rule={self.pooled.rule!r} terms={len(self._table)} "
                f"mean|std.diff|={self.mean_abs_std_diff:.3g} mean CI overlap={self.mean_ci_overlap:.3g}>")


def compare_fit(pooled: PooledResult, real_df: pd.DataFrame) -> CompareFit:
    """Refit ``pooled``'s model on ``real_df`` and compare coefficient by coefficient.

    Returns a `CompareFit` whose ``to_frame()`` has columns ``term, estimate.syn, std.error.syn,
    conf.low.syn, conf.high.syn, estimate.obs, std.error.obs, statistic.obs, conf.low.obs,
    conf.high.obs, diff, std.diff, ci.overlap`` (terms of either fit; NaN where one lacks it).
    """
    import patsy

    if not isinstance(pooled, PooledResult):
        raise TypeError(f"pooled must be the PooledResult of fit_pooled; got {type(pooled).__name__}")
    if not isinstance(real_df, pd.DataFrame):
        raise TypeError(f"real_df must be a pandas DataFrame; got {type(real_df).__name__}")
    fam = pooled.family
    outcome = outcome_column(pooled.formula, real_df.columns)
    coding = outcome_coding([real_df], outcome, fam) if outcome is not None else None
    env = patsy.EvalEnvironment.capture(1)
    fit, _ = fit_one(real_df, pooled.formula, fam, env, "real", coding, outcome, keep_result=True)
    if fit.error is not None:
        raise ValueError(f"the model could not be fitted to the real data: {fit.error}")
    res = fit.result
    level = pooled.conf_level
    ci = res.conf_int(alpha=1 - level)
    real = pd.DataFrame({
        "term": list(res.params.index), "estimate.obs": res.params.to_numpy(), "std.error.obs": res.bse.to_numpy(),
        "statistic.obs": res.tvalues.to_numpy(), "conf.low.obs": ci.iloc[:, 0].to_numpy(),
        "conf.high.obs": ci.iloc[:, 1].to_numpy(),
    })
    return CompareFit(compare_table(pooled.to_frame(), real), pooled, res, fit.nobs, fit.n_missing)


def _means(table: pd.DataFrame) -> tuple[float, float]:
    """Mean |std.diff| and mean CI overlap over the terms that have both."""
    both = table.dropna(subset=["std.diff", "ci.overlap"])
    if not len(both):
        return np.nan, np.nan
    return float(both["std.diff"].abs().mean()), float(both["ci.overlap"].mean())


def compare_estimates(pooled_table: pd.DataFrame, terms, estimates, std_errors, *, conf_level: float = 0.95,
                      family: str = "gaussian", df_resid=None) -> dict:
    """`compare_table` for a real-data fit made elsewhere (dpsynthr's ``dp_compare``: R's lm/glm on the
    real data gives ``terms``, ``estimates``, ``std_errors`` and ``df_resid``). The real-data Wald
    intervals at ``conf_level`` use a t(df_resid) reference where the family estimates a dispersion
    ("gaussian", i.e. lm, Gamma, inverse.gaussian, the quasi families) and the normal otherwise
    ("binomial", "poisson", negative binomial), as R's ``summary.glm``. Returns ``table`` and
    ``mean_abs_std_diff``, ``mean_ci_overlap`` (over the terms in both fits).

    >>> syn = pd.DataFrame({"term": ["x"], "estimate": [1.0], "std.error": [0.1], "conf.low": [0.8],
    ...                     "conf.high": [1.2]})
    >>> out = compare_estimates(syn, ["x"], [1.0], [0.1], family="binomial")
    >>> round(float(out["table"]["conf.high.obs"][0]), 4), round(out["mean_ci_overlap"], 3)
    (1.196, 0.99)
    """
    from scipy import stats

    est, se = np.asarray(estimates, dtype=float), np.asarray(std_errors, dtype=float)
    q = (1 + check_level(conf_level)) / 2
    dispersion = family not in ("binomial", "poisson") and not str(family).startswith("Negative Binomial")
    crit = stats.t.ppf(q, df_resid) if dispersion and df_resid is not None else stats.norm.ppf(q)
    real = pd.DataFrame({"term": [str(t) for t in terms], "estimate.obs": est, "std.error.obs": se,
                         "statistic.obs": est / se, "conf.low.obs": est - crit * se, "conf.high.obs": est + crit * se})
    table = compare_table(pooled_table, real)
    mean_abs, mean_overlap = _means(table)
    return {"table": table, "mean_abs_std_diff": mean_abs, "mean_ci_overlap": mean_overlap}


def compare_table(pooled_table: pd.DataFrame, real: pd.DataFrame) -> pd.DataFrame:
    """The comparison table from the pooled table (mice's columns) and the real-data fit's
    ``term, estimate.obs, std.error.obs, statistic.obs, conf.low.obs, conf.high.obs`` (from
    statsmodels here, from R's glm in dpsynthr): the pooled terms first, then those only the real
    fit has; ``diff``, ``std.diff`` (in real-data standard errors) and ``ci.overlap`` (Karr et al.)."""
    syn = pooled_table[["term", "estimate", "std.error", "conf.low", "conf.high"]].copy()
    syn.columns = ["term", "estimate.syn", "std.error.syn", "conf.low.syn", "conf.high.syn"]
    table = syn.merge(real, on="term", how="outer", sort=False)
    order = list(syn["term"]) + [t for t in real["term"] if t not in set(syn["term"])]
    table = table.set_index("term").loc[order].reset_index()
    table["diff"] = table["estimate.syn"] - table["estimate.obs"]
    table["std.diff"] = table["diff"] / table["std.error.obs"]
    table["ci.overlap"] = ci_overlap(table["conf.low.obs"], table["conf.high.obs"],
                                     table["conf.low.syn"], table["conf.high.syn"])
    return table


__all__ = ["compare_fit", "compare_table", "compare_estimates", "CompareFit", "ci_overlap"]
