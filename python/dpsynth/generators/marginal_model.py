"""Shared plumbing of the generators that release noisy marginals and fit a graphical model to
them (MST, AIM, AIM-E): which rows are counted, the zCDP budget, the model, sampling.

Missing values (``missing=``): ``"complete-rows"`` (default; the seed paper's baseline) counts only
the rows observed on every column — a row-wise filter, so add/remove neighbours stay neighbours, and
the number of complete rows is never released by itself: the model's n̂ is estimated from the
noisy tables' totals (:func:`dpsynth.marginals.measure.estimate_totals`). ``"partial"`` counts each
table over the rows observed on its attributes (partial marginal observation, as PrivBayesE);
the 1-way tables carry a missing cell whose totals estimate the number of rows N.

Budget: (ε, δ) → ρ = :func:`dpsynth.privacy.cdp_rho` (the CKS conversion), spent in ρ on one
ledger that converts back once. Neighbouring relation: add/remove one row.

Numeric values (``refine_share``, default 0.05 of ρ): the model is over the schema's bins; where
a bin holds several values, fine within-bin histograms are released first
(:func:`dpsynth.marginals.refine.measure_refinements`, over the same rows) and each synthetic value
is placed inside its bin by them instead of uniformly (0 turns this off).
"""
from __future__ import annotations

from functools import partial

import numpy as np
import torch

from ..graphical import Domain
from ..graphical.chunks import torch_threads
from ..marginals import observed_mask
from ..marginals.refine import measure_refinements, refinement_cells
from ..privacy import cdp_rho
from ..validation import check_choice
from .base import Generator
from .options import checks

MISSING_MODES = ("complete-rows", "partial")
MARGINAL_CHECKS = checks(missing=partial(check_choice, choices=MISSING_MODES,
                                         meaning="'complete-rows' (count complete rows only) or 'partial' "
                                                 "(each table over the rows observed on its columns)"))


def single_thread():
    """Message passing runs many small tensor ops: one torch thread is faster than two contending."""
    return torch_threads(1)


class MarginalModelGenerator(Generator):
    """Base class: subclasses implement ``_measure(codes, domain, rho, source)`` and set
    ``self.model_`` (a :class:`dpsynth.graphical.estimation.GraphicalModel`) and ``self.n_``."""

    relation = "add-remove"
    needs_delta = True
    needs_bounds = True

    def __init__(self, epsilon: float, delta: float | None = None, missing: str = "complete-rows",
                 refine_share: float = 0.05):
        super().__init__(epsilon, delta)
        self._set_params(locals(), MARGINAL_CHECKS)

    def _fit(self, codes, data, source):
        names = self.schema_.names
        domain = Domain(names, self.schema_.domain_sizes)
        if self.missing == "complete-rows":
            keep = observed_mask(codes, range(len(names)))
            codes, data = codes[keep], data.iloc[np.flatnonzero(keep)]
        self.domain_ = domain
        rho = self.rho_budget_ = cdp_rho(self.epsilon, self.delta)
        self.refinements_ = []
        if self.refine_share > 0 and any(refinement_cells(self.schema_[c]) is not None for c in names):
            rho_r = self.refine_share * rho
            self.refinements_ = measure_refinements(data, self.schema_, self.ledger, source, rho=rho_r,
                                                    step=f"{self.method}: within-bin numeric histograms")
            rho -= rho_r
        with single_thread():
            self._measure(codes, domain, rho, source)

    def _measure(self, codes, domain, rho, source):  # pragma: no cover
        raise NotImplementedError

    def _sample_frame(self, n, rng, index):
        with single_thread():
            codes = self.model_.sample(n, rng)
        names = self.schema_.names
        values = {r.name: r.draw(codes[:, names.index(r.name)], rng) for r in getattr(self, "refinements_", [])}
        return self.schema_.decode(codes, rng, numeric_values=values or None)

    def marginal(self, attrs) -> np.ndarray:
        """The fitted model's probability table on ``attrs`` (post-processing)."""
        return self.model_.marginal(tuple(attrs))
