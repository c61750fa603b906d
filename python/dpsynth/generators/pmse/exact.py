"""Exact sampling for the pMSE mechanism: the exponential mechanism over finite public candidate sets.

The paper's mechanism (Snoke & Slavković, PSD 2018, eq. 2) is an exponential mechanism over a
continuous θ, which can only be sampled approximately (MCMC). Here each release is instead made of
``n_stages`` exponential mechanisms over *finite* candidate sets, each sampled exactly with
:func:`dpsynth.privacy.mechanisms.exponential_mechanism` (McSherry & Talwar 2007, Thm 6: over a
finite set R of outputs fixed independently of the data, P(r) ∝ exp(ε q(X, r)/(2Δq)) is ε-DP).

- Stage 1: ``n_candidates`` states drawn uniformly from a public box (:func:`candidate_box`, set by
  the prior's scale only), shared by all releases (the scores are computed once; each release
  draws its own index, at its own ε). The base measure of this stage is that public candidate
  distribution: uniform in asinh(coefficient) and in log σ.
- Stage s ≥ 2 ("zoom"): ``n_candidates // 4`` states drawn around the previous stage's *released*
  state (public spread ``STAGE_SPREAD0 · 0.3^(s−2)`` in state units), plus that state itself.
  The candidate set depends only on public randomness and earlier DP outputs, so the stages
  compose adaptively (Dwork, Rothblum & Vadhan 2010): stage s costs share_s · ε_r with
  share_s ∝ s, and the shares sum to ε_r. With ``n_stages=1`` a release is the plain finite-
  candidate exponential mechanism.

Utility u = −û(X, θ) (the stump pMSE, Δu = 1/(2n)); a state outside the numerically safe range
scores û = ¼ (the largest pMSE, a constant, so the sensitivity is unchanged). The guarantee is exact
for this finite-candidate mechanism (not for the continuous density of the paper): no chain, no
approximation error. What it costs is resolution: θ can only be one of the candidates.

Measured on the paper's case (n = 5000, unbounded schema, 10 releases, defaults; shared 2-core
machine): mean CART pMSE (cp 1e-3, minbucket 5) of the 10 datasets 0.125 at ε = 1 (true-model data
0.009; a useless θ ≈ 0.25), 0.015 at ε = 10 with lm(x2 ~ x1) coefficients (−2.46, 0.53) against
(−2.5, 0.5); fit + sampling 34 s and 57 s.
"""
from __future__ import annotations

import math

import numpy as np

from ...privacy.mechanisms import exponential_mechanism

STAGE_SPREAD0 = 1.0  # state-unit spread of stage 2's candidates; stage s uses STAGE_SPREAD0 · 0.3^(s−2)
LOG_SD_RANGE = (-7.0, None)  # log σ from e^−7 up to the prior's 3-sd bound on σ
BATCH = 256  # candidates per call of the quality function (memory: BATCH · n_synth · n · columns)


def candidate_box(prior) -> tuple[np.ndarray, np.ndarray]:
    """Public box (lower, upper) of the candidate states: |asinh β| ≤ asinh(3·sd) for regression
    coefficients (sd = √prior_var) and logit coefficients (sd = logit_prior_sd); log σ from −7 to the
    log of 3 prior sds of σ (or of √(3 sd) when the prior is on the variance). Read from the prior only."""
    sd = math.sqrt(prior.prior_var)
    k = prior.kinds
    hi = np.where(k == 2, math.asinh(3 * math.sqrt(prior.logit_var)), math.asinh(3 * sd))
    top_sd = math.log(math.sqrt(3 * sd)) if prior.prior_on == "var" else math.log(3 * sd)
    hi = np.where(k == 1, top_sd, hi)
    lo = np.where(k == 1, LOG_SD_RANGE[0], -hi)
    return lo.astype(float), hi.astype(float)


def stage_plan(n_stages: int) -> tuple[np.ndarray, np.ndarray]:
    """(ε shares, candidate spreads) of the stages: shares ∝ 1, 2, …, S (sum 1); spread of stage
    s ≥ 2 is STAGE_SPREAD0 · 0.3^(s−2) (stage 1 has no spread: it uses the box; NaN)."""
    s = np.arange(1, n_stages + 1, dtype=float)
    spreads = np.r_[np.nan, STAGE_SPREAD0 * 0.3 ** np.arange(n_stages - 1)]
    return s / s.sum(), spreads


def scores(u_hat, prior, states: np.ndarray) -> np.ndarray:
    """û for each candidate state, in batches; ¼ outside the prior's safe range."""
    out = np.full(len(states), 0.25)
    ok = prior.in_range(states)
    idx = np.flatnonzero(ok)
    for a in range(0, len(idx), BATCH):
        sl = idx[a:a + BATCH]
        out[sl] = u_hat(states[sl])
    return out


def exact_releases(u_hat, prior, candidates: np.ndarray, rng: np.random.Generator, source, ledger, *,
                   epsilon_r: float, sensitivity: float, n_releases: int, n_stages: int, relation: str,
                   note: str, progress=None) -> dict:
    """Draw ``n_releases`` states, each by ``n_stages`` exact exponential mechanisms (module docstring).

    ``candidates``: the public stage-1 states (drawn by the caller before any private row is read).
    Returns {"states": (n_releases, dim), "index": stage-1 index of each release, "candidate_u": û of
    the stage-1 candidates (data-dependent: the caller keeps it only as a flagged diagnostic),
    "stage_u": (n_releases, n_stages) û of the state released at each stage}.
    """
    shares, spreads = stage_plan(n_stages)
    n_refine = max(len(candidates) // 4, 1)
    u1 = scores(u_hat, prior, candidates)
    states = np.empty((n_releases, candidates.shape[1]))
    index = np.empty(n_releases, dtype=int)
    stage_u = np.empty((n_releases, n_stages))
    releases = range(n_releases) if progress is None else progress(range(n_releases), "pMSE mechanism: releases")
    for i in releases:
        cand, u = candidates, u1
        for s in range(n_stages):
            if s > 0:
                cand = np.vstack([cur[None], cur + spreads[s] * rng.standard_normal((n_refine, len(cur)))])
                u = scores(u_hat, prior, cand)
            step = (f"release {i + 1}/{n_releases}, stage {s + 1}/{n_stages}: θ among {len(cand)} public "
                    "candidates, P ∝ exp(−ε û/(2Δu)) (pMSE mechanism)")
            k = exponential_mechanism(-u, epsilon=shares[s] * epsilon_r, sensitivity=sensitivity, ledger=ledger,
                                      source=source, step=step, relation=relation, note=note)
            cur = cand[k]
            stage_u[i, s] = u[k]
            if s == 0:
                index[i] = k
        states[i] = cur
    return {"states": states, "index": index, "candidate_u": u1, "stage_u": stage_u}


def draw_candidates(prior, rng: np.random.Generator, size: int) -> np.ndarray:
    """``size`` public stage-1 candidate states, uniform on :func:`candidate_box` (no data read)."""
    lo, hi = candidate_box(prior)
    return lo + (hi - lo) * rng.random((size, len(lo)))


__all__ = ["candidate_box", "draw_candidates", "exact_releases", "stage_plan", "scores"]
