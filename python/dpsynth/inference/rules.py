"""Combining rules for m analyses of multiply imputed or synthetic data, and the D1 Wald test.

Each of m datasets gives an estimate q_i (a scalar or a vector of p coefficients) and its variance
u_i (a scalar or a p×p covariance matrix). With

    q̄ = (1/m) Σ q_i,   ū = (1/m) Σ u_i,   b = Σ (q_i − q̄)² / (m − 1)

the rules differ in T, the variance of q̄ as an estimate of the population quantity, and in the
degrees of freedom ν of the t reference distribution:

=====================  ===========================================  ==========================================
rule                   T                                            ν
=====================  ===========================================  ==========================================
"synthetic"            (1 + 1/m) b − ū; if T ≤ 0: (n_syn/n_orig) ū  (m − 1)(1 − ū / ((1 + 1/m) b))²
  fully synthetic data, Raghunathan, Reiter & Rubin (2003); non-negative variant of Reiter (2002)
"mi"                   ū + (1 + 1/m) b                              Barnard & Rubin (1999) with dfcom
  multiple imputation for missing data, Rubin (1987)
"reiter2003"           ū + b/m                                      (m − 1)(1 + ū / (b/m))²
  partially synthetic data, Reiter (2003)
"two-stage"            Ū + (1 + 1/M) B − W̄/r; if T ≤ 0: Ū          Satterthwaite, see `_two_stage`
  M imputations × r partial syntheses each, Reiter (2004)
"two-stage-synthetic"  (1 + 1/M) B + (1 − 1/r) W̄ − Ū; as synthetic  Satterthwaite, see `_two_stage`
  M imputations × r full syntheses each (the DP setting), derived in `_two_stage`
=====================  ===========================================  ==========================================

Conventions (say what each column means, as mice does):

* ``riv`` is (1 + 1/m) b / ū for "mi", "reiter2003" (mice computes the same for both) and "synthetic"
  (there it is r_f of Reiter 2005: T = ū (r_f − 1)); for the two-stage rules it is the between part
  of T over Ū (see `_two_stage`). ``lambda`` and ``fmi`` (fractions of missing information) exist only
  for "mi"; they are NaN for the synthetic-data rules, as mice leaves them NA for "reiter2003".
* "synthetic" fallback (Reiter 2002): when T ≤ 0 the variance is (n_syn/n_orig) ū; without n_syn and
  n_orig the ratio is 1, i.e. T = ū. The ``fallback`` column says where this happened. ν is kept from
  the formula above (the degrees of freedom Reiter 2002 gives for this rule), as twinify's
  non-negative rule used by Räisä et al. (2023) does; it is not switched to a normal reference, so
  ν stays continuous at T = 0 (it tends to 0 from both sides and the interval widens: the data then
  cannot tell the between-dataset variance from ū; more datasets help). The two-stage rules use the
  same convention.
* "mi" without ``dfcom`` assumes a large complete-data sample (dfcom = ∞, Rubin's 1987 ν), as
  ``mice::pool.scalar(n = Inf)``; λ is floored at 1e-4 inside the df only, as mice does.
* p-values and intervals use t(ν) with ν floored at 0.001 (mice floors it for p-values; the floor
  only matters when ν < 0.001); ν = ∞ gives the normal.

Example
-------
>>> import dpsynth
>>> tab = dpsynth.pool([1.0, 1.2, 0.9, 1.1, 1.05], [0.04, 0.05, 0.045, 0.05, 0.048],
...                    rule="mi", dfcom=98)
>>> round(float(tab.loc[0, "t"]), 5), round(float(tab.loc[0, "df"]), 3)
(0.0616, 34.983)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from ..validation import check_number

RULES = {
    "synthetic": "fully synthetic data (Raghunathan, Reiter & Rubin 2003; T <= 0 fallback of Reiter 2002)",
    "mi": "multiple imputation (Rubin 1987; Barnard & Rubin 1999 df)",
    "reiter2003": "partially synthetic data (Reiter 2003)",
    "two-stage": "multiple imputation, then partial synthesis, nested M x r (Reiter 2004)",
    "two-stage-synthetic": "multiple imputation, then full synthesis, nested M x r (dpsynth derivation)",
}
_ALIASES = {"rubin1987": "mi", "raghunathan2003": "synthetic", "reiter2004": "two-stage"}
NESTED_RULES = ("two-stage", "two-stage-synthetic")
SYNTHETIC_LIKE = ("synthetic", "two-stage-synthetic")

COLUMNS = ["term", "estimate", "ubar", "b", "t", "dfcom", "df", "riv", "lambda", "fmi",
           "std.error", "statistic", "p.value", "conf.low", "conf.high", "rule", "m", "fallback"]
NESTED_COLUMNS = ["w", "imputations", "syntheses"]
DF_FLOOR = 0.001  # mice floors df at 0.001 for p-values


def check_rule(rule: str) -> str:
    """The canonical rule name (aliases: "rubin1987" → "mi", "raghunathan2003" → "synthetic",
    "reiter2004" → "two-stage")."""
    if not isinstance(rule, str):
        raise TypeError(f"rule must be a string, one of {sorted(RULES)}; got {type(rule).__name__}")
    name = _ALIASES.get(rule.lower(), rule.lower())
    if name not in RULES:
        raise ValueError(f"unknown rule {rule!r}; use one of {sorted(RULES)} "
                         f"(or the aliases {sorted(_ALIASES)})")
    return name


def size_ratio(n_syn, n_orig) -> float:
    """n_syn/n_orig for the "synthetic" fallback; 1 when neither is given."""
    if (n_syn is None) != (n_orig is None):
        raise ValueError("give both n_syn and n_orig (rows per synthetic dataset and in the original "
                         "data), or neither (the fallback then uses ubar itself)")
    if n_syn is None:
        return 1.0
    if not (np.isfinite(n_syn) and np.isfinite(n_orig)) or n_syn <= 0 or n_orig <= 0:
        raise ValueError(f"n_syn and n_orig must be positive numbers; got {n_syn!r}, {n_orig!r}")
    return float(n_syn) / float(n_orig)


def _dfcom(dfcom) -> float:
    if dfcom is None:
        return np.inf
    dfcom = float(check_number(dfcom, "dfcom", 0.0, low_open=True, what="a positive number of complete-data degrees "
                                                                         "of freedom (e.g. n − k), or None for a large sample"))
    return max(dfcom, 1.0)  # mice floors dfcom at 1


# ----------------------------------------------------------------------------------------------
# Scalar rules, vectorised over terms (arrays of equal length; m, M, r are numbers)
# ----------------------------------------------------------------------------------------------

def barnard_rubin(m, b, t, dfcom=np.inf):
    """Barnard & Rubin (1999) small-sample degrees of freedom for the "mi" rule.

    λ = (1 + 1/m) b / t (floored at 1e-4 as in mice), ν_old = (m − 1)/λ²; with a finite dfcom,
    ν_obs = (dfcom + 1)/(dfcom + 3) · dfcom · (1 − λ) and ν = ν_old ν_obs / (ν_old + ν_obs).
    """
    b, t = np.asarray(b, float), np.asarray(t, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = np.maximum((1 + 1 / m) * b / t, 1e-4)
        df_old = (m - 1) / lam ** 2
        if np.isinf(dfcom):
            return df_old
        df_obs = (dfcom + 1) / (dfcom + 3) * dfcom * (1 - lam)
        return df_old * df_obs / (df_old + df_obs)


@dataclass
class ScalarPool:
    """Per-term results of one rule (arrays over terms)."""
    estimate: np.ndarray
    ubar: np.ndarray
    b: np.ndarray
    t: np.ndarray
    df: np.ndarray
    riv: np.ndarray
    lam: np.ndarray
    fmi: np.ndarray
    fallback: np.ndarray
    w: np.ndarray | None = None


def _flat_rule(rule, m, qbar, ubar, b, dfcom, ratio) -> ScalarPool:
    nan = np.full_like(qbar, np.nan)
    fallback = np.zeros(qbar.shape, bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        riv = (1 + 1 / m) * b / ubar
        if rule == "mi":
            t = total_variance(rule, ubar, b, m)
            df = barnard_rubin(m, b, t, dfcom)
            lam = (1 + 1 / m) * b / t
            fmi = (riv + 2 / (df + 3)) / (riv + 1)
            return ScalarPool(qbar, ubar, b, t, df, riv, lam, fmi, fallback)
        if rule == "reiter2003":
            t = total_variance(rule, ubar, b, m)
            df = (m - 1) * (1 + ubar / (b / m)) ** 2
            return ScalarPool(qbar, ubar, b, t, df, riv, nan, nan, fallback)
        # "synthetic"
        t_raw = total_variance(rule, ubar, b, m)
        df = (m - 1) * (1 - ubar / ((1 + 1 / m) * b)) ** 2
    fallback = ~(t_raw > 0)
    t = np.where(fallback, ratio * ubar, t_raw)
    return ScalarPool(qbar, ubar, b, t, df, riv, nan, nan.copy(), fallback)


def _two_stage_extra(rule, M, r, b, w):
    """The two-stage rules' between- and within-nest part: (1 + 1/M) B ∓ c_W W̄ (see `_two_stage`)."""
    if rule == "two-stage":
        return (1 + 1 / M) * b - (1 / r) * w
    return (1 + 1 / M) * b + (1 - 1 / r) * w


