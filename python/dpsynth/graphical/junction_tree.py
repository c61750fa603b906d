"""Junction tree: exact log-partition, marginals and sampling for a product of log-factors.

For p(x) ∝ exp(Σ_f ψ_f(x_{S_f})) on a discrete :class:`Domain` (Koller & Friedman 2009, ch. 9–10):

1. **Elimination order** by greedy min-fill (ties: smallest new clique in cells); eliminating the
   variables in that order triangulates the interaction graph, and the maximal elimination cliques
   are the junction-tree cliques. Cost is exponential in the tree-width only.
2. **Tree**: a maximum-weight spanning tree over the cliques with weight |C_i ∩ C_j| (running
   intersection holds for triangulated graphs); disconnected parts are joined by empty separators.
   It is rooted at a centre (a clique of least eccentricity), so that it has as few levels as possible.
3. **Message passing** in log space (sum-product; log-sum-exp per message): the upward pass gives
   A = log Σ_x exp(Σ_f ψ_f) at the root; the downward pass calibrates every clique, giving all
   clique marginals. Torch ops only, so μ = ∇A and Σ = ∇²A follow by autograd, and leading batch
   dimensions run many parameter vectors / pieces of evidence in one pass.
4. **Sampling** (forward sampling on the tree): the root clique from its marginal, then each
   child's new variables from p(x_{C∖S} | x_S) = p(x_C)/p(x_S), vectorised over rows and over a
   batch of models (one pass through the tree for m parameter draws).

Example
-------
>>> import torch
>>> dom = Domain(["a", "b", "c"], [2, 2, 2])
>>> jt = JunctionTree(dom, [("a", "b"), ("b", "c")])
>>> jt.cliques
[('a', 'b'), ('b', 'c')]
>>> f = [Factor.zeros(dom.project(["a", "b"])), Factor.zeros(dom.project(["b", "c"]))]
>>> round(float(jt.log_partition(f).exp()), 6)
8.0
"""
from __future__ import annotations

from itertools import combinations
from typing import Hashable, Sequence

import numpy as np
import torch

from .domain import Domain
from .factor import Factor


def greedy_elimination_order(domain: Domain, scopes: Sequence[Sequence[Hashable]]):
    """Greedy min-fill elimination order; returns (order, elimination cliques)."""
    nbrs = {a: set() for a in domain.attrs}
    for s in scopes:
        for a, b in combinations(s, 2):
            nbrs[a].add(b)
            nbrs[b].add(a)
    order, cliques = [], []
    left = set(domain.attrs)
    while left:
        def cost(v):
            nb = nbrs[v] & left
            fill = sum(1 for a, b in combinations(nb, 2) if b not in nbrs[a])
            cells = domain.size(v)
            for a in nb:
                cells *= domain.size(a)
            return fill, cells, domain.attrs.index(v)

        v = min(left, key=cost)
        nb = nbrs[v] & left
        for a, b in combinations(nb, 2):
            nbrs[a].add(b)
            nbrs[b].add(a)
        order.append(v)
        cliques.append({v} | nb)
        left.remove(v)
    return order, cliques


