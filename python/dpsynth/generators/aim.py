"""AIM (McKenna, Mullins, Sheldon & Miklau, "AIM: An Adaptive and Iterative Mechanism for
Differentially Private Synthetic Data", VLDB 2022, Algorithm 1) and AIM-E (AIM with partial
marginal observation; Mohapatra et al., PVLDB 2024, §4.2 and its full version).

The workload is every 2-way marginal of at most ``max_cells`` cells (the missing-data paper's AIM
setting), weight 1. The loop — 1-way tables first, then rounds of exponential-mechanism selection
(Alg. 1, line 11), Gaussian measurement (line 12), warm-started mirror descent (line 13) and
budget annealing (lines 14–16), the last round spending exactly what is left (lines 8–10) — is
:func:`dpsynth.marginals.aim.aim_measure`, whose docstring gives the scores, their sensitivity and
the zCDP accounting; all of it is charged in ρ to this generator's ledger.

``missing="complete-rows"`` (method ``"aim"``, the paper's AIM baseline) models the rows observed
on every column; ``missing="partial"`` (method ``"aim-e"``) measures each marginal over the rows
that observe it. Sensitivity argument for AIM-E (add/remove one row): a row adds 1 to exactly one
cell of a table over attribute set r if it is observed on r, and nothing otherwise, so each
available-case table has L1 and L2 sensitivity ≤ 1 whatever the missingness pattern, exactly as a
complete-row table; the selection score w_r(‖x_r − t̂_r p̂_r‖₁ − √(2/π)σ|Ω_r|) reads the data only
through x_r (t̂_r, p̂_r from released tables), so its sensitivity is max_r w_r as in AIM. The
guarantee is therefore AIM's, unchanged: ρ-zCDP for ρ = cdp_rho(ε, δ), hence (ε, δ)-DP.

Measured (``bench/aim.py``, shared 2-core machine under load 3–4.5, ε = 1, δ = 1e-9): on Adult's
30,162 complete rows AIM runs 31 rounds in 40–58 s with 2-way TVD 0.034–0.036 (seeds 1, 2; the
paper's binning), MST in 3–6 s with 0.045. Without the within-bin refinement (``refine_share=0``)
the same runs give 0.067 and 0.077: the paper-binned TVD has a floor of 0.042 when values are placed
uniformly inside the schema's bins (the complete rows themselves, encoded and decoded so, score
0.042). On 8,000 Adult rows with 20 % MCAR cells (0.8¹⁵ ≈ 3.5 % complete): AIM-E 0.080, AIM on the
complete rows 0.485.

The synthetic data are complete: n̂ rows by default (complete rows for ``"aim"``, all rows N for
``"aim-e"``, each estimated from the noisy totals).

Example
-------
>>> import dpsynth
>>> df, schema = dpsynth.load_dataset("adult")
>>> gen = AIM(1.0, 1e-9, missing="partial", rounds=20, max_model_cells=20000).fit(df.head(3000), schema, seed=1)
>>> res = gen.sample(n=50, seed=2)
>>> res.method, res.datasets[0].shape, res.ledger.total_epsilon() <= 1.0
('aim-e', (50, 15), True)
"""
from __future__ import annotations

from ..marginals.aim import ALPHA, MAX_CELLS, MAX_MODEL_CELLS, aim_measure
from functools import partial

from ..validation import check_count, check_int, check_number
from .marginal_model import MARGINAL_CHECKS, MarginalModelGenerator

_CHECKS = {**MARGINAL_CHECKS, "rounds": partial(check_int, minimum=1, allow_none=True),
           "max_cells": check_count, "max_model_cells": check_count, "round_iters": check_count,
           "final_iters": check_count,
           "alpha": partial(check_number, low=0.0, high=1.0, low_open=True, high_open=True,
                            what="in (0, 1) (the measurement share of each round, e.g. 0.9)")}


class AIM(MarginalModelGenerator):
    """AIM / AIM-E; see the module docstring.

    Parameters
    ----------
    epsilon, delta : the (ε, δ) budget (δ required, e.g. 1e-9), converted to ρ-zCDP.
    missing : ``"complete-rows"`` (AIM, default) or ``"partial"`` (AIM-E).
    rounds : T, the planned number of rounds (default 16·d), which sets the initial σ and ε.
    max_cells : largest workload marginal, in cells (default 10,000).
    max_model_cells : model-size limit in junction-tree cells (default 200,000; the reference's
        80 MB is 10⁷ cells and takes hours).
    round_iters, final_iters : mirror-descent iterations per round and at the end.
    alpha : share of each round's ρ for measurement (0.9).
    refine_share : share of ρ for within-bin numeric histograms (:mod:`dpsynth.generators.marginal_model`).
    """

    def __init__(self, epsilon: float, delta: float | None = None, missing: str = "complete-rows",
                 rounds: int | None = None, max_cells: int = MAX_CELLS, max_model_cells: int = MAX_MODEL_CELLS,
                 round_iters: int = 50, final_iters: int = 500, alpha: float = ALPHA, refine_share: float = 0.05):
        super().__init__(epsilon, delta, missing, refine_share)
        self._set_params(locals(), _CHECKS)

    @property
    def method(self) -> str:
        return "aim-e" if self.missing == "partial" else "aim"

    def _measure(self, codes, domain, rho, source):
        res = aim_measure(codes, domain, rho, self.ledger, source, partial=self.missing == "partial",
                          rounds=self.rounds, alpha=self.alpha, max_cells=self.max_cells,
                          max_model_cells=self.max_model_cells, round_iters=self.round_iters,
                          final_iters=self.final_iters, step="AIM-E" if self.missing == "partial" else "AIM")
        self.model_, self.n_ = res.model, res.n_hat
        self.selected_, self.measurements_ = res.selected, res.measurements
        self.diagnostics_ = {"rounds": res.rounds, "sigmas": res.sigmas, "model_cells": res.model.jt.size()}
