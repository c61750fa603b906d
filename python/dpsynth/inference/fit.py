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

import re
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..analyses import quote_columns, warn_uncongenial
from .rules import (NESTED_RULES, RULES, SYNTHETIC_LIKE, ScalarPool, _check_level, _select, check_rule,
                    d1_from_moments, pool_terms, scalar_table, size_ratio, wald_test)

_OUTCOME_RE = re.compile(r"""^\s*(?:Q\(\s*(['"])(?P<quoted>.+)\1\s*\)|(?P<bare>[A-Za-z_][A-Za-z0-9_.]*))\s*$""")


SMALL_DF = 3.0  # the synthetic rules' screen: df below this gets a note (b barely exceeds ubar)


class NotNoiseAwareWarning(UserWarning):
    """The synthetic datasets were not drawn from a noise-aware posterior."""


class DegenerateFitWarning(UserWarning):
    """Some per-dataset fits or coefficients were dropped before pooling (see PooledResult.dropped)."""


# ----------------------------------------------------------------------------------------------
# Families and outcome coding
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Family:
    name: str           # "gaussian", "binomial", "poisson" or the statsmodels class name
    label: str          # for summaries
    sm_family: object   # None → OLS

    @property
    def is_binomial(self) -> bool:
        import statsmodels.api as sm
        return isinstance(self.sm_family, sm.families.Binomial)


def resolve_family(family) -> Family:
    """"gaussian" (OLS), "binomial" (logit GLM), "poisson" (log GLM), or a statsmodels family."""
    import statsmodels.api as sm
    if isinstance(family, sm.families.Family):
        link = type(family.link).__name__.lower()
        return Family(type(family).__name__.lower(), f"GLM {type(family).__name__} ({link})", family)
    if not isinstance(family, str):
        raise TypeError(f"family must be 'gaussian', 'binomial', 'poisson' or a statsmodels family; "
                        f"got {type(family).__name__}")
    key = family.lower()
    if key in ("gaussian", "ols", "normal"):
        return Family("gaussian", "OLS", None)
    if key in ("binomial", "logit", "logistic"):
        return Family("binomial", "GLM Binomial (logit)", sm.families.Binomial())
    if key == "poisson":
        return Family("poisson", "GLM Poisson (log)", sm.families.Poisson())
    raise ValueError(f"unknown family {family!r}; use 'gaussian' (OLS), 'binomial', 'poisson' or a "
                     "statsmodels family instance such as sm.families.Gamma()")


def outcome_column(formula: str, columns) -> str | None:
    """The outcome's column name when the left-hand side is a plain name or Q("name")."""
    if not isinstance(formula, str) or "~" not in formula:
        raise ValueError(f"formula must be a string 'outcome ~ terms' (patsy syntax); got {formula!r}")
    match = _OUTCOME_RE.match(formula.split("~", 1)[0])
    if match is None:
        return None
    name = match.group("quoted") or match.group("bare")
    return name if name in columns else None


def outcome_coding(frames, name: str, family: Family):
    """The (level0, level1) pair for a non-numeric binomial outcome, or None when it is numeric."""
    col = frames[0][name]
    if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
        return None
    if isinstance(col.dtype, pd.CategoricalDtype):
        levels = list(col.dtype.categories)
    elif pd.api.types.is_bool_dtype(col):
        levels = [False, True]
    else:
        levels = sorted({v for f in frames for v in f[name].dropna().unique()}, key=str)
    if family.name in ("gaussian", "poisson") or not family.is_binomial:
        raise ValueError(f"outcome {name!r} is not numeric; family {family.name!r} needs a numeric "
                         "outcome (use family='binomial' for a two-level outcome)")
    if len(levels) != 2:
        raise ValueError(f"binomial outcome {name!r} has {len(levels)} levels {levels[:6]}; it needs "
                         "exactly 2 (recode it, e.g. df[col] == level, before fitting)")
    return levels[0], levels[1]


def code_outcome(frame: pd.DataFrame, name: str, levels) -> pd.DataFrame:
    """A copy of frame with the outcome as float 0/1 (levels[1] = 1); other values → error."""
    col = frame[name]
    values = col.astype(object)
    known = values.isna() | values.isin(list(levels))
    if not known.all():
        bad = values[~known].unique()[:3]
        raise ValueError(f"outcome {name!r} has values {list(bad)} outside its two levels {list(levels)}")
    coded = np.where(values.isna(), np.nan, (values == levels[1]).astype(float))
    out = frame.copy()
    out[name] = coded.astype(float)
    return out