def total_variance(rule, ubar, b, m, w=None, r=None):
    """The rule's total variance T before any fallback: the one home of the combining rules' formulas.
    Elementwise, so it serves per-term variances and covariance matrices alike. ``m``: datasets (the
    flat rules) or nests M (the two-stage rules, which also take the within-nest ``w`` and ``r``).

    * "mi" (Rubin 1987): T = Ū + (1 + 1/m) B; "reiter2003": T = Ū + B/m;
    * "synthetic" (Raghunathan, Reiter & Rubin 2003): T = (1 + 1/m) B − Ū;
    * "two-stage": T = Ū + (1 + 1/M) B − W̄/r; "two-stage-synthetic": T = (1 + 1/M) B + (1 − 1/r) W̄ − Ū.

    >>> round(float(total_variance("mi", 0.04, 0.01, 4)), 6)
    0.0525
    """
    if rule == "mi":
        return ubar + (1 + 1 / m) * b
    if rule == "reiter2003":
        return ubar + b / m
    if rule == "synthetic":
        return (1 + 1 / m) * b - ubar
    extra = _two_stage_extra(rule, m, r, b, w)
    return ubar + extra if rule == "two-stage" else extra - ubar


def total_covariance(rule, q, covs, shape=None):
    """The rule's total covariance matrix T (before any fallback) from estimates q (n x p) and
    covariance matrices covs (n x p x p); ``shape`` = (M, r) for the two-stage rules, n = M r."""
    ubar = covs.mean(axis=0)
    if shape is None:
        return total_variance(rule, ubar, np.atleast_2d(np.cov(q, rowvar=False, ddof=1)), q.shape[0])
    M, r = shape
    qn = q.reshape(M, r, -1)
    b = np.atleast_2d(np.cov(qn.mean(axis=1), rowvar=False, ddof=1))
    w = np.mean([np.atleast_2d(np.cov(qn[l], rowvar=False, ddof=1)) for l in range(M)], axis=0) if r > 1 \
        else np.zeros_like(b)
    return total_variance(rule, ubar, b, M, w, r)


