"""The pMSE mechanism's Metropolis chains: ``sampler="metropolis-approximate"`` (Snoke & Slavković,
PSD 2018, Algorithm 2), an approximate sampler of the exponential mechanism's continuous density
f(θ) ∝ π(θ) exp(−ε_r û(X, θ)/(2Δu)).

``sampler="metropolis-approximate"`` is the paper's variant: a finite Metropolis chain on the
continuous density (:func:`pmse_chains`), whose output is only close to it. The guarantee is for the
exact density and the chain's error is not accounted, so the ledger is flagged (ε reported as ∞).
Its settings are public: each chain starts at a prior draw (drawn before the data are read), the
initial proposal scale is the prior's (:meth:`Prior.proposal_scale`), the burn-in search sharpness is
the constant ``SEARCH_SHARPNESS`` and the iteration counts depend only on the number of parameters.
The burn-in adapts the proposal to the chain's own history (Haario et al. 2001), so the proposal
used afterwards does depend on the data: one more reason why this option is not a guarantee. One
independent chain per release; the chains run on asinh(coefficients) and log σ; the burn-in search
uses the mean of the single-feature pMSEs. At small ε_r the exact density can put much of its mass
on the prior's plateau (û ≈ ¼); a chain that has found the mode rarely leaves it, so there the chain
is less noisy than the exact mechanism. Chain diagnostics are kept only with ``keep_diagnostics=True``.
Mixing diagnostics (acceptance, R̂, bulk ESS) come from :mod:`.diagnostics`.
"""
from __future__ import annotations

import math

import numpy as np

from ...privacy import observe_noise_input
from ...progress import progress
from .diagnostics import mixing

SEARCH_SHARPNESS = 5000.0  # metropolis-approximate: final k of the burn-in search, per unit of pMSE (public)
MECHANISM = "exponential mechanism (MCMC, approximate)"


def metropolis_releases(u_hat, u_search, prior, starts: np.ndarray, rng: np.random.Generator, ledger, *,
                        epsilon_r: float, sensitivity: float, n_releases: int, iters: tuple, blocks: list,
                        relation: str, note: str, keep_traces: bool = False):
    """One chain per release (see :func:`pmse_chains`), each charged ε_r to ``ledger``, which is flagged.

    ``u_hat(states)`` is the quality û, ``u_search(states)`` the burn-in search's (the mean pMSE over
    the stump's features); ``starts`` the public prior draws; ``iters`` = (n_search, n_adapt, n_sample).
    States outside the prior's safe range score û = ¼ and density 0. Returns (states, diagnostics),
    the diagnostics with ``start_u`` (û at the public starts) added."""
    n_search, n_adapt, n_sample = iters
    scale = epsilon_r / (2.0 * sensitivity)

    def terms(states, q, base):
        ok = prior.in_range(states)
        val = np.full(len(states), 0.25)
        if ok.any():
            val[ok] = q(states[ok])
        return np.where(ok, base(states), -np.inf), val

    def density(states):
        base, val = terms(states, u_hat, prior.logpdf)
        return base - scale * val, val

    start_u = u_hat(starts)
    for i in range(n_releases):
        step = f"release {i + 1}/{n_releases}: θ ~ exp(−ε u/(2Δu)) (pMSE mechanism)"
        ledger.spend(step, MECHANISM, epsilon=epsilon_r, sensitivity=sensitivity, relation=relation, norm="Linf",
                     note=note)
        observe_noise_input(step, MECHANISM, start_u[i:i + 1], sensitivity, "Linf")
    ledger.flag("pMSE mechanism with sampler='metropolis-approximate': a finite MCMC chain is not an exact "
                "draw from the exponential mechanism, so the ε above is not a guarantee")
    # Search density (burn-in only): the mean pMSE over the features (it improves as soon as any
    # feature does, where the target waits for the worst one), annealed up to SEARCH_SHARPNESS per
    # unit of pMSE, with a N(0, 3²) on the state instead of the prior, whose asinh/log Jacobian
    # pulls the state outwards, where the prior's mass is.
    states, diag = pmse_chains(lambda s: terms(s, u_search, prior.search_logpdf), density, starts,
                               prior.proposal_scale(), n_search, n_adapt, n_sample, rng, keep_traces=keep_traces,
                               blocks=blocks, search_scale=SEARCH_SHARPNESS)
    diag["start_u"] = start_u
    return states, diag