# ----------------------------------------------------------------------------------------------
# One fit
# ----------------------------------------------------------------------------------------------

def estimable_columns(X: np.ndarray, tol: float = 1e-7) -> np.ndarray:
    """Boolean mask of columns not in the span of earlier columns (R's lm/glm aliasing rule:
    the part of a column orthogonal to the earlier kept columns is < tol × its norm)."""
    X = np.asarray(X, float)
    norms = np.linalg.norm(X, axis=0)
    keep = norms > 0
    if keep.all() and X.shape[0] >= X.shape[1]:
        r = np.abs(np.diag(np.linalg.qr(X, mode="r")))
        if np.all(r > tol * norms):
            return keep
    basis = np.empty((X.shape[0], 0))
    for j in np.flatnonzero(norms > 0):
        v = X[:, j].copy()
        for _ in range(2):  # Gram–Schmidt, twice for stability
            v -= basis @ (basis.T @ v)
        size = np.linalg.norm(v)
        if size > tol * norms[j]:
            basis = np.column_stack([basis, v / size])
        else:
            keep[j] = False
    return keep


@dataclass
class DatasetFit:
    """One dataset's fit: the coefficients statsmodels estimated and what happened."""
    index: object                 # i, or (l, i) for nested data (0-based)
    params: pd.Series = None      # estimable coefficients (aliased ones absent)
    cov: pd.DataFrame = None
    df_resid: float = np.nan
    nobs: int = 0
    n_missing: int = 0            # rows dropped for missing values in model variables
    aliased: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    error: str | None = None      # set when the whole fit failed
    result: object = None         # the statsmodels results (kept only when asked)


def fit_one(frame, formula, family: Family, env, index=None, coding=None, outcome=None,
            fit_kwds=None, keep_result=False) -> tuple[DatasetFit, list]:
    """Fit the model to one DataFrame. Returns (DatasetFit, design column names)."""
    import patsy
    import statsmodels.api as sm
    from statsmodels.tools.sm_exceptions import ConvergenceWarning, PerfectSeparationWarning

    fit = DatasetFit(index)
    if coding is not None:
        frame = code_outcome(frame, outcome, coding)
    try:
        y, X = patsy.dmatrices(formula, frame, eval_env=env, NA_action="drop", return_type="dataframe")
    except Exception as err:  # patsy errors: bad formula, unknown column
        raise ValueError(f"could not build the design for {formula!r}: {err}") from err
    if y.shape[1] != 1:
        raise ValueError(f"the outcome of {formula!r} expands to {y.shape[1]} columns {list(y.columns)}; "
                         "use a numeric outcome, or a two-level one with family='binomial'")
    names = list(X.columns)
    fit.nobs, fit.n_missing = len(y), len(frame) - len(y)
    if fit.nobs == 0:
        fit.error = "no complete rows for the model variables"
        return fit, names
    keep = estimable_columns(X.to_numpy())
    fit.aliased = [n for n, k in zip(names, keep) if not k]
    Xk = X.loc[:, keep]
    kwds = dict(fit_kwds or {})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if family.sm_family is None:
                res = sm.OLS(y.iloc[:, 0], Xk).fit(**kwds)
            else:
                kwds.setdefault("tol", 1e-10)
                kwds.setdefault("maxiter", 100)
                res = sm.GLM(y.iloc[:, 0], Xk, family=family.sm_family).fit(**kwds)
        except Exception as err:
            fit.error = f"fit failed: {type(err).__name__}: {err}"
            return fit, names
    for w in caught:  # kept as notes (reported in the summary), not lost
        if issubclass(w.category, PerfectSeparationWarning):
            note = "perfect separation detected"
        elif issubclass(w.category, ConvergenceWarning):
            note = f"convergence warning: {w.message}"
        else:
            note = f"{w.category.__name__}: {w.message}"
        if note not in fit.notes:
            fit.notes.append(note)
    if family.sm_family is not None and not getattr(res, "converged", True):
        fit.error = "GLM did not converge"
        return fit, names
    fit.params = res.params.copy()
    fit.cov = res.cov_params().copy()
    fit.df_resid = float(res.df_resid)
    if keep_result:
        fit.result = res
    return fit, names


# ----------------------------------------------------------------------------------------------
# Pooling the fits
# ----------------------------------------------------------------------------------------------

def _frames_of(data, rule):
    """Flat list of (index, frame) and the nesting (M, r) or None."""
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