def _two_stage(rule, M, r, qbar, ubar, b_between, w_within, ratio) -> ScalarPool:
    r"""Two-stage rules: M imputations of the missing values, then r syntheses from each.

    Data set (l, i), l = 1..M (nests: completed data D^(l)), i = 1..r, gives q_li and u_li.
    Statistics: q̄_l = mean_i q_li, q̄ = mean_l q̄_l, Ū = mean u_li,
    B = Σ_l (q̄_l − q̄)²/(M − 1) (between nests), W̄ = mean_l Σ_i (q_li − q̄_l)²/(r − 1) (within).

    Derivation. Let Q be the population quantity, q^(l) the estimate the completed data D^(l) would
    give, with complete-data variance u (≈ Ū when the synthetic sets have the original size), and
    q̄_com = mean_l q^(l). Split
        q̄ − Q = (q̄ − q̄_com) + (q̄_com − Q).
    (1) Imputation (Rubin 1987, M draws): Var(q̄_com − Q) = u + (1 + 1/M) B_∞, where B_∞ is the
        variance of q^(l) across imputations.
    (2) Synthesis: given D^(l), the r synthetic estimates scatter around q^(l) with variance W_∞,
        so q̄_l = q^(l) + error of variance W_∞/r, and Var(q̄ − q̄_com) = W_∞/(M r).
    (3) Moments of the observable statistics: E[W̄] = W_∞ and, because each nest mean carries its
        own synthesis error, E[B] = B_∞ + W_∞/r, hence B_∞ ≈ B − W̄/r.
    Together T = u + (1 + 1/M)(B − W̄/r) + W̄/(M r) = u + (1 + 1/M) B − W̄/r.

    * "two-stage" (Reiter 2004, partial synthesis): the released sets keep the completed data's
      size and design, so u ≈ Ū and T = Ū + (1 + 1/M) B − W̄/r (needs r ≥ 2).
    * "two-stage-synthetic" (full synthesis, e.g. a DP generator fitted to each completed set): the
      synthetic sets are new samples, and as in Raghunathan, Reiter & Rubin (2003) their within-nest
      spread is W_∞ ≈ u + Ū_syn (parameter uncertainty given D^(l), which includes any DP noise,
      plus the synthetic sample's own sampling variance). So u ≈ W̄ − Ū and
          T = (1 + 1/M) B + (1 − 1/r) W̄ − Ū.
      With r = 1 this is exactly the "synthetic" rule with m = M (W̄ drops out); without missing
      data (B_∞ = 0, so B ≈ W̄/r) and M = 1 it is, in expectation, the "synthetic" rule
      (1 + 1/r) W̄ − Ū within one nest. When T ≤ 0 the same fallback as "synthetic" applies,
      (n_syn/n_orig) Ū; for "two-stage" the fallback is Ū.
    Degrees of freedom (Satterthwaite, B with M − 1 df and W̄ with M(r − 1) df, Ū treated as
    fixed; the slow simulation tests check the resulting coverage):
        ν = T_raw² / [ (c_B B)²/(M − 1) + (c_W W̄)²/(M (r − 1)) ],
    with (c_B, c_W) = (1 + 1/M, 1/r) for "two-stage" and (1 + 1/M, 1 − 1/r) for
    "two-stage-synthetic" (the W̄ term vanishes at r = 1, and ν is then the "synthetic" ν).
    ``riv`` is (c_B B − c_W W̄)/Ū for "two-stage" and (c_B B + c_W W̄)/Ū for
    "two-stage-synthetic" (so that T = Ū (1 + riv), resp. Ū (riv − 1), as for "mi" / "synthetic").
    Both rules are checked by simulation in python/tests/test_inference.py (slow tests).
    """
    c_b, c_w = 1 + 1 / M, (1 / r if rule == "two-stage" else 1 - 1 / r)
    extra = _two_stage_extra(rule, M, r, b_between, w_within)
    t_raw = total_variance(rule, ubar, b_between, M, w_within, r)
    with np.errstate(divide="ignore", invalid="ignore"):
        w_part = (c_w * w_within) ** 2 / (M * (r - 1)) if r > 1 else np.zeros_like(w_within)
        df = t_raw ** 2 / ((c_b * b_between) ** 2 / (M - 1) + w_part)
        riv = extra / ubar
    fallback = ~(t_raw > 0)
    floor = ubar if rule == "two-stage" else ratio * ubar
    t = np.where(fallback, floor, t_raw)
    nan = np.full_like(qbar, np.nan)
    return ScalarPool(qbar, ubar, b_between, t, df, riv, nan, nan.copy(), fallback, w=w_within)


