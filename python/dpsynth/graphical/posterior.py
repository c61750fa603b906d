"""Posterior approximations for smooth log-densities in torch: Laplace, HMC (and, re-exported from
:mod:`dpsynth.graphical.elliptical_slice`, elliptical slice sampling).

- :func:`laplace_approximation`: mode by L-BFGS (strong-Wolfe line search), restarted from a
  perturbed start when it diverges (non-finite loss, loss rising by > 1e3) or fails to converge;
  precision = the Hessian of −log p at the mode by autograd; N(mode, H⁻¹) (Gelman et al. 2013,
  §4.1; Räisä et al. 2023, Supp. D).
- :func:`hmc`: Hamiltonian Monte Carlo (Neal 2011) for several chains at once (one batched
  gradient per leapfrog step), with a dense mass matrix adapted in Stan-style warm-up windows from
  the pooled draws of all chains and the step size by dual averaging (Hoffman & Gelman 2014,
  §3.2), optionally in coordinates that a per-coordinate map refitted in warm-up makes closer
  to Gaussian (:mod:`dpsynth.graphical.transport`). Written here rather than taken from Pyro:
  Pyro's NUTS runs one chain per process, while the NAPSU-MQ likelihood costs about as much for 8
  chains in one batch as for 1.
- Diagnostics: rank-normalised split-R̂ and bulk ESS (Vehtari et al. 2021) from arviz-stats
  (:mod:`dpsynth.graphical.mixing`); importance weights by PSIS (:mod:`dpsynth.graphical.importance`).

The log-density ``log_prob(x)`` takes a batch (…, dim) and returns (…,); non-finite values are
treated as zero density.

Example
-------
>>> import torch
>>> lp = lambda x: -0.5 * ((x - 1.0) ** 2).sum(-1) / 4.0
>>> la = laplace_approximation(lp, torch.zeros(2, dtype=torch.float64))
>>> [round(v, 4) for v in la.mode.tolist()], round(float(la.cov[0, 0]), 4)
([1.0, 1.0], 4.0)
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from .importance import PSIS_BOUNDED_RATIO, PSIS_MIN_DRAWS, psis_weights  # noqa: F401  (re-exported)
from .metric import shrunk_covariance, velocity, velocity_metric
from .mixing import ess_bulk, rhat_and_ess, split_rhat  # noqa: F401  (the diagnostics' home; re-exported)
from .mixing import ChainSummary, moving_chains, settled_chains
from .elliptical_slice import SliceResult, elliptical_slice  # noqa: F401  (re-exported: its home before)
from .leapfrog import LeapfrogPaths
from .split_chains import closes_own_helpers, split_density
from .transport import MarginalMap

DTYPE = torch.float64


class PosteriorNotMixedWarning(UserWarning):
    """A posterior sampler did not reach its R̂ / ESS targets: draws (and the synthetic datasets made
    from them) may misstate the posterior's spread, and pooled intervals may be off."""


class ConvergenceError(RuntimeError):
    """The posterior mode could not be found after the allowed restarts."""


@dataclass
class LaplaceResult:
    mode: torch.Tensor
    precision: torch.Tensor
    cov: torch.Tensor
    chol_cov: torch.Tensor
    log_prob_mode: float
    restarts: int
    evaluations: int
    seconds: float

    def sample(self, size: int, rng: np.random.Generator) -> torch.Tensor:
        """``size`` draws from N(mode, H⁻¹)."""
        z = torch.as_tensor(rng.standard_normal((size, self.mode.numel())), dtype=DTYPE)
        return self.mode + z @ self.chol_cov.T


def value_and_grad(log_prob, x):
    """log_prob(x) and its gradient; entries with a non-finite density get a zero gradient."""
    x = x.detach().requires_grad_(True)
    lp = log_prob(x)
    ok = torch.isfinite(lp)
    if bool(ok.any()):
        (g,) = torch.autograd.grad(lp[ok].sum(), x)
        g = torch.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0)
    else:
        g = torch.zeros_like(x)
    return lp.detach(), g


