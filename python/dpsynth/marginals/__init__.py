"""Counting marginals: the one place that reads encoded private rows.

:func:`count_marginal` returns the contingency table of a set of attributes over the rows that are
observed on all of them (available-case, PrivBayesE's partial marginal observation; the seed paper,
Alg. 2). Each row adds at most 1 to one cell, so under add/remove the table's L1 and L2 sensitivity
is 1; under replace-one it is 2 (L1) and √2 (L2).

Example
-------
>>> import numpy as np
>>> codes = np.array([[0, 1], [1, 1], [-1, 0]])
>>> count_marginal(codes, [0, 1], [2, 2]).tolist()
[[0, 1], [0, 1]]
"""
from __future__ import annotations

import math

import numpy as np

from ..schema import MISSING

MAX_CELLS = 50_000_000  # 400 MB of int64 counts: beyond this a table does not fit a 24 GB machine's budget


def observed_mask(codes: np.ndarray, attrs) -> np.ndarray:
    """Rows observed on every attribute in ``attrs``."""
    attrs = list(attrs)
    if not attrs:
        return np.ones(codes.shape[0], dtype=bool)
    return np.all(codes[:, attrs] != MISSING, axis=1)


def count_marginal(codes: np.ndarray, attrs, sizes, rows: np.ndarray | None = None) -> np.ndarray:
    """Contingency table (shape ``[sizes[a] for a in attrs]``, int64) over the rows observed on
    ``attrs`` (and in the boolean mask ``rows`` if given)."""
    attrs = list(attrs)
    shape = tuple(int(sizes[a]) for a in attrs)
    cells = math.prod(shape)
    if cells > MAX_CELLS:
        raise ValueError(f"the marginal over attributes {attrs} has {cells:,} cells (limit {MAX_CELLS:,}); "
                         "use fewer bins or categories in the schema, or marginals of fewer attributes")
    mask = observed_mask(codes, attrs)
    if rows is not None:
        mask &= rows
    if not attrs:
        return np.array(int(mask.sum()), dtype=np.int64)
    sub = codes[mask][:, attrs]
    flat = np.ravel_multi_index(tuple(sub.T), shape) if sub.size else np.zeros(0, dtype=np.int64)
    return np.bincount(flat, minlength=int(np.prod(shape))).reshape(shape).astype(np.int64)


def count_with_missing(codes: np.ndarray, attr: int, size: int) -> np.ndarray:
    """1-way table with an extra last cell counting missing values (each row in exactly one cell)."""
    col = codes[:, attr]
    col = np.where(col == MISSING, size, col)
    return np.bincount(col, minlength=size + 1).astype(np.int64)