def pool_terms(rule, q, u, *, dfcom=None, ratio=1.0) -> ScalarPool:
    """Pool per term. q, u: arrays (m, p) for the flat rules or (M, r, p) for the nested rules,
    u holding per-term variances. No validation here: `pool` and `fit_pooled` validate."""
    dfc = _dfcom(dfcom)
    if rule in NESTED_RULES:
        M, r = q.shape[0], q.shape[1]
        nest_means = q.mean(axis=1)
        qbar = nest_means.mean(axis=0)
        b_between = nest_means.var(axis=0, ddof=1)
        w_within = q.var(axis=1, ddof=1).mean(axis=0) if r > 1 else np.zeros_like(qbar)
        return _two_stage(rule, M, r, qbar, u.mean(axis=(0, 1)), b_between, w_within, ratio)
    m = q.shape[0]
    return _flat_rule(rule, m, q.mean(axis=0), u.mean(axis=0), q.var(axis=0, ddof=1), dfc, ratio)


def scalar_table(terms, res: ScalarPool, rule, m, dfcom, conf_level=0.95, nested=None) -> pd.DataFrame:
    """The mice-shaped table from per-term results (adds std.error, statistic, p.value, CI)."""
    level = check_level(conf_level)
    se = np.sqrt(res.t)
    with np.errstate(divide="ignore", invalid="ignore"):
        statistic = res.estimate / se
    df_used = np.maximum(res.df, DF_FLOOR)
    p_value = 2 * stats.t.sf(np.abs(statistic), df_used)
    crit = stats.t.ppf(0.5 + level / 2, df_used)
    out = pd.DataFrame({
        "term": [str(x) for x in terms],
        "estimate": res.estimate, "ubar": res.ubar, "b": res.b, "t": res.t,
        "dfcom": np.full(len(terms), np.inf if dfcom is None else float(dfcom)),
        "df": res.df, "riv": res.riv, "lambda": res.lam, "fmi": res.fmi,
        "std.error": se, "statistic": statistic, "p.value": p_value,
        "conf.low": res.estimate - crit * se, "conf.high": res.estimate + crit * se,
        "rule": rule, "m": np.broadcast_to(np.asarray(m, int), (len(terms),)).copy(),
        "fallback": res.fallback.astype(bool),
    })
    if nested is not None:
        out["w"] = res.w
        out["imputations"], out["syntheses"] = nested
    return out


