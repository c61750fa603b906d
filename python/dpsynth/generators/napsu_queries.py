"""Which marginal queries NAPSU-MQ may measure, checked from public knowledge before any release.

The noise-aware likelihood works clique by clique on the junction tree
(:class:`dpsynth.graphical.gaussian_tree.GaussianTree`): its cost grows with the cube of the
largest clique's released cells and only linearly with the number of cliques. ``max_cells`` is
therefore a limit on the largest junction-tree clique (in cells of the schema's domain, a missing
level included), not on the total: :func:`check_queries` refuses explicit queries, forced
queries and analyses whose tree would exceed it, says which clique and how to coarsen it, and
tells MST which candidate pairs it may choose (those whose clique stays within the limit), so
that a private selection can never build a model that is too large. Everything here reads the
schema and the options only.

Example
-------
>>> from dpsynth.graphical import Domain
>>> dom = Domain(["a", "b", "y"], [16, 16, 2])
>>> largest_clique(dom, [("a", "y"), ("b", "y"), ("a", "b")])
(('a', 'b', 'y'), 512)
>>> check_queries(dom, [("a", "y"), ("b", "y")], among=[("a", "b")], max_cells=256, selection="mst")
[]
>>> check_queries(dom, [("a", "b", "y")], max_cells=256)
Traceback (most recent call last):
...
ValueError: NAPSU-MQ's junction tree would hold the clique ['a', 'b', 'y'] with 512 cells, above max_cells=256 ...
"""
from __future__ import annotations

from typing import Sequence

from ..analyses import association, connected_components, star_cliques
from ..graphical import Domain, JunctionTree
from ..marginals.measure import measure_marginals

#: share of the selection budget (ρ of the exponential mechanisms) spent on the (response,
#: predictor) tables that choose a star's hub (:func:`star_queries`); the predictor edges MST
#: no longer has to choose leave it more than that
HUB_SHARE = 0.25


def largest_clique(domain: Domain, cliques: Sequence[tuple]) -> tuple[tuple, int]:
    """(the largest clique, its cells) of the junction tree of ``cliques`` on ``domain``."""
    jt = JunctionTree(domain, [*cliques, *[(a,) for a in domain.attrs]])
    sizes = [domain.project(c).size() for c in jt.cliques]
    k = max(range(len(sizes)), key=sizes.__getitem__)
    return tuple(jt.cliques[k]), sizes[k]


def too_large(domain: Domain, clique: tuple, cells: int, max_cells: int) -> str:
    """The error for a clique over ``max_cells``: which one, and what to coarsen."""
    widest = max(clique, key=domain.size)
    return (f"NAPSU-MQ's junction tree would hold the clique {list(clique)} with {cells} cells, above "
            f"max_cells={max_cells} (the likelihood's cost grows with the cube of its largest clique). "
            f"Coarsen {widest!r} ({domain.size(widest)} levels: fewer bins or categories in the schema), "
            "drop a predictor or interaction from the analyses, or raise max_cells")


def check_queries(domain: Domain, known: Sequence[tuple], among: Sequence[tuple] = (), max_cells: int = 1024,
                  selection: str | None = None) -> list[tuple]:
    """Check the cliques measured whatever the data (``known``: explicit, forced and analysis
    cliques) against ``max_cells``; with ``selection="mst"`` also that the pairs MST may choose
    (those whose clique, with ``known``, stays within the limit) can connect every column.
    Returns the predictor pairs of ``among`` MST may still choose."""
    clique, cells = largest_clique(domain, known)
    if cells > max_cells:
        raise ValueError(too_large(domain, clique, cells, max_cells))
    if selection != "mst":
        return list(among)
    allowed_among = [p for p in among if largest_clique(domain, [*known, p])[1] <= max_cells]
    attrs = domain.attrs
    pairs = [(a, b) for i, a in enumerate(attrs) for b in attrs[i + 1:] if domain.size(a) * domain.size(b) <= max_cells]
    parts = connected_components(attrs, [*known, *pairs])
    if len(parts) > 1:
        alone = sorted(min(parts, key=len), key=domain.attrs.index)
        raise ValueError(f"no column pair can join {alone} to the other columns within max_cells={max_cells} "
                         "cells; coarsen those columns (fewer bins or categories in the schema) or raise max_cells")
    return allowed_among


def as_query_list(queries, name) -> list[tuple]:
    """``queries`` (a list of column tuples; a bare name is a 1-column query) as tuples of str,
    with a TypeError / ValueError that says what is wrong (``name``: the option, for the message)."""
    if isinstance(queries, (str, bytes)) or not hasattr(queries, "__iter__"):
        raise TypeError(f"{name} must be a list of column tuples such as [('age', 'income')], got {queries!r}")
    out = []
    for q in queries:
        if isinstance(q, str):
            q = (q,)
        if not hasattr(q, "__iter__"):
            raise TypeError(f"each entry of {name} must be a tuple of column names, got {q!r}")
        q = tuple(str(c) for c in q)
        if not q:
            raise ValueError(f"{name} contains an empty query; each query needs at least one column")
        if len(set(q)) != len(q):
            raise ValueError(f"query {q} names a column twice")
        if any(set(q) == set(o) for o in out):
            raise ValueError(f"{name} lists the marginal {q} twice; list each set of columns once")
        out.append(q)
    return out


def star_queries(rows, domain: Domain, schema, stars, known: Sequence[tuple], max_cells: int, rho: float, ledger,
                 source, step: str) -> tuple[list[tuple], dict]:
    """The predictor cliques of each analysis whose predictors' joint is too large
    (:class:`dpsynth.analyses.PredictorStar`): the (response, predictor) tables are released with
    one Gaussian mechanism at ``rho`` (in the ledger as ``step``), each predictor's
    :func:`dpsynth.analyses.association` with the response is computed from its noisy table
    (post-processing: numeric predictors at their bin index, a missing level left out), and
    :func:`dpsynth.analyses.star_cliques` builds the hub and the predictor pairs to measure, each
    hub member kept only if the junction tree of ``known`` and every star so far stays within
    ``max_cells`` (public sizes only, so no outcome of the release can exceed it).
    These tables choose the structure only; they are not reused in the likelihood.
    Returns (pairs, {analysis: hub}); a star whose strongest predictor cannot be the hub adds
    nothing (hub []), and where no predictor could (public sizes) nothing is measured."""
    def fits(cliques, out=()):
        return largest_clique(domain, [*known, *out, *cliques])[1] <= max_cells

    # public: only stars where some predictor could be the hub are worth their tables
    stars = [s for s in stars if any(star_cliques(s, {x: 1.0}, fits)[0] for x in s.predictors)]
    if not stars:
        return [], {}
    tables = list(dict.fromkeys((s.response, x) for s in stars for x in s.predictors))
    noisy = {m.attrs: m.noisy.reshape(domain.size(m.attrs[0]), domain.size(m.attrs[1]))
             for m in measure_marginals(rows, domain, tables, ledger, source, step, rho=rho)}
    out, hubs = [], {}
    for s in stars:
        strength = {x: association(noisy[(s.response, x)][:schema[s.response].size, :schema[x].size],
                                   not schema[x].is_categorical) for x in s.predictors}
        hub, cliques = star_cliques(s, strength, lambda c: fits(c, out))
        hubs[f"{s.response} ~ {' + '.join(s.predictors)}"] = hub
        out += cliques
    return out, hubs
