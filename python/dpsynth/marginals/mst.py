"""MST query selection (McKenna, Miklau & Sheldon 2021), shared by the MST generator and NAPSU-MQ.

Neighbouring relation: add/remove one row (tables are available-case counts,
:mod:`dpsynth.marginals.measure`).

:func:`mst_select` is private-pgm's MST selection, charged in ρ to the ledger it is given:

1. all d 1-way marginals measured with ρ₁ (default ρ/3), σ₁ = √d/√(2ρ₁);
2. the independence model fitted to the noisy 1-ways (negative counts clipped to 0, normalised)
   predicts every 2-way table x̂_ab; each pair's score is ‖x_ab − x̂_ab‖₁ on the *true* 2-way table
   (sensitivity 1: x̂ is a released quantity, x_ab changes by one count);
3. Kruskal-style maximum spanning tree: r − 1 exponential mechanisms (r = connected components after
   the forced cliques), each with ρ₂/(r − 1) (bounded-range analysis, ε = √(8ρ)), choosing among the
   pairs that join two components.

With ``noise_sd=σ`` each score is lowered by AIM's expected L1 error of measuring that pair with
Gaussian noise of sd σ, √(2/π)·σ·cells (:func:`noise_penalty`; McKenna, Mullins, Sheldon & Miklau
2022, AIM's quality score): a large table is then chosen only where its dependence exceeds the noise
its measurement will add. The penalty reads the public domain and the planned σ only, so each
score's sensitivity stays 1.

Deviations from private-pgm, documented: no ``compress_domain`` (rare levels are not merged for
selection), the independence model is the clipped-and-normalised 1-ways rather than a mirror-descent
fit (for 1-way measurements alone they agree up to the projection), and under available-case
counting each pair's prediction is scaled to that pair's expected number of observed rows
(n̂_a n̂_b / n̂, from the released 1-way totals).

Example
-------
>>> import numpy as np
>>> from dpsynth.graphical import Domain
>>> from dpsynth.privacy import NoiseSource, PrivacyLedger, cdp_rho
>>> codes = np.tile([[0, 0, 0], [1, 1, 2], [1, 1, 1], [0, 0, 2]], (125, 1))  # 500 rows, b = a
>>> rho, led = cdp_rho(1.0, 1e-6), PrivacyLedger(1.0, 1e-6)
>>> one_way, edges = mst_select(codes, Domain(["a", "b", "c"], [2, 2, 3]), rho, led, NoiseSource(1))
>>> ("a", "b") in edges, len(edges), round(led.total_rho() / rho, 6)  # 1-ways and selection: 2/3 of ρ
(True, 2, 0.666667)
"""
from __future__ import annotations

from itertools import combinations
from typing import Hashable, Sequence

import numpy as np

from ..graphical import Domain
from ..privacy import NoiseSource, PrivacyLedger, exponential_mechanism
from . import Rows, as_rows
from .measure import RELATION, Measurement, measure_marginals


def pair_scores(rows: Rows | np.ndarray, domain: Domain, one_way: Sequence[Measurement],
                pairs: Sequence[tuple]) -> np.ndarray:
    """‖x_ab − x̂_ab‖₁ for each pair: true available-case 2-way table against the independence
    model of the released 1-ways (each score has sensitivity 1 under add/remove)."""
    idx = {a: j for j, a in enumerate(domain.attrs)}
    probs, totals = {}, {}
    for m in one_way:
        (a,) = m.attrs
        w = np.clip(m.noisy.astype(float), 0.0, None)
        probs[a] = w / w.sum() if w.sum() > 0 else np.full(w.shape, 1.0 / w.size)
        totals[a] = max(m.total, 1.0)
    n_hat = max(totals.values())
    out = np.empty(len(pairs))
    counts = as_rows(rows, domain.shape).tables([idx[a], idx[b]] for a, b in pairs)
    for k, ((a, b), x) in enumerate(zip(pairs, counts)):
        x = x.astype(float)
        n_ab = totals[a] * totals[b] / n_hat
        out[k] = np.abs(x - n_ab * np.outer(probs[a], probs[b])).sum()
    return out


def noise_penalty(domain: Domain, pairs: Sequence[tuple], sigma: float) -> np.ndarray:
    """√(2/π)·σ·cells for each pair: the expected L1 error of a table of that many cells measured
    with Gaussian noise of sd ``sigma`` (AIM's penalty). Public: domain sizes and σ only.

    >>> from dpsynth.graphical import Domain
    >>> noise_penalty(Domain(["a", "b", "c"], [2, 3, 40]), [("a", "b"), ("b", "c")], 10.0).round(1)
    array([ 47.9, 957.5])
    """
    cells = np.array([domain.project(p).size() for p in pairs], dtype=float)
    return np.sqrt(2.0 / np.pi) * float(sigma) * cells


