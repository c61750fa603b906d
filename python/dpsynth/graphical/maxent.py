"""The maximum-entropy exponential family of a set of marginal queries (NAPSU-MQ's model).

Given cliques C_1..C_K on a discrete :class:`Domain`, the distribution with maximal entropy that
matches expected full marginals on the cliques is the log-linear model (Räisä et al. 2023, eq. 4)

    p(x | θ) = exp(θᵀ a(x) − A(θ)),   A(θ) = log Σ_x exp(θᵀ a(x)),

a Markov network whose factors are the cliques. The full set of cell indicators of the K marginals
is linearly dependent (each table sums to one, tables share lower-order margins), so θ would not be
identifiable. :func:`canonical_cells` keeps the *canonical* statistics (Räisä et al. 2023, Supp. C;
Abbeel et al. 2006): a reference level r_i for every variable (level 0 unless ``reference`` says
otherwise); for every non-empty subset S of a clique and every assignment v of S with all v_i ≠ r_i,
the indicator [x_S = v] — re-expressed as the cells of the first clique containing S that agree with
v on S (one statistic per cell, duplicates skipped). Every statistic is then one cell of one clique,
and D = Σ_S ∏_{i∈S}(k_i − 1) over the distinct subsets S (one clique: all cells but the reference
cell). The references change the coordinates, not the family (:mod:`dpsynth.graphical.reference`).

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

from .domain import Domain, cell_index, maximal_cliques  # noqa: F401 (re-exported)
from .factor import DTYPE, Factor
from .reference import check_reference
from .junction_tree import JunctionTree
from .level_pass import level_pass
from .sparse_map import SparseMap

#: log-weight that clamps a configuration away (exp(−1e4) = 0 in float64, yet finite, so that
#: log-sum-exp gradients stay finite where a whole slice is clamped away)
CLAMP = -1.0e4


def canonical_cells(domain: Domain, cliques: Sequence[Sequence[Hashable]],
                    reference: dict | None = None) -> list[np.ndarray]:
    """For each clique, the flat indices (C order over the clique's attributes) of its canonical
    cells: cells whose coordinates off their reference level (``reference``: attribute → level,
    0 where absent) contain a subset S that this clique is the first to contain (see module
    docstring).

    >>> dom = Domain(["a", "b"], [2, 3])
    >>> [c.tolist() for c in canonical_cells(dom, [("a", "b")])]   # all cells but (0, 0)
    [[1, 2, 3, 4, 5]]
    >>> [c.tolist() for c in canonical_cells(dom, [("a", "b")], {"b": 2})]  # all but (0, 2)
    [[0, 1, 3, 4, 5]]
    """
    cliques = [tuple(c) for c in cliques]
    reference = reference or {}
    owner = {}
    for k, c in enumerate(cliques):
        for r in range(1, len(c) + 1):
            for s in combinations(c, r):
                owner.setdefault(frozenset(s), k)
    out = []
    for k, c in enumerate(cliques):
        shape = domain.project(c).shape
        levels = np.array([reference.get(a, 0) for a in c])[:, None]
        nonzero = np.indices(shape).reshape(len(c), -1) != levels
        keep = np.zeros(nonzero.shape[1], dtype=bool)
        for s, j in owner.items():
            if j == k:
                keep |= nonzero[[c.index(a) for a in s]].all(axis=0)
        out.append(np.flatnonzero(keep))
    return out


class MaxEntModel:
    """Max-ent log-linear model on ``cliques`` with canonical parameters θ ∈ R^D; ``tables`` are the
    marginal tables whose moments are needed (default: the cliques); each must lie inside a clique.

    ``reference``: attribute → reference level of the canonical statistics (:func:`canonical_cells`;
    0 where absent).

    Attributes: ``cliques`` (maximal query sets), ``canonical`` (per clique, flat canonical cells),
    ``reference``, ``D``, ``tables``, ``table_sizes``, ``P`` (total cells over ``tables``), ``jt``.
    """

    def __init__(self, domain: Domain, cliques: Sequence[Sequence[Hashable]],
                 tables: Sequence[Sequence[Hashable]] | None = None, reference: dict | None = None):
        self.domain = domain
        self.reference = check_reference(domain, reference)
        self.cliques = maximal_cliques(cliques)
        if not self.cliques:
            raise ValueError("a max-ent model needs at least one clique")
        covered = set().union(*map(set, self.cliques))
        uncovered = [a for a in domain.attrs if a not in covered]
        if uncovered:
            raise ValueError(f"attributes {uncovered} are in no query; add a 1-way query for each "
                             "(e.g. ('col',)) or drop them from the data")
        self.canonical = canonical_cells(domain, self.cliques, self.reference)
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

    def cell_map(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, c): every released cell indicator as a fixed integer combination of the canonical
        statistics, a_P(x) = B a_D(x) + c (inclusion–exclusion; independent of θ). Read off the
        moments at θ = 0 (full support): Cov(a_P, a_D) = B Σ_D, so B = Cov(a_P, a_D) Σ_D⁻¹,
        rounded and checked."""
        can = self.canonical_index
        if can is None:
            raise ValueError("every clique must be among the released tables")
        with torch.no_grad():
            mu, second = self.moments(torch.zeros(self.D, dtype=DTYPE))
            cov = second - mu[:, None] * mu[None, :]
            b = torch.linalg.solve(cov[can][:, can], cov[:, can].T).T
            b_int = torch.round(b)
            c = mu - b_int @ mu[can]
        if float((b - b_int).abs().max()) > 1e-6 or float((c - torch.round(c)).abs().max()) > 1e-6:
            raise RuntimeError("released cells are not integer combinations of the canonical statistics")
        return b_int, torch.round(c)

    # ------------------------------------------------------------------ canonical moments, linear space
    def _flat_plan(self) -> dict:
        """Constant matrices of the flat, linear-space message passing in :meth:`canonical_moments`:
        per junction-tree clique i (cells flattened in C order), the evidence ``mask[i]``
        (D + 1, n_i) of clamping each canonical statistic (row 0 free), ``to_sep[i]`` (n_i) the
        index of each cell's projection onto the separator with the parent (``sep_size[i]``
        cells), ``parent_to_sep[i]`` (n_p) the same from the parent's side, ``lift`` (D, Σ n_i)
        from θ to the log-potentials of all cliques at once, and ``collect`` (Σ n_i, D) from
        clique beliefs to the statistics' probabilities (:meth:`_statistic_hits` says which cells
        are which). Messages are gathers and scatter-adds along these indices (linear in the
        cells; products with 0/1 matrices cost cells × separator cells, which dominated at 2,000
        tree cells)."""
        cache = self.__dict__.setdefault("_evidence_cache", {})
        if "flat_plan" in cache:
            return cache["flat_plan"]
        jt = self.jt
        k = len(jt.cliques)
        to_sep, parent_to_sep, sep_size = [None] * k, [None] * k, [None] * k
        for i in range(k):
            if jt.parent[i] >= 0:
                sep = list(jt.separators[i])
                idx, sep_size[i] = cell_index(jt.clique_domain(i), sep)
                to_sep[i] = torch.as_tensor(idx)
                parent_to_sep[i] = torch.as_tensor(cell_index(jt.clique_domain(jt.parent[i]), sep)[0])
        sizes = [jt.clique_domain(i).size() for i in range(k)]
        start = np.cumsum([0] + sizes)
        lift = torch.zeros((self.D, int(start[-1])), dtype=DTYPE)
        collect = torch.zeros((int(start[-1]), self.D), dtype=DTYPE)
        masks = [torch.ones((self.D + 1, n), dtype=DTYPE) for n in sizes]
        row = 0
        for q, (c, cells) in enumerate(zip(self.cliques, self.canonical)):
            i = self._home(q)
            feature, event = (torch.as_tensor(h, dtype=DTYPE) for h in self._statistic_hits(i, c, cells))
            rows = slice(row, row + len(cells))
            lift[rows, start[i]:start[i + 1]] = feature
            collect[start[i]:start[i + 1], rows] = event.T
            masks[i][1 + row:1 + row + len(cells)] = event
            row += len(cells)
        plan = {"mask": masks, "to_sep": to_sep, "parent_to_sep": parent_to_sep, "sep_size": sep_size,
                "lift": lift, "sizes": sizes, "collect": collect, "tables_nonzero": self._table_hits(start)}
        cache["flat_plan"] = plan
        return plan

    def _table_hits(self, start) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The non-zeros (clique cell, released table cell, P) of the 0/1 map from all cliques'
        cells (flattened, clique i from ``start[i]``) to every released table cell
        (:meth:`table_cells`)."""
        rows, cols, col = [], [], 0
        for k, size in enumerate(self.table_sizes):
            i, index = self.table_cells(k)
            rows.append(int(start[i]) + torch.arange(index.numel()))
            cols.append(index + col)
            col += size
        return torch.cat(rows), torch.cat(cols), self.P

    def _home(self, q: int) -> int:
        """The junction-tree clique that holds model clique q."""
        return self.jt.assignment[q]

    def _statistic_hits(self, i: int, clique, cells) -> tuple[np.ndarray, np.ndarray]:
        """(feature, event), each (len(cells), n_i) 0/1 over junction-tree clique i's cells: the
        cells where each canonical statistic's feature (its θ's term in the log-potential) is 1,
        and those where the statistic itself (a released indicator) is 1 — the same here; a
        latent-variable model (:class:`dpsynth.graphical.icin.IcinModel`) tells them apart."""
        idx, _ = cell_index(self.jt.clique_domain(i), list(clique))
        hit = idx[None, :] == np.asarray(cells)[:, None]
        return hit, hit

    def canonical_moments(self, theta: torch.Tensor, clamped: tuple | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(μ_D, M_D): means (…, D) and second moments (…, D, D) of the canonical statistics
        (Σ_D = ∇²A = M_D − μμᵀ), by clamping each canonical cell in a batched two-pass
        sum-product in *linear* space on flattened clique tables (:meth:`_flat_pass`). The same
        numbers as :meth:`moments` restricted to :attr:`canonical_index`, clamping D cells instead
        of P, several times faster, and differentiable in θ (``clamped``: see :meth:`_flat_pass`)."""
        log_z, cond_can = self._flat_pass(theta, clamped=clamped)  # (…, D + 1), (…, D + 1, D)
        mu = cond_can[..., 0, :]
        p_j = torch.exp(log_z[..., 1:] - log_z[..., :1])
        m2 = p_j.unsqueeze(-1) * cond_can[..., 1:, :]
        return mu, 0.5 * (m2 + m2.transpose(-1, -2))

    def canonical_means(self, theta: torch.Tensor, flat: torch.Tensor | None = None) -> torch.Tensor:
        """μ_D = E[a_D] (…, D), the means of the canonical statistics: one unclamped pass, level by
        level (:meth:`collect_means`), an order of magnitude cheaper than :meth:`table_marginals` for
        small cliques. ``flat``: θ's log-potentials on the tree cells (:meth:`lifted_potentials`)."""
        return self._level_collect(theta, ("collect",), flat=flat)[1][0]

    def collect_means(self, theta: torch.Tensor, *names: str) -> list[torch.Tensor]:
        """The probabilities of the events of the plan's 0/1 maps ``names`` (``"collect"``: the
        canonical statistics, ``"tables"``: every released cell), (…, width) each, from one pass."""
        return self._level_collect(theta, names)[1]

    def tilted_means(self, theta: torch.Tensor, tilt: torch.Tensor, flat: torch.Tensor | None = None) -> torch.Tensor:
        """μ_D (…, D) under p(x | θ) tilted by exp(tiltᵀ a_D(x)) (a_D the statistics, not the features
        θ multiplies: they differ in :class:`dpsynth.graphical.icin.IcinModel`). Along u,
        (tilted_means(θ, h u) − μ_D(θ)) · u / h → uᵀ Cov_θ(a_D) u as h → 0 (``flat``: as in :meth:`canonical_means`)."""
        return self._level_collect(theta, ("collect",), tilt, flat)[1][0]

    def lifted_potentials(self, theta: torch.Tensor) -> torch.Tensor:
        """θ (…, D) as log-potentials of the tree cells in the level pass's order (cells, B): one product."""
        lp = self._level_plan()
        flat = lp["lift"](theta.reshape(-1, self.D).T)
        return flat if lp["offset"] is None else flat + lp["offset"]

    def pass_maps(self, names: tuple = ("collect",)) -> tuple:
        """(lift, collect, levels): the fixed maps of the level pass: θ (D, B) → tree cells
        (:class:`SparseMap`; :meth:`lifted_potentials` adds the offset), beliefs → the events of
        ``names`` stacked (as in :meth:`collect_means`; by default the canonical statistics), and
        the levels of :func:`dpsynth.graphical.level_pass.level_forward`; for code that
        differentiates a whole density through the pass by hand
        (:class:`dpsynth.graphical.expanded_v.ExpandedV`, :class:`dpsynth.graphical.frozen_v.FrozenV`)."""
        lp = self._level_plan()
        return lp["lift"], self._level_map(tuple(names))[0], lp["levels"]

    def _level_collect(self, theta, names, tilt=None, flat=None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """(A(θ) (…), :meth:`collect_means`) from the same pass (tilted as in :meth:`tilted_means`)."""
        batch = tuple(theta.shape[:-1])
        collect, widths = self._level_map(tuple(names))
        cells = None if tilt is None else self._level_map(("collect",))[0].T(tilt.reshape(-1, self.D).T)
        log_z, belief = self._level_pass(theta, cells, flat)
        out = collect(belief)
        return log_z.reshape(batch), [o.T.reshape(batch + (-1,)) for o in torch.split(out, widths, dim=0)]

    def _level_map(self, names: tuple) -> tuple[SparseMap, list[int]]:
        """The maps ``names`` stacked (their widths), from cells in the level pass's order."""
        cache = self.__dict__.setdefault("_evidence_cache", {})
        key = ("level_map",) + names
        if key not in cache:
            inverse, rows, cols, widths = self._level_plan()["inverse"], [], [], []
            for name in names:
                r, c, w = self._sparse(name)
                rows.append(inverse[r])
                cols.append(c + sum(widths))
                widths.append(w)
            n_cells = len(self._level_plan()["order"])
            cache[key] = (SparseMap(torch.cat(cols), torch.cat(rows), (sum(widths), n_cells)), widths)
        return cache[key]

    def clamped_calibration(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(log Z (…, D + 1), clique cells' beliefs (cells, …, D + 1)) of the clamped pass, from which
        :meth:`canonical_moments` and a latent model's ``mean_jacobian`` both collect (one calibration)."""
        log_z, belief = self._calibrate_flat(theta, True)
        return log_z, torch.cat(belief, dim=0)

    def _flat_pass(self, theta: torch.Tensor, collect: str = "collect",
                   clamped: tuple | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(log Z (…, D + 1), P(canonical statistics | evidence) (…, D + 1, D)) from θ's
        :meth:`clamped_calibration` (``clamped``: that calibration, if at hand); ``collect`` names
        the plan's matrix from clique cells to the events whose probabilities are returned."""
        log_z, cells = clamped if clamped is not None else self.clamped_calibration(theta)
        return log_z, self._apply(cells, collect, dim=0).movedim(0, -1)

    def partition_and_means(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(A(θ) (…), μ_D (…, D)) from one unclamped pass (:meth:`_level_pass`): the value and gradient of
        the log-partition function."""
        log_z, (mu,) = self._level_collect(theta, ("collect",))
        return log_z, mu

    def clique_marginals(self, theta: torch.Tensor) -> list[torch.Tensor]:
        """P(x_C) for every junction-tree clique C, (…, n_C) each, cells in C order of
        ``jt.clique_domain(i)``: one unclamped pass (:meth:`_calibrate_levels`)."""
        return [b[..., 0].movedim(0, -1) for b in self._calibrate_flat(theta, clamp=False)[1]]

    def separator_cells(self, i: int) -> tuple[torch.Tensor, int, torch.Tensor]:
        """Junction-tree clique i's separator with its parent: (index of each of i's cells in the
        separator's table, the separator's cells, index of each of the parent's cells in it); the
        root's separator is empty (one cell) and its third entry is None."""
        plan = self._flat_plan()
        if self.jt.parent[i] < 0:
            return torch.zeros(plan["sizes"][i], dtype=torch.long), 1, None
        return plan["to_sep"][i], plan["sep_size"][i], plan["parent_to_sep"][i]

    def table_cells(self, k: int) -> tuple[int, torch.Tensor]:
        """Released table k as a sum over one junction-tree clique's cells: (that clique i, the
        index in table k of each of its cells)."""
        t = self.tables[k]
        i = self._holder(self.lifted(t))
        _, event = self._statistic_hits(i, t, np.arange(self.table_sizes[k]))
        if not (event.sum(0) == 1).all():
            raise RuntimeError(f"table {t} does not partition the cells of junction-tree clique {i}")
        return i, torch.as_tensor(event.argmax(0))

    def lifted(self, attrs) -> tuple:
        """The model's scope of table attributes ``attrs`` (themselves here; a latent-variable model adds its own)."""
        return tuple(attrs)

    def _holder(self, attrs) -> int:
        """The first junction-tree clique that contains ``attrs``."""
        return next(i for i, c in enumerate(self.jt.cliques) if set(attrs) <= set(c))

    def _calibrate_flat(self, theta: torch.Tensor, clamp: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Two-pass sum-product in linear space on flattened clique tables, each clique's potential
        shifted by its maximum and every message renormalised. With ``clamp`` the batch gains an axis
        of D + 1 pieces of evidence (row 0 free, row 1 + j keeps only canonical cell j); without it
        :meth:`_calibrate_levels` computes it level by level and that axis has length 1.
        Returns (log Z (…, R), the clique beliefs, (n_i, …, R) each, normalised per clique)."""
        jt = self.jt
        plan = self._flat_plan()
        theta = torch.as_tensor(theta, dtype=DTYPE)
        batch = tuple(theta.shape[:-1])
        if theta.shape[-1] != self.D:
            raise ValueError(f"theta must have last dimension D = {self.D}, got shape {tuple(theta.shape)}")
        if not clamp:
            return self._calibrate_levels(theta)
        # tables are laid out cells first, (cells, …, R): gathers and scatter-adds along the cells
        # then move whole contiguous rows of the batch
        flat = self._apply(theta.movedim(-1, 0), "lift", dim=0)
        offset = plan.get("offset")
        if offset is not None:
            flat = flat + offset.reshape((-1,) + (1,) * len(batch))
        flat = flat.unsqueeze(-1)                                      # (cells of all cliques, …, 1)
        pots, shift = [], 0.0
        for v, mk in zip(torch.split(flat, plan["sizes"], dim=0), plan["mask"]):
            top = v.amax(dim=0, keepdim=True)
            p = torch.exp(v - top) * mk.T.reshape((mk.shape[1],) + (1,) * len(batch) + (mk.shape[0],))
            pots.append(p)                                               # (n_i, …, R)
            shift = shift + top[0]
        k = len(jt.cliques)
        to_sep, from_sep = plan["to_sep"], plan["parent_to_sep"]

        def lift(msg, index):  # separator table → clique cells
            return msg.index_select(0, index)

        def project(b, index, width):  # clique cells → separator table (sums)
            return b.new_zeros((width,) + b.shape[1:]).index_add(0, index, b)

        up, log_scale = [None] * k, 0.0
        for i in reversed(jt.bfs):
            b = pots[i]
            for c in jt.children[i]:
                b = b * lift(up[c], from_sep[c])
            if jt.parent[i] >= 0:
                m = project(b, to_sep[i], plan["sep_size"][i])
                norm = m.sum(0, keepdim=True)
                up[i] = m / norm
                log_scale = log_scale + torch.log(norm[0])
            else:
                total = b.sum(0)
        log_z = log_scale + torch.log(total) + shift                 # (…, R)
        down, belief = [None] * k, [None] * k
        for i in jt.bfs:
            base = pots[i] if down[i] is None else pots[i] * lift(down[i], to_sep[i])
            children = jt.children[i]
            incoming = [lift(up[c], from_sep[c]) for c in children]
            # child c's message: base times the other children's, in the children's order, taking the
            # product of those before c from the running prefix (the same products in the same order:
            # the same values, with k − 1 + k(k − 1)/2 products instead of k(k − 1); the bundled Adult's
            # root has 8 children, each product over 1,024 cells × 1,027 pieces of evidence)
            prefix = base
            for j, c in enumerate(children):
                m = prefix
                for o in range(j + 1, len(children)):
                    m = m * incoming[o]
                msg = project(m, from_sep[c], plan["sep_size"][c])
                down[c] = msg / msg.sum(0, keepdim=True)
                prefix = prefix * incoming[j]
            belief[i] = prefix / prefix.sum(0, keepdim=True)   # base times every child's message
        return log_z, belief

    def _level_plan(self) -> dict:
        """Index maps of :meth:`_calibrate_levels`: the cliques grouped by depth in the junction
        tree, cells laid out level by level (``order``: each level-ordered cell's position in the
        flat plan), and per level d the cells' clique (``clique``), their separator cell
        (``sep``), each separator cell's clique (``sep_clique``), and the pairs (parent cell,
        child's separator cell, child) joining level d to level d + 1 (``pairs``)."""
        cache = self.__dict__.setdefault("_evidence_cache", {})
        if "level_plan" in cache:
            return cache["level_plan"]
        jt, plan = self.jt, self._flat_plan()
        depth = {jt.bfs[0]: 0}
        for i in jt.bfs[1:]:
            depth[i] = depth[jt.parent[i]] + 1
        levels = [[i for i in jt.bfs if depth[i] == d] for d in range(max(depth.values()) + 1)]
        start = np.cumsum([0] + plan["sizes"])
        cell0, sep0 = {}, {}  # a clique's first cell / separator cell within its level
        out = []
        for cliques in levels:
            n = s_ = 0
            for i in cliques:
                cell0[i], sep0[i] = n, s_
                n += plan["sizes"][i]
                s_ += plan["sep_size"][i] or 0
            lv = {"size": n, "sep_size": s_, "n": len(cliques),
                  "clique": torch.as_tensor(np.repeat(np.arange(len(cliques)), [plan["sizes"][i] for i in cliques]))}
            if jt.parent[cliques[0]] >= 0:
                lv["sep"] = torch.cat([sep0[i] + plan["to_sep"][i] for i in cliques])
                lv["sep_clique"] = torch.as_tensor(np.repeat(np.arange(len(cliques)),
                                                             [plan["sep_size"][i] for i in cliques]))
            out.append(lv)
        for d, cliques in enumerate(levels[1:], start=1):
            kids = [(c, j) for j, c in enumerate(cliques)]
            out[d - 1]["pairs"] = tuple(torch.cat(v) for v in zip(*[
                (cell0[jt.parent[c]] + torch.arange(plan["sizes"][jt.parent[c]]),
                 sep0[c] + plan["parent_to_sep"][c], torch.full((plan["sizes"][jt.parent[c]],), j))
                for c, j in kids]))
        for d, lv in enumerate(out):  # the gathers and scatter-adds of the pass as sparse products
            if "sep" in lv:  # cells → their separator cells (sums); its transpose lifts separator cells
                lv["to_sep"] = SparseMap(lv["sep"], torch.arange(lv["size"]), (lv["sep_size"], lv["size"]))
            if "pairs" in lv:  # parent cell → child's separator cell; each child separator cell's parent
                cell, sep, _ = lv["pairs"]
                lv["add_up"] = SparseMap(cell, sep, (lv["size"], out[d + 1]["sep_size"]))
                lv["sep_parent"] = torch.zeros(out[d + 1]["sep_size"], dtype=torch.long).index_put_(
                    (sep,), lv["clique"][cell])
        order = torch.as_tensor(np.concatenate([np.arange(start[i], start[i + 1]) for c in levels for i in c]))
        inverse = torch.argsort(order)
        rows, cols, _ = self._sparse("lift")
        lp = {"levels": out, "order": order, "inverse": inverse,
              "lift": SparseMap(inverse[cols], rows, (len(order), self.D)),
              "offset": None if plan.get("offset") is None else plan["offset"].index_select(0, order)[:, None]}
        cache["level_plan"] = lp
        return lp

    def _calibrate_levels(self, theta: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """:meth:`_calibrate_flat` without evidence (:meth:`_level_pass`, beliefs split by clique)."""
        log_z, belief = self._level_pass(theta)
        shape = tuple(theta.shape[:-1]) + (1,)
        belief = belief.index_select(0, self._level_plan()["inverse"])
        return log_z.reshape(shape), [b.reshape((-1,) + shape) for b in torch.split(belief, self._flat_plan()["sizes"], dim=0)]

    def _level_pass(self, theta: torch.Tensor, tilt: torch.Tensor | None = None,
                    flat: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(log Z (B,), the beliefs of every clique cell (cells in level order, B)) for θ (…, D) as B
        rows: the unclamped sum-product, one junction-tree level at a time (its cliques share each op).
        Up: b_i = ψ_i + Σ_children lift(u_c), u_i = log Σ_{cells → separator} e^{b_i}, each
        log-sum-exp shifted by its group's (detached) maximum; log Z = log Σ e^{b_root}. Down, on
        normalised beliefs (probabilities: no shift, one exp per level): β_root = e^{b_root − log Z},
        β_c = exp(b_c + lift(log s_c − u_c)) with s_c = Σ_{parent cells → separator} β_p (sums onto
        separator cells floored at :data:`dpsynth.graphical.level_pass.TINY`): an exp, a shift and a log per level fewer than
        log-sum-exps (Adult-10, 20 % MCAR, 16 chains: 1.16 → 0.87 ms). ``tilt`` (cells, B) is added
        to the log-potentials ψ, ``flat`` (:meth:`lifted_potentials`) replaces them."""
        lp = self._level_plan()
        flat = self.lifted_potentials(theta) if flat is None else flat    # θ → cells in level order
        if tilt is not None:
            flat = flat + tilt
        return level_pass(lp["levels"], flat)

    def _sparse(self, name: str) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The plan's 0/1 matrix ``name`` as (row index, column index, columns) of its non-zeros."""
        plan = self._flat_plan()
        key = name + "_nonzero"
        if key not in plan:
            rows, cols = torch.nonzero(plan[name], as_tuple=True)
            plan[key] = (rows, cols, plan[name].shape[1])
        return plan[key]

    def _apply(self, x: torch.Tensor, name: str, dim: int = -1) -> torch.Tensor:
        """x @ plan[name] along ``dim`` for a sparse 0/1 matrix: a gather and a scatter-add over its
        non-zeros (a dense product cost batch × cells × statistics)."""
        rows, cols, width = self._sparse(name)
        shape = list(x.shape)
        shape[dim] = width
        return x.new_zeros(shape).index_add(dim, cols, x.index_select(dim, rows))

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

    def __repr__(self) -> str:
        return f"MaxEntModel({len(self.cliques)} cliques, D = {self.D}, {len(self.tables)} tables, {self.jt})"
