"""Noisy marginal measurements: available-case tables released with one discrete Gaussian mechanism.

Neighbouring relation: add/remove one row. A row adds 1 to at most one cell of each marginal table
(exactly one when it is observed on the table's attributes, none otherwise: available-case
counting), so each table has L2 sensitivity 1 and T tables measured together have √T.

:func:`measure_marginals` releases a list of tables with one discrete Gaussian mechanism call
(``gaussian_counts``; ρ-zCDP with σ = √T/√(2ρ); an (ε, δ) budget is converted to ρ by the CKS
conversion and charged in ρ, since the continuous analytic calibration does not hold for the
discrete Gaussian). Used by MST, AIM and NAPSU-MQ.

Example
-------
>>> import numpy as np
>>> from dpsynth.graphical import Domain
>>> from dpsynth.privacy import NoiseSource, PrivacyLedger
>>> codes = np.array([[0, 1], [1, 1], [-1, 0]])
>>> led = PrivacyLedger(1.0, 1e-6)
>>> (m,) = measure_marginals(codes, Domain(["a", "b"], [2, 2]), [("a", "b")], led, NoiseSource(1), "demo", rho=0.01)
>>> m.attrs, m.noisy.shape, round(m.sigma, 4), led.total_rho()
(('a', 'b'), (2, 2), 7.0711, 0.01)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

import numpy as np

from ..graphical import Domain
from ..privacy import NoiseSource, PrivacyLedger, gaussian_counts
from . import count_marginal

RELATION = "add-remove"


@dataclass
class Measurement:
    """A released marginal: ``noisy`` counts on ``attrs`` with discrete Gaussian noise of scale ``sigma``."""

    attrs: tuple
    noisy: np.ndarray
    sigma: float

    @property
    def total(self) -> float:
        return float(self.noisy.sum())


def measure_marginals(codes: np.ndarray, domain: Domain, tables: Sequence[Sequence[Hashable]],
                      ledger: PrivacyLedger, source: NoiseSource, step: str, *, rho: float | None = None,
                      epsilon: float | None = None, delta: float | None = None) -> list[Measurement]:
    """Release the available-case contingency tables ``tables`` (columns of ``codes`` in ``domain``
    order) with one Gaussian mechanism of L2 sensitivity √len(tables) (add/remove)."""
    tables = [tuple(t) for t in tables]
    idx = {a: j for j, a in enumerate(domain.attrs)}
    counts = [count_marginal(codes, [idx[a] for a in t], domain.shape) for t in tables]
    flat = np.concatenate([c.ravel() for c in counts])
    noisy, sigma = gaussian_counts(flat, sensitivity=float(np.sqrt(len(tables))), ledger=ledger, source=source,
                                   step=step, relation=RELATION, rho=rho, epsilon=epsilon, delta=delta,
                                   note=f"{len(tables)} tables, add/remove: L2 sensitivity 1 per table")
    out, start = [], 0
    for t, c in zip(tables, counts):
        out.append(Measurement(t, noisy[start:start + c.size].reshape(c.shape), float(sigma)))
        start += c.size
    return out
