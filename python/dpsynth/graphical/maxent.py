"""The maximum-entropy exponential family of a set of marginal queries (NAPSU-MQ's model).

Given cliques C_1..C_K on a discrete :class:`Domain`, the distribution with maximal entropy that
matches expected full marginals on the cliques is the log-linear model (Räisä et al. 2023, eq. 4)

    p(x | θ) = exp(θᵀ a(x) − A(θ)),   A(θ) = log Σ_x exp(θᵀ a(x)),

a Markov network whose factors are the cliques. The full set of cell indicators of the K marginals
is linearly dependent (each table sums to one, tables share lower-order margins), so θ would not be
identifiable. :func:`canonical_cells` keeps the *canonical* statistics (Räisä et al. 2023, Supp. C;
Abbeel et al. 2006): reference level 0 for every variable; for every non-empty subset S of a clique
and every assignment v of S with all v_i ≥ 1, the indicator [x_S = v] — re-expressed as the cells of
the first clique containing S that agree with v on S (one statistic per cell, duplicates skipped).
Every statistic is then one cell of one clique, and D = Σ_S ∏_{i∈S}(k_i − 1) over the distinct
subsets S (one clique: all cells but the all-zero cell).

A(θ), the table marginals μ and the second moments E[a aᵀ] of any measured tables come from one
batched pass of junction-tree message passing (:class:`JunctionTree`): the second moments by
*clamping*: E[a_i a_j] = P(cell i) · P(cell j | cell i), all cells i at once as a batch of evidence.

Example
-------
>>> import torch
>>> dom = Domain(["x1", "x2", "y"], [2, 2, 2])
>>> model = MaxEntModel(dom, [("x1", "x2", "y")])
>>> model.D
7
>>> theta = torch.zeros(7, dtype=torch.float64)
>>> round(float(model.log_partition(theta)), 6) == round(float(torch.log(torch.tensor(8.0))), 6)
True
"""
from __future__ import annotations

from itertools import combinations
from typing import Hashable, Sequence

import numpy as np
import torch

from .domain import Domain
from .factor import DTYPE, Factor
from .junction_tree import JunctionTree

#: log-weight that clamps a configuration away (exp(−1e4) = 0 in float64, yet finite, so that
#: log-sum-exp gradients stay finite where a whole slice is clamped away)
CLAMP = -1.0e4


def maximal_cliques(cliques: Sequence[Sequence[Hashable]]) -> list[tuple]:
    """The sets in ``cliques`` not contained in another one (first occurrence, order kept)."""
    sets = [tuple(c) for c in cliques]
    out = []
    for i, c in enumerate(sets):
        if any(set(c) < set(o) or (set(c) == set(o) and j < i) for j, o in enumerate(sets)):
            continue
        out.append(c)
    return out


def canonical_cells(domain: Domain, cliques: Sequence[Sequence[Hashable]]) -> list[np.ndarray]:
    """For each clique, the flat indices (C order over the clique's attributes) of its canonical
    cells: cells whose non-zero coordinates contain a subset S that this clique is the first to
    contain (see module docstring)."""
    cliques = [tuple(c) for c in cliques]
    owner = {}
    for k, c in enumerate(cliques):
        for r in range(1, len(c) + 1):
            for s in combinations(c, r):
                owner.setdefault(frozenset(s), k)
    out = []
    for k, c in enumerate(cliques):
        shape = domain.project(c).shape
        nonzero = np.indices(shape).reshape(len(c), -1) != 0
        keep = np.zeros(nonzero.shape[1], dtype=bool)
        for s, j in owner.items():
            if j == k:
                keep |= nonzero[[c.index(a) for a in s]].all(axis=0)
        out.append(np.flatnonzero(keep))
    return out


