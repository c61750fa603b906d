"""Propensity-score utility: pMSE and S_pMSE, computed as synthpop's ``utility.gen`` does.

Stack the synthetic rows (t = 1) and the real rows (t = 0), N = n_syn + n_real, c = n_syn/N; fit a
classifier for t and take the in-sample propensity scores p̂ᵢ:

    pMSE = (1/N) Σᵢ (p̂ᵢ − c)²            (Woo et al. 2009; Snoke et al. 2018, JRSS A)

S_pMSE = pMSE / E₀[pMSE], the ratio to its expectation when real and synthetic rows come from the
same distribution (≈ 1 for a perfect synthesiser; synthpop calls values below ~3 good, but this is a
convention, not a test):

- ``method="logit"``: logistic regression on main effects (``maxorder=0``, default here) or main
  effects plus all two-way interactions (``maxorder=1``, synthpop's default); the null expectation
  is E₀ = (k − 1)(1 − c)² c / N with k the number of estimable coefficients including the intercept,
  and null sd √(2(k − 1))(1 − c)² c / N (synthpop ``pMSEExp``).
- ``method="cart"``: an rpart-like tree (:class:`~dpsynth.metrics.cart.RpartLikeTree`, rpart's
  defaults cp = 0.01, minsplit = 20, minbucket = 7; synthpop's ``utility.gen`` uses cp = 1e-3,
  minbucket = 5: pass them to match it) and the **permutation null** of synthpop ≥ 1.7-0: permute t
  ``nperm`` = 50 times, refit, and take E₀ = mean(pMSE_perm)/2 (synthpop halves the permutation
  pMSE since 1.7-0; ``synthpop_version="<1.7"`` gives the older, unhalved null, under which S_pMSE is
  half as large). If no permuted fit makes a split, E₀ = 0 and S_pMSE is ``inf`` (``nan`` if pMSE = 0
  too); ``nnosplits`` counts such permutations.

Predictors: categorical columns (schema categorical, or pandas category/object) with missing as its own
level; numeric columns as floats with an indicator column for missing cells (synthpop adds such
indicators). For CART, levels are coded by their proportion of t = 1 (see ``cart.ordered_codes``); for
logit, levels are one-hot coded (first level dropped) and numerics standardised (missing → 0).

Example
-------
>>> import dpsynth
>>> df, schema = dpsynth.load_dataset("adult")
>>> half = df.sample(4000, random_state=1)
>>> res = pmse(half.iloc[:2000], half.iloc[2000:], method="logit", schema=schema)
>>> res.s_pmse < 3
True
"""
from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..schema import Schema
from .cart import RpartLikeTree, ordered_codes

METHODS = ("cart", "logit")


@dataclass
class PMSEResult:
    """pMSE, its null expectation and the ratio S_pMSE = pmse / null."""

    pmse: float
    s_pmse: float
    null: float
    method: str
    null_kind: str  # "analytic" (logit) or "permutation" (cart)
    null_sd: float | None = None
    nperm: int = 0
    nnosplits: int = 0
    k: int | None = None  # logit: estimable coefficients incl. the intercept
    n_real: int = 0
    n_synth: int = 0

    @property
    def c(self) -> float:
        return self.n_synth / (self.n_real + self.n_synth)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in ("pmse", "s_pmse", "null", "method", "null_kind", "null_sd", "nperm",
                                              "nnosplits", "k", "n_real", "n_synth")}

    def __getitem__(self, key):  # dict-style access: res["s_pmse"]
        return self.to_dict()[key]