def check_level(conf_level) -> float:
    """``conf_level`` is a number strictly between 0 and 1 (the intervals' level)."""
    return float(check_number(conf_level, "conf_level", 0.0, 1.0, low_open=True, high_open=True,
                              what="between 0 and 1 (e.g. 0.95)"))


# ----------------------------------------------------------------------------------------------
# Input handling for pool() and wald_test()
# ----------------------------------------------------------------------------------------------

def _float_array(values, message: str) -> np.ndarray:
    """``values`` as a float array; TypeError(message) when they are not numbers."""
    try:
        return np.asarray(values, dtype=float)
    except (TypeError, ValueError) as err:
        raise TypeError(message) from err


def _as_estimates(estimates, nested):
    """(array (..., p), term names or None, was_scalar)."""
    names = None
    if isinstance(estimates, pd.DataFrame):
        names = [str(c) for c in estimates.columns]
        arr = estimates.to_numpy(dtype=float)
    elif isinstance(estimates, (list, tuple)) and estimates and all(isinstance(e, pd.Series) for e in estimates):
        names = [str(i) for i in estimates[0].index]
        if any(list(map(str, e.index)) != names for e in estimates):
            raise ValueError("the estimate Series have different terms; align them first")
        arr = np.array([e.to_numpy(dtype=float) for e in estimates])
    else:
        arr = _float_array(estimates, "estimates must be numbers: a list of m values, an m×p array or DataFrame, "
                                      "or for the two-stage rules an M×r (or M×r×p) nested list")
    scalar_dims = 2 if nested else 1
    if arr.ndim == scalar_dims:
        return arr[..., None], names, True
    if arr.ndim == scalar_dims + 1:
        return arr, names, False
    shape = "M×r or M×r×p (M imputations, r syntheses each)" if nested else "m or m×p"
    raise ValueError(f"estimates must have shape {shape}; got shape {arr.shape}")


def _as_variances(variances, q):
    """Covariance matrices of shape q.shape + (p,) from scalars, per-term variances or matrices."""
    p = q.shape[-1]
    if isinstance(variances, (list, tuple)) and variances and all(isinstance(v, pd.DataFrame) for v in variances):
        arr = np.array([v.to_numpy(dtype=float) for v in variances])
    elif isinstance(variances, pd.DataFrame):
        arr = variances.to_numpy(dtype=float)
    else:
        arr = _float_array(variances, "variances must be numbers: squared standard errors (same shape as the "
                                      "estimates) or covariance matrices")
    lead = q.shape[:-1]
    if arr.shape == lead and p == 1:
        arr = arr[..., None]
    if arr.shape == q.shape:
        cov = np.zeros(q.shape + (p,))
        idx = np.arange(p)
        cov[..., idx, idx] = arr
        arr = cov
    if arr.shape != q.shape + (p,):
        raise ValueError(f"variances must be one variance per estimate (shape {q.shape[:-1] if p == 1 else q.shape}) "
                         f"or one {p}×{p} covariance matrix per dataset; got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("variances contain NaN or infinite values: drop the failed analyses first "
                         "(fit_pooled does this and reports what it dropped)")
    diag = np.diagonal(arr, axis1=-2, axis2=-1)
    if np.any(diag < 0):
        raise ValueError("variances must be non-negative (squared standard errors, not standard errors "
                         "with a sign)")
    return arr


