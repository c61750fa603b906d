"""k-way total variation distance between the marginals of a real and a synthetic table.

For every set of k columns, TVD = ½ Σ_cells |p_real(cell) − p_synth(cell)|, and the metric is the plain
mean over all C(d, k) sets (the seed paper's "average variational distance", Mohapatra et al. 2024,
§6.1). Two binnings:

- ``mode="paper"`` (default), as the artifact's ``evaluation.py``: both frames drop every row with a
  missing cell; a numeric column is clipped to the real data's [min, max] and binned by
  ⌊(x − min) / ((max − min)/16)⌋, so the maximum falls in a 17th bin of its own (kept, as the
  artifact does); categorical columns compare their labels (the artifact also lower-cased them).
- ``mode="schema"``: the public schema's codes (numeric bins from the schema), and each set of k
  columns uses the rows observed on those k columns (available-case).

Example
-------
>>> import pandas as pd, dpsynth
>>> schema = dpsynth.Schema.from_dict({"a": {"type": "categorical", "categories": ["x", "y"]}})
>>> tvd(pd.DataFrame({"a": ["x", "x"]}), pd.DataFrame({"a": ["x", "y"]}), schema, k=1)
0.5
"""
from __future__ import annotations

import itertools
import numbers

import numpy as np
import pandas as pd

from ..schema import MISSING, Schema

MODES = ("paper", "schema")
PAPER_BINS = 16


def tvd(real: pd.DataFrame, synth: pd.DataFrame, schema: Schema, k: int = 2, mode: str = "paper",
        bins: int = PAPER_BINS, per_combination: bool = False):
    """Mean k-way TVD over all sets of k schema columns (a float), or, with ``per_combination=True``,
    a Series indexed by the column tuples."""
    if not isinstance(schema, Schema):
        raise TypeError(f"schema must be a dpsynth.Schema, got {type(schema).__name__}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
    d = len(schema)
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not 1 <= k <= d:
        raise ValueError(f"k must be an integer between 1 and the number of columns ({d}), got {k!r}")
    if isinstance(bins, bool) or not isinstance(bins, numbers.Integral) or bins < 1:
        raise ValueError(f"bins must be a positive integer, got {bins!r}")
    for name, frame in (("real", real), ("synth", synth)):
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"{name} must be a pandas DataFrame, got {type(frame).__name__}")
        absent = [c for c in schema.names if c not in frame.columns]
        if absent:
            raise ValueError(f"{name} lacks the schema columns {absent}")
    if mode == "paper":
        codes_r, codes_s, sizes = _paper_codes(real, synth, schema, int(bins))
    else:
        codes_r, codes_s = schema.encode(real[schema.names]), schema.encode(synth[schema.names])
        sizes = schema.domain_sizes
    out = {}
    for combo in itertools.combinations(range(d), k):
        p = _distribution(codes_r, combo, sizes)
        q = _distribution(codes_s, combo, sizes)
        if p is None or q is None:
            who = "real" if p is None else "synthetic"
            raise ValueError(f"the {who} data have no row observed on {[schema.names[j] for j in combo]}; "
                             "TVD is undefined there")
        out[tuple(schema.names[j] for j in combo)] = 0.5 * float(np.abs(p - q).sum())
    if per_combination:
        return pd.Series(out, name=f"tvd{k}")
    return float(np.mean(list(out.values())))


def _distribution(codes: np.ndarray, combo, sizes):
    sub = codes[:, list(combo)]
    sub = sub[(sub != MISSING).all(axis=1)]
    if len(sub) == 0:
        return None
    shape = tuple(int(sizes[j]) for j in combo)
    flat = np.ravel_multi_index(tuple(sub.T), shape)
    counts = np.bincount(flat, minlength=int(np.prod(shape)))
    return counts / counts.sum()


def _paper_codes(real, synth, schema, bins):
    """Codes for the paper mode: complete rows only; numerics in ``bins`` equal-width bins of the real
    [min, max] plus the max's own bin; categoricals by label (union of both frames' labels)."""
    r = real[schema.names].dropna()
    s = synth[schema.names].dropna()
    if len(r) == 0 or len(s) == 0:
        who = "real" if len(r) == 0 else "synthetic"
        raise ValueError(f"the {who} data have no complete row; the paper-compatible TVD drops incomplete rows "
                         "(use mode='schema' for available-case marginals)")
    codes_r = np.empty(r.shape, dtype=np.int64)
    codes_s = np.empty(s.shape, dtype=np.int64)
    sizes = []
    for j, name in enumerate(schema.names):
        if schema[name].is_categorical:
            labels_r = r[name].astype(object).astype(str).to_numpy()
            labels_s = s[name].astype(object).astype(str).to_numpy()
            levels, inv = np.unique(np.r_[labels_r, labels_s], return_inverse=True)
            codes_r[:, j], codes_s[:, j] = inv[:len(r)], inv[len(r):]
            sizes.append(len(levels))
        else:
            xr = pd.to_numeric(r[name]).to_numpy(dtype=float)
            xs = pd.to_numeric(s[name]).to_numpy(dtype=float)
            lo, hi = float(xr.min()), float(xr.max())
            codes_r[:, j], codes_s[:, j] = _paper_bin(xr, lo, hi, bins), _paper_bin(xs, lo, hi, bins)
            sizes.append(bins + 1)
    return codes_r, codes_s, sizes


def _paper_bin(x: np.ndarray, lo: float, hi: float, bins: int) -> np.ndarray:
    """⌊(clip(x) − lo)/((hi − lo)/bins)⌋ ∈ {0, …, bins}: the maximum gets bin ``bins`` (the 17th)."""
    if hi <= lo:
        return np.zeros(len(x), dtype=np.int64)
    width = (hi - lo) / bins
    b = np.floor((np.clip(x, lo, hi) - lo) / width).astype(np.int64)
    return np.clip(b, 0, bins)
