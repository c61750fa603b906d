"""Complete values and response indicators under itemwise conditionally independent nonresponse
(ICIN; Sadinle & Reiter, Biometrika 2017): NAPSU-MQ's model for incomplete private data.

The released tables are over the *observed* domain: an incomplete column j has its k_j levels
and one more, "missing", last (x̃_j). Behind every row lie its complete values x and response
indicators R_j (1 = missing) of the incomplete columns. The model is the max-ent family on the
latent (x, R) whose log-potential on each clique C holds every interaction among
{x_a, R_a : a ∈ C} except those containing both x_j and R_j:

    p(x, r | θ) ∝ exp(θᵀ b(x, r)).

That restriction is ICIN, R_j ⊥ x_j | (x_−j, R_−j): whether a value is missing may depend on the
other columns (observed or not) and on which others are missing, but not on the value itself.
MCAR satisfies it, and so does MAR through columns that are always observed. It is
nonparametrically just-identified (Sadinle & Reiter 2017, §3): θ has as many coordinates as the
released tables have free cells (D), so the model reproduces any observed-data distribution on
the cliques and adds no testable restriction, yet p(x) = Σ_r p(x, r) is identified. Synthetic rows
are drawn from the latent joint and R is dropped: the datasets are complete.

Unlike "missing as a level" (a log-linear model on x̃, which cannot represent even MCAR when rows
miss cells in several overlapping cliques: a chain x1 − x2 − x3 with x2 missing makes x1 and x3
dependent), the observed tables here are marginal sums of a latent model.

**Statistics and features.** The released canonical statistics a_D(x̃) are those of the
observed-domain :class:`MaxEntModel` (cells w of its cliques):
a_w = ∏_{a ∈ C} ([x_a = w_a, R_a = 0], or [R_a = 1] where w_a is "missing"). The features b_w
replace [x_a = w_a, R_a = 0] by [x_a = w_a]: the same number, no x_j·R_j product, so they span
the ICIN family. The noise-aware likelihood needs the moments of a_D under p(· | θ): the same
linear-space message passing as :class:`MaxEntModel` on the latent junction tree, with θ lifted
by b and the clamped and collected events given by a.

**MNAR sensitivity.** ``shift={j: δ}`` adds δ·x_j·R_j (x_j its level index) to the
log-potential: given everything else, a missing value's odds of each step up the levels are e^δ
times an observed one's (the δ-adjustment of NARFCS, van Buuren 2018, §3.8). δ = 0 is ICIN.

Example
-------
>>> import torch
>>> from dpsynth.graphical import Domain
>>> dom = Domain(["x", "y"], [3, 2])          # x: levels 0, 1 and "missing" (2)
>>> model = IcinModel(dom, [("x", "y")], incomplete=["x"])
>>> model.D, model.latent.shape                # D as on the observed domain; latent x has 2 levels
(5, (2, 2, 2))
>>> mu = model.table_marginals(torch.zeros(model.D, dtype=torch.float64))
>>> [round(float(v), 4) for v in mu]          # x̃ = 0, 1 are "x = v and observed": 1/8 each
[0.125, 0.125, 0.125, 0.125, 0.25, 0.25]
"""
from __future__ import annotations

from typing import Hashable, Sequence

import numpy as np
import torch

from .domain import Domain
from .factor import DTYPE, Factor
from .junction_tree import JunctionTree
from .maxent import MaxEntModel


def indicator(column: Hashable) -> tuple:
    """The latent attribute R_j of ``column`` (1 = missing)."""
    return ("missing", column)