class JunctionTree:
    """Junction tree for factors with scopes ``scopes`` on ``domain`` (see module docstring).

    Attributes: ``cliques`` (tuples of attributes, in domain order), ``parent`` (index or -1),
    ``bfs`` (root-first visiting order), ``separators[i]`` (attributes shared with the parent),
    ``assignment[k]`` (clique that holds the k-th scope).
    """

    def __init__(self, domain: Domain, scopes: Sequence[Sequence[Hashable]]):
        self.domain = domain
        self.scopes = [tuple(s) for s in scopes]
        for s in self.scopes:
            if not domain.contains(s):
                raise ValueError(f"scope {s} is not inside {domain}")
        self.order, elim = greedy_elimination_order(domain, self.scopes)
        maximal = []
        for c in sorted(elim, key=len, reverse=True):
            if not any(c <= m for m in maximal):
                maximal.append(c)
        pos = {a: i for i, a in enumerate(domain.attrs)}
        maximal.sort(key=lambda c: sorted(pos[a] for a in c))
        self.cliques = [tuple(sorted(c, key=pos.get)) for c in maximal]
        self._build_tree()
        self.assignment = []
        for s in self.scopes:
            self.assignment.append(next(i for i, c in enumerate(self.cliques) if set(s) <= set(c)))

    def _build_tree(self):
        k = len(self.cliques)
        pairs = sorted(((len(set(self.cliques[i]) & set(self.cliques[j])), i, j)
                        for i, j in combinations(range(k), 2)), key=lambda t: (-t[0], t[1], t[2]))
        root = list(range(k))

        def find(i):
            while root[i] != i:
                root[i] = root[root[i]]
                i = root[i]
            return i

        adj = {i: [] for i in range(k)}
        for _, i, j in pairs:
            ri, rj = find(i), find(j)
            if ri != rj:
                root[ri] = rj
                adj[i].append(j)
                adj[j].append(i)
        # rooted at a centre (least eccentricity): a shallow tree has fewer levels, and the batched
        # message passing of MaxEntModel._level_pass costs a fixed number of operations per level
        root_at = min(range(k), key=lambda i: (self._eccentricity(adj, i), i))
        self.parent = [-1] * k
        self.children = [[] for _ in range(k)]
        self.bfs = [root_at]
        seen = {root_at}
        for i in self.bfs:
            for j in sorted(adj[i]):
                if j not in seen:
                    seen.add(j)
                    self.parent[j] = i
                    self.children[i].append(j)
                    self.bfs.append(j)
        self.separators = [tuple(a for a in self.cliques[i] if self.parent[i] >= 0 and a in self.cliques[self.parent[i]])
                           for i in range(k)]

    @staticmethod
    def _eccentricity(adj: dict, start: int) -> int:
        """The largest number of edges from ``start`` to any clique of the tree ``adj``."""
        dist, queue = {start: 0}, [start]
        for i in queue:
            for j in adj[i]:
                if j not in dist:
                    dist[j] = dist[i] + 1
                    queue.append(j)
        return max(dist.values())

    @property
    def width(self) -> int:
        """Tree-width + 1: the largest clique (in variables)."""
        return max(len(c) for c in self.cliques)

    def clique_domain(self, i: int) -> Domain:
        return self.domain.project(self.cliques[i])

    def size(self) -> int:
        """Total number of cells over the cliques (memory of one calibrated tree)."""
        return sum(self.clique_domain(i).size() for i in range(len(self.cliques)))

    # ------------------------------------------------------------------ message passing
    def potentials(self, factors: Sequence[Factor]) -> list[Factor]:
        """Clique log-potentials: each factor added to the clique holding its scope (factors must
        come in the order of ``scopes``)."""
        if len(factors) != len(self.scopes):
            raise ValueError(f"expected {len(self.scopes)} factors (one per scope), got {len(factors)}")
        pots = [None] * len(self.cliques)
        for f, i in zip(factors, self.assignment):
            pots[i] = f if pots[i] is None else pots[i] + f
        out = []
        for i, p in enumerate(pots):
            dom = self.clique_domain(i)
            if p is None:
                out.append(Factor.zeros(dom))
            else:
                out.append(p if p.domain == dom else p.expand(dom))
        return out

    def _upward(self, pots):
        up = [None] * len(self.cliques)
        for i in reversed(self.bfs):
            b = pots[i]
            for c in self.children[i]:
                b = b + up[c]
            if self.parent[i] >= 0:
                up[i] = b.project(self.separators[i])
            else:
                up[i] = b
        return up

    def log_partition(self, factors: Sequence[Factor]) -> torch.Tensor:
        """A = log Σ_x exp(Σ_f ψ_f(x)) (a tensor of the batch shape)."""
        pots = self.potentials(factors)
        return self._upward(pots)[self.bfs[0]].logsumexp()

    def calibrate(self, factors: Sequence[Factor]) -> tuple[list[Factor], torch.Tensor]:
        """Two-pass sum-product: normalised log-marginals of every clique, and A."""
        pots = self.potentials(factors)
        up = self._upward(pots)
        root = self.bfs[0]
        log_z = up[root].logsumexp()
        down = [None] * len(self.cliques)
        beliefs = [None] * len(self.cliques)
        for i in self.bfs:
            base = pots[i] if down[i] is None else pots[i] + down[i]
            kids = self.children[i]
            for c in kids:  # message to c: everything at i except what came from c (no division)
                m = base
                for o in kids:
                    if o != c:
                        m = m + up[o]
                down[c] = m.project(self.separators[c])
            b = base
            for c in kids:
                b = b + up[c]
            beliefs[i] = b
        beliefs = [Factor(b.domain, b.values - log_z.reshape(log_z.shape + (1,) * len(b.domain)))
                   for b in beliefs]
        return beliefs, log_z

    def marginal(self, beliefs: Sequence[Factor], attrs: Sequence[Hashable]) -> Factor:
        """Log-marginal on ``attrs`` (which must lie in one clique) from calibrated beliefs."""
        for i, c in enumerate(self.cliques):
            if set(attrs) <= set(c):
                return beliefs[i].project(attrs)
        raise ValueError(f"{tuple(attrs)} is not inside one clique of this junction tree; add it as a scope")

    # ------------------------------------------------------------------ sampling
    def sample(self, beliefs: Sequence[Factor], n: int, rng: np.random.Generator) -> np.ndarray:
        """Forward-sample ``n`` rows from each model in the batch of calibrated ``beliefs``
        (batch shape (m,) or ()). Returns int64 codes of shape (m, n, d) (or (n, d)), columns in
        domain order."""
        batch = beliefs[0].batch_shape
        if len(batch) > 1:
            raise ValueError("sample() takes beliefs with at most one batch dimension")
        m = batch[0] if batch else 1
        codes = np.zeros((m, n, len(self.domain)), dtype=np.int64)
        col = {a: j for j, a in enumerate(self.domain.attrs)}
        for i in self.bfs:
            dom = self.clique_domain(i)
            sep = list(self.separators[i])
            new = [a for a in dom.attrs if a not in sep]
            if not new:
                continue
            probs = beliefs[i].project(sep + new).values.detach().exp().cpu().numpy()
            s_size = int(np.prod([dom.size(a) for a in sep], dtype=np.int64)) if sep else 1
            k = int(np.prod([dom.size(a) for a in new], dtype=np.int64))
            cond = probs.reshape(m, s_size, k)
            group = np.broadcast_to(np.arange(m)[:, None] * s_size, (m, n))
            if sep:
                group = group + np.ravel_multi_index(tuple(codes[:, :, col[a]] for a in sep),
                                                     [dom.size(a) for a in sep])
            flat = _categorical(cond.reshape(m * s_size, k), group.reshape(-1), rng)
            vals = np.unravel_index(flat, [dom.size(a) for a in new])
            for a, v in zip(new, vals):
                codes[:, :, col[a]] = v.reshape(m, n)
        return codes if batch else codes[0]

    def __repr__(self) -> str:
        return f"JunctionTree({len(self.cliques)} cliques, width {self.width}, {self.size()} cells)"


def _categorical(probs: np.ndarray, group: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One category per entry of ``group`` from the row ``probs[group]`` (rows need not be
    normalised), by inverse-CDF on all rows at once: row g's CDF is shifted by g, so a single
    sorted array serves every row."""
    g, k = probs.shape
    w = np.clip(probs, 0.0, None)
    tot = w.sum(axis=1, keepdims=True)
    w = np.where(tot > 0, w / np.where(tot > 0, tot, 1.0), 1.0 / k)  # unreachable rows: uniform
    cdf = np.cumsum(w, axis=1)
    cdf[:, -1] = 1.0
    flat = (cdf + np.arange(g)[:, None]).ravel()
    q = group + rng.random(group.shape[0])
    pos = np.searchsorted(flat, q, side="right")
    return np.clip(pos - group * k, 0, k - 1)