def mst_select(rows: Rows | np.ndarray, domain: Domain, rho: float, ledger: PrivacyLedger, source: NoiseSource,
               forced: Sequence[Sequence[Hashable]] = (), split: tuple[float, float] = (1 / 3, 1 / 3),
               step: str = "MST", first_among: Sequence[tuple] = (),
               max_pair_cells: int | None = None,
               noise_sd: float | None = None) -> tuple[list[Measurement], list[tuple]]:
    """MST selection with total budget ``split[0]·rho`` (1-way marginals) + ``split[1]·rho`` (edge
    selection). Returns the released 1-way measurements and the 2-way cliques (forced pairs first,
    then selected edges, each as an attribute pair in domain order).

    ``first_among``: candidate pairs (e.g. an analysis' predictor pairs) over which a spanning tree
    of their columns is chosen first, each column on its own; then the usual tree joins every
    component left after the forced cliques and those edges. All rounds share ``split[1]·rho``
    equally. ``max_pair_cells``: the tree's edges are chosen among pairs of at most that many cells
    (a public limit; the caller checks that they can join every column). ``noise_sd``: the sd the
    caller will measure the chosen pairs with; each score is lowered by :func:`noise_penalty`
    (None: private-pgm's scores)."""
    attrs = list(domain.attrs)
    rows = as_rows(rows, domain.shape)
    rho_one, rho_select = split[0] * rho, split[1] * rho
    one_way = measure_marginals(rows, domain, [(a,) for a in attrs], ledger, source, f"{step}: 1-way marginals",
                                rho=rho_one)
    pos = {a: i for i, a in enumerate(attrs)}
    first_among = [tuple(sorted(p, key=pos.get)) for p in first_among]
    first_cols = sorted({a for p in first_among for a in p}, key=pos.get)
    forced = [tuple(sorted(c, key=pos.get)) for c in forced]
    # rounds: a tree over the first_among columns (less what forced cliques link), then over the
    # components left after forced + that tree
    tree = _Components(first_cols)
    for c in forced:  # predictors a forced clique already links (e.g. an interaction's triple)
        tree.join_all([a for a in c if a in tree.root])
    rounds_first = tree.count() - 1 if first_cols else 0
    comps = _Components(attrs)
    for c in forced:
        comps.join_all(c)
    comps.join_all(first_cols)  # the first tree will connect them
    r = comps.count()
    n_rounds = rounds_first + max(r - 1, 0)
    cliques = list(forced)
    if n_rounds:
        rho_edge = rho_select / n_rounds
        scores = {}

        def pick(candidates, label):
            need = [p for p in candidates if p not in scores]
            q = pair_scores(rows, domain, one_way, need)  # penalised once per pair, with its score
            scores.update(zip(need, q if noise_sd is None else q - noise_penalty(domain, need, noise_sd)))
            k = exponential_mechanism(np.array([scores[p] for p in candidates]), rho=rho_edge, sensitivity=1.0,
                                      ledger=ledger, source=source, step=f"{step}: {label}", relation=RELATION,
                                      note="L1 error of the independence model" + (
                                          "" if noise_sd is None else " less the noise the table's measurement adds"))
            return candidates[k]

        for k in range(rounds_first):
            cand = [p for p in first_among if tree.find(p[0]) != tree.find(p[1])]
            if not cand:
                break
            a, b = pick(cand, f"predictor edge {k + 1} of {rounds_first}")
            tree.join(a, b)
            if not any(set((a, b)) <= set(c) for c in cliques):
                cliques.append((a, b))
        for k in range(max(r - 1, 0)):
            cand = [p for p in combinations(attrs, 2) if comps.find(p[0]) != comps.find(p[1])
                    and (max_pair_cells is None or domain.project(p).size() <= max_pair_cells)]
            a, b = pick(cand, f"edge {k + 1} of {r - 1}")
            comps.join(a, b)
            cliques.append((a, b))
    return one_way, cliques


class _Components:
    """Union–find over column names (Kruskal's bookkeeping)."""

    def __init__(self, attrs):
        self.root = {a: a for a in attrs}

    def find(self, a):
        while self.root[a] != a:
            self.root[a] = self.root[self.root[a]]
            a = self.root[a]
        return a

    def join(self, a, b):
        self.root[self.find(a)] = self.find(b)

    def join_all(self, cols):
        for a, b in zip(cols[:-1], cols[1:]):
            self.join(a, b)

    def count(self) -> int:
        return len({self.find(a) for a in self.root})