def _screen(fits, terms, se_ratio, se_limit):
    """Estimates, standard errors, validity mask (datasets × terms) and the drop records."""
    n = len(fits)
    est = np.full((n, len(terms)), np.nan)
    se = np.full((n, len(terms)), np.nan)
    dropped = []
    for i, f in enumerate(fits):
        if f.error is not None:
            dropped.append((f.index, None, f.error))
            continue
        for j, term in enumerate(terms):
            if term in f.params.index:
                est[i, j] = f.params[term]
                se[i, j] = np.sqrt(f.cov.loc[term, term]) if f.cov.loc[term, term] >= 0 else np.nan
            elif term in f.aliased:
                dropped.append((f.index, term, "aliased (singular design; not estimable in this dataset)"))
            else:
                dropped.append((f.index, term, "term absent from this dataset's design"))
    fitted = np.array([f.error is None for f in fits])
    present = np.isfinite(est) | np.isfinite(se)
    valid = np.isfinite(est) & np.isfinite(se) & (se > 0)
    for i, j in zip(*np.nonzero(present & ~valid & fitted[:, None])):
        dropped.append((fits[i].index, terms[j], "non-finite estimate or non-positive standard error"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: terms never estimated
        median = np.nanmedian(np.where(valid, se, np.nan), axis=0)
    for i, j in zip(*np.nonzero(valid)):
        ratio = se[i, j] / median[j]
        if se_ratio is not None and ratio > se_ratio:
            dropped.append((fits[i].index, terms[j],
                            f"standard error exploded ({se[i, j]:.3g}, {ratio:.3g} × the median)"))
            valid[i, j] = False
        elif se_limit is not None and se[i, j] > se_limit:
            dropped.append((fits[i].index, terms[j], f"standard error {se[i, j]:.3g} above se_limit"))
            valid[i, j] = False
    frame = pd.DataFrame(dropped, columns=["dataset", "term", "reason"])
    return est, se, valid, frame


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


def _total_cov(rule, q, covs, shape):
    """The rule's total covariance matrix T (before any fallback) from q (n×p) and covs (n×p×p)."""
    if shape is None:
        m = q.shape[0]
        ubar, b = covs.mean(axis=0), np.atleast_2d(np.cov(q, rowvar=False, ddof=1))
        if rule == "mi":
            return ubar + (1 + 1 / m) * b
        if rule == "reiter2003":
            return ubar + b / m
        return (1 + 1 / m) * b - ubar
    M, r = shape
    qn = q.reshape(M, r, -1)
    nest_means = qn.mean(axis=1)
    b = np.atleast_2d(np.cov(nest_means, rowvar=False, ddof=1))
    w = np.mean([np.atleast_2d(np.cov(qn[l], rowvar=False, ddof=1)) for l in range(M)], axis=0) if r > 1 \
        else np.zeros_like(b)
    ubar = covs.mean(axis=0)
    if rule == "two-stage":
        return ubar + (1 + 1 / M) * b - w / r
    return (1 + 1 / M) * b + (1 - 1 / r) * w - ubar


def _fmt(value) -> str:
    """Summary number format: 4 decimals, scientific for very large or tiny non-zero values."""
    if isinstance(value, str):
        return value
    if not np.isfinite(value):
        return str(value)
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-4):
        return f"{value:.3e}"
    return f"{value:.4f}"


class PooledResult:
    """Pooled coefficients of one model fitted to m datasets.

    Attributes: ``rule``, ``formula``, ``family``, ``m`` (datasets given), ``terms``, ``fits``
    (one `DatasetFit` per dataset), ``dropped`` (DataFrame: dataset, term, reason; term None = whole
    dataset), ``dfcom``, ``n_ratio`` (n_syn/n_orig of the fallback), ``conf_level``, ``outcome_note``,
    ``congeniality`` (what the formula needs that the generator's released queries do not carry;
    empty when they carry it all or the queries are unknown).
    Methods: ``to_frame()`` (mice's columns), ``summary()`` (statsmodels Summary), ``params``,
    ``bse``, ``pvalues``, ``conf_int()``, ``cov_params()``, ``wald_test(terms)``, ``per_dataset()``.
    """

    def __init__(self, *, table, rule, formula, family, fits, dropped, dfcom, n_ratio, conf_level,
                 shape, cov, complete_moments, outcome_note, congeniality=(), screened=None):
        self._table = table
        self.rule = rule
        self.formula = formula
        self.family = family
        self.fits = fits
        self.dropped = dropped
        self.dfcom = dfcom
        self.n_ratio = n_ratio
        self.conf_level = conf_level
        self.shape = shape
        self._cov = cov
        self._moments = complete_moments
        self.outcome_note = outcome_note
        self.congeniality = list(congeniality)
        self._screened = screened  # (estimates, valid): datasets x terms, after the screens

    # statsmodels-like accessors
    @property
    def m(self) -> int:
        return len(self.fits)

    @property
    def terms(self) -> list:
        return list(self._table["term"])

    @property
    def params(self) -> pd.Series:
        return pd.Series(self._table["estimate"].to_numpy(), index=self.terms, name="estimate")

    @property
    def bse(self) -> pd.Series:
        return pd.Series(self._table["std.error"].to_numpy(), index=self.terms, name="std.error")

    @property
    def pvalues(self) -> pd.Series:
        return pd.Series(self._table["p.value"].to_numpy(), index=self.terms, name="p.value")

    def conf_int(self) -> pd.DataFrame:
        """Intervals at ``conf_level`` (columns conf.low, conf.high), as in the table."""
        return self._table.set_index("term")[["conf.low", "conf.high"]].copy()

    def cov_params(self) -> pd.DataFrame:
        """The rule's total covariance matrix T, from the datasets in which every estimable term is
        valid (terms never estimated are left out). For the synthetic rules it can be indefinite;
        the table's per-term t applies the T ≤ 0 fallback."""
        if self._cov is None:
            raise ValueError("fewer than 2 datasets are valid for every estimable term; no joint covariance")
        joint = self._moments[0]
        return pd.DataFrame(self._cov, index=joint, columns=joint)

    def to_frame(self) -> pd.DataFrame:
        """The pooled table: term, estimate, ubar, b, t, dfcom, df, riv, lambda, fmi, std.error,
        statistic, p.value, conf.low, conf.high, rule, m, fallback (a copy)."""
        return self._table.copy()

    def wald_test(self, terms=None, null=None) -> dict:
        """D1 test that the named coefficients (default: all estimable) equal ``null`` (default 0)
        jointly, over the datasets valid for every estimable term. See `dpsynth.inference.wald_test`."""
        if self._moments is None:
            raise ValueError("fewer than 2 datasets are valid for every estimable term; no joint test")
        if self.rule in NESTED_RULES:
            raise ValueError(f"the D1 test is not available for rule {self.rule!r}")
        joint, q, covs = self._moments
        idx = _select(joint, terms)
        q, covs = q[:, idx], covs[:, idx][:, :, idx]
        b = np.atleast_2d(np.cov(q, rowvar=False, ddof=1))
        out = d1_from_moments(self.rule, q.shape[0], q.mean(axis=0), covs.mean(axis=0), b, null=null,
                              dfcom=None if not np.isfinite(self.dfcom) else self.dfcom, ratio=self.n_ratio)
        out["terms"] = [joint[i] for i in idx]
        return out

    def per_dataset(self) -> dict:
        """The per-dataset pieces after the screens, for a joint test made later (dpsynthr keeps them
        in its pooled object for ``dp_wald``; `wald_per_dataset` tests them): ``terms`` (the table's);
        ``qhat`` (datasets x terms; NaN where a coefficient was not estimated or was screened out);
        ``uhat`` (per dataset a terms x terms covariance matrix, NaN where not estimated; None for a
        dropped dataset); ``nobs`` (rows used per dataset).

        >>> res = pool_fits([{"a": 1.0}, {"a": 1.2}, {"a": 0.9}], [[[0.04]], [[0.05]], [[0.04]]], df_resid=[49] * 3)
        >>> res.per_dataset()["qhat"].tolist()
        [[1.0], [1.2], [0.9]]
        """
        est, valid = self._screened
        terms = self.terms
        uhat = []
        for f in self.fits:
            if f.error is not None:
                uhat.append(None)
                continue
            u = pd.DataFrame(np.nan, index=terms, columns=terms)
            u.loc[list(f.cov.index), list(f.cov.columns)] = f.cov.to_numpy()
            uhat.append(u.to_numpy())
        return {"terms": terms, "qhat": np.where(valid, est, np.nan), "uhat": uhat,
                "nobs": [f.nobs for f in self.fits]}

    def _dropped_text(self) -> str:
        if self.dropped.empty:
            return "none"
        whole = self.dropped["term"].isna().sum()
        parts = self.dropped.dropna(subset=["term"])
        return f"{whole} datasets, {len(parts)} coefs"

    def notes(self) -> list[str]:
        """The notes a reader of the pooled table needs (the summary prints them; dpsynthr prints the
        same): outcome coding, rows dropped for missing values, fallback terms, the small-df screen,
        fit warnings, uncongeniality, what was dropped before pooling."""
        tab = self._table
        noted = {}
        for f in self.fits:
            for note in f.notes:
                key = note.split(":")[0]
                noted[key] = noted.get(key, 0) + 1
        missing = sum(f.n_missing for f in self.fits)
        notes = []
        if self.outcome_note:
            notes.append(self.outcome_note)
        if missing:
            notes.append(f"{missing} row(s) with missing model variables were dropped across the datasets.")
        if tab["fallback"].any():
            notes.append("* T <= 0: the variance is (n_syn/n_orig) x ubar "
                         f"(ratio {self.n_ratio:.3g}), df from the rule's formula (Reiter 2002).")
        if self.rule in SYNTHETIC_LIKE and (tab["df"] < SMALL_DF).any():
            notes.append(f"df < {SMALL_DF:g} for some terms: b barely exceeds ubar, so the intervals are very wide; "
                         "use more datasets (m of about 100 when n_syn = n) or larger ones.")
        if noted:
            notes.append("Fit warnings: " + "; ".join(f"{k} in {v} dataset(s)" for k, v in noted.items())
                         + " (see .fits[i].notes).")
        if self.congeniality:
            notes.append("UNCONGENIAL: the generator's released tables do not carry what this model estimates "
                         "(coefficients biased towards independence): " + "; ".join(self.congeniality) + ".")
        if not self.dropped.empty:
            counts = self.dropped["reason"].str.split(" [(]", n=1, regex=True).str[0].value_counts()
            notes.append("Dropped before pooling: " + "; ".join(f"{k}: {v}" for k, v in counts.items()) + ".")
        return notes

    def summary(self):
        """A statsmodels ``Summary`` (print it, or ``.as_text()`` / ``.as_html()``), naming the rule."""
        from statsmodels.iolib.summary2 import Summary
        tab = self._table
        level = self.conf_level
        lo, hi = f"[{(1 - level) / 2:.3g}", f"{1 - (1 - level) / 2:.3g}]"
        coef = pd.DataFrame({
            "Coef.": tab["estimate"].to_numpy(), "Std.Err.": tab["std.error"].to_numpy(),
            "t": tab["statistic"].to_numpy(), "P>|t|": tab["p.value"].to_numpy(),
            lo: tab["conf.low"].to_numpy(), hi: tab["conf.high"].to_numpy(),
            "df": tab["df"].to_numpy(), "riv": tab["riv"].to_numpy(),
        }, index=[t + (" *" if fb else "") for t, fb in zip(tab["term"], tab["fallback"])])
        if self.rule == "mi":
            coef["FMI"] = tab["fmi"].to_numpy()
        if (tab["m"] != self.m).any():
            coef["m"] = [str(int(v)) for v in tab["m"]]
        nobs = [f.nobs for f in self.fits if f.error is None]
        info = {
            "Combining rule:": self.rule,
            "Model:": self.family.label,
            "Dependent variable:": self.formula.split("~", 1)[0].strip(),
            "Datasets (m):": (str(self.m) if self.shape is None
                              else f"{self.m} ({self.shape[0]} imputations × {self.shape[1]})"),
            "Rows per dataset:": f"{np.mean(nobs):.0f}" if nobs else "-",
            "dfcom:": f"{self.dfcom:.0f}" if np.isfinite(self.dfcom) else "inf",
            "Dropped:": self._dropped_text(),
        }
        if self.rule in SYNTHETIC_LIKE or tab["fallback"].any():
            info["Fallback terms:"] = str(int(tab["fallback"].sum()))
        s = Summary()
        s.add_title(f"Pooled {self.family.label} results, rule = {self.rule!r}")
        s.add_dict(info, ncols=2)
        s.add_df(coef.map(_fmt) if hasattr(coef, "map") else coef.applymap(_fmt))
        notes = [f"Rule: {RULES[self.rule]}.", f"Formula: {self.formula}"] + self.notes()
        for note in notes:
            s.add_text(note)
        return s

    def __repr__(self) -> str:
        return (f"<PooledResult rule={self.rule!r} family={self.family.name!r} m={self.m} "
                f"terms={len(self._table)} formula={self.formula!r}>")


def _check_congeniality(data, formula, columns) -> list[str]:
    """Warn (UncongenialAnalysisWarning) when ``data`` is a result whose released queries miss a
    dependency the formula estimates; returns the messages (empty: congenial or nothing to check)."""
    queries = getattr(data, "queries", None)
    if queries is None:
        return []
    schema = getattr(data, "schema", None)
    names = list(schema.names) if schema is not None and hasattr(schema, "names") else list(columns)
    return warn_uncongenial(formula, names, queries, stacklevel=3)


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
    level = _check_level(conf_level)
    if se_ratio is not None and not se_ratio > 1:
        raise ValueError(f"se_ratio must be > 1 (or None to disable the screen); got {se_ratio!r}")
    env = patsy.EvalEnvironment.capture(eval_env + 1)
    gen = getattr(data, "generator", None)
    if gen is not None:
        warn_not_noise_aware(rule, getattr(gen, "noise_aware", False), data.m, data.method, stacklevel=3)
    diag = getattr(data, "diagnostics", None)
    if isinstance(diag, dict) and diag.get("mixed") is False:
        from ..graphical.posterior import PosteriorNotMixedWarning

        warnings.warn(f"the posterior sampler behind these {data.m} datasets did not mix (split R-hat of the cells "
                      f"{diag.get('rhat_max_cells', float('nan')):.3f}, bulk ESS {diag.get('ess_bulk_min_cells', float('nan')):.0f}): "
                      "the between-dataset variance b, and so the pooled intervals, may be off",
                      PosteriorNotMixedWarning, stacklevel=2)
    flat, shape = _frames_of(data, rule)
    if n_orig is None:
        n_orig = getattr(data, "n_private", None)  # a SynthResult knows its released n
    frames = [f for _, f in flat]
    congeniality = _check_congeniality(data, formula, frames[0].columns)
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
    return _pool_dataset_fits(fits, terms, rule=rule, shape=shape, dfcom=dfcom, n_orig=n_orig, level=level,
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


def warn_not_noise_aware(rule, noise_aware, m, method, stacklevel=2) -> None:
    """Warn (NotNoiseAwareWarning) when the "synthetic" rule meets datasets that all come from one
    fitted model (``noise_aware`` False): the rule's intervals then ignore the DP noise."""
    if rule == "synthetic" and noise_aware is False:
        warnings.warn(f"the {m} datasets of {method!r} come from ONE fitted noisy model: the 'synthetic' "
                      "rule assumes each dataset comes from its own posterior draw, so its intervals ignore "
                      "the DP noise and b may barely exceed ū (tiny df, huge intervals). Use a noise-aware "
                      "generator (method='napsu-mq') for valid intervals.", NotNoiseAwareWarning,
                      stacklevel=stacklevel + 1)


def _pool_dataset_fits(fits, terms, *, rule, shape, dfcom, n_orig, level, se_ratio, se_limit, formula, family,
                       outcome_note="", congeniality=(), stacklevel=2) -> "PooledResult":
    """The pooling policy, once: screens (`_screen`), per-term pooling over the valid datasets, the
    joint moments, the DegenerateFitWarning. Used by `fit_pooled` (statsmodels fits) and by
    `pool_fits` (fits made elsewhere, e.g. R's lm/glm through dpsynthr)."""
    est, se, valid, dropped = _screen(fits, terms, se_ratio, se_limit)
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
        cov = _total_cov(rule, q, covs, None if shape is None else (n_ok, shape[1]))
        moments = (joint, q, covs)

    if not dropped.empty:
        whole = int(dropped["term"].isna().sum())
        warnings.warn(f"fit_pooled: {whole} dataset(s) and {int(dropped['term'].notna().sum())} coefficient "
                      "estimate(s) were dropped before pooling (degenerate fits); see .dropped and the summary",
                      DegenerateFitWarning, stacklevel=stacklevel)
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
    level = _check_level(conf_level)
    if se_ratio is not None and not se_ratio > 1:
        raise ValueError(f"se_ratio must be > 1 (or None to disable the screen); got {se_ratio!r}")
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
    return _pool_dataset_fits(fits, terms, rule=rule, shape=None, dfcom=dfcom, n_orig=n_orig, level=level,
                              se_ratio=se_ratio, se_limit=se_limit, formula=str(formula), family=fam,
                              congeniality=list(congeniality or ()), stacklevel=3)