class IcinModel(MaxEntModel):
    """ICIN model (module docstring) on the observed ``domain`` (each column of ``incomplete`` has
    its missing level last) with ``cliques``, released ``tables`` and ``reference`` (never an
    incomplete column's missing level) as in :class:`MaxEntModel`; ``shift``: column → δ (MNAR sensitivity). Attributes as :class:`MaxEntModel`, plus
    ``observed`` (the observed-domain model that defines the statistics), ``latent`` (the domain
    of x then the R_j) and ``jt`` (the latent junction tree). :meth:`sample` (inherited) gives
    latent codes (m, n, d + number of incomplete columns): x in domain order (incomplete columns
    without their missing level), then the R_j (1 = missing)."""

    def __init__(self, domain: Domain, cliques: Sequence[Sequence[Hashable]],
                 tables: Sequence[Sequence[Hashable]] | None = None, incomplete: Sequence[Hashable] = (),
                 shift: dict | None = None, reference: dict | None = None):
        unknown = [c for c in incomplete if c not in domain]
        if unknown:
            raise ValueError(f"incomplete columns {unknown} are not in the domain")
        self.observed = MaxEntModel(domain, cliques, tables, reference)  # checks the reference levels
        at_missing = [c for c in incomplete if self.observed.reference[c] == domain.size(c) - 1]
        if at_missing:  # its features would be [x = v] for every level v: collinear with the constant
            raise ValueError(f"the reference level of incomplete columns {at_missing} is their 'missing' level; "
                             "pick an observed level (largest_levels(..., last_excluded=incomplete))")
        shift = dict(shift or {})
        if set(shift) - set(incomplete):
            raise ValueError(f"shift names columns {sorted(set(shift) - set(incomplete), key=str)} "
                             "that are not incomplete")
        o = self.observed
        self.domain, self.cliques, self.canonical, self.D = o.domain, o.cliques, o.canonical, o.D
        self.reference = o.reference
        self.tables, self.table_sizes, self.P = o.tables, o.table_sizes, o.P
        self.canonical_index = o.canonical_index
        self.incomplete = [a for a in domain.attrs if a in set(incomplete)]
        self.shift = {a: float(v) for a, v in shift.items()}
        sizes = [domain.size(a) - (a in self.incomplete) for a in domain.attrs]
        self.latent = Domain([*domain.attrs, *map(indicator, self.incomplete)], sizes + [2] * len(self.incomplete))
        # the tree's own cliques as its scopes: the potentials are laid clique by clique (a chordal
        # set of cliques is its own min-fill triangulation, so the tree is the same)
        self.jt = JunctionTree(self.latent, JunctionTree(self.latent, [self.lifted(c) for c in self.cliques]).cliques)

    def _home(self, q: int) -> int:
        return self._holder(self.lifted(self.cliques[q]))

    def lifted(self, attrs) -> tuple:
        """The latent scope of observed ``attrs``: the columns and their response indicators."""
        return (*attrs, *(indicator(a) for a in attrs if a in self.incomplete))

    # ------------------------------------------------------------------ statistics on the latent tree
    def _statistic_hits(self, i, clique, cells):
        """Features b and events a of the canonical cells ``cells`` of ``clique`` on latent
        junction-tree clique i (module docstring)."""
        ldom = self.jt.clique_domain(i)
        grid = np.indices(ldom.shape).reshape(len(ldom), -1)
        w = np.unravel_index(np.asarray(cells), self.domain.project(clique).shape)
        feature = np.ones((len(cells), grid.shape[1]), dtype=bool)
        event = feature.copy()
        for a, wa in zip(clique, w):
            x = grid[ldom.attrs.index(a)][None, :]
            wa = wa[:, None]
            if a not in self.incomplete:
                feature &= x == wa
                event &= x == wa
                continue
            r = grid[ldom.attrs.index(indicator(a))][None, :]
            missing = wa == self.domain.size(a) - 1
            feature &= np.where(missing, r == 1, x == wa)
            event &= np.where(missing, r == 1, (x == wa) & (r == 0))
        return feature, event

    def _flat_plan(self) -> dict:
        """:meth:`MaxEntModel._flat_plan` on the latent tree, plus ``features`` (liftᵀ, kept only as
        the non-zeros :meth:`_apply` uses), ``tables`` (the non-zeros of the map from clique cells
        to every released table cell, :meth:`MaxEntModel._table_hits`) and ``offset`` (Σ n_i) holding the
        δ·x_j·R_j terms of ``shift`` (each on the first clique that holds x_j and R_j)."""
        cache = self.__dict__.setdefault("_evidence_cache", {})
        if "flat_plan" in cache:
            return cache["flat_plan"]
        plan = super()._flat_plan()
        jt = self.jt
        start = np.cumsum([0] + plan["sizes"])
        offset = torch.zeros(int(start[-1]), dtype=DTYPE)
        for a, delta in self.shift.items():
            i = self._holder((a, indicator(a)))
            ldom = jt.clique_domain(i)
            grid = np.indices(ldom.shape).reshape(len(ldom), -1)
            term = grid[ldom.attrs.index(a)] * grid[ldom.attrs.index(indicator(a))]
            offset[start[i]:start[i + 1]] += delta * torch.as_tensor(term, dtype=DTYPE)
        rows, cols = torch.nonzero(plan["lift"], as_tuple=True)
        plan.update(features_nonzero=(cols, rows, self.D), offset=offset)
        return plan

    def cell_map(self):
        """(B, c) of the released cells on the canonical statistics: an identity on the observed
        domain (:meth:`MaxEntModel.cell_map` of :attr:`observed`)."""
        return self.observed.cell_map()

    def mean_jacobian(self, theta: torch.Tensor, clamped: tuple | None = None) -> torch.Tensor:
        """∂μ_D/∂θ = Cov(a_D, b) (D, D), by clamping each statistic a_i and collecting the features
        (``clamped``: θ's clamped calibration, :meth:`MaxEntModel.clamped_calibration`, if at hand)."""
        log_z, cond = self._flat_pass(theta, collect="features", clamped=clamped)
        p_a = torch.exp(log_z[..., 1:] - log_z[..., :1])
        return p_a.unsqueeze(-1) * (cond[..., 1:, :] - cond[..., :1, :])

    def table_marginals(self, theta: torch.Tensor) -> torch.Tensor:
        """μ: the probabilities of every released table cell (observed domain), concatenated (…, P)."""
        return self.collect_means(theta, "tables")[0]

    def moments(self, theta):
        raise NotImplementedError("IcinModel gives the canonical statistics' moments (canonical_moments); "
                                  "the dense form over all released cells is not implemented for it")

    # ------------------------------------------------------------------ potentials and sampling
    def potentials(self, theta: torch.Tensor, extra_batch: int = 0) -> list[Factor]:
        """Log-potentials of the latent junction-tree cliques: θᵀb plus the δ terms."""
        theta = torch.as_tensor(theta, dtype=DTYPE)
        if theta.shape[-1] != self.D:
            raise ValueError(f"theta must have last dimension D = {self.D}, got shape {tuple(theta.shape)}")
        plan = self._flat_plan()
        batch = tuple(theta.shape[:-1])
        flat = self._apply(theta, "lift") + plan["offset"]
        return [Factor(self.jt.clique_domain(i), v.reshape(batch + (1,) * extra_batch + self.jt.clique_domain(i).shape))
                for i, v in enumerate(torch.split(flat, plan["sizes"], dim=-1))]

    def _factors(self, theta, evidence=None, extra_batch=0):
        if evidence is not None:
            raise NotImplementedError("IcinModel takes no evidence factors")
        return self.potentials(theta, extra_batch)

    def __repr__(self) -> str:
        return (f"IcinModel({len(self.cliques)} cliques, D = {self.D}, {len(self.tables)} tables, "
                f"incomplete {self.incomplete}, {self.jt})")
