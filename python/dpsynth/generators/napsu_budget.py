"""How NAPSU-MQ splits its zCDP budget ρ (Räisä et al. 2023, Algorithm 1 lines 1–3): between the
selection of cliques (1-way tables that score it and the exponential mechanisms) and the
measurement, and within the measurement between the tables the named analyses need and the others.
Arithmetic on public options only; the ledger records what each part buys.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RhoSplit:
    """Where the zCDP budget ρ goes: ``one_way`` (1-way tables that score the selection),
    ``selection`` (exponential mechanisms choosing cliques) and ``measurement`` (the cliques), of
    which ``analyses`` on the cliques the named analyses need (:func:`split_measurement`)."""

    one_way: float
    selection: float
    measurement: float
    analyses: float = 0.0

    def as_dict(self) -> dict:
        return {"one_way": self.one_way, "selection": self.selection, "measurement": self.measurement,
                "analyses": self.analyses}


def split_rho(rho: float, selection_share: float, needs_selection: bool) -> RhoSplit:
    """Split ρ: all of it on measurement when nothing is selected, otherwise ``selection_share``·ρ
    for selection (half on 1-way tables, half on the exponential mechanisms) and the rest on the
    measurement of the chosen cliques.

    >>> split_rho(1.0, 0.2, False)
    RhoSplit(one_way=0.0, selection=0.0, measurement=1.0, analyses=0.0)
    >>> split_rho(1.0, 0.2, True)
    RhoSplit(one_way=0.1, selection=0.1, measurement=0.8, analyses=0.0)
    """
    if not needs_selection:
        return RhoSplit(0.0, 0.0, float(rho))
    if not 0.0 < selection_share < 1.0:
        raise ValueError(f"selection_share must be in (0, 1), got {selection_share!r}")
    half = 0.5 * selection_share * rho
    return RhoSplit(half, half, float(rho) - 2 * half)


def split_measurement(rho: float, n_analysis: int, n_other: int, analysis_weight: float) -> tuple[float, float]:
    """(ρ of the analyses' tables, ρ of the other tables) out of the measurement budget ``rho``:
    each of the ``n_analysis`` tables the named analyses need gets ``analysis_weight`` times the ρ
    of each of the ``n_other`` others (Gaussian noise sd ∝ 1/√ρ per table). The analyses' estimates
    depend on their own tables only, so weighting them narrows the pooled intervals; the other
    columns' tables, there to keep the rest of the data plausible, get less.

    >>> split_measurement(1.0, 4, 6, 3.0)
    (0.6666666666666666, 0.3333333333333333)
    >>> split_measurement(1.0, 4, 0, 3.0)
    (1.0, 0.0)
    """
    if n_analysis == 0 or n_other == 0:
        return (float(rho), 0.0) if n_analysis else (0.0, float(rho))
    a = analysis_weight * n_analysis
    return float(rho) * a / (a + n_other), float(rho) * n_other / (a + n_other)


def planned_sd(split: RhoSplit, n_analysis: int, n_columns: int, analysis_weight: float) -> float:
    """The noise sd a selected table will get, planned before selection from public counts only:
    ``n_analysis`` analysis tables and at most ``n_columns`` − 1 tree edges measured with
    ``split.measurement`` (:func:`split_measurement`); a table group of T tables at ρ has σ = √(T/(2ρ)).
    An upper bound (the tree may need fewer edges), used to weigh MST's scores
    (:func:`dpsynth.marginals.mst.noise_penalty`).

    >>> round(planned_sd(split_rho(0.0149, 0.2, True), 5, 15, 2.0), 1)  # ε = 1, δ = 1/32,561² on 15 columns
    31.7
    """
    n_other = max(n_columns - 1, 1)
    _, rho_other = split_measurement(split.measurement, n_analysis, n_other, analysis_weight)
    return float((n_other / (2.0 * rho_other)) ** 0.5)