def pmse(real: pd.DataFrame, synth: pd.DataFrame, method: str = "cart", schema: Schema | None = None, *,
         maxorder: int = 0, nperm: int = 50, cp: float = 0.01, minsplit: int = 20, minbucket: int = 7,
         maxdepth: int = 30, synthpop_version: str = ">=1.7", seed: int | None = 0) -> PMSEResult:
    """pMSE of ``synth`` against ``real`` and S_pMSE (see the module docstring).

    ``schema`` (optional) says which columns are categorical and which to use (default: the real
    frame's columns). ``seed`` fixes the permutations and the tree's tie-breaking.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {list(METHODS)}, got {method!r}")
    if synthpop_version not in (">=1.7", "<1.7"):
        raise ValueError("synthpop_version must be '>=1.7' (halved permutation null) or '<1.7'")
    if maxorder not in (0, 1):
        raise ValueError("maxorder must be 0 (main effects) or 1 (two-way interactions)")
    if isinstance(nperm, bool) or not isinstance(nperm, numbers.Integral) or nperm < 1:
        raise ValueError(f"nperm must be a positive integer, got {nperm!r}")
    columns, categorical = _columns(real, synth, schema)
    stacked = pd.concat([synth[columns], real[columns]], ignore_index=True)
    n_syn, n_real = len(synth), len(real)
    N = n_syn + n_real
    c = n_syn / N
    t = np.r_[np.ones(n_syn), np.zeros(n_real)]
    if method == "logit":
        X = _design_logit(stacked, categorical, maxorder)
        scores, k = _logit_scores(X, t)
        value = float(np.mean((scores - c) ** 2))
        km1 = k - 1
        null = km1 * (1 - c) ** 2 * c / N
        sd = np.sqrt(2 * km1) * (1 - c) ** 2 * c / N
        return PMSEResult(value, _ratio(value, null), null, "logit", "analytic", float(sd), 0, 0, int(k), n_real, n_syn)

    rng = np.random.default_rng(seed)
    tree_args = dict(cp=cp, minsplit=minsplit, minbucket=minbucket, maxdepth=maxdepth, random_state=seed)
    value, _ = _cart_pmse(stacked, categorical, t, c, tree_args)
    perms, nosplit = [], 0
    for _ in range(nperm):
        tp = rng.permutation(t)
        v, splits = _cart_pmse(stacked, categorical, tp, c, tree_args)
        perms.append(v)
        nosplit += splits == 0
    null = float(np.mean(perms)) / (2.0 if synthpop_version == ">=1.7" else 1.0)
    return PMSEResult(value, _ratio(value, null), null, "cart", "permutation", None, int(nperm), int(nosplit), None,
                      n_real, n_syn)


def _ratio(value: float, null: float) -> float:
    if null > 0:
        return value / null
    return float("nan") if value == 0 else float("inf")


def _columns(real, synth, schema):
    for name, frame in (("real", real), ("synth", synth)):
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"{name} must be a pandas DataFrame, got {type(frame).__name__}")
        if len(frame) == 0:
            raise ValueError(f"{name} has no rows")
    if schema is not None:
        if not isinstance(schema, Schema):
            raise TypeError(f"schema must be a dpsynth.Schema, got {type(schema).__name__}")
        columns = list(schema.names)
    else:
        columns = [c for c in real.columns]
    absent = [c for c in columns if c not in real.columns or c not in synth.columns]
    if absent:
        raise ValueError(f"columns {absent} are missing from the real or the synthetic data; both need the same columns")
    categorical = {}
    for col in columns:
        if schema is not None:
            categorical[col] = schema[col].is_categorical
        else:
            s = real[col]
            categorical[col] = not (pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s))
    return columns, categorical


def _numeric(s: pd.Series) -> np.ndarray:
    return pd.to_numeric(s, errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def _cart_pmse(stacked, categorical, t, c, tree_args):
    X = _design_cart(stacked, categorical, t)
    tree = RpartLikeTree(**tree_args).fit(X, t)
    p = tree.predict_proba1(X)
    return float(np.mean((p - c) ** 2)), tree.n_splits_


def _design_cart(stacked: pd.DataFrame, categorical: dict, t: np.ndarray) -> np.ndarray:
    cols = []
    for col, is_cat in categorical.items():
        s = stacked[col]
        if is_cat:
            cols.append(ordered_codes(s, t))
        else:
            x = _numeric(s)
            cols.append(x)
            miss = np.isnan(x)
            if miss.any():
                cols.append(miss.astype(float))
    return np.column_stack(cols)


def _design_logit(stacked: pd.DataFrame, categorical: dict, maxorder: int) -> np.ndarray:
    """Main-effect blocks per variable (one-hot, first level dropped; standardised numeric + NA
    indicator), optionally with all products between blocks of different variables."""
    blocks = []
    for col, is_cat in categorical.items():
        s = stacked[col]
        if is_cat:
            labels = s.astype(object).where(s.notna(), "\0NA").astype(str)
            dummies = pd.get_dummies(labels, drop_first=True, dtype=float).to_numpy()
            if dummies.shape[1]:
                blocks.append(dummies)
        else:
            x = _numeric(s)
            miss = np.isnan(x)
            sd = np.nanstd(x) if (~miss).any() else 0.0
            z = np.where(miss, 0.0, (x - np.nanmean(x)) / sd) if sd > 0 else np.zeros_like(x)
            block = [z] + ([miss.astype(float)] if miss.any() and not miss.all() else [])
            blocks.append(np.column_stack(block))
    if not blocks:
        return np.zeros((len(stacked), 0))
    parts = list(blocks)
    if maxorder == 1:
        for i in range(len(blocks)):
            for j in range(i + 1, len(blocks)):
                a, b = blocks[i], blocks[j]
                parts.append((a[:, :, None] * b[:, None, :]).reshape(len(a), -1))
    X = np.column_stack(parts)
    return X[:, X.std(axis=0) > 0]  # drop constant columns (empty levels/interactions)


def _logit_scores(X: np.ndarray, t: np.ndarray):
    """Unpenalised logistic regression on the estimable columns; returns (in-sample scores, k).

    Aliased columns are dropped first, as R's ``glm`` reports them as NA (pivoted QR of [1, X], rank
    tolerance 1e-7 relative to the largest pivot); k = the rank, so k − 1 = synthpop's ``km1``."""
    import scipy.linalg
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    design = np.column_stack([np.ones(len(X)), X])
    r, piv = scipy.linalg.qr(design, mode="r", pivoting=True)
    diag = np.abs(np.diag(r))
    k = int(np.sum(diag > 1e-7 * diag[0])) if diag.size else 0
    keep = np.sort(piv[:k])
    keep = keep[keep > 0] - 1  # columns of X (the intercept is column 0 of the design)
    if keep.size == 0:
        return np.full(len(t), t.mean()), max(k, 1)
    model = LogisticRegression(C=np.inf, solver="newton-cholesky", max_iter=100)
    with warnings.catch_warnings(), threadpool_limits(limits=1):  # oversubscribed BLAS threads are slow
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", UserWarning)
        model.fit(X[:, keep], t)
    return model.predict_proba(X[:, keep])[:, 1], k