def laplace_approximation(log_prob: Callable, x0: torch.Tensor, *, max_iter: int = 500, max_restarts: int = 5,
                          rng: np.random.Generator | None = None, restart_scale: float = 0.5,
                          grad_tol: float = 1e-3, decrement_tol: float = 1e-2,
                          precondition: torch.Tensor | None = None) -> LaplaceResult:
    """Laplace approximation of the density ∝ exp(log_prob(x)) (see module docstring).

    L-BFGS runs from ``x0`` unless its gradient is already below ``grad_tol`` (max-norm); at the
    point reached, the Hessian H of −log p must be positive definite and the Newton decrement
    gᵀH⁻¹g (twice the log-density still to gain, to second order) below ``decrement_tol`` after
    up to ten backtracking Newton corrections with that H; otherwise the search restarts from a
    perturbed start.
    ``precondition``: a matrix S; L-BFGS then runs on z with x = x0 + S z (S Sᵀ ≈ the inverse
    Hessian makes the problem well conditioned), and restarts perturb z by N(0, restart_scale²)."""
    t0 = time.perf_counter()
    rng = rng if rng is not None else np.random.default_rng(0)
    x0 = torch.as_tensor(x0, dtype=DTYPE).detach().clone()
    dim = x0.numel()
    s_mat = torch.eye(dim, dtype=DTYPE) if precondition is None else torch.as_tensor(precondition, dtype=DTYPE)
    evals = 0
    for attempt in range(max_restarts + 1):
        z0 = torch.zeros(dim, dtype=DTYPE) if attempt == 0 else \
            restart_scale * torch.as_tensor(rng.standard_normal(dim), dtype=DTYPE)
        x = x0 + s_mat @ z0
        lp, g = value_and_grad(log_prob, x)
        evals += 1
        if not (bool(torch.isfinite(lp)) and float(g.abs().max()) <= grad_tol):
            z, n_eval = _lbfgs(lambda z: log_prob(x0 + z @ s_mat.T), z0, max_iter, grad_tol)
            evals += n_eval
            if z is None:
                continue
            x = x0 + s_mat @ z
            lp, g = value_and_grad(log_prob, x)
            if not bool(torch.isfinite(lp)):
                continue
        hess = torch.autograd.functional.hessian(lambda v: -log_prob(v), x)
        hess = 0.5 * (hess + hess.T)
        chol_prec, info = torch.linalg.cholesky_ex(hess)
        if int(info) != 0:
            continue  # not a maximum: restart
        for _ in range(10):  # Newton corrections with the Hessian at x, backtracking
            step = torch.cholesky_solve(g[:, None], chol_prec).squeeze(-1)
            if float(g @ step) < 1e-8:
                break
            t = 1.0
            while t > 1e-4:
                lp_new, g_new = value_and_grad(log_prob, x + t * step)
                evals += 1
                if bool(torch.isfinite(lp_new)) and float(lp_new) >= float(lp) - 1e-9:
                    break
                t *= 0.5
            else:
                break
            x, lp, g = x + t * step, lp_new, g_new
        decrement = float(g @ torch.cholesky_solve(g[:, None], chol_prec).squeeze(-1))
        if decrement > decrement_tol:
            continue
        cov = torch.cholesky_inverse(chol_prec)
        chol_cov = torch.linalg.cholesky(0.5 * (cov + cov.T))
        return LaplaceResult(x.detach().clone(), hess, cov, chol_cov, float(lp), attempt, evals,
                             time.perf_counter() - t0)
    raise ConvergenceError(f"the posterior mode was not found after {max_restarts} restarts; try a larger "
                           "epsilon, fewer queries, or inference='mcmc'")


