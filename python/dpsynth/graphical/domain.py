"""A discrete domain: named attributes and their numbers of levels.

``Domain(attrs, shape)`` is the set of joint configurations ∏_i {0, …, shape_i − 1}; a marginal
table over a subset of attributes lives on ``domain.project(attrs)``. Attribute names are any
hashable labels (column names in dpsynth). Domains are immutable and cheap to build. Two helpers
on sets of attributes live beside it: :func:`maximal_cliques` and :func:`cell_index`.

Example
-------
>>> d = Domain(["a", "b", "c"], [2, 3, 4])
>>> d.project(["c", "a"])
Domain(c: 4, a: 2)
>>> d.size(), d.project(["b"]).size()
(24, 3)
"""
from __future__ import annotations

from typing import Hashable, Iterable, Sequence

import numpy as np


class Domain:
    """Ordered attributes with their numbers of levels (see the module docstring)."""

    __slots__ = ("attrs", "shape")

    def __init__(self, attrs: Iterable[Hashable], shape: Iterable[int]):
        attrs, shape = tuple(attrs), tuple(int(s) for s in shape)
        if len(attrs) != len(shape):
            raise ValueError(f"Domain needs one size per attribute, got {len(attrs)} attributes and {len(shape)} sizes")
        if len(set(attrs)) != len(attrs):
            raise ValueError(f"Domain attributes must be unique, got {attrs}")
        if any(s < 1 for s in shape):
            raise ValueError(f"every attribute needs at least one level, got sizes {shape}")
        self.attrs, self.shape = attrs, shape

    @classmethod
    def from_dict(cls, sizes: dict) -> "Domain":
        return cls(sizes.keys(), sizes.values())

    # ------------------------------------------------------------------ subsets
    def project(self, attrs: Sequence[Hashable]) -> "Domain":
        """The sub-domain on ``attrs`` (in the order given)."""
        attrs = tuple(attrs)
        unknown = [a for a in attrs if a not in self.attrs]
        if unknown:
            raise ValueError(f"attributes {unknown} are not in {self}")
        return Domain(attrs, (self.shape[self.attrs.index(a)] for a in attrs))

    def marginalize(self, attrs: Iterable[Hashable]) -> "Domain":
        """The domain without ``attrs``."""
        drop = set(attrs)
        return self.project([a for a in self.attrs if a not in drop])

    def merge(self, other: "Domain") -> "Domain":
        """Union: this domain's attributes, then ``other``'s new ones."""
        extra = [a for a in other.attrs if a not in self.attrs]
        return Domain(self.attrs + tuple(extra), self.shape + tuple(other.size(a) for a in extra))

    def contains(self, other: "Domain | Iterable[Hashable]") -> bool:
        attrs = other.attrs if isinstance(other, Domain) else tuple(other)
        return set(attrs) <= set(self.attrs)

    def axes(self, attrs: Iterable[Hashable]) -> tuple[int, ...]:
        return tuple(self.attrs.index(a) for a in attrs)

    # ------------------------------------------------------------------ sizes
    def size(self, attr: Hashable | None = None) -> int:
        """Number of configurations (of one attribute if given)."""
        if attr is not None:
            return self.shape[self.attrs.index(attr)]
        out = 1
        for s in self.shape:
            out *= s
        return out

    def __contains__(self, attr) -> bool:
        return attr in self.attrs

    def __len__(self) -> int:
        return len(self.attrs)

    def __iter__(self):
        return iter(self.attrs)

    def __eq__(self, other) -> bool:
        return isinstance(other, Domain) and self.attrs == other.attrs and self.shape == other.shape

    def __hash__(self) -> int:
        return hash((self.attrs, self.shape))

    def __repr__(self) -> str:
        return "Domain(" + ", ".join(f"{a}: {s}" for a, s in zip(self.attrs, self.shape)) + ")"


def maximal_cliques(cliques: Sequence[Sequence[Hashable]]) -> list[tuple]:
    """The sets in ``cliques`` not contained in another one (first occurrence, order kept)."""
    sets = [tuple(c) for c in cliques]
    out = []
    for i, c in enumerate(sets):
        if any(set(c) < set(o) or (set(c) == set(o) and j < i) for j, o in enumerate(sets)):
            continue
        out.append(c)
    return out


def cell_index(cdom: Domain, attrs) -> tuple[np.ndarray, int]:
    """Flat index, in the projection of ``cdom`` onto ``attrs`` (in attrs' order), of every cell of
    ``cdom`` (C order), and the projection's size."""
    grid = np.indices(cdom.shape).reshape(len(cdom), -1)
    if not attrs:
        return np.zeros(grid.shape[1], dtype=np.int64), 1
    sub = [grid[cdom.attrs.index(a)] for a in attrs]
    shape = [cdom.size(a) for a in attrs]
    return np.ravel_multi_index(sub, shape), int(np.prod(shape))
