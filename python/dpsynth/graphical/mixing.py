"""Rank-normalised split-R̂ and bulk ESS (Vehtari, Gelman, Simpson, Carpenter & Bürkner 2021,
"Rank-normalization, folding, and localization: an improved R̂"), vectorised over quantities.

The same numbers as arviz-stats (``array_stats.rhat(method="rank")`` / ``ess(method="bulk")``;
:func:`test_mixing_matches_arviz` checks them to 1e-10), computed for all k quantities of a
(chains, draws, k) array at once: arviz-stats loops over the quantities in Python, one rank
transform and one FFT each, which took 8.5 s of a 125 s NAPSU-MQ fit under MAR (341 released cells,
profiled) and about 0.7 s here.

Definitions (paper §3 and §4): split each chain in two halves (an odd middle draw is dropped);
z-scale = Φ⁻¹((r − 3/8) / (S + 1/4)) of the average ranks r over all S split draws; R̂ of
split chains with W the mean within-chain variance and B/n the variance of their means,
R̂ = √((B/W + n − 1)/n); the rank-normalised R̂ is the larger of the bulk R̂ (of z-scaled draws)
and the tail R̂ (of z-scaled |draws − median|). Bulk ESS = S/τ of the z-scaled split chains, τ from
the chains' FFT autocovariances by Geyer's initial positive and initial monotone sequences,
τ ≥ 1/log10 S.

Also here: NAPSU-MQ's sampler's guides from R̂ (:func:`draws_to_target`, :func:`transient_start`);
:class:`GrowingCellProbs`, the cells' values of a growing run's draws, each draw's computed once;
and two checks of single chains that :func:`dpsynth.graphical.posterior.hmc`'s warm-up
restarts where the others are: :func:`settled_chains` (by log density) and :func:`moving_chains`
(by acceptance).

>>> import numpy as np
>>> x = np.random.default_rng(0).standard_normal((4, 500, 3))
>>> bool((split_rhat(x) < 1.01).all()), bool((ess_bulk(x) > 1000).all())
(True, True)
"""
from __future__ import annotations

import math
from functools import cached_property

import numpy as np
import torch
from scipy import fft, special

from .chunks import map_chunks

#: quantities from which :func:`rhat_and_ess` splits its work over two threads (the 532 released
#: cells of Adult-10 with 20 % MCAR, 16 chains × 400 draws: 0.78 s on one thread)
THREAD_QUANTITIES = 64

#: draws (chains × draws per chain × quantities) of one column block of :func:`rhat_and_ess`: its
#: rank transform and FFTs hold about a dozen arrays of a block's size, so blocks bound its memory
#: whatever the chains' length. The bundled Adult at 15 columns, seed 13 on 2026-12-06, 1,391
#: released cells × 16 chains × 2,200 draws in two blocks on two threads: the fit's peak resident
#: memory 6.27 GB (≤ 2.32 GB in fits of ≤ 900 draws per chain). 4 M draws: 32 MB per float64 array
BLOCK_DRAWS = 4 * 1024 * 1024


def _split(x: np.ndarray) -> np.ndarray:
    """(2 chains, ⌊draws/2⌋, k): each chain's first and last half."""
    half = x.shape[1] // 2
    return np.concatenate([x[:, :half], x[:, x.shape[1] - half:]], axis=0)


