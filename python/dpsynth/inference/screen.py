"""The screen of degenerate fits before pooling (the policy in `fit.py`'s module docstring).

`screen_fits` lays the per-dataset fits out as estimates and standard errors (datasets x terms)
and marks what may not be pooled, with the reason for each: a failed fit drops its dataset; an
aliased or absent term, a non-finite estimate or a non-positive standard error, and a standard
error that "explodes" (over ``se_ratio`` times the term's median, or over ``se_limit``) drop that
coefficient in that dataset.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd


class DegenerateFitWarning(UserWarning):
    """Some per-dataset fits or coefficients were dropped before pooling (see PooledResult.dropped)."""


def screen_fits(fits, terms, se_ratio, se_limit):
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


def warn_dropped(dropped: pd.DataFrame, stacklevel: int = 2) -> None:
    """DegenerateFitWarning when the screen dropped anything (whole datasets and coefficients)."""
    if not dropped.empty:
        whole = int(dropped["term"].isna().sum())
        warnings.warn(f"fit_pooled: {whole} dataset(s) and {int(dropped['term'].notna().sum())} coefficient "
                      "estimate(s) were dropped before pooling (degenerate fits); see .dropped and the summary",
                      DegenerateFitWarning, stacklevel=stacklevel + 1)
