"""Reference levels of the canonical statistics (:func:`dpsynth.graphical.maxent.canonical_cells`):
each θ is a cell's log odds ratio against its columns' reference levels, so which level is the
reference decides what each coordinate measures and what a N(0, σ²) prior on θ shrinks towards.
The family of distributions is the same for every choice (any choice spans the same
log-potentials; Räisä et al. 2023, Supp. C: "an arbitrary assignment", they take 0). A rare
reference level makes every coordinate of its tables as noisy as that level's cells;
:func:`largest_levels` picks well-filled ones from released counts.
"""
from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np

from .domain import Domain


def check_reference(domain: Domain, reference: dict | None) -> dict:
    """``reference`` as a dict of int levels, every attribute of ``domain`` (0 where absent); a
    ValueError for an unknown attribute or a level outside its domain."""
    reference = dict(reference or {})
    unknown = [a for a in reference if a not in domain]
    if unknown:
        raise ValueError(f"reference levels name attributes {unknown} that are not in the domain")
    out = {}
    for a in domain.attrs:
        level = reference.get(a, 0)
        if isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not 0 <= level < domain.size(a):
            raise ValueError(f"reference level of {a!r} must be an integer level in 0..{domain.size(a) - 1}, got {level!r}")
        out[a] = int(level)
    return out


def largest_levels(domain: Domain, tables: Sequence[Sequence[Hashable]], counts: Sequence,
                   last_excluded: Sequence[Hashable] = ()) -> dict:
    """Each attribute's level with the largest count, summing ``counts`` (one array per table of
    ``tables``, its cells in C order over the table's attributes, e.g. noisy released counts: a
    function of them is post-processing) over every table that holds the attribute; the attributes
    of ``last_excluded`` never take their last level (an incomplete column's "missing"). Ties go
    to the lower level; an attribute in no table gets 0. The canonical coordinates' references
    (:func:`canonical_cells`): a well-filled reference level keeps each cell's noise in its own
    coordinate.

    >>> dom = Domain(["a", "b"], [3, 2])
    >>> largest_levels(dom, [("a", "b"), ("a",)], [np.array([1, 2, 8, 9, 3, 1]), np.array([2, 20, 5])])
    {'a': 1, 'b': 0}
    >>> largest_levels(dom, [("a",)], [np.array([2, 5, 20])], last_excluded=["a"])
    {'a': 1, 'b': 0}
    """
    out, excluded = {}, set(last_excluded)
    for a in domain.attrs:
        total = np.zeros(domain.size(a))
        for t, c in zip(tables, counts):
            t = tuple(t)
            if a in t:
                cube = np.asarray(c, dtype=float).reshape([domain.size(b) for b in t])
                total += cube.sum(axis=tuple(i for i, b in enumerate(t) if b != a))
        if a in excluded:
            total = total[:-1]
        out[a] = int(np.argmax(total))
    return out
