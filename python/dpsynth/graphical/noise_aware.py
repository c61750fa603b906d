"""The noise-aware likelihood of NAPSU-MQ (Räisä, Jälkö, Kaski & Honkela, AISTATS 2023, eq. 6) and
the split of the zCDP budget ρ between selection and measurement.

**Likelihood.** Released tables ŷ (P cells, each with discrete Gaussian noise of variance σ_i²) of
a max-ent model p(x | θ) (:class:`MaxEntModel`, D canonical parameters). By the CLT for a sum of n
indicator vectors plus independent Gaussian noise,

    ŷ | θ, n ~ N(n ∘ μ(θ), N ∘ Cov(θ) + diag σ²),                                     (eq. 6)

with μ and Cov = E[aaᵀ] − μμᵀ over the released cells and N the number of rows two cells'
tables share. Two forms are implemented; both are exact evaluations of eq. 6.

- **Reduced** (one count group: complete data, or missing values as a level). Every released cell
  indicator is a fixed linear map of the canonical statistics, a_P(x) = B a_D(x) + c (B integer,
  from inclusion–exclusion; independent of θ), so ŷ = B_a s_a + e with s_a = (Σ_r a_D(x_r), n),
  B_a = [B, c] and e ~ N(0, W⁻¹). Its generalised least-squares estimate ŝ = M B_aᵀ W ŷ,
  M = (B_aᵀ W B_a)⁻¹, is sufficient for s_a, and

      ŝ | θ, n ~ N(n (μ_D(θ), 1), n (Σ_D(θ) ⊕ 0) + M),

  a (D + 1)-dimensional Gaussian: only the D canonical cells are clamped in the moment pass and the
  Cholesky factor is (D + 1) × (D + 1), whatever the number of released cells.
- **Dense** (available-case tables, one count group per table): eq. 6 over all P cells with
  N_ij = min(n̂_i, n̂_j)·√(r_i r_j), n̂ the noisy table totals and r = n/n̂ (smooth in n; exact
  when one table's rows contain the other's, an upper bound otherwise).

Prior: θ ~ N(0, prior_sd² I); each log n_g ~ N(log n̂_g, 5²) around the released total (proper,
so a tiny table still has a posterior mode). Parameters x = (θ, v) with n_g = n̂_g·exp(s_g v_g),
s_g the relative sd of the total, so that every coordinate is O(1).

**Budget.** :func:`split_rho` states where ρ goes: with the cliques fixed by the analyses and
every column covered, all of ρ measures them; otherwise ``selection_share`` of ρ pays for the
1-way tables (half) and the exponential-mechanism selection (half), and the rest measures the
chosen cliques. :func:`split_measurement` weights the analyses' own tables within the measurement.

Example
-------
>>> import numpy as np, torch
>>> from dpsynth.graphical import Domain, MaxEntModel
>>> dom = Domain(["a", "b"], [2, 3])
>>> model = MaxEntModel(dom, [("a", "b")], [("a", "b"), ("a",)])
>>> tables = [np.array([[40., 10, 50], [30, 20, 50]]), np.array([100., 100])]
>>> lik = NoiseAwareLikelihood(model, tables, [2.0, 2.0], groups=[0, 0], prior_sd=2.5)
>>> lik.form, lik.dim
('reduced', 6)
>>> bool(torch.isfinite(lik.log_posterior(torch.zeros(lik.dim, dtype=torch.float64))))
True
"""
from __future__ import annotations

import math

import numpy as np
import torch
from scipy import linalg

from .chunks import map_chunks
from .expanded_v import ExpandedV, FixedMatrix
from .half_matrix import HALF_MIN_DIM, HalfMatrix
from .frozen_v import FrozenV, follow_terms
from .gaussian_tree import GaussianTree
from .maxent import MaxEntModel
from .starting_point import NEWTON_MAX_D, StartingPoint

