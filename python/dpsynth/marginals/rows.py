"""Counting marginals from encoded private rows (see :mod:`dpsynth.marginals`): the :class:`Rows`
interface every backend implements, :class:`EncodedRows` (codes in memory, with multiplicities) and
the plain numpy helpers. Codes follow the schema's encoding (:data:`dpsynth.schema.MISSING` for a
missing cell); a table is a sequence of attribute indices or ``(attribute, level)`` pairs
(:func:`table_spec`).

>>> import numpy as np
>>> EncodedRows(np.array([[0, 1], [1, 1], [-1, 0]]), sizes=[2, 2]).table([0, 1]).tolist()
[[0, 1], [0, 1]]
"""
from __future__ import annotations

import math
from typing import Iterable, Iterator, Sequence

import numpy as np

from ..schema.column import MISSING

MAX_CELLS = 50_000_000  # 400 MB of int64 counts: beyond this a table does not fit a 24 GB machine's budget


# ---------------------------------------------------------------------- plain numpy helpers
def observed_mask(codes: np.ndarray, attrs) -> np.ndarray:
    """Rows observed on every attribute in ``attrs``."""
    attrs = list(attrs)
    if not attrs:
        return np.ones(codes.shape[0], dtype=bool)
    return np.all(codes[:, attrs] != MISSING, axis=1)


def count_marginal(codes: np.ndarray, attrs, sizes, rows: np.ndarray | None = None) -> np.ndarray:
    """Contingency table (shape ``[sizes[a] for a in attrs]``, int64) over the rows observed on
    ``attrs`` (and in the boolean mask ``rows`` if given)."""
    codes = np.asarray(codes)
    if rows is not None:
        codes = codes[rows]
    return EncodedRows(codes, sizes).table(attrs)


def count_with_missing(codes: np.ndarray, attr: int, size: int) -> np.ndarray:
    """1-way table with an extra last cell counting missing values (each row in exactly one cell)."""
    return EncodedRows(np.asarray(codes)[:, [attr]], [size]).table([0], missing_cell=True)


# ---------------------------------------------------------------------- the counting interface
def table_spec(table) -> tuple:
    """Normalise a table to a tuple of (attribute, level) pairs."""
    return tuple((int(a[0]), int(a[1])) if isinstance(a, (tuple, list)) else (int(a), 0) for a in table)


class Rows:
    """Encoded private rows that can only be counted. ``sizes``: public domain size of each
    attribute (schema order); ``missing_level``: attributes whose missing value is counted as an
    extra last level (NAPSU-MQ's ``missing="level"``) instead of leaving the row out of the table.

    Subclasses provide ``n`` (number of rows), :meth:`tables` (usually: codes of each table's
    attributes and their multiplicities handed to :meth:`_dense`), :meth:`complete` and
    :meth:`with_missing_level`."""

    def __init__(self, sizes: Sequence[int], missing_level: Iterable[int] = ()):
        self.sizes = [int(s) for s in sizes]
        self.missing_level = frozenset(int(a) for a in missing_level)

    n: int

    def width(self, attr: int, level: int = 0) -> int:
        """Domain size of ``attr`` at ``level`` (with the extra missing level where one is kept)."""
        size = self.sizes[attr] + (attr in self.missing_level)
        return ((size - 1) >> level) + 1

    def table(self, table, missing_cell: bool = False) -> np.ndarray:
        """Available-case contingency table over ``table``'s attributes (int64, one axis each).
        ``missing_cell``: keep one extra last cell per axis for rows missing that attribute."""
        return next(self.tables([table], missing_cell=missing_cell))

    def tables(self, tables, missing_cell: bool = False) -> Iterator[np.ndarray]:  # pragma: no cover
        """:meth:`table` for each of ``tables``, lazily (a backend may count them in batches)."""
        raise NotImplementedError

    def complete(self) -> "Rows":  # pragma: no cover - every backend implements it
        """The rows observed on every attribute (PrivBayes's complete-rows mode)."""
        raise NotImplementedError

    def with_missing_level(self, attrs: Iterable[int]) -> "Rows":  # pragma: no cover
        """The same rows, counting a missing value of each of ``attrs`` as that attribute's extra last level."""
        raise NotImplementedError

    # ------------------------------------------------------------------ shared arithmetic
    def _check_cells(self, spec) -> None:
        cells = math.prod(self.width(a, lvl) for a, lvl in spec)
        if cells > MAX_CELLS:
            raise ValueError(f"the marginal over attributes {[a for a, _ in spec]} has {cells:,} cells (limit "
                             f"{MAX_CELLS:,}); use fewer bins or categories in the schema, or marginals of fewer "
                             "attributes")

    def _extended(self, attr: int, level: int, codes: np.ndarray) -> np.ndarray:
        """Codes at ``level`` over the extended domain: a missing cell gets the extra code ``width``
        (one slot past the domain), or the attribute's missing level where one is kept."""
        if attr in self.missing_level:
            if level:
                raise ValueError("a kept missing level cannot be combined with a coarser level")
            return np.where(codes == MISSING, self.sizes[attr], codes).astype(np.intp)
        return np.where(codes == MISSING, self.width(attr, level), codes >> level).astype(np.intp)

    def _dense(self, spec, columns, weights, missing_cell: bool, index: np.ndarray | None = None) -> np.ndarray:
        """Bincount over the extended domains, then slice the missing slots off: exactly the
        available-case table, no masks. ``index``: the extended index of all but the last
        attribute, if the caller has it already."""
        if not spec:
            return np.array(self.n, dtype=np.int64)
        ext_shape = [self.width(a, lvl) + 1 for a, lvl in spec]
        if index is None:
            index = self._index(spec, columns)
        else:
            index = index * ext_shape[-1] + self._extended(*spec[-1], columns[-1])
        full = np.bincount(index, weights=weights, minlength=math.prod(ext_shape)).reshape(ext_shape)
        if not missing_cell:
            full = full[tuple(slice(0, s - 1) for s in ext_shape)]
        return full.astype(np.int64)  # weighted sums of whole numbers below 2^53 are exact

    def _index(self, spec, columns) -> np.ndarray:
        index = None
        for (a, lvl), col in zip(spec, columns):
            e = self._extended(a, lvl, col)
            index = e if index is None else index * (self.width(a, lvl) + 1) + e
        return index