def from_results(results):
    """(params list, covariance list, df_resid of the first) from fitted statsmodels results."""
    results = list(results) if isinstance(results, (list, tuple)) else None
    if not results or not all(hasattr(r, "params") and hasattr(r, "cov_params") for r in results):
        raise TypeError("variances is missing: give the variances (or covariance matrices), or pass a "
                        "list of fitted statsmodels results as the first argument")
    params = [pd.Series(r.params) for r in results]
    covs = [pd.DataFrame(r.cov_params()) for r in results]
    return params, covs, getattr(results[0], "df_resid", None)


def _prepare(estimates, variances, rule, terms):
    rule = check_rule(rule)
    nested = rule in NESTED_RULES
    q, names, scalar = _as_estimates(estimates, nested)
    if not np.all(np.isfinite(q)):
        raise ValueError("estimates contain NaN or infinite values: drop the failed analyses first "
                         "(fit_pooled does this and reports what it dropped)")
    cov = _as_variances(variances, q)
    if nested:
        M, r = q.shape[0], q.shape[1]
        if M < 2:
            raise ValueError(f"rule {rule!r} needs at least 2 imputations (rows); got {M}")
        if rule == "two-stage" and r < 2:
            raise ValueError("rule 'two-stage' needs at least 2 syntheses per imputation (r ≥ 2) to "
                             "estimate the within-imputation variance")
    elif q.shape[0] < 2:
        raise ValueError(f"pooling needs at least 2 analyses (m ≥ 2) to estimate the between variance b; "
                         f"got m = {q.shape[0]}")
    p = q.shape[-1]
    if terms is not None:
        terms = [str(t) for t in (terms if not isinstance(terms, str) else [terms])]
        if len(terms) != p:
            raise ValueError(f"terms has {len(terms)} names for {p} estimates per dataset")
    elif names is not None:
        terms = names
    else:
        terms = ["Q"] if scalar else [f"Q{j + 1}" for j in range(p)]
    return rule, q, cov, terms


def pool(estimates, variances=None, rule: str = "synthetic", dfcom=None, n_syn=None, n_orig=None, *,
         terms=None, conf_level: float = 0.95) -> pd.DataFrame:
    """Combine m estimates and their variances into one table (mice's columns).

    Parameters
    ----------
    estimates : m numbers, an m×p array / DataFrame (columns = terms) or a list of Series; for the
        rules "two-stage" and "two-stage-synthetic" an M×r (or M×r×p) nested list: M imputations,
        r syntheses from each. Or a list of m fitted statsmodels results, with ``variances=None``:
        their ``params`` and ``cov_params()`` are used, and ``dfcom`` defaults to the first
        result's ``df_resid`` (as mice).
    variances : the matching squared standard errors (same shape), or one p×p covariance matrix per
        dataset (only the diagonals enter the table; see `wald_test` for the full matrices).
    rule : "synthetic" (default: fully synthetic data, the NAPSU-MQ noise-aware setting), "mi",
        "reiter2003", "two-stage", "two-stage-synthetic". See the module docstring for T and ν.
    dfcom : complete-data degrees of freedom (e.g. n − k) for the Barnard–Rubin df of "mi";
        None = large sample (∞). Stored, not used, by the other rules (as mice does).
    n_syn, n_orig : rows per synthetic dataset and in the original data, for the T ≤ 0 fallback
        (n_syn/n_orig) ū of the synthetic rules; both None → ratio 1, i.e. ū.
    terms : names for the p terms (default: the DataFrame columns, else "Q" or "Q1".."Qp").
    conf_level : level of conf.low/conf.high.

    Returns
    -------
    DataFrame with columns ``term, estimate, ubar, b, t, dfcom, df, riv, lambda, fmi, std.error,
    statistic, p.value, conf.low, conf.high, rule, m, fallback`` (the two-stage rules add ``w``,
    ``imputations``, ``syntheses``), one row per term. ``fallback`` is True where the synthetic
    rule's T ≤ 0 and the fallback variance was used.

    Example
    -------
    >>> tab = pool([1.0, 1.2, 0.9, 1.1, 1.05], [0.04, 0.05, 0.045, 0.05, 0.048], rule="synthetic")
    >>> bool(tab.loc[0, "fallback"]), round(float(tab.loc[0, "t"]), 4)
    (True, 0.0466)
    """
    if variances is None:
        estimates, variances, df_resid = from_results(estimates)
        dfcom = df_resid if dfcom is None else dfcom
    rule, q, cov, terms = _prepare(estimates, variances, rule, terms)
    ratio = size_ratio(n_syn, n_orig)
    u = np.diagonal(cov, axis1=-2, axis2=-1)
    res = pool_terms(rule, q, u, dfcom=dfcom, ratio=ratio)
    nested = (q.shape[0], q.shape[1]) if rule in NESTED_RULES else None
    m = q.shape[0] * q.shape[1] if nested else q.shape[0]
    out = scalar_table(terms, res, rule, m, None if dfcom is None else _dfcom(dfcom), conf_level, nested)
    out.attrs.update(rule=rule, description=RULES[rule], m=m, n_ratio=ratio)
    return out