DTYPE = torch.float64
LOG_N_PRIOR_SD = 5.0  # prior sd of log n around the released total
#: points per exact evaluation in :meth:`NoiseAwareLikelihood.log_posterior_many` (Adult-10 with all
#: ten columns incomplete, D = 298, 2,100 tree cells: 16 ms per point one at a time, 66 ms in
#: chunks of 64; the complete-data model, 513 cells: 4 ms either way up to chunks of 16)
EXACT_CHUNK = 2
#: the same for the junction-tree form (:class:`GaussianTree`): Adult-10 under MAR / with every
#: column MCAR, 0.55 / 1.2 ms per point in chunks of 32 against 1.9 / 2.7 ms one at a time
TREE_CHUNK = 32
#: ... and at most this many entries per point's largest clique block m × m in a chunk (chunk =
#: TREE_CHUNK_ELEMENTS // m², 1 to TREE_CHUNK): Adult-10 under MAR has m = 122 (chunks of 32); the
#: bundled 15-column Adult has m = 672, where a chunk of 32 (115 MB per tensor) was slower per
#: point than chunks of 1–2
TREE_CHUNK_ELEMENTS = 32 * 128 ** 2
#: the surrogate's tables-follow-θ term is soft-capped at ± this many nats (c ↦ K·tanh(c/K)). Uncapped,
#: the frozen full quadratic less the frozen table blocks is indefinite, so far from the data the
#: term can grow without bound and hold a chain in a spurious region (Adult-10 MAR, seed 0: one
#: chain stuck, 332 divergences, R̂ 1.066). On seed 3's draws the term has sd 0.78 and lies within
#: [−3.1, 3.5]; capped at 5 the importance efficiency is 0.637 against 0.642 uncapped
FOLLOW_CAP = 5.0
#: soft cap (nats) of the surrogate's linear term, raised to twice the largest value the term
#: takes over the draws it was fitted to (a fixed 25 distorted the bulk of a 376-parameter fit,
#: importance efficiency 0.35 → 0.01). A slope fitted where the chains are is a good
#: correction there but grows without bound along the slope: uncapped, with paths of π in
#: the metric's units, the 16 chains of an Adult-10 MAR fit (seed 0) followed it in one warm-up
#: window until the surrogate's log density had risen by 1,200 nats and the exact one fallen by 950
#: (θ with sd 20 under a N(0, 2.5²) prior), and the step size collapsed to 0.002
LINEAR_CAP = 25.0
#: where the reduced form's surrogate expands V⁻¹ about its reference point
#: (:meth:`NoiseAwareLikelihood._expanded_v`) instead of freezing V but for each table's own block:
#: ``"incomplete"`` for the ICIN model of incomplete data (:class:`dpsynth.graphical.icin.IcinModel`),
#: ``"always"`` or ``"never"``. The complete-data default keeps the cheaper frozen V (one
#: calibration per gradient, not two), with which it mixes and covers within its time target
EXPAND_V = "incomplete"
#: ... for the warm-up windows' surrogates too; False: only for the last window's, which the draws
#: are reweighted from. The warm-up's surrogates steer the adaptation: with V frozen they over-weight
#: prior-bounded tails by up to 17 nats (Adult-10 MAR, seed 0), the chains spend a window there and
#: the map and metric are fitted to that transient. Expanded (the code of 2026-11-28, one fit at a
#: time beside another): MAR seeds 0 / 16 23,404 → 15,238 and 12,409 → 10,004 gradients (900 → 600
#: and 900 → 500 draws per chain), MCAR seeds 2 / 8 14,674 → 9,548 and 11,864 → 10,682 (900 → 600 /
#: 700); earlier, with a first-order expansion, MCAR seed 1 had needed 12,374 against 11,607
EXPAND_V_WARMUP = True
#: the forward difference's step h·|u| in that expansion (relative error ~1e-7 against the clamped moments at 1e-5)
FD_STEP = 1e-5
#: Newton decrement at which :meth:`NoiseAwareLikelihood.mode` stops unless told otherwise
MODE_TOL = 1e-8
#: precision of the surrogates' dense products with fixed D × D matrices (V₀⁻¹ and [V₀⁻¹ | V₀⁻¹Σ₀] of ``_expanded_v``,
#: L⁻ᵀ of ``_frozen_v``), the rest staying float64: single precision halves the products' cost. Adult-10, 20 % MCAR,
#: seed 1 (a captured surrogate, 16 chains, in-process A/B, one thread): a gradient 9.97 → 8.56 ms (V expanded), 5.94 →
#: 5.48 ms (V frozen); log densities differ by at most 5e-5 nats over 1,200 posterior draws, gradients by 9e-7 relative.
#: The chains target the surrogate as computed and the importance weights use the same function, so the rounding changes
#: no guarantee. From :data:`HALF_MIN_DIM` parameters V₀⁻¹ is float16 (:class:`.half_matrix.HalfMatrix`: the same argument)
PRODUCT_DTYPE = torch.float32
#: models of at least this many parameters get Σ₀u in :meth:`NoiseAwareLikelihood._expanded_v` by a
#: forward difference at θ₀ in the tilted pass's batch, not by two products with C₀ = n₀Σ_D(θ₀) a
#: gradient (measured: :class:`dpsynth.graphical.expanded_v.ExpandedV`); smaller models (Adult-10:
#: 300–550 parameters), whose products are cheap beside the pass, keep C₀ and their studies' paths
SIGMA0_BY_PASS_MIN_DIM = 800
#: exact evaluations spent fitting the surrogate's linear term to draws (:func:`fit_draws`). A fixed
#: 1,024 left a 376-parameter fit (Adult-10 MAR, seed 11, 16 chains: 688 draws after thinning) with
#: the gradient at x_ref: sd of log p − log q over the chains' draws 1.54, against 0.83 fitted to
#: all 2,064 and 0.78 with the whitened, cross-validated ridge; importance efficiency 0.02 → 0.48
SURROGATE_FIT_DRAWS, MAX_FIT_DRAWS, MIN_FIT_DRAWS = 1024, 2048, 100
RIDGE_ALPHAS = tuple(10.0 ** k for k in range(-1, 5))  # penalties tried, on whitened x


def fit_draws(dim: int) -> int:
    """Draws the surrogate's linear term is fitted to (each needs one exact evaluation)."""
    return int(min(MAX_FIT_DRAWS, max(SURROGATE_FIT_DRAWS, 4 * (dim + 1))))