class EncodedRows(Rows):
    """Codes in memory (n × d, MISSING for a missing cell), each row with an optional multiplicity
    ``weights`` (the distinct encoded rows a backend grouped). Columns at each level are cached,
    and the index of a table's leading attributes is built on the prefix it shares with the
    previous table's (PrivBayes asks for its candidate tables sorted by parent set)."""

    def __init__(self, codes: np.ndarray, sizes: Sequence[int], weights: np.ndarray | None = None,
                 missing_level: Iterable[int] = ()):
        super().__init__(sizes, missing_level)
        self.codes = np.asarray(codes)
        self.weights = None if weights is None else np.asarray(weights, dtype=np.float64)
        self.n = int(self.codes.shape[0] if weights is None else round(float(self.weights.sum())))
        self._ext: dict = {}
        self._stack: list = []  # [(attribute, level), index of the head up to it]

    def tables(self, tables, missing_cell: bool = False) -> Iterator[np.ndarray]:
        for t in tables:
            spec = table_spec(t)
            self._check_cells(spec)
            if not spec:
                yield np.array(self.n, dtype=np.int64)
                continue
            yield self._dense(spec, [self.codes[:, a] for a, _ in spec], self.weights, missing_cell,
                              index=self._head_index(spec[:-1]))

    def _head_index(self, head) -> np.ndarray | None:
        """Extended index of the leading attributes ``head``, built on the longest prefix it shares
        with the previous head (tables asked for in sorted order share long prefixes)."""
        if not head:
            return None
        stack = self._stack
        k = 0
        while k < min(len(stack), len(head)) and stack[k][0] == head[k]:
            k += 1
        del stack[k:]
        for a, lvl in head[k:]:
            e = self._extended(a, lvl, None)
            stack.append(((a, lvl), e if not stack else stack[-1][1] * (self.width(a, lvl) + 1) + e))
        return stack[-1][1]

    def _extended(self, attr, level, codes):
        key = (attr, level)
        if key not in self._ext:
            self._ext[key] = super()._extended(attr, level, self.codes[:, attr])
        return self._ext[key]

    def complete(self) -> "EncodedRows":
        keep = observed_mask(self.codes, range(self.codes.shape[1]))
        return EncodedRows(self.codes[keep], self.sizes, None if self.weights is None else self.weights[keep],
                           self.missing_level)

    def with_missing_level(self, attrs) -> "EncodedRows":
        return EncodedRows(self.codes, self.sizes, self.weights, self.missing_level | set(attrs))

    @classmethod
    def grouped(cls, codes: np.ndarray, sizes: Sequence[int]) -> "EncodedRows":
        """The distinct rows of ``codes`` with their multiplicities (same counts, fewer rows);
        a hash group-by (pandas), as a SQL backend's GROUP BY."""
        import pandas as pd

        codes = np.asarray(codes)
        if codes.shape[0] == 0:
            return cls(codes, sizes)
        small = codes.astype(np.int32 if max(sizes, default=0) < 2 ** 31 - 1 else np.int64)
        counts = pd.DataFrame(small).groupby(list(range(codes.shape[1])), sort=False).size()
        index = counts.index
        if codes.shape[1] == 1:
            distinct = index.to_numpy().reshape(-1, 1)
        else:
            distinct = np.column_stack([index.get_level_values(j).to_numpy() for j in range(codes.shape[1])])
        return cls(distinct.astype(np.int64), sizes, counts.to_numpy())


def as_rows(rows, sizes: Sequence[int]) -> Rows:
    """``rows`` itself, or an n × d code array wrapped as :class:`EncodedRows` (for callers with codes)."""
    return rows if isinstance(rows, Rows) else EncodedRows(np.asarray(rows), sizes)

__all__ = ["MAX_CELLS", "Rows", "EncodedRows", "as_rows", "count_marginal", "count_with_missing",
           "observed_mask", "table_spec"]