def _sorted(rows: np.ndarray, kind: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(order, the sorted rows) of ``rows`` (k, S, C-contiguous) along their contiguous axis (numpy's
    sort ``kind``), ``order`` as flat positions in ``rows`` (row i's argsort plus i·S): a flat gather
    or scatter with them is 1.6–3.7 times faster than ``take_along_axis`` / ``put_along_axis`` (696
    rows × 12,800 draws)."""
    order = np.argsort(rows, axis=1, kind=kind)
    order += np.arange(rows.shape[0])[:, None] * rows.shape[1]
    return order, rows.ravel()[order]


def _folded_sorted(order: np.ndarray, ordered: np.ndarray, median: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_sorted` of |rows − median| from that of ``rows``: in the rows' sorted order the folded
    values fall to the median and rise after it, two runs that a stable sort (timsort) merges in
    linear time (696 rows × 12,800 draws: 0.085 s against 0.29 s for a fresh argsort). Ties may come
    out in another order than a fresh sort's; their average ranks, and so the scores, are the same."""
    fold, folded = _sorted(np.abs(ordered - median[:, None]), kind="stable")
    return order.ravel()[fold], folded


def _twice_ranks(ordered: np.ndarray) -> np.ndarray:
    """Twice the average rank less 2 of each entry of the sorted rows ``ordered`` (k, S), in sorted
    order: 2j for the entry at position j of the sort and, inside a tie group, start + end (its
    first and last positions). Only tie groups' entries are touched (few: the folded draws
    |x − median| of an even count tie the two middle ones in every column), so a tie costs what it
    touches, not a pass over all columns."""
    size = ordered.shape[1]
    twice = np.broadcast_to(np.arange(0, 2 * size, 2), ordered.shape)
    tie = np.zeros(ordered.shape, dtype=bool)
    tie[:, 1:] = ordered[:, 1:] == ordered[:, :-1]          # equal to the one before: inside a group
    if not tie.any():  # no ties (continuous draws): the rank is the position in the sort
        return twice
    grouped = tie.copy()
    grouped[:, :-1] |= tie[:, 1:]                           # … or the first of a group
    row, pos = np.nonzero(grouped)                          # row-major: each group's entries in order
    entries = np.arange(row.size)
    starts = np.maximum.accumulate(np.where(~tie[row, pos], entries, 0))
    ends_here = np.ones(row.size, dtype=bool)
    ends_here[:-1] = ~tie[row[1:], pos[1:]] | (row[1:] != row[:-1])
    ends = np.minimum.accumulate(np.where(ends_here, entries, row.size)[::-1])[::-1]
    twice = twice.copy()
    twice[row, pos] = pos[starts] + pos[ends]
    return twice


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1…S of each column of x (S, k), ties given their average rank: scipy's
    ``rankdata(method="average", axis=0)`` from one sort per column (scipy's took 1.25 s on
    12,800 × 550 draws here, this 0.25 s). The ranks themselves, from :func:`_twice_ranks`, which
    R̂'s normal scores (:func:`_scores`) use without forming them; tested against scipy."""
    rows = np.ascontiguousarray(np.asarray(x, dtype=float).T)      # (k, S): sort along contiguous rows
    order, ordered = _sorted(rows)
    ranks = np.empty(rows.shape)
    ranks.ravel()[order] = _twice_ranks(ordered) / 2.0 + 1.0
    return ranks.T


def _score_table(size: int) -> np.ndarray:
    """The normal scores Φ⁻¹((r − 3/8)/(S + 1/4)) of every average rank r = 1, 1.5, …, S of S draws,
    indexed by 2r − 2: an average rank is a multiple of ½, so the scores are looked up instead of
    an inverse normal per draw (a NAPSU-MQ check ranks 1,391 cells × 6,400 draws twice or four
    times, and ``ndtri`` over all of them was a fifth of its R̂)."""
    return special.ndtri((np.arange(2, 2 * size + 1) / 2.0 - 0.375) / (size + 0.25))


def _scores(order: np.ndarray, ordered: np.ndarray, table: np.ndarray) -> np.ndarray:
    """The normal scores (k, S) of rows sorted as ``order``, ``ordered`` (:func:`_sorted`), each put
    straight where its draw sits (no array of ranks in between)."""
    z = np.empty(ordered.shape)
    z.ravel()[order] = table[_twice_ranks(ordered)]
    return z


def _rhat(x: np.ndarray) -> np.ndarray:
    n = x.shape[1]
    b = n * np.var(x.mean(axis=1), axis=0, ddof=1)
    w = np.var(x, axis=1, ddof=1).mean(axis=0)
    return np.sqrt((b / w + n - 1) / n)


def _as_draws(x) -> tuple[np.ndarray, bool]:
    x = np.asarray(x, dtype=float)
    scalar = x.ndim == 2
    return (x[..., None] if scalar else x.reshape(x.shape[:2] + (-1,))), scalar


def _finish(out: np.ndarray, x: np.ndarray, scalar: bool, shape) -> np.ndarray | float:
    out = np.where(np.isfinite(x).all(axis=(0, 1)), out, np.nan)
    return float(out[0]) if scalar else out.reshape(shape[2:])


def split_rhat(x) -> np.ndarray | float:
    """Rank-normalised split-R̂ of draws ``x`` (chains, draws[, …]): the larger of the bulk and
    tail (folded) versions, as Stan and ArviZ report it; NaN for a quantity with non-finite draws,
    and with fewer than 2 chains or 4 draws."""
    return rhat_and_ess(x, ess=False)[0]


def format_rhat(rhat: float, target: float, digits: int = 3) -> str:
    """R̂ as text, rounded to ``digits`` decimals, or to more (at most 6) where that rounding would
    put it on the other side of ``target``: a progress line or report must not print "1.010" for an
    R̂ of 1.0102 that missed a target of 1.01.

    >>> format_rhat(1.0102, 1.01), format_rhat(1.01003, 1.01, 4), format_rhat(1.0079, 1.01)
    ('1.0102', '1.01003', '1.008')
    """
    text = f"{rhat:.{digits}f}"
    while digits < 6 and (rhat > target) != (float(text) > target):
        digits += 1
        text = f"{rhat:.{digits}f}"
    return text


def ess_bulk(x) -> np.ndarray | float:
    """Bulk effective sample size of draws ``x`` (chains, draws[, …]): the ESS of the z-scaled
    split chains; NaN for a quantity with non-finite draws, and with fewer than 4 draws."""
    return rhat_and_ess(x, rhat=False)[1]


def rhat_and_ess(x, rhat: bool = True, ess: bool = True) -> tuple:
    """(:func:`split_rhat`, :func:`ess_bulk`) of ``x``, sharing the bulk rank transform (None for
    the one not asked for). Quantities are independent: above :data:`THREAD_QUANTITIES` of them,
    column blocks are computed on :func:`dpsynth.graphical.chunks.map_chunks`'s threads (the
    sorts, normal quantiles and FFTs release the GIL), at least two and as many as keep each block
    within :data:`BLOCK_DRAWS` draws (memory bounded however long the chains): R̂ the same as one
    block's, the ESS to rounding (the FFTs and sums over a block's columns may order their
    operations differently: a last bit)."""
    shape = np.shape(x)
    x, scalar = _as_draws(x)
    nan = np.full(x.shape[-1], np.nan)
    if x.shape[1] < 4:
        return (_finish(nan, x, scalar, shape) if rhat else None), (_finish(nan, x, scalar, shape) if ess else None)
    k = x.shape[-1]
    count = max(2 if k >= THREAD_QUANTITIES else 1, math.ceil(x.shape[0] * x.shape[1] * k / BLOCK_DRAWS))
    if count == 1:
        r, e = _rhat_and_ess(x, rhat, ess)
    else:
        blocks = np.array_split(np.arange(k), min(count, k))
        parts = map_chunks(lambda cols: _rhat_and_ess(x[..., cols], rhat, ess), blocks)
        r, e = (np.concatenate([p[i] for p in parts]) if want else None for i, want in ((0, rhat), (1, ess)))
    return (_finish(r, x, scalar, shape) if rhat else None), (_finish(e, x, scalar, shape) if ess else None)


def _rhat_and_ess(x: np.ndarray, rhat: bool, ess: bool) -> tuple:
    """(R̂, ESS) of the draws x (chains, draws ≥ 4, k), each (k,) (None where not asked for), before
    non-finite quantities are set to NaN."""
    nan = np.full(x.shape[-1], np.nan)
    s = _split(np.where(np.isfinite(x), x, 0.0))
    rows = np.ascontiguousarray(s.reshape(-1, s.shape[-1]).T)   # (k, S): each quantity's draws in a row
    size = rows.shape[1]
    table = _score_table(size)
    order, ordered = _sorted(rows)
    z_rows = _scores(order, ordered, table)
    z = z_rows.T.reshape(s.shape)  # a view, quantities slowest: the memory order the sums below were measured in
    r = e = None
    with np.errstate(invalid="ignore", divide="ignore"):
        if rhat:
            # the median of each quantity from its sorted draws (np.median's value: the middle
            # one, or the mean of the middle two), then the folded draws' scores
            half = size // 2
            median = ordered[:, half] if size % 2 else 0.5 * (ordered[:, half - 1] + ordered[:, half])
            tail_rows = _scores(*_folded_sorted(order, ordered, median), table)
            tail = _rhat(tail_rows.T.reshape(s.shape))
            r = np.fmax(_rhat(z), tail) if x.shape[0] >= 2 else nan
        if ess:
            total = z.shape[0] * z.shape[1]
            out = total / np.maximum(_tau(z), 1.0 / np.log10(total))
            constant = (z.max(axis=(0, 1)) - z.min(axis=(0, 1))) < np.finfo(float).resolution
            e = np.where(constant, float(total), out)
    return r, e


def _tau(z: np.ndarray) -> np.ndarray:
    """Integrated autocorrelation time of the chains z (chains, draws, k) by Geyer's initial
    positive sequence of pair sums P_j = ρ_2j + ρ_2j+1, made monotone (a running minimum)."""
    m, n, k = z.shape
    centred = z - z.mean(axis=1, keepdims=True)
    size = fft.next_fast_len(2 * n)
    spec = fft.rfft(centred, n=size, axis=1)
    acov = fft.irfft(spec * np.conjugate(spec), n=size, axis=1)[:, :n] / n   # (m, n, k)
    mean_var = acov[:, 0].mean(axis=0) * n / (n - 1.0)
    var_plus = mean_var * (n - 1.0) / n + (np.var(z.mean(axis=1), axis=0, ddof=1) if m > 1 else 0.0)
    rho = 1.0 - (mean_var - acov.mean(axis=0)) / var_plus                       # (n, k)
    rho[0] = 1.0
    pairs = n // 2
    p = rho[:2 * pairs].reshape(pairs, 2, k).sum(axis=1)                       # (pairs, k)
    # the sequence stops at the first pair j ≥ 1 whose sum is ≤ 0 (or at the last lag there is)
    last = min(pairs - 1, (n - 3) // 2)                # the last pair the lag limit lets it reach
    stop = np.full(k, last)
    if last >= 1:
        nonpos = p[1:last + 1] <= 0
        stop = np.where(nonpos.any(axis=0), 1 + nonpos.argmax(axis=0), last)
    stop = np.where(p[0] > 0, stop, 0)                 # ρ_1 ≤ −1: no pair is summed
    mono = np.minimum.accumulate(p, axis=0)
    kept = np.arange(pairs)[:, None] < stop[None, :]
    cols = np.arange(k)
    even = np.where(stop > 0, rho[2 * stop, cols], 1.0)
    p_stop = p[stop, cols]
    last_even = np.where((even > 0) | (p_stop >= 0) | (stop == 0), even, 0.0)
    return -1.0 + 2.0 * np.where(kept, mono, 0.0).sum(axis=0) + last_even


def transient_start(draws: int, first: int) -> int:
    """The draws per chain that a check leaves out as a possible transient
    (:data:`dpsynth.generators.napsu_sampling.TRANSIENT_MODES`) when the chains hold ``draws`` each
    and the first run kept ``first``: half of them, at most the first run; none at the first check.

    >>> transient_start(200, 200), transient_start(300, 200), transient_start(800, 200)
    (0, 150, 200)
    """
    return min(draws // 2, first) if draws > first else 0


def draws_to_target(draws: int, rhat: float, target: float) -> int | None:
    """A rough guide to the draws per chain at which R̂ meets ``target``, from ``draws`` per chain
    with R̂ ``rhat``: once the chains are stationary, the split R̂ of a quantity whose
    autocorrelation time is τ draws is ≈ 1 + (τ − 1) / draws whatever the number of chains (AR(1)
    chains, 8–64 of them: docs/napsu-measurements.md, "Wide tables"), so R̂ − 1 falls as 1 / draws.
    Early checks, whose draws still hold the chains' travel from their starts, overstate it. None
    where R̂ meets the target or is undefined.

    >>> draws_to_target(600, 1.0172, 1.01), draws_to_target(800, 1.0079, 1.01)
    (1032, None)
    """
    if not (math.isfinite(rhat) and rhat > target > 1.0):
        return None
    return round(draws * (rhat - 1.0) / (target - 1.0))


class GrowingCellProbs:
    """The released cells' probabilities (chains, draws, P) of a run whose draws only grow (each
    extension appends to every chain), each draw's computed once: the check after an extension
    would otherwise recompute every earlier draw's (Adult-10 with 20 % MCAR, five checks: 23,200
    draws' passes where 9,600 draws were kept). ``probs_of`` maps draws (…, dim) to (…, P).

    >>> grow = GrowingCellProbs(lambda d: d.numpy()[..., :1] * 2)
    >>> grow(torch.ones(2, 3, 4)).shape, grow(torch.ones(2, 5, 4)).shape
    ((2, 3, 1), (2, 5, 1))
    """

    def __init__(self, probs_of):
        self.probs_of, self.values = probs_of, None

    def __call__(self, draws: torch.Tensor) -> np.ndarray:
        done = 0 if self.values is None else self.values.shape[1]
        if done > draws.shape[1]:
            raise ValueError("the draws shrank: start a new GrowingCellProbs for a new run")
        if done < draws.shape[1]:
            new = self.probs_of(draws[:, done:])
            self.values = new if self.values is None else np.concatenate([self.values, new], axis=1)
        return self.values


#: a chain whose exact log density lies more than this many standard deviations of a Gaussian
#: target's log density (√(dim/2)) below the chains' median at the end of a warm-up window has
#: strayed (e.g. into a region where a surrogate is high and the exact density is not)
STRAY_SD = 5.0
#: a chain that accepted fewer than this share of a warm-up window's proposals is stuck
STUCK_ACCEPT = 0.05


def _majority_or_all(good: torch.Tensor) -> torch.Tensor:
    """``good``, or every chain when fewer than half are good (no basis then to single any out)."""
    return good if 2 * int(good.sum()) >= good.numel() else torch.ones_like(good)


def settled_chains(log_density: torch.Tensor, dim: int) -> torch.Tensor:
    """Mask of the chains that have not strayed (:data:`STRAY_SD`); all of them when fewer than
    half would remain."""
    lp = torch.where(torch.isfinite(log_density), log_density, torch.full_like(log_density, -math.inf))
    return _majority_or_all(lp >= lp.median() - STRAY_SD * math.sqrt(dim / 2))


def moving_chains(accept_share: torch.Tensor) -> torch.Tensor:
    """Mask of the chains that accepted at least :data:`STUCK_ACCEPT` of their proposals
    (``accept_share``, one per chain); all of them when fewer than half would remain. The bundled
    Adult's 15 columns (D = 2,752, seed 0): two of 16 chains ended warm-up at θ ≈ −4.3 on a cell
    where the others were at −10 ± 0.5, the log density's gradient there ~1,200 in the metric's
    units against a step of 0.03: every trajectory diverged, the two never moved, and the released
    cells' R̂ stayed at 1.40 over the first 500 draws per chain.

    >>> moving_chains(torch.tensor([0.8, 0.0, 0.7, 0.04])).tolist()
    [True, False, True, False]
    """
    return _majority_or_all(accept_share >= STUCK_ACCEPT)


# ---------------------------------------------------------------------- MCMC results
class ChainSummary:
    """Shared read-outs of an MCMC result (:class:`dpsynth.graphical.posterior.HMCResult`,
    :class:`dpsynth.graphical.elliptical_slice.SliceResult`) with ``draws`` (chains, draws, dim) and ``seconds``:
    per-parameter ``rhat`` and ``ess_bulk``, computed on first use (one shared rank transform) and
    kept. NAPSU-MQ diagnoses the released cells instead and never reads them: computed eagerly
    after each of a fit's runs they took ~2.5 of its ~110 s (Adult-10 with 20 % MCAR, profiled)."""

    @property
    def rhat(self) -> np.ndarray:
        return self._rhat_and_ess[0]

    @property
    def ess_bulk(self) -> np.ndarray:
        return self._rhat_and_ess[1]

    @cached_property
    def _rhat_and_ess(self) -> tuple[np.ndarray, np.ndarray]:
        return rhat_and_ess(self.draws.detach().numpy())  # NaN with fewer than 4 draws

    @property
    def max_rhat(self) -> float:
        return finite_extreme(np.max, self.rhat)

    @property
    def min_ess(self) -> float:
        return finite_extreme(np.min, self.ess_bulk)

    @property
    def ess_per_second(self) -> float:
        return self.min_ess / self.seconds

    def flat(self) -> torch.Tensor:
        return self.draws.reshape(-1, self.draws.shape[-1])


def finite_extreme(fn, values) -> float:
    """fn (np.max, np.min) of the finite ``values``; NaN where there are none."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return float(fn(v)) if v.size else float("nan")
