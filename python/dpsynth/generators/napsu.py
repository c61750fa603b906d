"""NAPSU-MQ: noise-aware private synthetic data from marginal queries (Räisä, Jälkö, Kaski & Honkela,
AISTATS 2023, Algorithm 1), with missing data.

**Model.** On the schema's discrete domain (categories; numeric columns binned by the schema's public
bins), the maximum-entropy distribution matching a set of marginal queries C_1..C_K is the
log-linear model p(x | θ) = exp(θᵀa(x) − A(θ)) with canonical (identifiable) statistics a(x)
(:class:`dpsynth.graphical.MaxEntModel`; paper eq. 4 and Supp. C). A(θ), the table marginals μ and
second moments come from junction-tree message passing in torch, exact for low tree-width.

**Release and privacy.** Neighbouring relation: add/remove one row. Each released marginal table has
L2 sensitivity 1 (a row adds 1 to at most one cell), so T tables released together have Δ₂ = √T.
(The paper uses substitution with Δ₂ = √(2K); a substitution is a removal plus an addition, so this
guarantee implies the substitution one with twice the ε of a single step — group privacy of size 2.)
Add/remove is MST's relation, it keeps available-case tables (missing data) at sensitivity 1, and it
does not treat n as public: n is estimated from the noisy table totals and gets a posterior.

- ``queries=[("a", "b"), ...]``: one discrete Gaussian mechanism on all full tables, σ by the
  analytic Gaussian calibration at (ε, δ) with Δ₂ = √K.
- ``queries="mst"``: (ε, δ) → ρ (``cdp_rho``); private-pgm's MST (:mod:`dpsynth.generators.mst`):
  1-way tables with ρ/3, edge selection by exponential mechanisms with ρ/3 in total, the selected
  2-way tables (and ``forced_queries``) with ρ/3. All spends are charged in ρ to one ledger, which
  converts Σρ to (ε, δ) once. The 1-way tables enter the likelihood as well.

Full tables are released (every cell, not only the canonical ones): this costs nothing extra under
add/remove and keeps the information of the reference cells.

**Likelihood** (paper eq. 6, CLT for a sum of n indicator vectors plus Gaussian noise), over all
released cells ŷ (length P):

    ŷ | θ, n ~ N(n ∘ μ(θ), N ∘ Cov(θ) + diag σ²),

with μ and Cov = E[aaᵀ] − μμᵀ over the released cells, n the number of rows counted by each table
and N_ij the rows shared by the tables of cells i and j: N_ij = min(n̂_i, n̂_j)·√(r_i r_j) with n̂
the noisy table totals (released) and r = n/n̂ (≈ 1). Within a table N = n exactly; across tables
min(n̂_i, n̂_j) is exact when one table's rows contain the other's and an upper bound otherwise (it
errs towards treating tables as more redundant). The form is smooth in n (a plain min(n_i, n_j) has
kinks that stall the optimiser) and keeps N ∘ Cov positive semi-definite (a Hadamard product of
PSD matrices).
The discrete Gaussian noise has variance slightly below σ²; the likelihood uses σ². Prior: θ ~
N(0, prior_sd² I) (paper: 10); each log n gets N(log n₀, 5²) around the released total n₀: as
vague as the scale-invariant p(n) ∝ 1/n wherever n is well measured, but proper, so the posterior
has a mode even when the noisy totals of a tiny table are near or below 0 (where p ∝ 1/n is not).

**Posterior.** All three start from the Laplace approximation: mode by Fisher scoring, finished by
L-BFGS preconditioned with the Fisher information (restarts from perturbed starts when it diverges),
Hessian by autograd (4th derivatives of A through message passing).

- ``inference="slice"`` (default): elliptical slice sampling (Murray et al. 2010) with the Laplace
  Gaussian as the reference: exact MCMC, gradient-free, 20 chains run as one batch; the last states
  of the chains become the datasets' parameter draws. Split-R̂ and bulk ESS in ``diagnostics_``
  (over θ, and over the released cells' probabilities, which is what the data depend on).
  Known limitation: on Adult (150 parameters) the default 36 iterations per chain do not mix (split
  R̂ of the cell probabilities 3–4, bulk ESS ≈ the number of chains; ten times more iterations
  barely change it). The Laplace reference is the cause: at its own draws log p − log N has sd ~10⁵
  (one-sided, prior-dominated directions of near-empty cells), and even with its variance capped the
  chains move in small steps. The chains' end states are nevertheless spread like the posterior in
  the directions that matter: the pooled intervals cover the real coefficients at 0.96 (10 runs,
  width 1.3–3.7× the real-data ones; ``pytest -m slow``). Check ``diagnostics_`` on your data.
- ``inference="laplace"``: draws from N(mode, H⁻¹) only. Fast and calibrated when every measured
  cell is well above the noise (the toy problem), but on data with rare cells (Adult) it is far too
  wide: a near-empty cell's parameter has a prior-dominated Laplace sd (≈ prior_sd) while the
  posterior stops at a wall (the cell count cannot exceed its noisy value by much), so Gaussian draws
  inflate such cells by orders of magnitude and the pooled intervals become ~10× too wide (the
  paper, Sec. 5.2, also found the Laplace approximation unsuitable for Adult).
- ``inference="mcmc"``: HMC with the Laplace covariance as inverse mass matrix (whitened
  coordinates), chains run as one batch, step size by dual averaging; exact but slow on Adult (each
  gradient needs third derivatives of A, and the walls force small steps).

**Synthetic data.** ``sample(n, m)``: m posterior draws of θ, and n rows from p(x | θ_j) for each,
all m sampled in one forward pass through the junction tree. Combine analyses with the rules for
fully synthetic data (``dpsynth.fit_pooled(..., rule="synthetic")``).

**Missing data** (``missing=``):

- ``"available-case"`` (default): each table counts the rows observed on its columns
  (``count_marginal``), and each table has its own n in the likelihood. The synthetic data are
  complete and estimate the complete-data distribution; valid when values are missing completely at
  random (MCAR).
- ``"level"``: a missing value is an extra level of each column in ``incomplete`` (public
  knowledge: an option, never read from the data; default every column). Every row counts in every
  table (one n). The synthetic data carry the missingness pattern (NA where the model draws the NA
  level), so an analyst can impute each synthetic dataset (r times) and pool in two stages: rule
  "mi" over the imputations of each synthetic dataset, then rule "synthetic" over the m datasets
  (``dpsynth.pool``). A column declared complete that holds missing values is an error.

Example
-------
>>> import numpy as np, pandas as pd, dpsynth
>>> rng = np.random.default_rng(0)
>>> x1, x2 = rng.integers(0, 2, 2000), rng.integers(0, 2, 2000)
>>> y = (rng.random(2000) < 1 / (1 + np.exp(-x1))).astype(int)
>>> df = pd.DataFrame({"x1": x1, "x2": x2, "y": y})
>>> schema = dpsynth.Schema.from_dict({c: {"type": "categorical", "categories": [0, 1]} for c in df})
>>> gen = NAPSUMQ(1.0, 1 / 2000**2, queries=[("x1", "x2", "y")]).fit(df, schema, seed=1)
>>> res = gen.sample(m=3, seed=2)
>>> len(res.datasets), res.datasets[0].shape[1], res.ledger.total_epsilon() <= 1.0
(3, 3, True)
"""
from __future__ import annotations