def ridge_cv(x: np.ndarray, y: np.ndarray, alphas, folds: int = 4) -> np.ndarray:
    """The coefficients of ridge regression of y on x (with an intercept) at the penalty of
    ``alphas`` whose fits to ``folds`` consecutive blocks of rows left out predict them best (mean
    R²; the first of equals): scikit-learn's ``RidgeCV(alphas, cv=KFold(folds)).fit(x, y).coef_``
    (``Ridge``'s Cholesky solver on centred data, ``GridSearchCV``'s choice), with each training
    set's Gram matrix formed once for all penalties instead of once per penalty. The surrogate's
    slope (2,048 draws × 1,026 parameters, the bundled Adult at 15 columns): 5.0 s through
    scikit-learn, 2.0 s here (both beside a running fit); the same Cholesky solves on the same
    arrays (the last fit on ``x`` itself, in its memory order), so where rows outnumber columns the
    coefficients are scikit-learn's bit for bit (``test_graphical``) and a fit's draws do not move.

    >>> rng = np.random.default_rng(0)
    >>> x = rng.normal(size=(200, 3)); y = x @ np.array([1.0, -2.0, 0.5]) + rng.normal(0, 0.1, 200)
    >>> np.round(ridge_cv(x, y, (0.1, 10.0)), 1).tolist()
    [1.0, -2.0, 0.5]
    """
    def fit(rows, alpha_list):
        xs, ys = x[rows], y[rows]
        x_mean, y_mean = xs.mean(0), ys.mean()
        xc = xs - x_mean
        gram, xty = xc.T @ xc, xc.T @ (ys - y_mean)
        out = []
        for alpha in alpha_list:
            a = gram.copy()
            a.flat[::a.shape[0] + 1] += alpha
            coef = linalg.solve(a, xty, assume_a="pos", overwrite_a=True)
            out.append((coef, y_mean - x_mean @ coef))
        return out

    n = x.shape[0]
    bounds = np.cumsum([0] + [n // folds + (1 if k < n % folds else 0) for k in range(folds)])
    scores = np.zeros(len(alphas))
    for k in range(folds):
        test = np.arange(bounds[k], bounds[k + 1])
        train = np.setdiff1d(np.arange(n), test)
        y_test = y[test]
        total = ((y_test - y_test.mean()) ** 2).sum()
        for j, (coef, intercept) in enumerate(fit(train, alphas)):
            resid = ((y_test - x[test] @ coef - intercept) ** 2).sum()
            scores[j] += (1.0 - resid / total if total > 0 else (1.0 if resid == 0 else 0.0)) / folds
    return fit(slice(None), [alphas[int(np.argmax(scores))]])[0][0]  # x itself: its memory order, as Ridge


class NoiseAwareLikelihood(StartingPoint):
    """Log-posterior of NAPSU-MQ over x = (θ, v) (see the module docstring).

    Parameters: ``model`` (its tables are the released tables, in order), ``noisy`` (one array
    per table), ``sigmas`` (noise sd per table), ``groups`` (count group of each table: all 0 for
    one n), ``prior_sd``; ``form`` = ``"auto"`` (reduced when possible), ``"reduced"`` or
    ``"dense"``.
    """

    def __init__(self, model: MaxEntModel, noisy, sigmas, groups, prior_sd: float, form: str = "auto",
                 tree: bool = True):
        self.model = model
        self.D = model.D
        y = np.concatenate([np.asarray(t, dtype=float).ravel() for t in noisy])
        if y.size != model.P:
            raise ValueError("the noisy tables do not match the model's tables")
        sigma2 = np.concatenate([np.full(np.size(t), float(s) ** 2) for t, s in zip(noisy, sigmas)])
        groups = np.asarray(groups, dtype=np.int64)
        self.G = int(groups.max()) + 1
        # n0: inverse-variance weighted noisy totals of each group's tables; scale: their relative sd
        n0, scale = [], []
        for g in range(self.G):
            tot = [(float(np.sum(t)), np.size(t) * float(s) ** 2)
                   for t, s, gg in zip(noisy, sigmas, groups) if gg == g]
            w = np.array([1.0 / v for _, v in tot])
            est = max(float(np.sum(w * np.array([t for t, _ in tot])) / w.sum()), 1.0)
            n0.append(est)
            scale.append(max(math.sqrt(1.0 / w.sum()), math.sqrt(est)) / est)
        self.n0 = torch.as_tensor(n0, dtype=DTYPE)
        self.scale = torch.as_tensor(scale, dtype=DTYPE)
        self.prior_sd = float(prior_sd)
        self.dim = self.D + self.G
        if form not in ("auto", "reduced", "dense"):
            raise ValueError(f"form must be 'auto', 'reduced' or 'dense', got {form!r}")
        reducible = self.G == 1 and model.canonical_index is not None
        if form == "reduced" and not reducible:
            raise ValueError("the reduced form needs one count group and every clique among the tables")
        self.form = "reduced" if (reducible and form != "dense") else "dense"
        table_of_cell = np.concatenate([np.full(np.size(t), k) for k, t in enumerate(noisy)])
        self._cells = (torch.as_tensor(y, dtype=DTYPE), torch.as_tensor(sigma2, dtype=DTYPE),
                       torch.nn.functional.one_hot(torch.as_tensor(table_of_cell), len(noisy)).to(DTYPE),
                       torch.as_tensor(groups[table_of_cell]))
        if self.form == "reduced":
            self._init_reduced(y, sigma2)
        else:
            self._init_dense(y, sigma2, noisy, groups)
        self.tree = GaussianTree(model, noisy, sigmas) if tree and self.G == 1 else None

    # ------------------------------------------------------------------ the two forms
    def _init_reduced(self, y, sigma2):
        """ŝ = M B_aᵀ W ŷ and M = (B_aᵀ W B_a)⁻¹, with B_a = [B, c] from :meth:`MaxEntModel.cell_map`."""
        b_int, c = self.model.cell_map()
        b_aug = torch.cat([b_int, c[:, None]], dim=1)                      # (P, D + 1)
        w = torch.as_tensor(1.0 / sigma2, dtype=DTYPE)
        info = b_aug.T @ (w[:, None] * b_aug)
        self.noise = torch.linalg.inv(info)
        self.noise = 0.5 * (self.noise + self.noise.T)
        self.y = self.noise @ (b_aug.T @ (w * torch.as_tensor(y, dtype=DTYPE)))
        self.group_of_cell = torch.zeros(self.D + 1, dtype=torch.long)
        self.theta_columns = torch.arange(self.D)

    def _init_dense(self, y, sigma2, noisy, groups):
        self.y = torch.as_tensor(y, dtype=DTYPE)
        self.noise = torch.diag(torch.as_tensor(sigma2, dtype=DTYPE))
        table_of_cell = np.concatenate([np.full(np.size(t), k) for k, t in enumerate(noisy)])
        self.group_of_cell = torch.as_tensor(groups[table_of_cell])
        n0_cell = self.n0[self.group_of_cell]
        self._n0_cell = n0_cell
        self._n0_overlap = torch.minimum(n0_cell[:, None], n0_cell[None, :])
        if self.model.canonical_index is None:
            raise ValueError("every clique must be among the released tables")
        self.theta_columns = self.model.canonical_index

    def statistics(self, theta: torch.Tensor, clamped: tuple | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, covariance) per row of the statistic the likelihood is over: (μ_D, 1) and
        Σ_D ⊕ 0 (reduced; ``clamped``: θ's clamped calibration if at hand) or μ_P and Cov_P (dense)."""
        if self.form == "reduced":
            mu, second = self.model.canonical_moments(theta, clamped=clamped)
            cov = second - mu.unsqueeze(-1) * mu.unsqueeze(-2)
            mu = torch.cat([mu, torch.ones_like(mu[..., :1])], dim=-1)
            cov = torch.nn.functional.pad(cov, (0, 1, 0, 1))
            return mu, cov
        mu, second = self.model.moments(theta)
        return mu, second - mu.unsqueeze(-1) * mu.unsqueeze(-2)

    # ------------------------------------------------------------------ density
    def counts(self, x: torch.Tensor) -> torch.Tensor:
        """Row counts n_g of the count groups at x (…, G)."""
        return self.n0 * torch.exp(self.scale * x[..., self.D:])

    def _terms(self, x: torch.Tensor, clamped: tuple | None = None):
        """(log-likelihood, mean statistic, covariance, n per cell, Cholesky factor of V), batched
        (``clamped``: :meth:`statistics`')."""
        mu, cov = self.statistics(x[..., :self.D], clamped=clamped)
        n_cell = self.counts(x)[..., self.group_of_cell]
        if self.form == "reduced":
            v = n_cell[..., :1, None] * cov + self.noise
        else:
            root = torch.sqrt(n_cell / self._n0_cell)
            v = self._n0_overlap * root.unsqueeze(-1) * root.unsqueeze(-2) * cov + self.noise
        chol, info = torch.linalg.cholesky_ex(v)
        bad = info != 0
        if bool(bad.any()):  # numerically indefinite (extreme θ): zero density there
            chol, _ = torch.linalg.cholesky_ex(torch.where(bad[..., None, None], self.noise.expand_as(v), v))
        r = self.y - n_cell * mu
        z = torch.linalg.solve_triangular(chol, r.unsqueeze(-1), upper=False).squeeze(-1)
        ll = -0.5 * (z ** 2).sum(-1) - torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1) \
            - 0.5 * self.y.numel() * math.log(2 * math.pi)
        return torch.where(bad, torch.full_like(ll, -math.inf), ll), mu, cov, n_cell, chol

    def log_likelihood(self, x: torch.Tensor) -> torch.Tensor:
        """Eq. 6 at x: by junction-tree messages (:class:`GaussianTree`) with one count group,
        else from :meth:`_terms`. The two differ by a constant in x (the reduced form is the
        density of the sufficient ŝ, the tree that of ŷ), which no posterior quantity sees."""
        if self.tree is not None:
            return self.tree.log_likelihood(x[..., :self.D], self.counts(x)[..., 0])
        return self._terms(x)[0]

    def log_prior(self, x: torch.Tensor) -> torch.Tensor:
        """N(0, prior_sd²) on θ; log n_g ~ N(log n0_g, LOG_N_PRIOR_SD²), i.e. s_g·v_g ~ N(0, 5²)."""
        theta = x[..., :self.D]
        logn = self.scale * x[..., self.D:]
        return -0.5 * (theta ** 2).sum(-1) / self.prior_sd ** 2 - 0.5 * (logn ** 2).sum(-1) / LOG_N_PRIOR_SD ** 2

    def log_prior_and_grad(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(:meth:`log_prior`, its gradient in x written out)."""
        theta, logn = x[..., :self.D], self.scale * x[..., self.D:]
        grad = torch.cat([-theta / self.prior_sd ** 2, -logn * self.scale / LOG_N_PRIOR_SD ** 2], dim=-1)
        return self.log_prior(x), grad

    def log_posterior(self, x: torch.Tensor) -> torch.Tensor:
        return self.log_likelihood(x) + self.log_prior(x)

    def log_posterior_many(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`log_posterior` of many points (n, dim), without gradients, in chunks of
        :data:`TREE_CHUNK` (junction-tree form; fewer when its largest clique block is large) or
        :data:`EXACT_CHUNK` (the clamped pass's tensors, points × D × tree cells, then stay in
        cache, where one batch of 64 would stream hundreds of MB per operation), the chunks spread
        over the machine's cores (:func:`dpsynth.graphical.chunks.map_chunks`)."""
        if self.tree is None:
            chunk = EXACT_CHUNK
        else:
            chunk = min(TREE_CHUNK, max(1, TREE_CHUNK_ELEMENTS // self.tree.largest_block ** 2))
        return torch.cat(map_chunks(self.log_posterior, x.split(chunk)))

    def surrogate(self, x_ref: torch.Tensor, draws: torch.Tensor | None = None):
        """A cheap stand-in for :meth:`log_posterior` near ``x_ref``: the same Gaussian likelihood
        with the covariance V frozen at ``x_ref`` (its Cholesky factor computed once), so that an
        evaluation needs only the mean μ(θ) — one calibration, first derivatives of A — instead of
        the clamped second moments whose gradient needs third derivatives. In the reduced form
        V⁻¹ is instead expanded about V(x_ref) (:meth:`_expanded_v`: two calibrations) for the
        models :data:`EXPAND_V` names, at the
        last warm-up window's reference point (with ``draws``) and, with :data:`EXPAND_V_WARMUP`,
        at every window's. Used as the guide of
        delayed-acceptance HMC, which corrects it to the exact posterior. Where V hardly changes
        over the posterior (common cells: nΣ is stable; rare cells: the noise dominates V) the two
        agree closely. Frozen V (:meth:`_frozen_v`): each table's own block of V (diagonal minus rank one,
        :meth:`table_log_density`) does follow θ, at O(P) per evaluation: of what separates the
        frozen-V density from the exact one, most is the within-table variance n·μ_i moving with
        μ_i (Adult-10 under MAR, seed 3, held-out draws: importance efficiency 0.25 with V frozen,
        0.66 with the tables' blocks following θ); that term is soft-capped at ±:data:`FOLLOW_CAP`
        nats so that it cannot open a spurious region far from the data. A linear term matches the
        exact gradient at ``x_ref``; with ``draws`` (a sample from near the posterior, e.g. the last warm-up window) it is instead a ridge
        fit (:meth:`_fitted_slope`) of log p − log q over at most :func:`fit_draws` of them, which matches the
        difference where the chains go rather than at one point (Adult-10, ε = 1: importance
        efficiency 0.19 in one fit before, median 0.31 over 20 fits after, bench/napsu_validity.py)."""
        x_ref = torch.as_tensor(x_ref, dtype=DTYPE).detach()
        wanted = EXPAND_V == "always" or (EXPAND_V == "incomplete" and hasattr(self.model, "incomplete"))
        expand = wanted and self.form == "reduced" and (draws is not None or EXPAND_V_WARMUP)
        base = self._expanded_v(x_ref) if expand else self._frozen_v(x_ref)  # the density before its linear term
        slope = None if draws is None else self._fitted_slope(base, x_ref, draws)
        if slope is None:  # the gradient of log p − log q at x_ref
            xr = x_ref.clone().requires_grad_(True)
            (slope,) = torch.autograd.grad(self.log_posterior(xr) - base(xr), xr)
        slope = torch.nan_to_num(slope.detach(), nan=0.0, posinf=0.0, neginf=0.0)
        # the cap leaves the term alone where the chains were: twice its largest value over draws
        reach = 0.0 if draws is None else float(((torch.as_tensor(draws, dtype=DTYPE).reshape(-1, self.dim) - x_ref)
                                                 @ slope).abs().max())
        cap = max(LINEAR_CAP, 2.0 * reach) if math.isfinite(reach) else LINEAR_CAP

        def capped(x: torch.Tensor) -> torch.Tensor:  # tanh of the linear term over its cap
            return torch.tanh(((x - x_ref) @ slope) / cap)

        def log_prob(x: torch.Tensor) -> torch.Tensor:
            return base(x) + cap * capped(x)

        if hasattr(base, "value_and_grad"):
            def value_and_grad(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                (lp, grad), t = base.value_and_grad(x), capped(x)
                return lp + cap * t, grad + (1.0 - t * t).unsqueeze(-1) * slope
            log_prob.value_and_grad = value_and_grad  # by hand: no autograd graph per gradient
        log_prob.slope, log_prob.cap = slope, cap  # the linear term, for diagnostics
        return log_prob

    def _frozen_v(self, x_ref: torch.Tensor):
        """The surrogate's density before its linear term: V frozen at ``x_ref`` but for each
        table's own block (:meth:`surrogate`): the dense form's, and where :data:`EXPAND_V` says so."""
        with torch.no_grad():
            chol = self._terms(x_ref)[4]
            tables_ref = self._frozen_tables(self._means(x_ref)[1], self.counts(x_ref))
            # z = L⁻¹r as one product: a batched triangular solve would first copy L once per row
            # of the batch (measured: 80 % of a gradient at 64 chains)
            l_inv_t = torch.linalg.solve_triangular(chol, torch.eye(chol.shape[0], dtype=DTYPE), upper=False).T
            l_inv_t = FixedMatrix(l_inv_t.to(PRODUCT_DTYPE))
        log_det = float(torch.log(torch.diagonal(chol)).sum())

        def frozen(x: torch.Tensor) -> torch.Tensor:
            mu, mu_p = self._means(x)
            n = self.counts(x)
            r = self.y - n[..., self.group_of_cell] * mu
            z = l_inv_t(r)
            # V follows θ table by table: each table's own multinomial block at x, less the same
            # block frozen at x_ref (the cross-table covariances stay frozen)
            follow = self._follow(mu_p, n, tables_ref)
            follow = FOLLOW_CAP * torch.tanh(follow / FOLLOW_CAP)
            return -0.5 * (z ** 2).sum(-1) - log_det + follow + self.log_prior(x)
        if self.form != "reduced":
            return frozen
        # the same density with its gradient by hand for the sampler (FrozenV)
        return FrozenV(self, self._cells, l_inv_t, log_det, tables_ref, FOLLOW_CAP, frozen)

    def _expanded_v(self, x_ref: torch.Tensor):
        """The reduced form's log density with rᵀV⁻¹r, r = ŝ − n(μ_D, 1), approximated from three numbers
        about V₀ = V(x_ref) and ΔV = V − V₀ = nΣ_D(θ) − n₀Σ_D(θ₀) (⊕ 0): with u = V₀⁻¹r,
        a = rᵀV₀⁻¹r, b = uᵀΔVu, c = (ΔVu)ᵀV₀⁻¹(ΔVu). In E = V₀^{-1/2}ΔVV₀^{-1/2}'s eigenbasis,
        rᵀV⁻¹r = a·E_w[1/(1 + e)] with weights w from y = V₀^{-1/2}r, mean ē = b/a and variance
        c/a − ē² ≥ 0; expanding 1/(1 + e) about ē to second order,

            rᵀV⁻¹r ≈ a/(1 + ē) + (c − b²/a)/(1 + ē)³,

        exact when E acts as a scalar on y, and never below the lower bound a/(1 + ē) (Jensen;
        1 + ē > 0 as V is positive definite), so it opens no spurious mode. ΔV enters only through
        ΔVu: Σ_D(θ)u is a forward difference of the means along a tilt by u
        (:meth:`MaxEntModel.tilted_means`), two message passes per evaluation instead of the clamped
        D × D moments (and, from :data:`SIGMA0_BY_PASS_MIN_DIM` parameters, Σ_D(θ₀)u the same
        difference at θ₀, in the tilted pass's batch). log |V| stays at log |V₀| (the linear term of
        :meth:`surrogate` takes up its first-order change). Importance efficiency on 1,200 held-out
        draws, with the fitted linear term (Adult-10, 20 % MCAR, seed 1) / on 1,500 draws around the
        mode (the bundled Adult's first 10 columns with their NAs, D = 1,016): 0.965 / 0.967; the
        Taylor series in ΔV about 0 to second order 0.956 / 0.0007 (a heavy tail where ΔV is large),
        to first order 0.754 / 0.71; V frozen but for each table's own block (:meth:`_frozen_v`)
        0.30 / 0.0007. Evaluated by :class:`dpsynth.graphical.expanded_v.ExpandedV` (one autograd
        node, its gradient by hand)."""
        d = self.D
        with torch.no_grad():
            _, mu0, cov0, n0, chol0 = self._terms(x_ref)
            v0_inv = torch.cholesky_inverse(chol0)
            v0_inv = 0.5 * (v0_inv + v0_inv.T)
            c0 = None  # n₀Σ_D(θ₀) (Σ₀u_D = u_D·C₀), or None: Σ₀u by a pass at θ₀ (SIGMA0_BY_PASS_MIN_DIM)
            if self.dim < SIGMA0_BY_PASS_MIN_DIM:
                c0 = n0[0] * cov0[:d, :d]
                c0 = (0.5 * (c0 + c0.T)).to(PRODUCT_DTYPE)
            u0 = ((self.y - n0 * mu0) @ v0_inv)[:d]
            step = FD_STEP / max(float(u0.norm()), 1e-3)  # h |u| ≈ FD_STEP near x_ref
            v0_inv = HalfMatrix(v0_inv) if self.dim >= HALF_MIN_DIM else FixedMatrix(v0_inv.to(PRODUCT_DTYPE))
        density = ExpandedV(self.model, self.y, self.n0, self.scale, step, v0_inv, c0,
                            float(torch.log(torch.diagonal(chol0)).sum()),
                            reference=None if c0 is not None else (x_ref[:d], n0[0]))

        def expanded(x: torch.Tensor) -> torch.Tensor:
            return density(x) + self.log_prior(x)

        def value_and_grad(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            (f, g), (prior, g_prior) = density.value_and_grad(x), self.log_prior_and_grad(x)
            return f + prior, g + g_prior
        expanded.density = density  # its operations through autograd: expanded.density.reference
        expanded.value_and_grad = value_and_grad  # and without autograd (the sampler's gradient)
        return expanded

    def _means(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the mean statistic of the likelihood's form, μ_P every released cell's probability)
        at x, from one message pass (reduced form: both collected from the clique beliefs at once,
        :meth:`MaxEntModel.collect_means`; μ_P = B μ_D + c)."""
        if self.form == "reduced":
            mu, mu_p = self.model.collect_means(x[..., :self.D], "collect", "tables")
            return torch.cat([mu, torch.ones_like(mu[..., :1])], dim=-1), mu_p
        mu_p = self.model.table_marginals(x[..., :self.D])
        return mu_p, mu_p

    def table_log_density(self, mu_p: torch.Tensor, n: torch.Tensor, mu_v: torch.Tensor,
                          n_v: torch.Tensor) -> torch.Tensor:
        """Σ_t log N(ŷ_t; n μ_t, n_v (diag μ_v,t − μ_v,t μ_v,tᵀ) + σ_t² I): eq. 6 with every
        released table taken alone (its own multinomial covariance, no covariance between tables),
        mean at cell probabilities ``mu_p`` and counts ``n`` (…, G), covariance at ``mu_v``,
        ``n_v``. Diagonal minus rank one per table: Sherman–Morrison and the matrix determinant
        lemma, O(P) (constants in x dropped). :meth:`surrogate` uses the difference between this
        at (μ(x), n(x)) and at the frozen point to let V follow θ."""
        return self._table_density(mu_p, n, self._table_covariance(mu_v, n_v))

    def _table_covariance(self, mu_v: torch.Tensor, n_v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(d, w) of :meth:`table_log_density`'s covariance: the diagonal d = n_v μ_v + σ² and
        w = u/d with u = √n_v μ_v, the rank-one part (a frozen point's are computed once)."""
        _, sigma2, _, group = self._cells
        nv = n_v[..., group]
        d = nv * mu_v + sigma2
        return d, torch.sqrt(nv) * mu_v / d

    def _table_density(self, mu_p: torch.Tensor, n: torch.Tensor, cov) -> torch.Tensor:
        y, _, one_hot, group = self._cells
        d, w = cov
        r = y - n[..., group] * mu_p
        # per-table sums of r²/d, r·u/d and u²/d as one product with the tables' indicators
        a, b, c = (torch.stack(torch.broadcast_tensors(r * r / d, r * w, w * w * d), dim=-2) @ one_hot).unbind(-2)
        c = 1.0 - c
        return (-0.5 * (a + b * b / c + torch.log(c))).sum(-1) - 0.5 * torch.log(d).sum(-1)

    def _frozen_tables(self, mu_v: torch.Tensor, n_v: torch.Tensor) -> tuple:
        """(d, w, 1 − Σ_t w²d, the constant ½ Σ log(1 − Σ_t w²d) + ½ Σ log d) of the tables' own
        blocks frozen at (μ_v, n_v), for :meth:`_follow`."""
        _, _, one_hot, _ = self._cells
        d, w = self._table_covariance(mu_v, n_v)
        c = 1.0 - (w * w * d) @ one_hot
        return d, w, c, float(0.5 * torch.log(c).sum() + 0.5 * torch.log(d).sum())

    def _follow(self, mu_p: torch.Tensor, n: torch.Tensor, ref: tuple) -> torch.Tensor:
        """``table_log_density(mu_p, n, mu_p, n)`` less the same with the covariance frozen at
        ``ref`` (:meth:`_frozen_tables`): one residual and one product with the tables' indicators
        for both terms (two :meth:`_table_density` calls cost twice the operations; this term is
        part of every surrogate gradient; :func:`dpsynth.graphical.frozen_v.follow_terms`, which
        :class:`FrozenV` differentiates by hand)."""
        return follow_terms(self._cells, ref, mu_p, n)[0]

    def _fitted_slope(self, frozen, x_ref, draws) -> torch.Tensor | None:
        """Ridge regression of d = log p − frozen on x − x_ref over an even thinning of ``draws``
        (rows chain by chain) to :func:`fit_draws` of them, the penalty chosen by 4-fold
        cross-validation over blocks of chains (:func:`ridge_cv`; draws of one chain are
        autocorrelated, so a fold holds whole chains); None with too few finite values."""
        draws = torch.as_tensor(draws, dtype=DTYPE).reshape(-1, self.dim)
        x = draws[np.unique(np.linspace(0, draws.shape[0] - 1, fit_draws(self.dim)).round().astype(int))]
        with torch.no_grad():
            d = self.log_posterior_many(x) - frozen(x)
        ok = torch.isfinite(d)
        if int(ok.sum()) < MIN_FIT_DRAWS:
            return None
        a = (x[ok] - x_ref).numpy()
        # whitened by the draws' covariance (the penalty then treats every direction of the
        # posterior alike): a = z Lᵀ, slope = L⁻ᵀ coef
        cov = np.cov(a.T)
        chol = np.linalg.cholesky(cov + (1e-6 * np.trace(cov) / self.dim + 1e-12) * np.eye(self.dim))
        z = np.linalg.solve(chol, a.T).T
        return torch.as_tensor(np.linalg.solve(chol.T, ridge_cv(z, d[ok].numpy(), RIDGE_ALPHAS)), dtype=DTYPE)

    def mode(self, x0: torch.Tensor, max_iter: int = 100, tol: float = MODE_TOL) -> tuple[torch.Tensor, torch.Tensor]:
        """Approach the posterior mode by Fisher scoring with backtracking: step F⁻¹∇log p, where
        F = JᵀV⁻¹J + prior precision and J = ∂(n∘mean)/∂x (columns n_i·Cov(a_i, a_θ) for θ and
        n_i·s_g·mean_i for v_g); V's dependence on x is left out of F (it only preconditions) but
        not of ∇. Above :data:`NEWTON_MAX_D` parameters F (three D³ products and two clamped
        passes) is kept while full steps are accepted and recomputed when a step had to be
        shortened (bundled 15-column Adult, D = 2,751: F costs about 6 s, a gradient 0.4 s).
        Stops when the Newton decrement ∇ᵀF⁻¹∇ (twice the gain the quadratic model still predicts)
        falls below ``tol``. Returns (x, the last F computed)."""
        x = x0.detach().clone()
        prior = torch.cat([torch.full((self.D,), self.prior_sd ** -2, dtype=DTYPE),
                           self.scale ** 2 / LOG_N_PRIOR_SD ** 2])
        fisher, chol_f, t = torch.diag(prior), None, 0.0
        for _ in range(max_iter):
            xr = x.clone().requires_grad_(True)
            lp_x = self.log_posterior(xr)
            if not bool(torch.isfinite(lp_x)):
                break
            (g,) = torch.autograd.grad(lp_x, xr)
            lp = float(lp_x.detach())
            with torch.no_grad():
                if chol_f is None or t < 1.0 or self.D <= NEWTON_MAX_D:
                    fisher = self.fisher(x, prior)
                    chol_f = torch.linalg.cholesky(fisher)
                step = torch.cholesky_solve(g[:, None], chol_f)[:, 0]
                t = 1.0
                while t > 1e-8:
                    lp_new = float(self.log_posterior(x + t * step))
                    if math.isfinite(lp_new) and lp_new >= lp - 1e-9:
                        break
                    t *= 0.5
                else:
                    break
                x = x + t * step
            if float(g @ step) < tol or abs(lp_new - lp) < 1e-10 * max(1.0, abs(lp)):
                break
        return x, fisher

    def fisher(self, x: torch.Tensor, prior: torch.Tensor) -> torch.Tensor:
        """F = JᵀV⁻¹J + diag(prior) at x (see :meth:`mode`), from the clamped moments. Where the
        features differ from the statistics (:class:`dpsynth.graphical.icin.IcinModel`), the moments
        and J are collected from one clamped calibration (the same numbers as two: the bundled
        Adult at 15 columns spent ~10 s of a fit's ~28 s mode search calibrating twice)."""
        jacobian = self.form == "reduced" and hasattr(self.model, "mean_jacobian")  # features ≠ statistics
        clamped = self.model.clamped_calibration(x[:self.D]) if jacobian else None
        _, mu, cov, n_cell, chol = self._terms(x, clamped=clamped)
        dmu = cov[:, self.theta_columns]
        if jacobian:
            dmu = torch.nn.functional.pad(self.model.mean_jacobian(x[:self.D], clamped=clamped), (0, 0, 0, 1))
        onehot = torch.nn.functional.one_hot(self.group_of_cell, self.G).to(DTYPE)
        jac = torch.cat([n_cell[:, None] * dmu, (n_cell * mu)[:, None] * onehot * self.scale], dim=1)
        w = torch.linalg.solve_triangular(chol, jac, upper=False)
        return w.T @ w + torch.diag(prior) + 1e-10 * torch.eye(self.dim, dtype=DTYPE)


def count_groups(measurements, z: float = 4.0) -> list[int]:
    """Available-case tables that count the same rows: the released (noisy) totals, sorted, are
    split wherever two neighbours differ by more than ``z`` standard deviations of their
    difference; tables in one group share one n. With complete data every total estimates the same
    n, so all tables form one group and the likelihood takes its reduced form; with missing values
    the totals of tables over incomplete columns stand apart. Post-processing of released values
    only: it costs no privacy.

    >>> from dpsynth.marginals.measure import Measurement
    >>> import numpy as np
    >>> ms = [Measurement(("a",), np.array([500., 500]), 5.0), Measurement(("b",), np.array([300., 701]), 5.0),
    ...       Measurement(("c",), np.array([400., 400]), 5.0)]
    >>> count_groups(ms)
    [0, 0, 1]
    """
    totals = np.array([m.total for m in measurements])
    sds = np.array([m.sigma * math.sqrt(m.noisy.size) for m in measurements])
    order = np.argsort(-totals, kind="stable")
    groups = np.zeros(len(measurements), dtype=int)
    g = 0
    for prev, cur in zip(order[:-1], order[1:]):
        if totals[prev] - totals[cur] > z * math.hypot(sds[prev], sds[cur]):
            g += 1
        groups[cur] = g
    return groups.tolist()
