"""One model fitted to one dataset with statsmodels (OLS or a GLM), R's aliasing rule included.

`fit_one` builds the patsy design (rows with a missing model variable dropped, as statsmodels and
R do), removes the aliased columns (`estimable_columns`), fits, and records in a `DatasetFit` what
happened: the estimable coefficients and their covariance, the rows used and dropped, the fit's
warnings as notes, or why the fit failed. Pooling the fits is `fit.py`'s concern.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .formula import Family, code_outcome

#: a ``levels=`` argument in a formula (patsy's ``C(x, levels=[...])``): :func:`fit_one` then leaves
#: string columns as they are (a column merely named "levels…" keeps the fast categorical path)
LEVELS_ARGUMENT = re.compile(r"\blevels\s*=")


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


def categorical_strings(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each column of strings (object dtype, every non-missing value a str) as a
    pandas Categorical of its sorted values: the levels patsy gives such a column itself, but read
    from the codes instead of patsy's value-by-value lookup (on Adult-10 with 32,561 rows that loop
    was 0.5 s of a 0.7 s logistic fit). A new frame; the caller's is not modified.

    >>> categorical_strings(pd.DataFrame({"g": ["b", "a", None]}))["g"].cat.categories.tolist()
    ['a', 'b']
    """
    out = frame
    for name in frame.columns[frame.dtypes == object]:
        levels = frame[name].dropna().unique()
        if len(levels) and all(isinstance(v, str) for v in levels):
            out = frame.copy(deep=False) if out is frame else out   # the caller's frame stays as it was
            out[name] = pd.Categorical(frame[name], categories=sorted(levels))
    return out


def fit_one(frame, formula, family: Family, env, index=None, coding=None, outcome=None,
            fit_kwds=None, keep_result=False) -> tuple[DatasetFit, list]:
    """Fit the model to one DataFrame. Returns (DatasetFit, design column names)."""
    import patsy
    import statsmodels.api as sm
    from statsmodels.tools.sm_exceptions import ConvergenceWarning, PerfectSeparationWarning

    fit = DatasetFit(index)
    if coding is not None:
        frame = code_outcome(frame, outcome, coding)
    if not LEVELS_ARGUMENT.search(formula):  # C(x, levels=[...]) must see the values, not a Categorical's own levels
        frame = categorical_strings(frame)
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