def _lbfgs(log_prob, start, max_iter, grad_tol):
    """L-BFGS (strong Wolfe) on −log_prob from ``start``; (x, evaluations), x None on divergence
    (a non-finite loss at an iterate, or a final loss more than 1e3 above the start; line-search
    trial points may be worse without counting)."""
    evals = 0
    x = start.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([x], lr=1.0, max_iter=max_iter, max_eval=int(max_iter * 1.5),
                            tolerance_grad=0.1 * grad_tol, tolerance_change=1e-12, history_size=50,
                            line_search_fn="strong_wolfe")

    def closure():
        nonlocal evals
        evals += 1
        opt.zero_grad()
        loss = -log_prob(x)
        if not torch.isfinite(loss):
            return torch.tensor(1e300, dtype=DTYPE)  # rejected by the line search
        loss.backward()
        return loss

    with torch.no_grad():
        first = float(-log_prob(start))
    try:
        opt.step(closure)
    except (RuntimeError, torch.linalg.LinAlgError):
        return None, evals
    with torch.no_grad():
        last = float(-log_prob(x))
    if not (torch.isfinite(x).all() and math.isfinite(last)) or last > first + 1e3:
        return None, evals
    return x.detach().clone(), evals


# ---------------------------------------------------------------------- HMC
@dataclass
class HMCResult(ChainSummary):
    draws: torch.Tensor          # (chains, draws, dim) in the original coordinates
    accept_rate: float
    step_size: float
    n_leapfrog: float            # mean leapfrog steps per iteration after warm-up
    gradient_evaluations: int    # batched evaluations (all chains at once)
    divergences: int
    seconds: float
    metric: torch.Tensor = field(repr=False, default=None)  # adapted covariance (inverse mass matrix) in z
    second_stage_accept: float = float("nan")  # delayed acceptance: share of first-stage passes kept
    target: Callable = field(repr=False, default=None)  # the density the chains targeted at the end
    strays: int = 0  # chains restarted at settled chains' positions in warm-up (prune_strays)
    transform: object = field(repr=False, default=None)  # the coordinate map the chains moved in at the end


#: ``hmc``'s short steps (share, low, high). In NAPSU-MQ fits of the bundled Adult's 15 columns a
#: chain could sit for hundreds of draws accepting nothing while the others moved: seed 6 (commit
#: d624a3c), chain 11 from draw 800 to 1,100, R̂ of many cells 1.04 meanwhile. From its position,
#: 16 copies × 20 draws at the adapted step (0.069) accepted none (137 of 320 trajectories
#: diverged); at half the step 96 % moved, a quarter 99 %; a typical chain at the full step 74 %.
#: The previous map and metric left it stuck too: the step, not the map, was out of reach there
SHORT_STEPS = (0.1, 0.3, 0.6)


