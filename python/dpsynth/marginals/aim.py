"""AIM: adaptive and iterative selection and measurement of marginals (McKenna, Mullins, Sheldon &
Miklau, VLDB 2022, Algorithm 1), and AIM-E, its partial-marginal-observation variant.

:func:`aim_measure` runs the selection–measurement–estimation loop on encoded rows and charges every
step in ρ (zCDP) to the ledger it is given. With ρ the whole budget, α = 0.9 (measurement share) and
T = 16·d rounds (Alg. 1, lines 1–3):

1. all 1-way tables are measured with σ₀ = √(T / (2αρ)) (line 4); the model p̂ is fitted
   (:class:`dpsynth.graphical.estimation.GraphicalModel`, mirror descent);
2. each round (lines 6–17): the candidates are the workload's downward closure (by default all
   1-way and 2-way sets of at most ``max_cells`` cells) whose junction tree, added to the model's
   cliques, stays within ``max_model_cells·ρ_used/ρ`` cells (ρ_used counts this round; a public
   function of the schema and of released choices) — or does not grow the model; the exponential mechanism with
   ε_t = √(8(1 − α)ρ/T) picks r by the score

       q(r) = w_r · (‖x_r − t̂_r p̂_r‖₁ − √(2/π)·σ_t·|Ω_r|),

   w_r = Σ_{s ∈ W} |r ∩ s| (the workload weight), sensitivity max_r w_r (only x_r, the true
   table, reads the data; a row changes it by 1 in L1; t̂_r, p̂ and σ_t are released or public);
   r is measured with σ_t (ρ = 1/(2σ_t²)), and p̂ is refitted from a warm start;
3. annealing (line 15): if ‖t̂_r(p̂_new − p̂_old)_r‖₁ ≤ √(2/π)·σ_t·|Ω_r|, then σ ← σ/2, ε ← 2ε;
4. the budget: each round costs ε_t²/8 + 1/(2σ_t²) (bounded-range exponential mechanism, Cesar &
   Rogers 2021; Gaussian on one table of L2 sensitivity 1). When what is left, ρ − ρ_used, is
   less than twice the next round's cost, the round spends exactly what is left (α of it on the
   measurement, 1 − α on the selection) and is the last one (lines 8–10). ρ_used is summed with
   ``math.fsum`` and the last round takes ρ − ρ_used less a relative 1e-12, so the ledger never
   exceeds ρ; every spend is checked by the ledger, which refuses any overspend.

Neighbouring relation: add/remove one row, the privacy unit. Every table is an available-case count
(:func:`dpsynth.marginals.count_marginal`).

**AIM-E** (``partial=True``; the missing-data paper's enhancement of AIM, as PrivBayesE enhances
PrivBayes): each table x_r is counted over the rows observed on r's attributes (partial marginal
observation) instead of over the complete rows. *Sensitivity*: adding or removing one row changes
x_r by exactly one count in one cell if the row is observed on r, and by nothing otherwise; so for
every r the L1 and L2 sensitivity of x_r is ≤ 1, the same as for complete-row counting, whatever
the missingness pattern. The score's other terms, t̂_r (the released estimate of the rows observed
on r: its own measured total, or n̂·Π_a t̂_a/n̂ from the 1-way totals, :func:`expected_total`) and p̂,
are functions of released tables only; so the score has sensitivity w_r ≤ max w, and each
measurement of one table has L2 sensitivity 1: the privacy analysis of AIM holds unchanged. The
1-way tables carry an extra cell counting the rows missing the attribute (each row still adds 1 to
exactly one cell), whose totals estimate the number of rows N. The model is fitted with each table
scaled by its own total (the rows it counts), so it estimates the distribution of complete rows;
this is unbiased under MCAR and a heuristic otherwise (as for PrivBayesE).

Deviations from the reference implementation, documented: the model-size limit is in junction-tree
cells (``max_model_cells``, default 2·10⁵, ≈ 1.6 MB of float64), not 80 MB, so that a fit takes
minutes on 2 cores; mirror descent runs ``round_iters`` iterations per round (reference: 1000)
and ``final_iters`` at the end; no domain compression.

Example
-------
>>> import numpy as np
>>> from dpsynth.graphical import Domain
>>> from dpsynth.privacy import NoiseSource, PrivacyLedger, cdp_rho
>>> rng = np.random.default_rng(0)
>>> a = rng.integers(0, 2, 2000); codes = np.column_stack([a, a, rng.integers(0, 3, 2000)])
>>> led = PrivacyLedger(1.0, 1e-6)
>>> res = aim_measure(codes, Domain(["a", "b", "c"], [2, 2, 3]), cdp_rho(1.0, 1e-6), led, NoiseSource(1))
>>> ("a", "b") in res.selected, led.total_rho() <= cdp_rho(1.0, 1e-6)
(True, True)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import combinations
from typing import Hashable, Sequence

import numpy as np

from ..graphical import Domain
from ..graphical.estimation import GraphicalModel, NoisyTable
from ..privacy import NoiseSource, PrivacyLedger, exponential_mechanism
from . import Rows, as_rows
from .measure import RELATION, Measurement, estimate_totals, expected_total, measure_marginals

ALPHA = 0.9
MAX_CELLS = 10_000
MAX_MODEL_CELLS = 200_000
BIAS = math.sqrt(2.0 / math.pi)


@dataclass
class AIMResult:
    """What :func:`aim_measure` released and fitted."""

    measurements: list
    model: GraphicalModel
    selected: list
    totals: dict
    n_hat: float
    rounds: int
    sigmas: list = field(default_factory=list)


def workload_pairs(domain: Domain, max_cells: int = MAX_CELLS) -> list[tuple]:
    """All 2-way sets of at most ``max_cells`` cells (the missing-data paper's AIM workload)."""
    return [p for p in combinations(domain.attrs, 2) if domain.project(p).size() <= max_cells]


def _candidates(domain: Domain, workload: Sequence[tuple], max_cells: int) -> dict:
    """Downward closure of the workload (non-empty subsets) with weights w_r = Σ_s |r ∩ s|."""
    pos = {a: i for i, a in enumerate(domain.attrs)}
    out = {}
    for s in workload:
        for k in range(1, len(s) + 1):
            for r in combinations(sorted(s, key=pos.get), k):
                if domain.project(r).size() <= max_cells:
                    out[r] = 0.0
    for r in out:
        out[r] = float(sum(len(set(r) & set(s)) for s in workload))
    return out


def tables_for_fit(measurements: Sequence[Measurement], totals: dict) -> list[NoisyTable]:
    return [NoisyTable(m.attrs, m.noisy, m.sigma, totals[m.attrs]) for m in measurements]


def aim_measure(rows: Rows | np.ndarray, domain: Domain, rho: float, ledger: PrivacyLedger, source: NoiseSource, *,
                workload: Sequence[Sequence[Hashable]] | None = None, partial: bool = False,
                rounds: int | None = None, alpha: float = ALPHA, max_cells: int = MAX_CELLS,
                max_model_cells: int = MAX_MODEL_CELLS, round_iters: int = 50, final_iters: int = 500,
                step: str = "AIM") -> AIMResult:
    """AIM (``partial=False``: ``rows`` (a :class:`Rows` or a code array) are the rows to model, e.g. the complete rows) or AIM-E
    (``partial=True``: available-case tables, 1-ways with a missing cell); see the module docstring.
    Spends exactly ``rho`` (up to a relative 1e-12) on ``ledger``."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha (measurement share of ρ) must be in (0, 1), got {alpha!r}")
    d = len(domain)
    pos = {a: i for i, a in enumerate(domain.attrs)}
    workload = workload_pairs(domain, max_cells) if workload is None else \
        [tuple(sorted(s, key=pos.get)) for s in workload]
    if not workload:
        workload = [(a,) for a in domain.attrs]
    cands = _candidates(domain, workload, max_cells)
    w_max = max(cands.values())
    T = int(rounds) if rounds is not None else 16 * d
    sigma = math.sqrt(T / (2.0 * alpha * rho))
    eps = math.sqrt(8.0 * (1.0 - alpha) * rho / T)
    spent = []  # ρ of every spend, summed with fsum

    # line 4: every 1-way table
    one = [(a,) for a in domain.attrs]
    rho_one = d / (2.0 * sigma ** 2)
    if rho_one > rho:
        raise ValueError(f"rounds={T} is too few for {d} columns: the 1-way tables alone would cost more than "
                         f"the budget; use rounds >= {math.floor(alpha * d) + 1} (default 16·d = {16 * d})")
    rows = as_rows(rows, domain.shape)
    measurements = measure_marginals(rows, domain, one, ledger, source, f"{step}: 1-way marginals", rho=rho_one,
                                     with_missing=partial)
    spent.append(rho_one)
    totals, n_hat = estimate_totals(measurements, partial)
    model = GraphicalModel(domain, one).fit(tables_for_fit(measurements, totals), iters=final_iters)
    idx = {a: j for j, a in enumerate(domain.attrs)}
    truth = {r: t.astype(float) for r, t in zip(cands, rows.tables([idx[a] for a in r] for r in cands))}
    selected, sigmas, t = [], [], 0
    while True:
        left = rho - math.fsum(spent)
        if left <= rho * 1e-12:
            break
        t += 1
        last = left < 2.0 * (1.0 / (2.0 * sigma ** 2) + eps ** 2 / 8.0)
        if last:
            left *= 1.0 - 1e-12
            sigma = math.sqrt(1.0 / (2.0 * alpha * left))
            eps = math.sqrt(8.0 * (1.0 - alpha) * left)
        rho_sel, rho_meas = eps ** 2 / 8.0, 1.0 / (2.0 * sigma ** 2)
        used = math.fsum(spent) + rho_sel + rho_meas
        limit = max_model_cells * used / rho
        # a candidate inside the model's cliques leaves its size unchanged, so it always qualifies
        # (every 1-way does): the candidate set is never empty
        names = [r for r in cands if _fits(model, r, max(limit, model.jt.size()))]
        est = _estimates(model, names)
        scores = np.array([cands[r] * (np.abs(truth[r] - expected_total(r, totals, n_hat) * est[r]).sum()
                                       - BIAS * sigma * truth[r].size) for r in names])
        k = exponential_mechanism(scores, rho=rho_sel, sensitivity=w_max, ledger=ledger, source=source,
                                  step=f"{step}: select round {t}", relation=RELATION,
                                  note="workload-weighted L1 error of the model, minus the expected noise")
        spent.append(rho_sel)
        r = names[k]
        (m,) = measure_marginals(rows, domain, [r], ledger, source, f"{step}: measure {'×'.join(r)} (round {t})",
                                 rho=rho_meas)
        spent.append(rho_meas)
        measurements.append(m)
        selected.append(r)
        sigmas.append(sigma)
        before = est[r] * expected_total(r, totals, n_hat)
        totals, n_hat = estimate_totals(measurements, partial)
        if not any(set(r) <= set(c) for c in model.cliques):
            model = model.extend([r])
        model.fit(tables_for_fit(measurements, totals), iters=round_iters)
        after = model.marginal(r) * expected_total(r, totals, n_hat)
        if last:
            break
        if np.abs(after - before).sum() <= BIAS * sigma * before.size:
            sigma /= 2.0
            eps *= 2.0
    model.fit(tables_for_fit(measurements, totals), iters=final_iters)
    return AIMResult(measurements, model, selected, totals, n_hat, t, sigmas)


def _fits(model: GraphicalModel, r: tuple, limit: float) -> bool:
    if any(set(r) <= set(c) for c in model.jt.cliques):
        return model.jt.size() <= limit
    cache = model.__dict__.setdefault("_size_cache", {})
    if r not in cache:
        cache[r] = GraphicalModel.size_of(model.domain, list(model.cliques) + [r])
    return cache[r] <= limit


def _estimates(model: GraphicalModel, names) -> dict:
    pairs = [r for r in names if len(r) == 2]
    out = model.pair_marginals(pairs)
    for r in names:
        if r not in out:
            out[r] = model.marginal(r) if any(set(r) <= set(c) for c in model.jt.cliques) else \
                _higher_order(model, r)
    return out


def _higher_order(model: GraphicalModel, r: tuple) -> np.ndarray:
    """p̂(r) for a set of three or more attributes outside every clique: from a model with r added
    (same distribution: the new potential is zero)."""
    return model.extend([r]).marginal(r)