class MaxEntModel:
    """Max-ent log-linear model on ``cliques`` with canonical parameters θ ∈ R^D; ``tables`` are the
    marginal tables whose moments are needed (default: the cliques); each must lie inside a clique.

    Attributes: ``cliques`` (maximal query sets), ``canonical`` (per clique, flat canonical cells),
    ``D``, ``tables``, ``table_sizes``, ``P`` (total cells over ``tables``), ``jt``.
    """

    def __init__(self, domain: Domain, cliques: Sequence[Sequence[Hashable]],
                 tables: Sequence[Sequence[Hashable]] | None = None):
        self.domain = domain
        self.cliques = maximal_cliques(cliques)
        if not self.cliques:
            raise ValueError("a max-ent model needs at least one clique")
        covered = set().union(*map(set, self.cliques))
        uncovered = [a for a in domain.attrs if a not in covered]
        if uncovered:
            raise ValueError(f"attributes {uncovered} are in no query; add a 1-way query for each "
                             "(e.g. ('col',)) or drop them from the data")
        self.canonical = canonical_cells(domain, self.cliques)
        self.D = int(sum(len(c) for c in self.canonical))
        self.tables = [tuple(t) for t in (tables if tables is not None else self.cliques)]
        for t in self.tables:
            if not any(set(t) <= set(c) for c in self.cliques):
                raise ValueError(f"table {t} is not inside a query clique")
        self.table_sizes = [domain.project(t).size() for t in self.tables]
        self.P = int(sum(self.table_sizes))
        self.jt = JunctionTree(domain, self.cliques + self.tables)
        # θ → clique log-potentials: gather from [θ, 0] (non-canonical cells read the 0)
        self._gather = []
        start = 0
        for c, cells in zip(self.cliques, self.canonical):
            idx = np.full(domain.project(c).size(), self.D, dtype=np.int64)
            idx[cells] = np.arange(start, start + len(cells))
            start += len(cells)
            self._gather.append(torch.as_tensor(idx))
        # position of each canonical statistic among the concatenated table cells (the clique's
        # own table), so that Cov(a_cells, a_canonical) is a column selection of the table moments
        offsets = np.cumsum([0] + self.table_sizes)
        where = {t: offsets[k] for k, t in enumerate(self.tables)}
        self.canonical_index = None
        if all(c in where for c in self.cliques):
            self.canonical_index = torch.as_tensor(np.concatenate(
                [where[c] + cells for c, cells in zip(self.cliques, self.canonical)]))

    # ------------------------------------------------------------------ parameters → factors
    def potentials(self, theta: torch.Tensor, extra_batch: int = 0) -> list[Factor]:
        """Clique log-potentials ψ_k(x_{C_k}) = θ at the canonical cells, 0 elsewhere; ``theta`` has
        shape (*batch, D); ``extra_batch`` trailing singleton batch axes are appended."""
        theta = torch.as_tensor(theta, dtype=DTYPE)
        if theta.shape[-1] != self.D:
            raise ValueError(f"theta must have last dimension D = {self.D}, got shape {tuple(theta.shape)}")
        batch = tuple(theta.shape[:-1])
        padded = torch.cat([theta, theta.new_zeros(batch + (1,))], dim=-1)
        out = []
        for c, idx in zip(self.cliques, self._gather):
            dom = self.domain.project(c)
            out.append(Factor(dom, padded[..., idx].reshape(batch + (1,) * extra_batch + dom.shape)))
        return out

    def _factors(self, theta, evidence=None, extra_batch=0):
        f = self.potentials(theta, extra_batch)
        if evidence is None:
            evidence = [Factor.zeros(self.domain.project(t)) for t in self.tables]
        return f + list(evidence)

    # ------------------------------------------------------------------ quantities
    def log_partition(self, theta: torch.Tensor) -> torch.Tensor:
        """A(θ) (batch shape of ``theta`` minus its last axis)."""
        return self.jt.log_partition(self._factors(theta))

    def table_marginals(self, theta: torch.Tensor) -> torch.Tensor:
        """μ: the probabilities of every cell of every table, concatenated (…, P)."""
        beliefs, _ = self.jt.calibrate(self._factors(theta))
        return self._stack(beliefs)

    def marginal(self, theta: torch.Tensor, attrs: Sequence[Hashable]) -> torch.Tensor:
        """Probabilities of the marginal on ``attrs`` (which must lie in one clique), flat (…, cells)."""
        beliefs, _ = self.jt.calibrate(self._factors(theta))
        m = self.jt.marginal(beliefs, attrs)
        return m.values.exp().reshape(m.batch_shape + (-1,))

    def _stack(self, beliefs):
        parts = []
        for t in self.tables:
            m = self.jt.marginal(beliefs, t)
            parts.append(m.values.exp().reshape(m.batch_shape + (-1,)))
        return torch.cat(parts, dim=-1)

    def clamp_evidence(self) -> list[Factor]:
        """Evidence factors with batch (P + 1,): row 0 free, row 1 + i keeps only cell i."""
        cache = self.__dict__.setdefault("_evidence_cache", {})
        if "clamp" not in cache:
            ev, start = [], 1
            for t, k in zip(self.tables, self.table_sizes):
                dom = self.domain.project(t)
                v = torch.zeros((self.P + 1, k), dtype=DTYPE)
                v[start:start + k] = CLAMP
                v[start:start + k].fill_diagonal_(0.0)
                start += k
                ev.append(Factor(dom, v.reshape((self.P + 1,) + dom.shape)))
            cache["clamp"] = ev
        return cache["clamp"]

    def moments(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(μ, M): cell probabilities (…, P) and second moments M_ij = E[a_i a_j] = P(cell i and
        cell j) (…, P, P) of the measured tables' cell indicators, by clamping every cell in one
        batched calibration. Cov = M − μμᵀ. Differentiable in θ."""
        beliefs, log_z = self.jt.calibrate(self._factors(theta, self.clamp_evidence(), extra_batch=1))
        cond = self._stack(beliefs)                       # (…, P+1, P): row 1+i = P(· | cell i)
        mu = cond[..., 0, :]
        p_i = torch.exp(log_z[..., 1:] - log_z[..., :1])  # = μ_i, as a normaliser ratio
        m = p_i.unsqueeze(-1) * cond[..., 1:, :]
        return mu, 0.5 * (m + m.transpose(-1, -2))

    # ------------------------------------------------------------------ canonical moments, linear space
    def _flat_plan(self) -> dict:
        """Constant matrices of the flat, linear-space message passing in :meth:`canonical_moments`:
        per junction-tree clique i (cells flattened in C order), the evidence ``mask[i]``
        (D + 1, n_i) of clamping each canonical statistic (row 0 free), ``to_sep[i]`` (n_i, n_s)
        summing a clique table onto its separator with the parent, ``parent_to_sep[i]`` (n_p, n_s)
        the same from the parent's side, and ``lift`` (D, Σ n_i) from θ to the log-potentials of
        all cliques at once. Sums and broadcasts become
        products with small 0/1 matrices, which BLAS does far faster than strided broadcasting."""
        cache = self.__dict__.setdefault("_evidence_cache", {})
        if "flat_plan" in cache:
            return cache["flat_plan"]
        jt = self.jt
        k = len(jt.cliques)

        def index_of(cdom, attrs):
            """Flat index, in the projection of cdom onto attrs (in attrs' order), of every cell of cdom."""
            grid = np.indices(cdom.shape).reshape(len(cdom), -1)
            if not attrs:
                return np.zeros(grid.shape[1], dtype=np.int64), 1
            sub = [grid[cdom.attrs.index(a)] for a in attrs]
            shape = [cdom.size(a) for a in attrs]
            return np.ravel_multi_index(sub, shape), int(np.prod(shape))

        def onehot(idx, width):
            m = torch.zeros((idx.size, width), dtype=DTYPE)
            m[np.arange(idx.size), idx] = 1.0
            return m

        to_sep, parent_to_sep = [None] * k, [None] * k
        for i in range(k):
            if jt.parent[i] >= 0:
                sep = list(jt.separators[i])
                idx, width = index_of(jt.clique_domain(i), sep)
                to_sep[i] = onehot(idx, width)
                pidx, _ = index_of(jt.clique_domain(jt.parent[i]), sep)
                parent_to_sep[i] = onehot(pidx, width)
        # lift: θ → every clique's log-potential (flat, cliques concatenated) in one product; its
        # rows are also the cells whose sum is each canonical statistic, so beliefs @ liftᵀ gives
        # the statistics' probabilities; mask[i][1 + j] clamps statistic j's cells
        sizes = [jt.clique_domain(i).size() for i in range(k)]
        start = np.cumsum([0] + sizes)
        lift = torch.zeros((self.D, int(start[-1])), dtype=DTYPE)
        masks = [torch.ones((self.D + 1, n), dtype=DTYPE) for n in sizes]
        row = 0
        for q, (c, cells) in enumerate(zip(self.cliques, self.canonical)):
            i = jt.assignment[q]
            idx, _ = index_of(jt.clique_domain(i), list(c))
            for j, cell in enumerate(cells):
                hit = torch.as_tensor(idx == cell, dtype=DTYPE)
                masks[i][1 + row + j] = hit
                lift[row + j, start[i]:start[i + 1]] = hit
            row += len(cells)
        # (a statistic's probability is the sum of the same cells of the clique that holds it)
        plan = {"mask": masks, "to_sep": to_sep, "parent_to_sep": parent_to_sep,
                "lift": lift, "sizes": sizes, "collect": lift.T.contiguous()}
        cache["flat_plan"] = plan
        return plan

    def canonical_moments(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(μ_D, M_D): means (…, D) and second moments (…, D, D) of the canonical statistics
        (Σ_D = ∇²A = M_D − μμᵀ), by clamping each canonical cell in a batched two-pass
        sum-product in *linear* space on flattened clique tables (:meth:`_flat_pass`). The same
        numbers as :meth:`moments` restricted to :attr:`canonical_index`, clamping D cells instead
        of P, several times faster, and differentiable in θ."""
        log_z, cond_can = self._flat_pass(theta, clamp=True)          # (…, D + 1), (…, D + 1, D)
        mu = cond_can[..., 0, :]
        p_j = torch.exp(log_z[..., 1:] - log_z[..., :1])
        m2 = p_j.unsqueeze(-1) * cond_can[..., 1:, :]
        return mu, 0.5 * (m2 + m2.transpose(-1, -2))

    def canonical_means(self, theta: torch.Tensor) -> torch.Tensor:
        """μ_D = E[a_D] (…, D), the means of the canonical statistics: one unclamped linear-space
        pass (:meth:`_flat_pass`), an order of magnitude cheaper than :meth:`table_marginals` for
        small cliques (a few dozen small matrix products instead of hundreds of broadcast ops)."""
        return self._flat_pass(theta, clamp=False)[1][..., 0, :]

    def _flat_pass(self, theta: torch.Tensor, clamp: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Two-pass sum-product in linear space on flattened clique tables: each clique's
        potential is shifted by its maximum and every message renormalised, so nothing
        overflows. With ``clamp`` the batch gains an axis of D + 1 pieces of evidence (row 0
        free, row 1 + j keeps only canonical cell j); without it, that axis has length 1.
        Returns (log Z (…, R), P(canonical statistics | evidence) (…, R, D))."""
        jt = self.jt
        plan = self._flat_plan()
        theta = torch.as_tensor(theta, dtype=DTYPE)
        batch = tuple(theta.shape[:-1])
        if theta.shape[-1] != self.D:
            raise ValueError(f"theta must have last dimension D = {self.D}, got shape {tuple(theta.shape)}")
        flat = (theta @ plan["lift"]).unsqueeze(-2)                  # (…, 1, cells of all cliques)
        pots, shift = [], 0.0
        for v, mk in zip(torch.split(flat, plan["sizes"], dim=-1), plan["mask"]):
            top = v.amax(dim=-1, keepdim=True)
            pots.append(torch.exp(v - top) * mk if clamp else torch.exp(v - top))   # (…, R, n_i)
            shift = shift + top[..., 0]
        k = len(jt.cliques)
        up, log_scale = [None] * k, 0.0
        for i in reversed(jt.bfs):
            b = pots[i]
            for c in jt.children[i]:
                b = b * (up[c] @ plan["parent_to_sep"][c].T)
            if jt.parent[i] >= 0:
                m = b @ plan["to_sep"][i]
                norm = m.sum(-1, keepdim=True)
                up[i] = m / norm
                log_scale = log_scale + torch.log(norm[..., 0])
            else:
                total = b.sum(-1)
        log_z = log_scale + torch.log(total) + shift                 # (…, R)
        down, belief = [None] * k, [None] * k
        for i in jt.bfs:
            base = pots[i] if down[i] is None else pots[i] * (down[i] @ plan["to_sep"][i].T)
            incoming = {c: up[c] @ plan["parent_to_sep"][c].T for c in jt.children[i]}
            full = base
            for c in jt.children[i]:
                full = full * incoming[c]
            for c in jt.children[i]:
                m = base
                for o in jt.children[i]:
                    if o != c:
                        m = m * incoming[o]
                msg = m @ plan["parent_to_sep"][c]
                down[c] = msg / msg.sum(-1, keepdim=True)
            belief[i] = full / full.sum(-1, keepdim=True)
        return log_z, torch.cat(belief, dim=-1) @ plan["collect"]

    def sample(self, theta: torch.Tensor, n: int, rng: np.random.Generator) -> np.ndarray:
        """Codes (m, n, d) in domain order: n rows from each of the m parameter vectors in
        ``theta`` (m, D), one pass of forward sampling through the junction tree."""
        theta = torch.as_tensor(theta, dtype=DTYPE)
        squeeze = theta.dim() == 1
        theta = theta.reshape(-1, self.D)
        with torch.no_grad():
            beliefs, _ = self.jt.calibrate(self._factors(theta))
            beliefs = [Factor(b.domain, b.values.expand((theta.shape[0],) + b.domain.shape)) for b in beliefs]
        codes = self.jt.sample(beliefs, n, rng)
        return codes[0] if squeeze else codes

    def complete(self, theta: torch.Tensor, codes: np.ndarray, missing_level: dict, rng: np.random.Generator,
                 sweeps: int = 5, shift: dict | None = None) -> np.ndarray:
        """Fill in the cells of ``codes`` (m, n, d; one dataset per row of ``theta`` (m, D)) that
        hold a column's *missing level* (``missing_level``: column → that level) by draws from the
        model's conditional given the rest of the row, with the missing level excluded:
        p(x_j | x_−j, x_j observed) ∝ exp(Σ_{C ∋ j} ψ_C(x_C)), the Markov-blanket conditional. This
        is the MAR identification (Rubin 1976): among rows alike in their other values, a missing
        x_j follows the distribution of the observed ones. Rows missing several columns get
        ``sweeps`` Gibbs sweeps over their missing cells (one draw per sweep; rows missing one
        column are exact after the first). ``shift``: column → δ added per level index to the
        log-odds of a filled-in value (the δ-adjustment of NARFCS sensitivity analysis, van
        Buuren 2018, §3.8; 0 is MAR). Returns a new array.

        >>> dom = Domain(["x", "y"], [3, 2])  # level 2 of x stands for "missing"
        >>> model = MaxEntModel(dom, [("x", "y")])
        >>> codes = np.array([[[2, 0], [0, 1]]])
        >>> out = model.complete(torch.zeros((1, model.D)), codes, {"x": 2}, np.random.default_rng(0))
        >>> int(out[0, 0, 0]) in (0, 1), out[0, 1].tolist()
        (True, [0, 1])
        """
        theta = torch.as_tensor(theta, dtype=DTYPE).reshape(-1, self.D)
        codes = np.array(codes, dtype=np.int64, copy=True)
        if codes.ndim != 3 or codes.shape[0] != theta.shape[0] or codes.shape[2] != len(self.domain):
            raise ValueError("codes must have shape (m, n, d) with one dataset per row of theta")
        with torch.no_grad():
            pots = [f.values.numpy() for f in self.potentials(theta)]        # (m, *clique shape)
        col = {a: j for j, a in enumerate(self.domain.attrs)}
        holes = {a: codes[:, :, col[a]] == level for a, level in missing_level.items()}
        shift = shift or {}
        several = bool(holes) and np.stack(list(holes.values()), axis=-1).sum(axis=-1).max(initial=0) > 1
        for _ in range(sweeps if several else 1):  # one missing column per row: the first sweep is exact
            for a, level in missing_level.items():
                b, r = np.nonzero(holes[a])
                if b.size == 0:
                    continue
                k = self.domain.size(a)
                logits = np.zeros((b.size, k))
                for c, v in zip(self.cliques, pots):
                    if a not in c:
                        continue
                    v = np.moveaxis(v, 1 + c.index(a), -1)                     # (m, …others, k)
                    logits += v[(b, *(codes[b, r, col[o]] for o in c if o != a))]
                logits[:, level] = -np.inf
                logits += float(shift.get(a, 0.0)) * np.arange(k)
                p = np.exp(logits - logits.max(axis=1, keepdims=True))
                p /= p.sum(axis=1, keepdims=True)
                u = rng.random(b.size)[:, None]
                codes[b, r, col[a]] = np.minimum((p.cumsum(axis=1) < u).sum(axis=1), k - 1)
        return codes

    def __repr__(self) -> str:
        return f"MaxEntModel({len(self.cliques)} cliques, D = {self.D}, {len(self.tables)} tables, {self.jt})"