import contextlib
import math
import time

import numpy as np
import torch

from ..graphical import Domain, MaxEntModel
from ..graphical.posterior import elliptical_slice, hmc, laplace_approximation
from ..privacy import cdp_rho
from ..schema import MISSING
from .base import Generator, check_count
from .mst import Measurement, measure_marginals, mst_select

DTYPE = torch.float64
INFERENCE = ("laplace", "mcmc", "slice")
LOG_N_PRIOR_SD = 5.0  # prior sd of log n around the released total (see the module docstring)
#: chains, warm-up iterations, kept draws per chain, thinning: HMC ("mcmc") and elliptical slice ("slice")
MCMC_DEFAULTS = {"mcmc": (4, 150, 100, 1), "slice": (20, 20, 8, 2)}
MISSING_MODES = ("available-case", "level")


@contextlib.contextmanager
def _single_thread():
    """Message passing runs many tiny tensor ops; one torch thread is much faster than two
    contending ones (and leaves the other core to the caller)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


class NoiseAwareLikelihood:
    """Log-posterior of NAPSU-MQ over x = (θ, v): θ ∈ R^D canonical parameters, v ∈ R^G the row
    counts n_g = n0_g·exp(s_g v_g) of the G count groups (one per table for available-case counting,
    one in all for ``missing="level"``), scaled so that v is O(1). See the module docstring."""

    def __init__(self, model: MaxEntModel, measurements: list[Measurement], groups: list[int], prior_sd: float):
        self.model = model
        self.D = model.D
        self.y = torch.as_tensor(np.concatenate([m.noisy.ravel() for m in measurements]), dtype=DTYPE)
        self.sigma2 = torch.as_tensor(np.concatenate([np.full(m.noisy.size, m.sigma ** 2) for m in measurements]),
                                      dtype=DTYPE)
        if self.y.numel() != model.P:
            raise ValueError("measurements do not match the model's tables")
        self.G = max(groups) + 1
        table_of_cell = np.concatenate([np.full(m.noisy.size, k) for k, m in enumerate(measurements)])
        self.group_of_cell = torch.as_tensor(np.asarray(groups)[table_of_cell])
        # n0: inverse-variance weighted noisy totals of the group's tables; s: their relative sd
        n0, s = [], []
        for g in range(self.G):
            tot = [(m.total, m.noisy.size * m.sigma ** 2) for m, gg in zip(measurements, groups) if gg == g]
            w = np.array([1.0 / v for _, v in tot])
            est = float(np.sum(w * np.array([t for t, _ in tot])) / w.sum())
            est = max(est, 1.0)
            n0.append(est)
            s.append(max(math.sqrt(1.0 / w.sum()), math.sqrt(est)) / est)
        self.n0 = torch.as_tensor(n0, dtype=DTYPE)
        self.scale = torch.as_tensor(s, dtype=DTYPE)
        self.n0_cell = self.n0[self.group_of_cell]
        self.n0_overlap = torch.minimum(self.n0_cell[:, None], self.n0_cell[None, :])
        self.prior_sd = float(prior_sd)
        self.dim = self.D + self.G

    def counts(self, x: torch.Tensor) -> torch.Tensor:
        """Row counts n_g of the count groups at x (…, G)."""
        return self.n0 * torch.exp(self.scale * x[..., self.D:])

    def _terms(self, x: torch.Tensor):
        """(log-likelihood, μ, Cov, n per cell, Cholesky factor of V) at x (batched)."""
        theta = x[..., :self.D]
        n_cell = self.counts(x)[..., self.group_of_cell]
        mu, second = self.model.moments(theta)
        cov = second - mu.unsqueeze(-1) * mu.unsqueeze(-2)
        root = torch.sqrt(n_cell / self.n0_cell)
        overlap = self.n0_overlap * root.unsqueeze(-1) * root.unsqueeze(-2)
        v = overlap * cov + torch.diag(self.sigma2)
        chol, info = torch.linalg.cholesky_ex(v)
        bad = info != 0
        if bool(bad.any()):  # numerically indefinite (extreme θ): zero density there
            eye = torch.diag(self.sigma2).expand_as(v)
            chol, _ = torch.linalg.cholesky_ex(torch.where(bad[..., None, None], eye, v))
        r = self.y - n_cell * mu
        z = torch.linalg.solve_triangular(chol, r.unsqueeze(-1), upper=False).squeeze(-1)
        ll = -0.5 * (z ** 2).sum(-1) - torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1) \
            - 0.5 * self.y.numel() * math.log(2 * math.pi)
        return torch.where(bad, torch.full_like(ll, -math.inf), ll), mu, cov, n_cell, chol

    def log_likelihood(self, x: torch.Tensor) -> torch.Tensor:
        return self._terms(x)[0]

    def log_prior(self, x: torch.Tensor) -> torch.Tensor:
        """N(0, prior_sd²) on θ; log n_g ~ N(log n0_g, LOG_N_PRIOR_SD²), i.e. s_g·v_g ~ N(0, 5²)."""
        theta = x[..., :self.D]
        logn = self.scale * x[..., self.D:]
        return -0.5 * (theta ** 2).sum(-1) / self.prior_sd ** 2 - 0.5 * (logn ** 2).sum(-1) / LOG_N_PRIOR_SD ** 2

    def log_posterior(self, x: torch.Tensor) -> torch.Tensor:
        return self.log_likelihood(x) + self.log_prior(x)

    def initial_point(self, measurements: list[Measurement], max_iter: int = 50) -> torch.Tensor:
        """Start for the mode search: θ matching the (clipped, smoothed) noisy clique proportions q by
        maximum entropy — the concave problem max θᵀq − A(θ) − λ|θ|²/2 — solved by Newton's method
        (gradient q − μ − λθ, Hessian −(Cov + λI)); v = 0. Noisy (or, with available-case tables
        under MAR, systematically) inconsistent tables can put q outside the marginal polytope, where
        the unpenalised solution runs off to infinity: λ = 1e-4 (per observation) keeps it finite."""
        by_attrs = {m.attrs: m for m in measurements}
        q = []
        for c, cells in zip(self.model.cliques, self.model.canonical):
            t = np.clip(by_attrs[c].noisy.astype(float).ravel(), 0.0, None) + 0.5
            q.append(t[cells] / t.sum())
        q = torch.as_tensor(np.concatenate(q), dtype=DTYPE)
        ridge = max(1e-4, 1.0 / (self.prior_sd ** 2 * float(self.n0.mean())))
        can = self.model.canonical_index
        eye = torch.eye(self.D, dtype=DTYPE)

        def objective(th):
            return float(th @ q - self.model.log_partition(th) - 0.5 * ridge * (th ** 2).sum())

        theta = torch.zeros(self.D, dtype=DTYPE)
        with torch.no_grad():
            f = objective(theta)
            for _ in range(max_iter):
                mu, second = self.model.moments(theta)
                mu_c = mu[can]
                cov = second[can][:, can] - mu_c[:, None] * mu_c[None, :]
                grad = q - mu_c - ridge * theta
                step = torch.linalg.solve(cov + ridge * eye, grad)
                t = 1.0
                while t > 1e-6:
                    f_new = objective(theta + t * step)
                    if f_new >= f - 1e-12:
                        break
                    t *= 0.5
                theta, f_old, f = theta + t * step, f, f_new
                if float(grad @ step) < 1e-10 or abs(f - f_old) < 1e-12:
                    break
        return torch.cat([theta, torch.zeros(self.G, dtype=DTYPE)])

    def mode(self, x0: torch.Tensor, max_iter: int = 100) -> tuple[torch.Tensor, torch.Tensor]:
        """Approach the posterior mode by Fisher scoring with backtracking: step F⁻¹∇log p, where
        F = JᵀV⁻¹J + prior precision and J = ∂(n∘μ)/∂x (columns n_i·Cov(a_i, a_θ) for θ and
        n_i·s_g·μ_i for v_g); the term of V's dependence on x is left out of F (it only preconditions)
        but not of ∇. Returns (x, F at x); the Laplace step finishes with L-BFGS preconditioned by F."""
        x = x0.detach().clone()
        can = self.model.canonical_index
        prior = torch.cat([torch.full((self.D,), self.prior_sd ** -2, dtype=DTYPE),
                           self.scale ** 2 / LOG_N_PRIOR_SD ** 2])
        onehot = torch.nn.functional.one_hot(self.group_of_cell, self.G).to(DTYPE)
        for _ in range(max_iter):
            xr = x.clone().requires_grad_(True)
            ll, mu, cov, n_cell, chol = self._terms(xr)
            lp_x = ll + self.log_prior(xr)
            if not bool(torch.isfinite(lp_x)):
                break
            (g,) = torch.autograd.grad(lp_x, xr)
            lp = float(lp_x.detach())
            with torch.no_grad():
                mu, cov, n_cell, chol = mu.detach(), cov.detach(), n_cell.detach(), chol.detach()
                jac = torch.cat([n_cell[:, None] * cov[:, can], (n_cell * mu)[:, None] * onehot * self.scale], dim=1)
                w = torch.linalg.solve_triangular(chol, jac, upper=False)
                fisher = w.T @ w + torch.diag(prior) + 1e-10 * torch.eye(self.dim, dtype=DTYPE)
                step = torch.linalg.solve(fisher, g)
                t = 1.0
                while t > 1e-8:
                    lp_new = float(self.log_posterior(x + t * step))
                    if math.isfinite(lp_new) and lp_new >= lp - 1e-9:
                        break
                    t *= 0.5
                else:
                    break
                x = x + t * step
            if float(g @ step) < 1e-8 or abs(lp_new - lp) < 1e-10 * max(1.0, abs(lp)):
                break
        return x, fisher


class NAPSUMQ(Generator):
    """NAPSU-MQ (see the module docstring).

    Parameters
    ----------
    epsilon, delta : the (ε, δ) budget; δ is required (e.g. 1/n²).
    queries : ``"mst"`` (private-pgm's MST selection, charged to the same ledger) or a list of column
        tuples, each a full marginal to measure (every column must appear in one).
    inference : ``"slice"`` (default: Laplace-referenced elliptical slice sampling), ``"laplace"``, or
        ``"mcmc"`` (HMC preconditioned by the Laplace covariance); see the module docstring.
    prior_sd : standard deviation of the N(0, prior_sd²) prior on θ (paper: 10).
    missing : ``"available-case"`` (default) or ``"level"`` (missing as an extra level).
    incomplete : with ``missing="level"``, the columns that may be missing (public knowledge; default all).
    forced_queries : with ``queries="mst"``, column tuples always measured (the paper forces the
        analysis' 2-way marginals); MST selects the rest.
    mcmc_chains, mcmc_warmup, mcmc_draws, mcmc_thin : sampler settings (chains run as one batch);
        None = the defaults of :data:`MCMC_DEFAULTS` for the chosen ``inference``.
    max_restarts : L-BFGS restarts allowed for the Laplace mode.
    max_cells : largest number of released cells P accepted (the likelihood needs P × P matrices).
    """

    method = "napsu-mq"
    relation = "add-remove"
    noise_aware = True  # each synthetic dataset comes from its own posterior draw
    needs_delta = True
    needs_bounds = True
    noise_aware = True  # each dataset from its own posterior draw: fit_pooled(rule="synthetic") is valid

    def __init__(self, epsilon: float, delta: float | None = None, queries="mst", inference: str = "slice",
                 prior_sd: float = 10.0, missing: str = "available-case", incomplete=None, forced_queries=None,
                 mcmc_chains: int | None = None, mcmc_warmup: int | None = None, mcmc_draws: int | None = None,
                 mcmc_thin: int | None = None, max_restarts: int = 5,
                 max_cells: int = 3000):
        super().__init__(epsilon, delta)
        if isinstance(queries, str):
            if queries != "mst":
                raise ValueError(f"queries must be 'mst' or a list of column tuples, got {queries!r}")
        else:
            queries = _as_query_list(queries, "queries")
            if not queries:
                raise ValueError("queries must list at least one column tuple, e.g. [('age', 'income')]")
        self.queries = queries
        if inference not in INFERENCE:
            raise ValueError(f"inference must be one of {INFERENCE}, got {inference!r}")
        self.inference = inference
        if isinstance(prior_sd, bool) or not isinstance(prior_sd, (int, float)) or not (prior_sd > 0 and math.isfinite(prior_sd)):
            raise ValueError(f"prior_sd must be a positive number, got {prior_sd!r}")
        self.prior_sd = float(prior_sd)
        if missing not in MISSING_MODES:
            raise ValueError(f"missing must be one of {MISSING_MODES}, got {missing!r}")
        self.missing = missing
        if incomplete is not None:
            if missing != "level":
                raise ValueError("incomplete= is used only with missing='level'")
            incomplete = [str(c) for c in ([incomplete] if isinstance(incomplete, str) else incomplete)]
        self.incomplete = incomplete
        if forced_queries is not None:
            if queries != "mst":
                raise ValueError("forced_queries is used only with queries='mst'; list them in queries instead")
            forced_queries = _as_query_list(forced_queries, "forced_queries")
        self.forced_queries = forced_queries or []
        given = dict(mcmc_chains=mcmc_chains, mcmc_warmup=mcmc_warmup, mcmc_draws=mcmc_draws, mcmc_thin=mcmc_thin)
        defaults = dict(zip(given, MCMC_DEFAULTS.get(inference, MCMC_DEFAULTS["mcmc"])))
        for k, v in given.items():
            setattr(self, k, defaults[k] if v is None else check_count(v, k))
        self.max_restarts = int(max_restarts)
        self.max_cells = check_count(max_cells, "max_cells")

    # ------------------------------------------------------------------ fitting
    def _domain(self) -> tuple[Domain, list[str]]:
        names = self.schema_.names
        sizes = list(self.schema_.domain_sizes)
        level_cols = []
        if self.missing == "level":
            level_cols = list(names) if self.incomplete is None else list(self.incomplete)
            unknown = [c for c in level_cols if c not in names]
            if unknown:
                raise ValueError(f"incomplete columns {unknown} are not in the schema")
            for c in level_cols:
                sizes[names.index(c)] += 1
        return Domain(names, sizes), level_cols

    def _check_queries(self, domain: Domain):
        names = set(domain.attrs)
        for q in ([] if self.queries == "mst" else self.queries) + self.forced_queries:
            unknown = [c for c in q if c not in names]
            if unknown:
                raise ValueError(f"query {q} names columns {unknown} that are not in the schema")
        if self.queries != "mst":
            covered = set().union(*map(set, self.queries))
            left = [c for c in domain.attrs if c not in covered]
            if left:
                raise ValueError(f"columns {left} are in no query; add a query for each (e.g. ('{left[0]}',)) or "
                                 "drop them from the data and the schema")
            cells = sum(domain.project(q).size() for q in self.queries)
        else:
            sizes = sorted((domain.size(a) * domain.size(b) for i, a in enumerate(domain.attrs)
                            for b in domain.attrs[i + 1:]), reverse=True)
            cells = sum(domain.shape) + sum(sizes[:max(len(domain) - 1, 0)]) + \
                sum(domain.project(q).size() for q in self.forced_queries)
        if cells > self.max_cells:
            raise ValueError(f"these queries release up to {cells} cells, above max_cells={self.max_cells}: the "
                             "noise-aware likelihood needs cells × cells matrices. Coarsen the schema (fewer bins or "
                             "categories), use fewer columns, or raise max_cells")

    def _fit(self, codes, data, source):
        t_start = time.perf_counter()
        domain, level_cols = self._domain()
        self._check_queries(domain)
        codes = codes.copy()
        for c in domain.attrs:
            j = domain.attrs.index(c)
            miss = codes[:, j] == MISSING
            if c in level_cols:
                codes[miss, j] = domain.size(c) - 1
            elif self.missing == "level" and miss.any():
                raise ValueError(f"column {c!r} has missing values but is not listed in incomplete=; list every "
                                 "column that may be missing")
        self.domain_, self.level_columns_ = domain, level_cols
        with _single_thread():
            measurements = self._measure(codes, domain, source)
            self._fit_posterior(measurements, source)
        self.diagnostics_["fit_seconds"] = time.perf_counter() - t_start

    def _measure(self, codes, domain, source) -> list[Measurement]:
        if self.queries == "mst":
            rho = cdp_rho(self.epsilon, self.delta)
            if len(domain) == 1:
                return measure_marginals(codes, domain, [domain.attrs], self.ledger, source,
                                         "NAPSU-MQ: marginals", rho=rho)
            one_way, cliques = mst_select(codes, domain, rho, self.ledger, source, forced=self.forced_queries,
                                          step="NAPSU-MQ MST selection")
            rho_left = rho - self.ledger.total_rho()
            two_way = measure_marginals(codes, domain, cliques, self.ledger, source, "NAPSU-MQ: 2-way marginals",
                                        rho=rho_left)
            self.selected_queries_ = cliques
            return one_way + two_way
        self.selected_queries_ = list(self.queries)
        return measure_marginals(codes, domain, self.queries, self.ledger, source, "NAPSU-MQ: marginals",
                                 epsilon=self.epsilon, delta=self.delta)

    def _fit_posterior(self, measurements, source):
        tables = [m.attrs for m in measurements]
        cliques = [m.attrs for m in measurements if not any(set(m.attrs) < set(o) for o in tables)]
        model = MaxEntModel(self.domain_, cliques, tables)
        groups = list(range(len(tables))) if self.missing == "available-case" else [0] * len(tables)
        lik = NoiseAwareLikelihood(model, measurements, groups, self.prior_sd)
        rng = source.spawn()
        x0, fisher = lik.mode(lik.initial_point(measurements))
        precondition = torch.linalg.inv(torch.linalg.cholesky(fisher)).T  # Sᵀ F S = I
        la = laplace_approximation(lik.log_posterior, x0, max_restarts=self.max_restarts, rng=rng,
                                   precondition=precondition)
        self.model_, self.likelihood_, self.laplace_ = model, lik, la
        self.measurements_ = measurements
        counts = lik.counts(la.mode).detach()
        self.n_ = float(counts.max())
        self.diagnostics_ = {"D": model.D, "P": model.P, "tables": len(tables), "cliques": len(model.cliques),
                             "junction_tree_cells": model.jt.size(), "laplace_restarts": la.restarts,
                             "laplace_evaluations": la.evaluations, "laplace_seconds": la.seconds,
                             "inference": self.inference}
        self.draws_ = None
        if self.inference == "mcmc":
            res = hmc(lik.log_posterior, la.mode, la.chol_cov, chains=self.mcmc_chains, warmup=self.mcmc_warmup,
                      draws=self.mcmc_draws * self.mcmc_thin, rng=rng)
            res.draws = res.draws[:, self.mcmc_thin - 1::self.mcmc_thin]
            self.diagnostics_.update({"accept_rate": res.accept_rate, "step_size": res.step_size,
                                      "n_leapfrog": res.n_leapfrog, "divergences": res.divergences,
                                      "gradient_evaluations": res.gradient_evaluations})
        elif self.inference == "slice":
            res = elliptical_slice(lik.log_posterior, la.mode, la.chol_cov, chains=self.mcmc_chains,
                                   warmup=self.mcmc_warmup, draws=self.mcmc_draws, thin=self.mcmc_thin, rng=rng)
            self.diagnostics_["log_density_evaluations"] = res.evaluations
        if self.inference != "laplace":
            self.draws_, self.mcmc_ = res.draws.detach(), res
            self.diagnostics_.update({"mcmc_seconds": res.seconds, "rhat_max": res.max_rhat,
                                      "ess_bulk_min": res.min_ess, "ess_per_second": res.ess_per_second,
                                      **self._cell_diagnostics(res.draws)})
        # the clamping evidence (P × P) is rebuilt on demand; do not pickle it
        model._evidence = None

    # ------------------------------------------------------------------ posterior and sampling
    def _cell_diagnostics(self, draws: torch.Tensor) -> dict:
        """R̂ and bulk ESS of the released cells' probabilities (what the synthetic data depend on;
        θ of a near-empty cell can wander in the prior's tail while its probability stays ≈ 0)."""
        from ..graphical.posterior import ess_bulk, split_rhat

        if draws.shape[1] < 4:
            return {}
        with torch.no_grad():
            probs = self.model_.table_marginals(draws[..., :self.model_.D]).numpy()
        rhat = [split_rhat(probs[:, :, j]) for j in range(probs.shape[-1])]
        ess = [ess_bulk(probs[:, :, j]) for j in range(probs.shape[-1])]
        return {"rhat_max_cells": _nan_extreme(max, rhat), "ess_bulk_min_cells": _nan_extreme(min, ess)}

    def posterior_draws(self, m: int, rng: np.random.Generator) -> torch.Tensor:
        """m draws of x = (θ, v) from the fitted posterior. Laplace: fresh Gaussian draws. MCMC:
        stored draws, spread over the chains (the last kept state of each chain first, then the ones
        before, chains in random order) so that draws for different datasets are as independent as
        the chains allow; with more datasets than stored draws, draws repeat."""
        if self.draws_ is None:
            return self.laplace_.sample(m, rng)
        chains, kept = self.draws_.shape[:2]
        order = [(c, k) for k in range(kept - 1, -1, -1) for c in rng.permutation(chains)]
        pick = [order[i % len(order)] for i in range(m)]
        return torch.stack([self.draws_[c, k] for c, k in pick])

    def sample(self, n=None, m=1, seed=None):
        """m synthetic datasets of n rows (default: the released n), each from its own posterior draw."""
        self._m_request = m
        try:
            return super().sample(n=n, m=m, seed=seed)
        finally:
            self._batch = None

    def _sample_frame(self, n, rng, index):
        if index == 0 or getattr(self, "_batch", None) is None:
            m = check_count(getattr(self, "_m_request", 1), "m")
            with _single_thread():
                theta = self.posterior_draws(m, rng)[:, :self.model_.D]
                self._batch = self.model_.sample(theta, n, rng)
        codes = self._batch[index].copy()
        for c in self.level_columns_:
            j = self.domain_.attrs.index(c)
            codes[codes[:, j] == self.domain_.size(c) - 1, j] = MISSING
        return self.schema_.decode(codes, rng)


#: The paper's Adult setting (Supp. E): 10 columns; the 2-way marginals its analysis needs.
ADULT_COLUMNS = ["age", "workclass", "education", "marital-status", "race", "sex", "capital-gain", "capital-loss",
                 "hours-per-week", "income"]
ADULT_FORCED_QUERIES = [("age", "income"), ("race", "income"), ("sex", "income"), ("race", "sex"),
                        ("hours-per-week", "income")]


def adult_reduced(df, schema):
    """The paper's discretised Adult (Räisä et al. 2023, Supp. E) as a *public* transformation of
    ``dpsynth.load_dataset("adult")``: the 10 columns above; age and hours-per-week in 5 equal-width
    buckets of the schema's public bounds (17–90, 1–99); capital gain and loss as positive-or-not.
    Returns (DataFrame of categoricals, Schema); missing values are kept. Bucket labels are the bucket
    midpoints (the paper's analysis uses age as the midpoint).

    >>> import dpsynth
    >>> d, s = adult_reduced(*dpsynth.load_dataset("adult"))
    >>> s.domain_sizes
    [5, 8, 16, 7, 5, 2, 2, 2, 5, 2]
    """
    import pandas as pd

    from ..schema import Schema

    out, spec = {}, {}
    for c in ADULT_COLUMNS:
        col = schema[c]
        if c in ("age", "hours-per-week"):
            edges = np.linspace(col.lower, col.upper, 6)
            mids = [f"{(a + b) / 2:g}" for a, b in zip(edges[:-1], edges[1:])]
            code = np.clip(np.searchsorted(edges, df[c].to_numpy(dtype=float), side="right") - 1, 0, 4)
            vals = np.where(df[c].isna(), None, np.array(mids, dtype=object)[code])
            out[c], spec[c] = vals, mids
        elif c in ("capital-gain", "capital-loss"):
            x = df[c].to_numpy(dtype=float)
            out[c] = np.where(np.isnan(x), None, np.where(x > 0, "positive", "zero"))
            spec[c] = ["zero", "positive"]
        else:
            out[c] = df[c].astype(object).where(df[c].notna(), None).to_numpy()
            spec[c] = list(col.categories)
    frame = pd.DataFrame({c: pd.Categorical(out[c], categories=spec[c]) for c in ADULT_COLUMNS}, index=df.index)
    sch = Schema.from_dict({"name": "adult-reduced", "columns": {
        c: {"type": "categorical", "categories": spec[c],
            "source": "public transformation of the adult schema (Räisä et al. 2023, Supp. E)"} for c in ADULT_COLUMNS}})
    return frame, sch


def _nan_extreme(fn, values) -> float:
    finite = [float(v) for v in values if np.isfinite(v)]
    return fn(finite) if finite else float("nan")


def _as_query_list(queries, name) -> list[tuple]:
    if isinstance(queries, (str, bytes)) or not hasattr(queries, "__iter__"):
        raise TypeError(f"{name} must be a list of column tuples such as [('age', 'income')], got {queries!r}")
    out = []
    for q in queries:
        if isinstance(q, str):
            q = (q,)
        if not hasattr(q, "__iter__"):
            raise TypeError(f"each entry of {name} must be a tuple of column names, got {q!r}")
        q = tuple(str(c) for c in q)
        if not q:
            raise ValueError(f"{name} contains an empty query; each query needs at least one column")
        if len(set(q)) != len(q):
            raise ValueError(f"query {q} names a column twice")
        if any(set(q) == set(o) for o in out):
            raise ValueError(f"{name} lists the marginal {q} twice; list each set of columns once")
        out.append(q)
    return out
