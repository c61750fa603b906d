"""Missingness simulators: MCAR, MAR, MNAR (logistic) and MNARQ (quantile censoring).

These are the four masks of Muzellec, Josse, Boyer & Cuturi (ICML 2020, "Missing data imputation
using optimal transport", §5 and their public ``utils.py``), which the seed paper (Mohapatra et al.,
PVLDB 2024, §6.1) uses to create incomplete data from a complete ground truth. Each returns a new
DataFrame with NA inserted; the input is never modified, and ``seed`` makes a mask repeatable.

Mechanisms (n rows, d columns, target rate p):

- **MCAR**: each cell is missing independently with probability p.
- **MAR** (``p_obs = 0.5``): d_obs = max(⌊p_obs·d⌋, 1) random columns stay fully observed; each other
  column j is missing with probability σ(x_obs·w_j + b_j), w_j ~ N(0, I) rescaled so that x_obs·w_j has
  unit standard deviation, b_j found by bisection so that the mean probability is p.
- **MNAR** (``p_params = 0.3``, inputs excluded): d_params = max(⌊p_params·d⌋, 1) random input columns
  drive a logistic mask (as MAR) on the other columns; the inputs themselves are then masked MCAR at
  p, so the other columns' missingness depends on values that may be unobserved.
- **MNARQ** (``q = 0.2``, both tails, ``p_params = 0.5``): max(⌊p_params·d⌋, 1) random columns; a cell is
  missing with probability p if its value is at or below the q-quantile or at or above the
  (1 − q)-quantile of its column. Ties (few-level columns) make the realised rate lower than p.

Model inputs: the logistic masks use the schema's integer codes (numerics binned by the public
schema), each column standardised to mean 0 and sd 1 over the observed cells; cells already missing
in the input enter as 0 (the column mean). The quantile mask orders numeric columns by their raw
values and categorical columns by their schema codes (the artifact's ordinal encoding); the quantile
is the ⌊q·n⌋-th smallest value (Muzellec et al.'s ``kthvalue``). Cells already missing stay missing and
are never selected as a quantile. :data:`PRESETS` holds the parameters above.

Example
-------
>>> import dpsynth
>>> df, schema = dpsynth.load_dataset("adult")
>>> truth = df.dropna()
>>> masked = ampute(truth, "MCAR", p=0.2, seed=1, schema=schema)
>>> round(float(masked.isna().to_numpy().mean()), 2)
0.2
"""
from __future__ import annotations

import numbers

import numpy as np
import pandas as pd

from ..schema import MISSING, Schema

MECHANISMS = ("MCAR", "MAR", "MNAR", "MNARQ")

#: Muzellec et al. (2020) parameters, as used by the seed paper's artifact (``missing_mechanisms.py``).
PRESETS = {
    "MCAR": {},
    "MAR": {"p_obs": 0.5},
    "MNAR": {"p_params": 0.3, "exclude_inputs": True},
    "MNARQ": {"q": 0.2, "cut": "both", "p_params": 0.5},
}


def ampute(df: pd.DataFrame, mechanism: str = "MCAR", p: float = 0.2, seed: int | None = None,
           schema: Schema | None = None, return_mask: bool = False, **params):
    """Insert missing values into a copy of ``df`` by ``mechanism`` at rate ``p``.

    ``schema`` (optional) gives the public encoding of the logistic-model inputs; without it the
    columns are encoded from their dtypes (pandas categories/values, no private bounds are needed:
    the mask is a simulation on data you already hold, not a release). ``params`` overrides the
    :data:`PRESETS` (``p_obs``, ``p_params``, ``exclude_inputs``, ``q``, ``cut``). With
    ``return_mask=True`` returns ``(frame, mask)``, mask an n×d boolean array of the *new* NA cells.

    The returned frame has the input's columns and index; dtypes are kept where they can hold NA
    (categories, floats, object, pandas nullable types); int64 becomes Int64 and bool becomes boolean.
    """
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"ampute needs a pandas DataFrame, got {type(df).__name__}")
    if df.shape[0] < 2 or df.shape[1] < 1:
        raise ValueError("ampute needs a frame with at least 2 rows and 1 column")
    if df.columns.duplicated().any():
        raise ValueError("duplicate column names; rename them so that each column name is unique")
    mech = str(mechanism).upper() if isinstance(mechanism, str) else mechanism
    if mech not in MECHANISMS:
        raise ValueError(f"mechanism must be one of {list(MECHANISMS)}, got {mechanism!r}")
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 <= float(p) < 1:
        raise ValueError(f"p (the missing rate) must be a number in [0, 1), got {p!r}")
    p = float(p)
    opts = dict(PRESETS[mech])
    unknown = set(params) - set(opts)
    if unknown:
        raise ValueError(f"{mech} takes the parameters {sorted(opts) or 'none'}; unknown {sorted(unknown)}")
    opts.update(params)
    if schema is not None and not isinstance(schema, Schema):
        raise TypeError(f"schema must be a dpsynth.Schema, got {type(schema).__name__}")
    rng = np.random.default_rng(seed)
    n, d = df.shape

    if mech == "MCAR":
        mask = rng.random((n, d)) < p
    elif mech == "MAR":
        mask = _mar_mask(_model_inputs(df, schema), p, opts["p_obs"], rng)
    elif mech == "MNAR":
        mask = _mnar_logistic_mask(_model_inputs(df, schema), p, opts["p_params"], bool(opts["exclude_inputs"]), rng)
    else:
        mask = _mnar_quantile_mask(_order_values(df, schema), p, opts["q"], opts["cut"], opts["p_params"], rng)

    mask &= ~df.isna().to_numpy()  # count only new holes
    out = _insert_na(df, mask)
    return (out, mask) if return_mask else out