def _warmup_windows(warmup: int) -> list[int]:
    """Ends of the slow adaptation windows (Stan's schedule, scaled): a first fast window of 15 %
    for the step size, doubling slow windows in which the dense metric is estimated, and a last
    fast window of 10 %."""
    first, last = max(int(0.15 * warmup), 5), max(int(0.1 * warmup), 5)
    ends, start, width = [], first, max((warmup - first - last) // 7, 5)
    while start + width <= warmup - last:
        nxt = start + width
        if nxt + 2 * width > warmup - last:
            nxt = warmup - last
        ends.append(nxt)
        start, width = nxt, 2 * width
    return ends


def _window_start(warmup: int) -> int:
    """The warm-up iteration from which :func:`hmc` keeps draws for its first slow window (the first
    fast window, for the step size alone, ends there)."""
    return int(0.15 * warmup) if warmup > 0 else 0


#: :func:`hmc`'s warm-up with ``last_window``: a first fast window, two short slow windows and a last
#: fast window of these many iterations around the last slow window, whatever its length. Stan's
#: proportions (:func:`_warmup_windows`) spend 57 % of a warm-up before its last slow window: 171 of
#: the 300 iterations that give the bundled Adult at 15 columns (16 chains, D = 1,026) the 2,048
#: draws its surrogate's fit needs (141 before that window and 30 after it), some 3,400 of a fit's
#: ~25,000 gradients, where the step size settles within 20 iterations of its start
#: (0.5·dim^(−1/4) = 0.088; adapted 0.070–0.10 across seeds) and the chains start near the mode
#: with the Laplace metric
SHORT_EARLY_WINDOWS = (20, 25, 50, 30)


def short_warmup(last_window: int) -> int:
    """The warm-up iterations of :func:`hmc` with ``last_window`` (:data:`SHORT_EARLY_WINDOWS`).

    >>> short_warmup(128)
    253
    """
    return sum(SHORT_EARLY_WINDOWS) + last_window


def _schedule(warmup: int, last_window: int | None) -> tuple[int, list[int]]:
    """(the iteration the first slow window starts at, the ends of the slow windows) of a warm-up
    of ``warmup`` iterations: Stan's (:func:`_warmup_windows`), or with ``last_window`` the short
    early windows of :data:`SHORT_EARLY_WINDOWS` before a last slow window of that length."""
    if warmup <= 0:
        return 0, []
    if last_window is None:
        return _window_start(warmup), _warmup_windows(warmup)
    first, slow1, slow2, final = SHORT_EARLY_WINDOWS
    if warmup != short_warmup(last_window):
        raise ValueError(f"a last slow window of {last_window} iterations needs warmup={short_warmup(last_window)}")
    return first, [first + slow1, first + slow1 + slow2, warmup - final]


def last_window_iterations(warmup: int, last_window: int | None = None) -> int:
    """Iterations of the last slow warm-up window of :func:`hmc` (whose draws give the final
    metric, map and surrogate), for a warm-up of ``warmup`` iterations; 0 without slow windows.

    >>> last_window_iterations(200), last_window_iterations(300), last_window_iterations(253, 128)
    (87, 129, 128)
    """
    if last_window is not None:
        ends = _schedule(warmup, last_window)[1]
        return ends[-1] - ends[-2]
    ends = _warmup_windows(warmup) if warmup > 0 else []
    if not ends:
        return 0
    return ends[-1] - (ends[-2] if len(ends) > 1 else _window_start(warmup))


@closes_own_helpers  # the split's helpers end with the run, whether it returns or raises
def hmc(log_prob: Callable, init: torch.Tensor, *, cov: torch.Tensor | None = None, warmup: int = 300,
        draws: int = 200, target_accept: float = 0.8, path_length: float = 0.5 * math.pi, jitter: float = 0.5,
        max_leapfrog: int = 64, rng: np.random.Generator | None = None,
        step_size: float | None = None, surrogate: Callable | None = None,
        delayed_acceptance: bool = True, prune_strays: bool = True, transform=None,
        fit_transform: Callable | None = None, metric_target: np.ndarray | None = None,
        adapt_metric: bool = True, short_steps: tuple[float, float, float] | None = SHORT_STEPS,
        split_chains: bool = False, last_window: int | None = None,
        stop: Callable | None = None, stop_every: int = 25,
        sampling_path_length: float | None = None) -> HMCResult:
    """Hamiltonian Monte Carlo (Neal 2011) with a dense mass matrix adapted in warm-up, for a
    batch of chains that start at the rows of ``init`` (chains, dim) and advance together (one
    batched value-and-gradient per leapfrog step).

    Warm-up follows Stan's windowed adaptation (Carpenter et al. 2017): step size by dual averaging
    (Hoffman & Gelman 2014, §3.2) in every window; at the end of each slow window the inverse mass
    matrix becomes the shrunk covariance of the draws of *all* chains in that window (pooling the
    chains gives a usable dense estimate after a few dozen iterations), shrunk towards the
    correlations of ``metric_target`` (:func:`shrunk_covariance`; None: the identity). ``cov`` is
    the starting metric (e.g. a Laplace covariance; default the identity). After warm-up the path length, in
    the metric's units, is ``path_length`` (π/2: a quarter period of a standard Gaussian, where a
    position no longer correlates with its start) times a uniform jitter of ±``jitter``, so that
    no fixed period can lock in; ``sampling_path_length`` (None: ``path_length``) replaces it after
    warm-up, so that the draws may take longer paths than the warm-up's adaptation. Non-finite log
    densities reject the proposal (a divergence).
    ``step_size`` starts (or, with ``warmup=0``, fixes) the step size. ``adapt_metric=False``: the
    warm-up adapts the step size alone (dual averaging over all of it), keeping ``cov``, the
    surrogate and the map as given. ``short_steps`` = (share, low, high): after warm-up each chain,
    in each draw independently with probability ``share``, scales its step by U(low, high) for that
    draw's leapfrog steps (the number of steps is the other chains'), so a chain where the adapted
    step is beyond the leapfrog's stable range gets proposals it can accept (:data:`SHORT_STEPS`).
    A step chosen at random, independently of the state, leaves the target invariant (Neal 2011,
    §5.4.2.2). None: every chain takes the common step. ``split_chains``: with a density that has a
    ``value_and_grad``, each draw's leapfrog trajectories (:class:`dpsynth.graphical.leapfrog.LeapfrogPaths`)
    run half here, half in a forked helper process (:class:`dpsynth.graphical.split_chains.SplitDensity`):
    the same sampler on two cores.
    ``last_window``: Stan's windows are replaced by short early ones before a last slow window of
    this many iterations (:data:`SHORT_EARLY_WINDOWS`; ``warmup`` must be :func:`short_warmup` of it).
    ``stop``: called with the draws kept so far (chains, k, dim) every ``stop_every`` of them (not
    after the last); True ends the run there. It takes nothing from ``rng``, so a run it does not
    end is, draw for draw, the run without it, and one it ends is that run's first k draws.

    ``surrogate``: delayed acceptance (Christen & Fox 2005; Banterle et al. 2019). ``surrogate(c)``
    returns a cheap log-density that approximates ``log_prob`` near the point c; the trajectories
    follow its gradient and are accepted first with its energy, and a proposal that passes is
    accepted again with probability min(1, w(x')/w(x)), w = exp(log_prob − surrogate). The first
    stage is a reversible kernel for the surrogate density, so the two stages together leave
    ``log_prob`` invariant exactly; ``log_prob`` is evaluated once per iteration and never
    differentiated. The surrogate is rebuilt at the mean of the draws at the end of every warm-up
    window and fixed while sampling; at the last window it also gets those draws,
    ``surrogate(c, draws)``, to fit itself to the exact density where the chains are.

    ``prune_strays``: at the end of each slow warm-up window, chains whose exact log density lies
    far below the others' (:func:`settled_chains`) restart at the position of a settled chain and
    their window's draws are left out of the metric (and the surrogate's fit): one chain caught in a
    region where the surrogate is high but the posterior is not would otherwise distort the metric
    and collapse the step size of every chain. So do chains that are stuck (:func:`moving_chains`:
    fewer than ``mixing.STUCK_ACCEPT`` of the window's proposals accepted, e.g. a chain where the
    curvature is far above the step size's reach, whose every trajectory diverges), at the end of
    each slow window and once more at the end of warm-up. Warm-up only, so the kept draws remain a
    valid Markov chain; the result counts the restarts (``strays``).

    ``transform`` / ``fit_transform``: the chains move in coordinates z with x = transform.forward(z)
    (a :class:`dpsynth.graphical.transport.MarginalMap`; default x = z) and target the density
    of x times |dx/dz|; ``cov`` is then the metric in z. ``fit_transform(draws)`` refits the map to
    each slow window's draws (x) before the metric is estimated from them (in the new z): warm-up
    only. ``init`` and the returned draws are in x.

    ``delayed_acceptance=False``: no second stage; the chains target the (final, fixed) surrogate
    itself, which the result returns as ``target`` so that the caller can reweight the draws to
    ``log_prob`` (:func:`psis_weights`). Cheaper per iteration and never sticky, at the price of
    importance weights.
    """
    t0 = time.perf_counter()
    rng = rng if rng is not None else np.random.default_rng(0)
    x = torch.as_tensor(init, dtype=DTYPE).clone()
    chains, dim = x.shape
    tmap = transform if transform is not None else MarginalMap.identity(dim)
    x = tmap.inverse(x)  # the chains' state is z; positions in the target's coordinates are tmap.forward(z)
    metric = torch.eye(dim, dtype=DTYPE) if cov is None else torch.as_tensor(cov, dtype=DTYPE)
    metric, metric_low, chol = velocity_metric(0.5 * (metric + metric.T))

    def normal(shape):
        return torch.as_tensor(rng.standard_normal(shape), dtype=DTYPE)

    guide = surrogate(tmap.forward(x).mean(0)) if surrogate is not None else log_prob
    stepper, split = None, None

    def new_stepper():
        """The leapfrog trajectories with the guide, map and metric as they are now (after each warm-up
        window: new ones), and their helper process for half of the chains where they are split."""
        nonlocal stepper, split
        if split is not None:
            split.close()
        stepper = LeapfrogPaths(DriftThenGradient(guide, tmap, metric_low))
        split = split_density(stepper) if split_chains and chains > 1 and hasattr(guide, "value_and_grad") else None

    new_stepper()

    def trajectory(zz, pp, gg, ee, n):
        """(z, p, u = −log density, ∇u) after n leapfrog steps (:class:`LeapfrogPaths`; n = 0: at zz)."""
        if split is None:
            return stepper.run(zz, pp, gg, ee, n)
        u_end, out = split.value_and_grad(LeapfrogPaths.pack(zz, pp, gg, ee, n))
        return out[:, :dim], out[:, dim:2 * dim], u_end, out[:, 2 * dim:]

    def u_and_grad(zz):
        return trajectory(zz, torch.zeros_like(zz), torch.zeros_like(zz), 0.0, 0)[2:]

    def exact(zz):
        with torch.no_grad():
            lp = _mapped(log_prob, tmap, zz)
        return torch.where(torch.isfinite(lp), lp, torch.full_like(lp, -math.inf))

    u, gx = u_and_grad(x)
    delayed = surrogate is not None and delayed_acceptance
    lp_x = exact(x) if delayed else None
    second_stage = []
    n_grad = 1
    window_start, windows = _schedule(warmup, last_window)
    windows = windows if adapt_metric else []
    window_draws = []

    def new_dual(step):
        return {"mu": math.log(10 * step), "hbar": 0.0, "log_bar": 0.0, "m": 0}

    step = float(step_size) if step_size is not None else 0.5 * dim ** -0.25
    draw_path = path_length if sampling_path_length is None else sampling_path_length
    da = new_dual(step)
    kept, acc_kept, n_lf_kept, divergences, strays = [], [], [], 0, 0
    window_accepted, window_its = torch.zeros(chains, dtype=DTYPE), 0  # proposals each chain accepted

    def restart_at(good):  # chains not in ``good`` restart where chains in it are (warm-up only)
        nonlocal x, lp_x, strays
        pick = torch.as_tensor(rng.integers(int(good.sum()), size=int((~good).sum())))
        x = x.clone()
        x[~good] = x[good][pick]
        if delayed:
            lp_x = lp_x.clone()
            lp_x[~good] = lp_x[good][pick]
        strays += int((~good).sum())
    for it in range(warmup + draws):
        sampling = it >= warmup
        eps = step * (float(rng.uniform(0.9, 1.1)) if sampling else 1.0)
        length = (draw_path if sampling else path_length) * float(rng.uniform(1 - jitter, 1 + jitter))
        n_steps = int(min(max_leapfrog, max(1, math.ceil(length / eps))))
        if sampling and short_steps:  # some chains take shorter steps (and a shorter path) this draw
            share, low, high = short_steps
            scale = np.where(rng.random(chains) < share, rng.uniform(low, high, chains), 1.0)
            eps = eps * torch.as_tensor(scale, dtype=DTYPE)[:, None]
        # momentum p ~ N(0, metric⁻¹): p = L⁻ᵀ ξ; velocity = metric · p
        xi = normal((chains, dim))
        p = torch.linalg.solve_triangular(chol.T, xi.T, upper=True).T
        h0 = u + 0.5 * (xi ** 2).sum(-1)
        xn, pn, un, gn = trajectory(x, p, gx, eps, n_steps)
        n_grad += n_steps
        kin = 0.5 * ((pn @ chol) ** 2).sum(-1)
        dh = h0 - (un + kin)
        dh[~torch.isfinite(dh)] = -math.inf
        if sampling:
            divergences += int((dh < -1000).sum())
        acc_prob = torch.exp(torch.clamp(dh, max=0.0))
        accept = torch.as_tensor(rng.random(chains), dtype=DTYPE) < acc_prob
        if delayed:  # second stage: correct the surrogate to the exact density
            lp_n = torch.full_like(u, -math.inf)
            if bool(accept.any()):
                lp_n[accept] = exact(xn[accept])
            log_w = (lp_n + un) - (lp_x + u)  # (log p − log q)(x') − (log p − log q)(x); u = −log q
            log_w = torch.where(torch.isfinite(log_w), log_w, torch.full_like(log_w, -math.inf))
            second = torch.as_tensor(rng.random(chains), dtype=DTYPE) < torch.exp(torch.clamp(log_w, max=0.0))
            if bool(accept.any()):
                second_stage.append(float(second[accept].float().mean()))
            accept = accept & second
            lp_x = torch.where(accept, lp_n, lp_x)
        x = torch.where(accept[:, None], xn, x)
        u = torch.where(accept, un, u)
        gx = torch.where(accept[:, None], gn, gx)
        if not sampling:
            if it >= window_start:  # counted over the slow windows and the last fast one
                window_accepted, window_its = window_accepted + accept.to(DTYPE), window_its + 1
            da["m"] += 1
            m, t0_da, gamma, kappa = da["m"], 10.0, 0.05, 0.75
            da["hbar"] = (1 - 1 / (m + t0_da)) * da["hbar"] + (target_accept - float(acc_prob.mean())) / (m + t0_da)
            log_step = da["mu"] - math.sqrt(m) / gamma * da["hbar"]
            eta = m ** -kappa
            da["log_bar"] = eta * log_step + (1 - eta) * da["log_bar"]
            step = math.exp(log_step)
            if windows and it >= window_start:  # draws of a slow window (none with adapt_metric=False)
                window_draws.append(tmap.forward(x))
            if windows and it + 1 == windows[0]:
                good = settled_chains(lp_x if delayed else exact(x), dim) & moving_chains(window_accepted / window_its) \
                    if prune_strays else torch.ones(chains, dtype=torch.bool)
                window_accepted, window_its = torch.zeros_like(window_accepted), 0
                pooled = torch.stack(window_draws, dim=1)[good].reshape(-1, dim)
                if fit_transform is not None:  # a new map: the chains' z follow their positions
                    positions = tmap.forward(x)
                    tmap = fit_transform(pooled)
                    x = tmap.inverse(positions)
                    if delayed:
                        lp_x = exact(x)
                metric, metric_low, chol = velocity_metric(torch.as_tensor(
                    shrunk_covariance(tmap.inverse(pooled).numpy(), metric_target), dtype=DTYPE))
                pooled = pooled.numpy()
                moved = not bool(good.all())
                if moved:  # strays restart where settled chains are (warm-up only)
                    restart_at(good)
                if surrogate is not None:  # the last window's draws also fit its linear term
                    centre = torch.as_tensor(pooled.mean(0), dtype=DTYPE)
                    guide = surrogate(centre, torch.as_tensor(pooled, dtype=DTYPE)) if len(windows) == 1 \
                        else surrogate(centre)
                new_stepper()  # the metric, map and surrogate are new (so is the helper, where there is one)
                if moved or surrogate is not None or fit_transform is not None:  # fresh energy
                    u, gx = u_and_grad(x)
                windows.pop(0)
                window_draws = []
                step = math.exp(da["log_bar"])
                da = new_dual(step)
            if it == warmup - 1:
                step = math.exp(da["log_bar"])
                if prune_strays and adapt_metric and window_its:  # stuck since the last slow window
                    moving = moving_chains(window_accepted / window_its)
                    if not bool(moving.all()):
                        restart_at(moving)
                        u, gx = u_and_grad(x)
        else:
            kept.append(tmap.forward(x))
            acc_kept.append(float(acc_prob.mean()))
            n_lf_kept.append(n_steps)
            if stop is not None and len(kept) % stop_every == 0 and len(kept) < draws and stop(torch.stack(kept, dim=1)):
                break
    samples = torch.stack(kept, dim=1)  # (chains, draws, dim)
    return HMCResult(samples, float(np.mean(acc_kept)) if acc_kept else float("nan"), step,
                     float(np.mean(n_lf_kept)) if n_lf_kept else float("nan"), n_grad, divergences,
                     time.perf_counter() - t0, metric,
                     float(np.mean(second_stage)) if second_stage else float("nan"), guide, strays, tmap)


class DriftThenGradient:
    """A leapfrog step's drift and the gradient after it, row by row: rows (z, p, ε) packed as
    (B, 2·dim + 1) (:meth:`pack`) give (log density at z' (B,), [z', its gradient] (B, 2·dim)),
    z' = z + ε·(p @ M) with M the velocity metric (float32 or 16: :func:`dpsynth.graphical.metric.velocity_metric`)
    and the density that of ``log_prob`` in the coordinates of ``tmap``
    (:func:`_mapped_value_and_grad`). Each step of :class:`dpsynth.graphical.leapfrog.LeapfrogPaths`,
    which :func:`hmc` runs in each of its processes when the chains are split
    (:mod:`dpsynth.graphical.split_chains`), so that the helper does its own chains' velocity product
    and map, which the sampler's process did for all 16 chains while the helper waited (the bundled
    Adult at 15 columns, AMD EPYC, py-spy: 1.1 ms and 1.0 ms of the sampler's 11.1 ms a gradient).

    >>> lp = lambda x: -0.5 * (x ** 2).sum(-1)
    >>> lp.value_and_grad = lambda x: (lp(x), -x)
    >>> step = DriftThenGradient(lp, MarginalMap.identity(2), torch.eye(2, dtype=torch.float32))
    >>> z, p = torch.zeros(1, 2, dtype=DTYPE), torch.ones(1, 2, dtype=DTYPE)
    >>> f, out = step.value_and_grad(DriftThenGradient.pack(z, p, 0.5))
    >>> f.tolist(), out.tolist()
    ([-0.25], [[0.5, 0.5, -0.5, -0.5]])
    """

    def __init__(self, log_prob, tmap, metric_low: torch.Tensor):
        self.log_prob, self.tmap, self.metric_low = log_prob, tmap, metric_low
        self.dim = metric_low.shape[0]

    @staticmethod
    def pack(z: torch.Tensor, p: torch.Tensor | None, eps) -> torch.Tensor:
        """Rows (z, p, ε): ``p`` None for no drift (p = 0, ε = 0: z' = z), ``eps`` a number or (B, 1)."""
        if p is None:
            p, eps = torch.zeros_like(z), 0.0
        eps = torch.as_tensor(eps, dtype=DTYPE).expand(z.shape[0], 1)
        return torch.cat([z, p, eps], dim=-1)

    def drift_and_grad(self, z: torch.Tensor, p: torch.Tensor | None, eps) -> tuple:
        """(z', log density at z', its gradient) from unpacked z, p (None: no drift, z' = z) and ε."""
        if p is not None:
            z = z + eps * velocity(p, self.metric_low)
        lp, g = _mapped_value_and_grad(self.log_prob, self.tmap, z)
        return z, lp, g

    def value_and_grad(self, packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        d = self.dim
        z, lp, g = self.drift_and_grad(packed[:, :d], packed[:, d:2 * d], packed[:, 2 * d:])
        return lp, torch.cat([z, g], dim=-1)


def _mapped(log_prob, tmap, z):
    """The density in the chains' coordinates z: log p(x(z)) + log |dx/dz|."""
    x, log_jac = tmap.forward_and_log_jacobian(z)
    return log_prob(x) + log_jac


def _mapped_value_and_grad(log_prob, tmap, z):
    """:func:`value_and_grad` of :func:`_mapped`; by hand where ``log_prob`` has a ``value_and_grad``
    (the expanded-V surrogate: 16 chains of Adult-10 with 20 % MCAR, 5.6 → 4.8 ms without autograd's graph)."""
    if not hasattr(log_prob, "value_and_grad"):
        return value_and_grad(lambda v: _mapped(log_prob, tmap, v), z)
    lp, g = tmap.value_and_grad(log_prob.value_and_grad, z)
    g = torch.where(torch.isfinite(lp).unsqueeze(-1), torch.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0), 0.0)
    return lp, g
