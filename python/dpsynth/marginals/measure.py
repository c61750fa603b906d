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
from . import Rows, as_rows

RELATION = "add-remove"


@dataclass
class Measurement:
    """A released marginal: ``noisy`` counts on ``attrs`` with discrete Gaussian noise of scale ``sigma``."""

    attrs: tuple
    noisy: np.ndarray
    sigma: float
    #: 1-way tables measured ``with_missing``: the noisy count of rows missing the attribute
    missing: float | None = None

    @property
    def total(self) -> float:
        """Noisy number of rows the table counts (those observed on ``attrs``)."""
        return float(self.noisy.sum())


def measure_marginals(rows: Rows | np.ndarray, domain: Domain, tables: Sequence[Sequence[Hashable]],
                      ledger: PrivacyLedger, source: NoiseSource, step: str, *, rho: float | None = None,
                      epsilon: float | None = None, delta: float | None = None,
                      with_missing: bool = False) -> list[Measurement]:
    """Release the available-case contingency tables ``tables`` (of ``rows``: a
    :class:`dpsynth.marginals.Rows` or a code array, columns in ``domain`` order) with one Gaussian
    mechanism of L2 sensitivity √len(tables) (add/remove).

    ``with_missing=True`` (1-way tables only): each table gets an extra cell counting the rows
    missing the attribute, so every row adds 1 to exactly one cell of each table (sensitivity
    unchanged) and the noisy total estimates the number of rows N; the extra cell is returned as
    ``Measurement.missing``."""
    tables = [tuple(t) for t in tables]
    idx = {a: j for j, a in enumerate(domain.attrs)}
    rows = as_rows(rows, domain.shape)
    if with_missing:
        if any(len(t) != 1 for t in tables):
            raise ValueError("with_missing=True is for 1-way tables only")
        counts = list(rows.tables([[idx[t[0]]] for t in tables], missing_cell=True))
    else:
        counts = list(rows.tables([idx[a] for a in t] for t in tables))
    flat = np.concatenate([c.ravel() for c in counts])
    noisy, sigma = gaussian_counts(flat, sensitivity=float(np.sqrt(len(tables))), ledger=ledger, source=source,
                                   step=step, relation=RELATION, rho=rho, epsilon=epsilon, delta=delta,
                                   note=f"{len(tables)} tables, add/remove: L2 sensitivity 1 per table")
    out, start = [], 0
    for t, c in zip(tables, counts):
        part = noisy[start:start + c.size]
        if with_missing:
            out.append(Measurement(t, part[:-1], float(sigma), float(part[-1])))
        else:
            out.append(Measurement(t, part.reshape(c.shape), float(sigma)))
        start += c.size
    return out


def estimate_totals(measurements: Sequence[Measurement], partial: bool) -> tuple[dict, float]:
    """Post-processing of released tables: ({attrs: noisy number of rows the table counts}, n̂).

    ``partial=False`` (every table counts the same rows, e.g. the complete rows): one n̂ for all,
    the inverse-variance weighted mean of the tables' noisy totals (a table of c cells with noise
    σ has total variance cσ²). ``partial=True`` (available-case tables): each set of attributes
    gets the inverse-variance mean of its own tables' totals; n̂ is the number of rows N, from
    1-way tables measured ``with_missing`` when there are any (else the largest total)."""
    acc = {}
    for m in measurements:
        var = m.sigma ** 2 * m.noisy.size
        w, s = acc.get(m.attrs, (0.0, 0.0))
        acc[m.attrs] = (w + 1.0 / var, s + m.total / var)
    if not partial:
        w = sum(v[0] for v in acc.values())
        n_hat = max(sum(v[1] for v in acc.values()) / w, 1.0)
        return {a: n_hat for a in acc}, n_hat
    totals = {a: max(s / w, 1.0) for a, (w, s) in acc.items()}
    full = [(m.total + m.missing, m.sigma ** 2 * (m.noisy.size + 1)) for m in measurements if m.missing is not None]
    if full:
        w = sum(1.0 / v for _, v in full)
        n_hat = max(sum(t / v for t, v in full) / w, 1.0)
    else:
        n_hat = max(totals.values())
    return totals, n_hat


def expected_total(attrs: Sequence[Hashable], totals: dict, n_hat: float) -> float:
    """Released-data estimate of the rows observed on ``attrs``: its own measured total if it was
    measured, else n̂·Π_a (t̂_a / n̂) over its 1-way totals (missingness independent across
    columns, as under MCAR; an estimate only: it scales a prediction, never a sensitivity)."""
    attrs = tuple(attrs)
    if attrs in totals:
        return totals[attrs]
    out = n_hat
    for a in attrs:
        out *= min(totals.get((a,), n_hat) / n_hat, 1.0)
    return max(out, 1.0)