# ------------------------------------------------------------------------- the masks
def _mar_mask(X: np.ndarray, p: float, p_obs: float, rng: np.random.Generator) -> np.ndarray:
    """Logistic MAR: a random ⌊p_obs·d⌋ subset stays observed and drives the others' missingness."""
    n, d = X.shape
    if not 0 < p_obs < 1:
        raise ValueError(f"p_obs must be in (0, 1), got {p_obs}")
    d_obs = max(int(p_obs * d), 1)
    if d_obs >= d:
        raise ValueError(f"MAR needs at least 2 columns (one observed, one masked); got {d}")
    obs = rng.choice(d, d_obs, replace=False)
    na = np.setdiff1d(np.arange(d), obs)
    mask = np.zeros((n, d), dtype=bool)
    mask[:, na] = _logistic_cells(X[:, obs], len(na), p, rng)
    return mask


def _mnar_logistic_mask(X: np.ndarray, p: float, p_params: float, exclude_inputs: bool,
                        rng: np.random.Generator) -> np.ndarray:
    """Logistic MNAR: inputs (⌊p_params·d⌋ columns) drive the others, then are masked MCAR at p.
    With ``exclude_inputs=False`` all d columns are inputs and all are masked (self-masking)."""
    n, d = X.shape
    if not 0 < p_params <= 1:
        raise ValueError(f"p_params must be in (0, 1], got {p_params}")
    mask = np.zeros((n, d), dtype=bool)
    if exclude_inputs:
        d_params = max(int(p_params * d), 1)
        if d_params >= d:
            raise ValueError(f"MNAR with excluded inputs needs at least 2 columns; got {d}")
        inputs = rng.choice(d, d_params, replace=False)
        na = np.setdiff1d(np.arange(d), inputs)
    else:
        inputs = na = np.arange(d)
    mask[:, na] = _logistic_cells(X[:, inputs], len(na), p, rng)
    if exclude_inputs:
        mask[:, inputs] = rng.random((n, len(inputs))) < p
    return mask


def _mnar_quantile_mask(V: np.ndarray, p: float, q: float, cut: str, p_params: float,
                        rng: np.random.Generator) -> np.ndarray:
    """Quantile censoring: in ⌊p_params·d⌋ random columns, cells in the tail(s) go missing w.p. p."""
    n, d = V.shape
    if not 0 < q < 0.5:
        raise ValueError(f"q must be in (0, 0.5), got {q}")
    if cut not in ("both", "upper", "lower"):
        raise ValueError(f"cut must be 'both', 'upper' or 'lower', got {cut!r}")
    d_na = max(int(p_params * d), 1)
    cols = rng.choice(d, d_na, replace=False)
    mask = np.zeros((n, d), dtype=bool)
    tail = np.zeros((n, d_na), dtype=bool)
    for k, j in enumerate(cols):
        v = V[:, j]
        seen = np.sort(v[~np.isnan(v)])
        if seen.size == 0:
            continue
        lower = _kth_smallest(seen, q)
        upper = _kth_smallest(seen, 1 - q)
        with np.errstate(invalid="ignore"):
            if cut in ("both", "lower"):
                tail[:, k] |= v <= lower
            if cut in ("both", "upper"):
                tail[:, k] |= v >= upper
    mask[:, cols] = (rng.random((n, d_na)) < p) & tail
    return mask


def _kth_smallest(sorted_values: np.ndarray, q: float) -> float:
    """The ⌊q·n⌋-th smallest value (1-based; at least the first), as torch.kthvalue(int(q·n))."""
    k = min(max(int(q * sorted_values.size), 1), sorted_values.size)
    return float(sorted_values[k - 1])