# ----------------------------------------------------------------------------------------------
# Multivariate Wald test D1
# ----------------------------------------------------------------------------------------------

def _denominator_df(k, m, r_inc, sign):
    """Li, Raghunathan & Rubin (1991) denominator df, with the rule's r (sign −1 for the
    fully synthetic rule, where T = Ū (r − 1))."""
    t = k * (m - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        if t > 4:
            return 4 + (t - 4) * (1 + sign * (1 - 2 / t) / r_inc) ** 2
        return t * (1 + 1 / k) * (1 + sign / r_inc) ** 2 / 2


def _reiter2007_df(k, m, r_inc, dfcom):
    """Reiter (2007, Biometrika 94) small-sample denominator df of D1 for a finite dfcom."""
    t = k * (m - 1)
    a = r_inc * t / (t - 2)
    v_star = (dfcom + 1) / (dfcom + 3) * dfcom
    c0, c1, c2 = 1 / (t - 4), v_star - 2 * (1 + a), v_star - 4 * (1 + a)
    z = (1 / c2 + c0 * (a ** 2 * c1 / ((1 + a) ** 2 * c2)
                        + 8 * a ** 2 * c1 / ((1 + a) * c2 ** 2) + 4 * a ** 2 / ((1 + a) * c2)
                        + 4 * a ** 2 / (c2 * c1) + 16 * a ** 2 * c1 / c2 ** 3 + 8 * a ** 2 / c2 ** 2))
    return 4 + 1 / z


def d1_from_moments(rule, m, qbar, ubar, b, *, null=None, dfcom=None, ratio=1.0) -> dict:
    """D1 from the pooled moments (qbar: k, ubar and b: k×k). See `wald_test`."""
    k = len(qbar)
    d = qbar - (np.zeros(k) if null is None else np.asarray(null, float))
    try:
        ubar_inv_b = np.linalg.solve(ubar, b)
        ubar_inv_d = np.linalg.solve(ubar, d)
    except np.linalg.LinAlgError as err:
        raise ValueError("the mean covariance matrix ubar of the tested terms is singular: test fewer "
                         "or non-redundant terms") from err
    trace = float(np.trace(ubar_inv_b)) / k
    quad = float(d @ ubar_inv_d)
    dfc = _dfcom(dfcom)
    fallback = False
    if rule == "mi":
        r_inc = (1 + 1 / m) * trace
        stat = quad / (k * (1 + r_inc))
        if np.isfinite(dfc) and k * (m - 1) > 4:
            df2 = _reiter2007_df(k, m, r_inc, dfc)
        else:
            df2 = _denominator_df(k, m, r_inc, +1)
    elif rule == "reiter2003":
        r_inc = trace / m
        stat = quad / (k * (1 + r_inc))
        df2 = _denominator_df(k, m, r_inc, +1)
    elif rule == "synthetic":
        r_inc = (1 + 1 / m) * trace
        df2 = _denominator_df(k, m, r_inc, -1)
        if r_inc > 1:
            stat = quad / (k * (r_inc - 1))
        else:  # T not positive definite under proportionality: Reiter (2002) fallback
            fallback = True
            stat = quad / (k * ratio)
    else:
        raise ValueError(f"the D1 test is not available for rule {rule!r} (only 'mi', 'reiter2003', "
                         "'synthetic'); test single terms with the pooled table instead")
    df2 = float(df2)
    p_value = float(stats.f.sf(stat, k, max(df2, DF_FLOOR)))
    return {"statistic": float(stat), "df1": k, "df2": df2, "p.value": p_value, "riv": float(r_inc),
            "rule": rule, "m": int(m), "fallback": fallback}


def wald_test(estimates, variances=None, rule: str = "synthetic", *, terms=None, null=None, dfcom=None,
              n_syn=None, n_orig=None, names=None) -> dict:
    """Multivariate Wald test D1 that k coefficients equal ``null`` (default 0) jointly.

    With d = q̄ − q0, Ū and B the mean within and the between covariance matrices and
    tr = tr(Ū⁻¹ B)/k (B assumed proportional to Ū):

    * "mi" (Li, Raghunathan & Rubin 1991): r = (1 + 1/m) tr, D1 = dᵀŪ⁻¹d / (k (1 + r)),
      F(k, ν) with ν = 4 + (t − 4)(1 + (1 − 2/t)/r)², t = k(m − 1) (> 4; else
      t(1 + 1/k)(1 + 1/r)²/2); with dfcom, Reiter's (2007) small-sample ν. Same as mice::D1.
    * "reiter2003" (partially synthetic): r = tr/m, D1 = dᵀŪ⁻¹d / (k (1 + r)), ν as above.
    * "synthetic" (fully synthetic, Reiter 2005 approach): r = (1 + 1/m) tr, T = Ū (r − 1),
      D1 = dᵀŪ⁻¹d / (k (r − 1)), ν = 4 + (t − 4)(1 − (1 − 2/t)/r)². When r ≤ 1 (T not positive),
      the fallback (n_syn/n_orig) Ū is used and ``fallback`` is True.
    The ν forms for the synthetic rules follow the LRR moment match with the rule's r; their null
    rejection rates are checked by simulation (slow tests).

    ``estimates``/``variances`` as for `pool` (covariance matrices needed for k > 1, or a list of
    statsmodels results with ``variances=None``); ``names`` names the p coefficients (default:
    DataFrame columns, else "Q1".."Qp"); ``terms`` selects the k tested ones by name or position
    (default all); ``null`` gives their values under H0 (default 0). Returns a dict with
    ``statistic`` (the F value), ``df1``, ``df2``, ``p.value``, ``riv``, ``rule``, ``m``, ``fallback``.

    >>> res = wald_test([[0.1, 0.2], [0.3, 0.1], [0.2, 0.3]], [[0.01, 0.02]] * 3, rule="mi")
    >>> res["df1"]
    2
    """
    if variances is None:
        estimates, variances, df_resid = from_results(estimates)
        dfcom = df_resid if dfcom is None else dfcom
    rule, q, cov, names = _prepare(estimates, variances, rule, names)
    idx = select_terms(names, terms)
    q, cov = q[..., idx], cov[..., idx, :][..., idx]
    if rule in NESTED_RULES:
        raise ValueError(f"the D1 test is not available for rule {rule!r} (only 'mi', 'reiter2003', "
                         "'synthetic'); test single terms with the pooled table instead")
    m = q.shape[0]
    b = np.atleast_2d(np.cov(q, rowvar=False, ddof=1))
    return d1_from_moments(rule, m, q.mean(axis=0), cov.mean(axis=0), b, null=null, dfcom=dfcom,
                           ratio=size_ratio(n_syn, n_orig))


def select_terms(names, terms):
    """Positions of ``terms`` (names or positions; None: all) among ``names``."""
    if terms is None:
        return list(range(len(names)))
    if isinstance(terms, (str, int, np.integer)):
        terms = [terms]
    idx = []
    for t in terms:
        if isinstance(t, (int, np.integer)):
            if not 0 <= t < len(names):
                raise ValueError(f"term position {t} is out of range (there are {len(names)} terms)")
            idx.append(int(t))
        elif str(t) in names:
            idx.append(names.index(str(t)))
        else:
            raise ValueError(f"unknown term {t!r}; the terms are {names}")
    if len(set(idx)) != len(idx) or not idx:
        raise ValueError("terms must name at least one coefficient, each once")
    return idx
