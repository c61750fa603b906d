"""MST (McKenna, Miklau & Sheldon, "Winning the NIST Contest", JPC 2021, §4 and Algorithm 1).

1. ρ = cdp_rho(ε, δ), split in thirds (Alg. 1, line 1).
2. All 1-way marginals are measured with ρ/3 (one discrete Gaussian, L2 sensitivity √d; line 2).
3. Selection with ρ/3 (lines 3–4, :func:`dpsynth.marginals.mst.mst_select`): every pair is scored by
   the L1 error of the independence model of the noisy 1-ways on its true 2-way table (sensitivity 1),
   and a maximum spanning tree is built edge by edge with d − 1 exponential mechanisms.
4. The d − 1 tree edges are measured with ρ/3 (line 5), and a graphical model is fitted to all
   measurements by mirror descent (Private-PGM, line 6; :mod:`dpsynth.graphical.estimation`).
5. Synthetic rows are sampled from the model (line 7); n defaults to the model's n̂ (noisy totals).

Privacy: add/remove one row; every spend in ρ on the ledger (:mod:`dpsynth.generators.marginal_model`
for missing values and the budget). Deviations from the reference (documented in
:mod:`dpsynth.marginals.mst`): no domain compression; the independence model for selection is the
clipped, normalised 1-ways.

Example
-------
>>> import dpsynth
>>> df, schema = dpsynth.load_dataset("adult")
>>> gen = MST(1.0, 1e-9).fit(df.head(3000), schema, seed=1)
>>> res = gen.sample(n=50, seed=2)
>>> res.datasets[0].shape, len(gen.selected_), res.ledger.total_epsilon() <= 1.0  # education is derived: 14 modelled
((50, 15), 13, True)
"""
from __future__ import annotations

from ..graphical.estimation import GraphicalModel
from ..marginals.aim import tables_for_fit
from ..marginals.measure import estimate_totals, measure_marginals
from ..marginals.mst import mst_select
from .marginal_model import MARGINAL_CHECKS, MarginalModelGenerator


class MST(MarginalModelGenerator):
    """MST; see the module docstring.

    Parameters
    ----------
    epsilon, delta : the (ε, δ) budget (δ required, e.g. 1e-9), converted to ρ-zCDP.
    missing : ``"complete-rows"`` (default) or ``"partial"`` (available-case tables).
    refine_share : share of ρ for within-bin numeric histograms (:mod:`dpsynth.generators.marginal_model`).
    iters : mirror-descent iterations of the final fit (default 300; on Adult, 1000 give the same TVD in 2.5× the time).
    """

    method = "mst"

    def __init__(self, epsilon: float, delta: float | None = None, missing: str = "complete-rows",
                 iters: int = 300, refine_share: float = 0.05):
        super().__init__(epsilon, delta, missing, refine_share)
        self._set_params(locals(), MARGINAL_CHECKS)

    def _measure(self, codes, domain, rho, source):
        partial = self.missing == "partial"
        one_way, edges = mst_select(codes, domain, rho, self.ledger, source, split=(1 / 3, 1 / 3), step="MST")
        measured = measure_marginals(codes, domain, edges, self.ledger, source, "MST: tree marginals",
                                     rho=self.rho_budget_ - self.ledger.total_rho()) if edges else []
        measurements = one_way + measured
        totals, n_hat = estimate_totals(measurements, partial)
        self.model_ = GraphicalModel(domain, edges).fit(tables_for_fit(measurements, totals), iters=self.iters)
        self.selected_, self.n_ = list(edges), n_hat
        self.measurements_ = measurements