def pmse_chains(search_terms, logpost, x0: np.ndarray, scale0: np.ndarray, n_search: int, n_adapt: int,
                n_sample: int, rng: np.random.Generator, keep_traces: bool = False, blocks: list | None = None,
                search_scale: float = 1.0):
    """Independent Metropolis chains (one per row of ``x0``), run in lock step; chains share nothing.

    1. ``n_search`` iterations of annealed component-wise adaptive Metropolis on the *search*
       density base(x) − k_t·v(x) (``search_terms(x)`` returns base and v): one coordinate per
       iteration, its step adapted by Robbins–Monro towards acceptance 0.44 (Haario et al. 2005),
       alternating with moves of one ``block`` (a model column's coordinates) at once; k_t grows
       geometrically from ``search_scale``/1000 to ``search_scale`` over the first 70 % of the
       search, so the chains first roam the base density and are then drawn into the deepest funnel.
    2. ``n_adapt`` iterations of adaptive Metropolis on ``logpost`` (the target): a full-covariance
       proposal from the second half of the chain's own history (Haario et al. 2001), step size
       adapted towards acceptance 0.234.
    3. ``n_sample`` iterations with the proposal frozen (a plain Metropolis chain with the target
       as stationary law); the last state is the chain's draw.

    Phases 1–2 are burn-in: any moves are allowed there, since only the target's stationary law
    matters for the release. ``logpost(x)`` and ``search_terms(x)`` return (values, û) per chain.
    Returns (last states, diagnostics): ``acceptance`` of phase 3, ``rhat`` and ``ess_bulk`` of its
    draws (:func:`.diagnostics.mixing`), ``final_u``, ``search_u`` and, with ``keep_traces``, the traces.
    """
    C, d = x0.shape
    x = x0.copy()
    logs = np.tile(np.log(scale0), (C, 1))
    blocks = [np.asarray(b) for b in (blocks or [np.arange(d)])]
    log_f = np.zeros((C, len(blocks)))  # block-move step factors
    search_trace = [] if keep_traces else None
    base, su = search_terms(x) if n_search else (None, np.full(C, np.nan))
    warm = max(1, int(0.7 * n_search))
    for t in progress(range(n_search), "pMSE mechanism: MCMC burn-in search"):
        k_t = search_scale * 1e-3 ** max(0.0, 1.0 - t / warm)
        prop = x.copy()
        if t % 2 == 0:  # one coordinate
            k = (t // 2) % d
            prop[:, k] += np.exp(logs[:, k]) * rng.standard_normal(C)
        else:  # all coordinates of one model column (e.g. intercept, slope and sd moving together)
            b = (t // 2) % len(blocks)
            idx = blocks[b]
            prop[:, idx] += np.exp(logs[:, idx] + log_f[:, b:b + 1]) * rng.standard_normal((C, len(idx)))
        base_prop, su_prop = search_terms(prop)
        log_alpha = _log_alpha(base_prop - k_t * su_prop, base - k_t * su)
        acc = np.log(rng.random(C)) < log_alpha
        x = np.where(acc[:, None], prop, x)
        base = np.where(acc, base_prop, base)
        su = np.where(acc, su_prop, su)
        if keep_traces:
            search_trace.append(np.c_[x, su])
        gain = min(1.0, 3.0 / math.sqrt(t // (2 * d) + 1))
        if t % 2 == 0:
            logs[:, k] += gain * (np.exp(log_alpha) - 0.44)
        else:
            log_f[:, b] += gain * (np.exp(log_alpha) - 0.3)

    lp, u = logpost(x)
    n_main = n_adapt + n_sample
    hist = np.empty((C, n_main + 1, d))
    hist[:, 0] = x
    u_trace = np.empty((C, n_main + 1))
    u_trace[:, 0] = u
    chol = np.zeros((C, d, d))
    chol[:, np.arange(d), np.arange(d)] = np.exp(logs)
    log_lam = np.zeros(C)
    floor = np.diag((1e-4 * scale0) ** 2)
    accepted = np.zeros(C)
    for t in progress(range(1, n_main + 1), "pMSE mechanism: MCMC"):
        prop = x + np.exp(log_lam)[:, None] * np.einsum("cij,cj->ci", chol, rng.standard_normal((C, d)))
        lp_prop, u_prop = logpost(prop)
        log_alpha = _log_alpha(lp_prop, lp)
        acc = np.log(rng.random(C)) < log_alpha
        x = np.where(acc[:, None], prop, x)
        lp = np.where(acc, lp_prop, lp)
        u = np.where(acc, u_prop, u)
        hist[:, t] = x
        u_trace[:, t] = u
        if t <= n_adapt:
            log_lam += min(1.0, 5.0 / math.sqrt(t)) * (np.exp(log_alpha) - 0.234)
            if t >= 40 and t % 20 == 0:
                window = hist[:, t // 2: t + 1]
                for c in range(C):
                    cov = np.cov(window[c], rowvar=False).reshape(d, d) * (2.38 ** 2 / d) + floor
                    try:
                        chol[c] = np.linalg.cholesky(cov)
                        log_lam[c] = 0.0
                    except np.linalg.LinAlgError:
                        pass
        else:
            accepted += acc
    diag = {"acceptance": accepted / max(n_sample, 1), **mixing(hist[:, n_adapt + 1:]), "final_u": u, "search_u": su}
    if keep_traces:
        diag["search_trace"] = np.array(search_trace).transpose(1, 0, 2) if search_trace else None
        diag["state_trace"] = hist
        diag["u_trace"] = u_trace
    return x, diag


def _log_alpha(lp_prop, lp):
    out = np.minimum(0.0, lp_prop - lp)
    return np.where(np.isfinite(out), out, -np.inf)


__all__ = ["metropolis_releases", "pmse_chains", "SEARCH_SHARPNESS"]