def _logistic_cells(X_in: np.ndarray, n_out: int, p: float, rng: np.random.Generator) -> np.ndarray:
    """n × n_out Bernoulli(σ(X_in·w_j + b_j)) cells with mean rate p per output column.

    w_j ~ N(0, I), divided by sd(X_in·w_j) (Muzellec et al.'s ``pick_coeffs``); b_j by bisection on
    [−50, 50] so that mean_i σ(x_i·w_j + b_j) = p (``fit_intercepts``)."""
    n = X_in.shape[0]
    W = rng.standard_normal((X_in.shape[1], n_out))
    Z = X_in @ W
    sd = Z.std(axis=0)
    Z = Z / np.where(sd > 0, sd, 1.0)
    prob = np.empty_like(Z)
    for j in range(n_out):
        b = _fit_intercept(Z[:, j], p)
        prob[:, j] = _sigmoid(Z[:, j] + b)
    return rng.random((n, n_out)) < prob


def _fit_intercept(z: np.ndarray, p: float, lo: float = -50.0, hi: float = 50.0, tol: float = 1e-10) -> float:
    """b with mean σ(z + b) = p, by bisection (the mean is increasing in b)."""
    if p <= 0:
        return -np.inf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _sigmoid(z + mid).mean() > p:
            hi = mid
        else:
            lo = mid
        if hi - lo < tol:
            break
    return 0.5 * (lo + hi)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


# ------------------------------------------------------------------------- encodings
def _codes(df: pd.DataFrame, schema: Schema | None) -> np.ndarray:
    """n × d float codes, NaN for missing cells: the schema's codes, or codes from the dtypes."""
    if schema is not None:
        missing = [c for c in schema.names if c not in df.columns]
        extra = [c for c in df.columns if c not in schema.columns]
        if missing or extra:
            raise ValueError(f"the frame's columns do not match the schema (missing {missing}, extra {extra}); "
                             "pass schema.subset(list(df.columns)) or drop the extra columns")
        codes = schema.encode(df[list(schema.names)]).astype(float)
        codes[codes == MISSING] = np.nan
        order = [schema.names.index(c) for c in df.columns]
        return codes[:, order]
    out = np.empty(df.shape, dtype=float)
    for j, c in enumerate(df.columns):
        s = df[c]
        if isinstance(s.dtype, pd.CategoricalDtype):
            x = s.cat.codes.to_numpy().astype(float)
            x[x < 0] = np.nan
        elif pd.api.types.is_numeric_dtype(s) or pd.api.types.is_bool_dtype(s):
            x = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        else:
            x = s.astype("category").cat.codes.to_numpy().astype(float)
            x[x < 0] = np.nan
        out[:, j] = x
    return out


def _model_inputs(df: pd.DataFrame, schema: Schema | None) -> np.ndarray:
    """Codes standardised per column (mean 0, sd 1 over observed cells); missing cells → 0."""
    X = _codes(df, schema)
    with np.errstate(invalid="ignore", divide="ignore"):
        mu = np.nanmean(X, axis=0)
        sd = np.nanstd(X, axis=0)
    mu = np.where(np.isnan(mu), 0.0, mu)
    sd = np.where((sd > 0) & ~np.isnan(sd), sd, 1.0)
    Z = (X - mu) / sd
    return np.where(np.isnan(Z), 0.0, Z)


def _order_values(df: pd.DataFrame, schema: Schema | None) -> np.ndarray:
    """Values that order each column for the quantile mask: raw numbers for numeric columns,
    (schema) codes for categorical ones; NaN where missing."""
    codes = _codes(df, schema)
    out = codes.copy()
    for j, c in enumerate(df.columns):
        s = df[c]
        numeric = (schema is not None and not schema[c].is_categorical) or (
            schema is None and pd.api.types.is_numeric_dtype(s) and not isinstance(s.dtype, pd.CategoricalDtype))
        if numeric:
            out[:, j] = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    return out


def _insert_na(df: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """A copy of ``df`` with NA where ``mask`` is True (dtypes kept where they can hold NA)."""
    cols = {}
    for j, c in enumerate(df.columns):
        s = df[c]
        m = mask[:, j]
        if not m.any():
            cols[c] = s.copy()
            continue
        if pd.api.types.is_integer_dtype(s.dtype) and not isinstance(s.dtype, pd.api.extensions.ExtensionDtype):
            s = s.astype("Int64")
        elif pd.api.types.is_bool_dtype(s.dtype) and not isinstance(s.dtype, pd.api.extensions.ExtensionDtype):
            s = s.astype("boolean")
        cols[c] = s.mask(pd.Series(m, index=s.index))
    out = pd.DataFrame(cols, index=df.index)
    out.columns = df.columns
    return out


def missing_rates(df: pd.DataFrame) -> pd.Series:
    """Fraction of missing cells per column (a convenience for checking a mask)."""
    return df.isna().mean()
