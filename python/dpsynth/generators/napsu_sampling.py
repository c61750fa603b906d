"""NAPSU-MQ's posterior sampling and its diagnostics (Räisä et al. 2023, Algorithm 1, line 5: draws
of θ from the noise-aware posterior), kept apart from the generator's measurement and model.

:class:`PosteriorSampling` is a mixin of :class:`dpsynth.generators.napsu.NAPSUMQ`: it runs HMC on
the surrogate of the likelihood (V frozen but for each table's own block:
:meth:`NoiseAwareLikelihood.surrogate`; chains that stray far below the others' exact log density
in warm-up restart where the others are, ``diagnostics_["warmup_restarts"]``; after warm-up a
chain takes, at random, a shorter step in a tenth of its draws, so that one where the adapted step
is beyond the leapfrog's stable range still moves: :data:`dpsynth.graphical.posterior.SHORT_STEPS`; for
large models half of each batch of chains is differentiated in a forked helper process,
:data:`CHAIN_PROCESSES`), extends the run while the released cells' split R̂ / bulk ESS miss their
targets (a run still unmixed after :data:`RESTART_AFTER` extensions, its R̂ stalled, adapts afresh once,
``diagnostics_["restarts"]``;
every check's R̂ and ESS: ``diagnostics_["mixing_path"]``), reweights the draws to the exact
posterior by Pareto-smoothed importance sampling (Vehtari et al. 2024), and hands m posterior draws
to the sampler of synthetic rows. It reads the generator's options (``inference``, ``mcmc_*``,
``rhat_target``, ``ess_target``, ``on_not_mixed``) and writes ``draws_``, ``weights_`` and
``diagnostics_``.
"""
from __future__ import annotations

import math
import os
import sys
import time
import warnings

import numpy as np
import torch

from ..graphical.chunks import beside, cores, map_chunks, one_core, torch_threads
from ..graphical.metric import shrunk_covariance
from ..graphical.mixing import (GrowingCellProbs, draws_to_target, finite_extreme, format_rhat,  # noqa: F401
                                transient_start)  # (draws_to_target, transient_start: re-exported)
from ..graphical.noise_aware import fit_draws
from ..graphical.posterior import (PosteriorNotMixedWarning, ess_bulk, hmc, last_window_iterations, psis_weights,
                                   rhat_and_ess, short_warmup)
from ..graphical.transport import fit_marginal_map
from ..progress import note

DTYPE = torch.float64
#: chains, warm-up iterations, kept draws per chain, thinning, for complete data (and missing
#: values handled as available cases or a level). Complete-data Adult-10, ε = 1, seeds 0–3, one other
#: job on the machine: 48 × (100 + 400) took 45.7 / 46.3 / 54.5 / 73.3 s (seed 3 with one extension),
#: the code of 2026-11-25 with 64 chains 43.5 / 48.4 / 89.5 / 86.8 s; 64 chains now 50.8 / 56.0 s on
#: seeds 0 / 1, 32 chains 65.8 / 45.4 s (seed 0 extended); 16 × (300 + 400), alone, 75.7 / 71.6 s
MCMC_DEFAULTS = {"hmc": (48, 100, 400, 1), "hmc-da": (16, 300, 200, 1), "slice": (20, 20, 8, 2)}
#: ... and under ``missing="mar"``, whose posterior is stiffer (age × education cells bounded by
#: their noisy counts from above only): 16 chains (a gradient costs 7.3 ms at 16 chains, 13.1 ms at
#: 64: seed 11), a first check after 200 draws and extensions of 100 (:data:`EXTENSION_SHARE_MAR`),
#: each re-estimating the metric from all draws so far. The split R̂ of the worst of 550 cells, not
#: the ESS, sets the draws needed: Adult-10 with 20 % MCAR, seeds 0–3, warm-up 300, R̂ after 200 /
#: 300 / 400 draws 1.022 / 1.013 / 1.011, 1.028 / 1.010 / 1.009, 1.019 / 1.014 / 1.010, 1.032 /
#: 1.014 / 1.010 while the least bulk ESS was 484–1,990 (target 400). Warm-up 200 (seeds 0–2:
#: mixed after 500 draws each, 82 / 94 / 118 s for the fit, one thread beside another fit) against
#: 300 (500 / 400 / 500 draws, 83 / 105 / 124 s) and 150 (400 / 600 / 500, 65 / 104 / 133 s)
MCMC_DEFAULTS_MAR = {"hmc": (16, 200, 200, 1)}
#: ... whose warm-up, left at its default, grows with the model until its last slow window holds at
#: least min(:func:`fit_draws`, WINDOW_DRAWS_PER_PARAMETER · (D + 1)) draws: the surrogate the chains
#: sample has its linear term fitted to that window's draws (a ridge fit in D + 1 dimensions). At
#: 200 iterations and 16 chains the window holds 1,392 draws: 3.3 per parameter on Adult-10 (D =
#: 421, unchanged), 1.4 on the bundled Adult's first 10 columns (D = 1,016), where the importance
#: efficiency fell to 0.15 and the fit ended unmixed (ESS after weighting 260 against 400, 20
#: extensions, seed 0); with 300 iterations (2,064 draws) 0.63 and mixed (ESS 421), the same seed
#: and machine load (1,474 s against 1,337 s: both ran their 20 extensions and a restart)
WINDOW_DRAWS_PER_PARAMETER = 2.0

#: processes the chains' leapfrog gradients run on: 2 splits each batch between this process and a
#: forked helper (:class:`dpsynth.graphical.split_chains.SplitDensity`: the same sampler, its draws
#: other than one process's by float32 rounding), the default on Linux with two or more cores; 1
#: elsewhere. The bundled Adult at 15 columns, seed 3, alone (2026-12-02): 9.9 against 11.7 ms a
#: gradient, fit + 20 datasets 333.5 against 371.3 s (``bench/napsu_scale.py --chain-processes``)
CHAIN_PROCESSES = 2 if sys.platform.startswith("linux") and (os.cpu_count() or 1) >= 2 else 1
#: ... for models of at least this many parameters, where a gradient's fixed cost (products with
#: dense D × D matrices) is what two processes share; smaller ones (Adult-10: 300–550) keep one
#: process, the paths their coverage studies measured
SPLIT_MIN_DIM = 800


def mode_threads(dim: int) -> int:
    """torch threads for the mode search (Fisher scoring) of a model of ``dim`` parameters: the
    machine's cores (:func:`dpsynth.graphical.chunks.cores`) where the chains are split over two
    processes (:data:`CHAIN_PROCESSES`, :data:`SPLIT_MIN_DIM`), else one. Before the chains start
    the second core is idle, and a Fisher information's work is a few large calibrations, solves
    and products, which two threads share well. The bundled Adult at 15 columns, seed 9, alone
    (2026-12-04): the mode search took 12.3 s on two threads against 19.5 s on one (27 Fisher
    informations, 0.30 against 0.53 s each), the same mode to 7e-10 in the Fisher metric. The
    starting point's L-BFGS (many small operations) stays on one: 5.8 s on two against 0.6 s.

    >>> mode_threads(421)
    1
    """
    return cores() if CHAIN_PROCESSES > 1 and dim >= SPLIT_MIN_DIM else 1


def stalled(rhats, checks: int | None = None, ratio: float | None = None, floor: float = 1.0) -> bool:
    """Whether the R̂ of successive checks (``rhats``, the latest last) has stopped falling well
    short of its target: R̂ − 1 now above ``ratio`` (:data:`STALL_RATIO`) times its value
    ``checks`` (:data:`STALL_CHECKS`) checks before, and R̂ above ``floor``. False with too few
    checks or an undefined R̂.

    >>> stalled([1.042, 1.036, 1.028, 1.025, 1.019]), stalled([1.34, 1.34, 1.35, 1.35, 1.35])
    (False, True)
    >>> stalled([1.0108, 1.0102, 1.0101, 1.0101, 1.0101], floor=1.02)  # just short of 1.01
    False
    """
    checks = STALL_CHECKS if checks is None else checks
    ratio = STALL_RATIO if ratio is None else ratio
    if len(rhats) <= checks or not (np.isfinite(rhats[-1]) and np.isfinite(rhats[-1 - checks])):
        return False
    return rhats[-1] > floor and rhats[-1] - 1.0 > ratio * (rhats[-1 - checks] - 1.0)


def mar_warmup(warmup: int, dim: int, chains: int) -> tuple[int, int | None]:
    """(warm-up iterations, last slow window) under ``missing="mar"``: ``warmup`` with Stan's windows
    (None) where its last slow window (:func:`last_window_iterations`) gives the surrogate's fit
    enough draws (:data:`WINDOW_DRAWS_PER_PARAMETER`), else, for a wide model, a last slow window
    just long enough after short early windows (:data:`dpsynth.graphical.posterior.SHORT_EARLY_WINDOWS`:
    253 iterations where Stan's proportions needed 300 for the bundled Adult at 15 columns).

    >>> mar_warmup(200, 421, 16), mar_warmup(200, 1026, 16)
    ((200, None), (253, 128))
    """
    need = min(fit_draws(dim), math.ceil(WINDOW_DRAWS_PER_PARAMETER * (dim + 1)))
    if last_window_iterations(warmup) * chains >= need:
        return warmup, None
    last = math.ceil(need / chains)
    return short_warmup(last), last


#: ``"hmc"`` reweights at most this many draws (the chains thinned evenly): each needs one exact
#: evaluation of the likelihood (Adult-10 under MAR: 0.55 ms by junction-tree messages, 25 ms by
#: the clamped pass that 3,200 draws were sized for)
IMPORTANCE_DRAWS = 6400
#: R̂ and ESS of the cells are computed on every draw of every chain (None), as Stan and ArviZ
#: report them; a number k thins each chain by a stride of ⌈draws/k⌉ first (400 until 2026-12-06).
#: Thinning lowers the split R̂: at stationarity R̂ − 1 ≈ (τ − 1)/draws for a quantity of
#: autocorrelation time τ, and a stride s makes it ≈ (τ/s − 1)/(draws/s). AR(1) chains, 16 of them,
#: τ = 9 (docs/napsu-measurements.md, "ninth"): mean R̂ − 1 after 900 draws 0.0093 over all draws,
#: 0.0074 thinned by 3; after 600, 0.0134 against 0.0119. So an R̂ ≤ 1.01 on thinned chains need not
#: hold over every draw, and the target is checked on every draw. Cost of R̂ alone (1,391 cells, 16
#: chains, one core): 0.71 s at 400 draws per chain, 1.42 s at 800 (the cells' values of every draw
#: are computed in any case, :class:`GrowingCellProbs`). The bundled Adult at 15 columns, seeds 1–20:
#: the stop moved on 5 fits, by +100 draws per chain on two and −100 on three (docs/napsu-measurements.md,
#: "Session of 2026-12-06")
DIAGNOSTIC_DRAWS: int | None = None
#: extensions of the sampling phase (each EXTENSION_SHARE as long as the first) while R̂ / ESS
#: miss their targets: short steps, so that a posterior that mixes quickly (complete-data Adult)
#: stops early and a slow one (Adult-10 MAR: 800–2,400 draws per chain) stops soon after it has
#: mixed; at most 1 + MAX_EXTENSIONS · EXTENSION_SHARE times the first run's draws in all. A fit's
#: time is set by how many extensions it needs (Adult-10 with 20 % MCAR, seed 1, one thread beside
#: another fit: 11,220 gradients and 130 s with none, 14,610 and 150 s with one of 200 draws after a
#: different start); extensions of 100 draws (a quarter) overshoot the draws needed by half as much
MAX_EXTENSIONS, EXTENSION_SHARE = 20, 0.25
#: ... under ``missing="mar"`` (first run 200 draws: :data:`MCMC_DEFAULTS_MAR`): 100 draws an extension
EXTENSION_SHARE_MAR = 0.5
#: draws per message pass when the released cells' probabilities are computed for the diagnostics:
#: the pass's tensors (tree cells × draws) then stay in cache. Adult-10 with 20 % MCAR (2,592 tree
#: cells), 6,400 draws: 3.3 s in one batch, 1.9 s in chunks of 1,024, 0.66 s in chunks of 64
CELL_CHUNK = 64
#: a check that leaves out a transient (:data:`TRANSIENT_MODES`) first computes the later draws' R̂ of
#: the SCREEN_CELLS cells whose R̂ over all draws was highest, and stops where one of them misses the
#: target by more than SCREEN_MARGIN (the same decision as from every cell). The bundled Adult at 15
#: columns, seed 6 (an R̂ of all 1,391 cells 1.2 s on one core; seven of nine checks computed two):
#: the checks after the first and the waits for their maps 23.1 → 19.6 s, the same draws
SCREEN_CELLS, SCREEN_MARGIN = 64, 1e-9
#: path length after warm-up (the metric's units, ±50 % jitter) for models of SPLIT_MIN_DIM parameters or more: π,
#: warm-up keeps π/2. Rare cells' directions are wider than warm-up's metric says, and a path L turns the motion
#: along a direction of sd s by L/s. The bundled Adult at 15 columns, seeds 1–10: 400–600 draws per chain against
#: 600–1,000, median fit + 20 datasets 229.0 against 275.6 s (docs/napsu-measurements.md, "fourth"). None: π/2
SAMPLING_PATH_LENGTH: float | None = math.pi
#: Pareto k̂ above which importance-reweighted draws are not trusted (Vehtari et al. 2024)
PARETO_K_MAX = 0.7
#: chains start at N(mode, INIT_SCALE² F⁻¹): spread out, yet inside the region where the frozen-V
#: surrogate of delayed acceptance is close to the exact density
INIT_SCALE = 0.3
#: Newton decrement at which the mode search stops, per inference (others: noise_aware.MODE_TOL):
#: chains only start near the mode (the log density's sd over a posterior of D = 421 is ~15 nats).
#: Adult-10, 20 % MCAR, seed 1: the decrement fell below 1 after 20 of 31 Fisher-scoring steps (4.1
#: of 6.3 s), 0.6 nats below the mode's log density
MODE_TOL = {"hmc": 1.0, "hmc-da": 1.0}
#: ... and from SPLIT_MIN_DIM parameters on, at least this times the parameters: the bundled Adult at
#: 15 columns (D = 1,026, seed 8) spent the last 10 of 35 Fisher-scoring steps (~4 s) gaining 8 nats,
#: where the chains start ~½·INIT_SCALE²·D ≈ 46 nats below the mode (N(mode, INIT_SCALE² F⁻¹))
MODE_TOL_PER_PARAMETER = 0.02


def mode_tolerance(inference: str, dim: int, default: float) -> float:
    """The Newton decrement at which the mode search stops (:data:`MODE_TOL`, ``default`` for an
    inference it does not name, :data:`MODE_TOL_PER_PARAMETER`).

    >>> mode_tolerance("hmc", 421, 1e-6), mode_tolerance("hmc", 1027, 1e-6), mode_tolerance("laplace", 1027, 1e-6)
    (1.0, 20.54, 1e-06)
    """
    tol = MODE_TOL.get(inference, default)
    return max(tol, MODE_TOL_PER_PARAMETER * dim) if inference in MODE_TOL and dim >= SPLIT_MIN_DIM else tol


#: draws (all chains, evenly thinned) from which each extension re-estimates the metric. Adult-10
#: with 20 % MAR, seed 12: R̂ ≤ 1.01 after 1,200 draws per chain (20,281 gradients) against 2,000
#: (30,552) with the warm-up's metric kept; seeds 13 and 14 passed after the same 800 draws either
#: way, with bulk ESS 1,782 / 1,051 against 1,425 / 786
METRIC_DRAWS = 6400
#: a run that has not mixed after this many extensions, and whose R̂ has stalled (:func:`stalled`),
#: starts again once: a fresh warm-up (step size, metric windows, coordinate map and surrogate)
#: from where its chains are, the metric starting from all draws so far, which are then dropped.
#: A run's speed of mixing depends on its adaptation: Adult-10 with 20 % MAR, seed 11 (commit
#: 718cbdf) had not mixed after 2,400 draws per chain (R̂ 1.0128, bulk ESS 908: ~40 draws per
#: effective draw where a fit typically needs 6–10), where the code before mixed after 600; the
#: same path with the restart mixed 600 draws after it. A run whose R̂ still falls is not
#: restarted: restarting after 8 extensions regardless dropped 1,000 draws of two runs that were
#: mixing slowly but steadily, Adult-10 with 20 % MAR seed 3 (R̂ − 1 0.042 → 0.019 over the last
#: four checks; without a restart mixed after 1,400 draws, 14,863 gradients against 25,275) and the
#: bundled Adult's first 10 columns, seed 0 (40,154 gradients against 72,126). A stalled run is
#: restarted as soon as the rule can tell (after STALL_CHECKS extensions): the bundled 10 columns,
#: seed 1, sat at R̂ 1.337–1.347 from 200 to 500 draws per chain (one chain apart). Of the 20 + 20
#: Adult-10 fits of the MAR and MCAR studies (commit d60cf7a), none stalled by this rule at any
#: check from the fourth extension on. None: never restart
RESTART_AFTER = 4
#: R̂ has stalled when R̂ − 1 of the latest check is above STALL_RATIO times its value STALL_CHECKS
#: checks before (a run mixing at a steady rate has R̂ − 1 falling roughly as 1/√draws: from 600 to
#: 1,000 draws per chain by about 23 %) while R̂ − 1 is still above STALL_ABOVE times the target's
#: margin (rhat_target − 1): near its target R̂ hovers (the bundled 10 columns, seed 1: 1.0102,
#: 1.0101, 1.0101 after 900–1,100 draws, mixed at 1,200), which is no reason to start again
STALL_CHECKS, STALL_RATIO, STALL_ABOVE = 4, 0.9, 2.0
#: (a restart of large models' runs far from mixed after one extension, 2026-12-04 to 74c3c6e, cost the bundled Adult
#: at 15 columns time: seeds 1 / 8 472.6 / 460.1 s against 302.1 / 335.2 s; docs/napsu-measurements.md, "2026-12-05, third")


#: the first draws after warm-up can still be a transient (chains travelling from their starts near
#: the mode): under ``missing="mar"``, a check whose draws miss R̂ is made again on the draws after
#: the first :func:`transient_start` of them, and the fit stops when either set meets the targets,
#: keeping that set (deleting an initial transient, as Gelman & Rubin 1992 discard the first half
#: of each chain; here at most the first run). Adult-10 with 20 % MCAR, the draws of two fits taken
#: to their end: seed 16 mixed after 1,000 draws per chain, with the first min(n/2, 200) left out
#: after 600 (R̂ 1.0090; all draws there 1.0226); seed 2 after 1,200, and after 800 (1.0095 against
#: 1.0142); four fits that had no transient (R̂ 1.017 and less at the first check) stopped where
#: they did with all draws
TRANSIENT_MODES = ("mar",)
#: what the dense metric's estimates (each slow warm-up window's, each extension's) are shrunk
#: towards on the correlation scale: ``"laplace"``, the correlations of F⁻¹ at the mode (the Fisher
#: information the chains start from; :func:`dpsynth.graphical.metric.shrunk_covariance`), or
#: None, the identity (Ledoit–Wolf). The posterior has strong linear dependences (parameters tied
#: by the released totals) that the identity target washes out: the metric then overstates the
#: variance along them and the step size shrinks to fit. Adult-10 with 20 % MCAR, seeds 1 / 3,
#: metric from 87 iterations' draws (1,392) judged against the covariance of 6,400 later ones
#: (eigenvalues of the metric-whitened covariance, largest / smallest): 466 / 672 towards the identity,
#: 13.7 / 21.8 towards F⁻¹'s correlations; from 6,400 draws 52 / 56 against 6.6 / 4.9. Whole fits,
#: paired (the code before / this, two at a time, one thread each): step size 0.112 / 0.137, 0.078 /
#: 0.119, 0.089 / 0.139 (MCAR seeds 0, 2, 4), gradients 9,283 / 8,350, 12,730 / 14,724 (seed 2 needed
#: 900 draws per chain against 400: two rare cells mixed slowly), 13,134 / 9,825; complete-data
#: Adult-10, seeds 0 / 1: step 0.161 / 0.195 and 0.211 / 0.221, fit + 20 datasets 50.8 / 43.9 and 35.3 / 32.8 s
METRIC_TARGET = "laplace"
#: an extension whose previous run accepted more than RETUNE_ACCEPT of its proposals (the target is
#: 0.8) first re-adapts the step size alone for RETUNE_WARMUP iterations (dual averaging, draws not
#: kept; metric, map and surrogate as re-estimated for it): warm-up's last window is short (20
#: iterations at 200) and can end with a step far below what the later metrics allow. Adult-10 with
#: 20 % MAR, seed 0: step 0.0357, acceptance 0.948, 44 leapfrog steps a draw in every extension
RETUNE_ACCEPT, RETUNE_WARMUP = 0.9, 40
#: large models (:data:`SPLIT_MIN_DIM`) fit each extension's coordinate map on a thread of its own
#: while the check before it runs (:func:`dpsynth.graphical.chunks.beside`; the same map, so the
#: same draws). The bundled Adult at 15 columns, seed 8 (1,000 draws per chain, 9 checks, 8 maps):
#: checks and maps 26.1 + 20.0 s one after the other, 35.3 + 5.6 s side by side
MAP_BESIDE_CHECK = True
#: large models (:data:`SPLIT_MIN_DIM`) may also check the draws inside each extension, every
#: INSIDE_CHECK_DRAWS draws per chain: the R̂ of the last full check's :data:`SCREEN_CELLS` worst
#: cells, all cells where those meet the target, and a stop where every target is met
#: (``hmc(stop=...)`` takes nothing from the random stream: a run not stopped is the same run, a
#: stopped one its first draws). Off (0) by default: at 25, the bundled Adult at 15 columns, seeds
#: 1–20, ran 3.8–6.3 % fewer gradients, but a finer grid also stops on R̂'s dips (seed 8 at 525 draws,
#: where the checks at 500 / 600 had 1.0111 / 1.0114), and coverage was 168/180 against 173/180 on
#: the same paths checked every 100 draws (docs/napsu-measurements.md, 2026-12-05, eighth)
INSIDE_CHECK_DRAWS = 0
#: the chains move in coordinates z that a per-coordinate sinh–arcsinh map (refitted at each slow
#: warm-up window and before each extension; :mod:`dpsynth.graphical.transport`) makes closer to
#: Gaussian: near-empty cells' parameters have a sharp bulk and a long left shelf
MARGINAL_MAP = True


class PosteriorNotMixedError(RuntimeError):
    """Raised instead of the warning with ``on_not_mixed="raise"``."""


class PosteriorSampling:
    """Posterior draws of NAPSU-MQ's θ and their diagnostics (module docstring)."""

    def _mode(self, lik, start: torch.Tensor, tol: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(the posterior mode, the Fisher information there) by ``lik.mode`` from ``start``, on
        :func:`mode_threads` torch threads."""
        with torch_threads(mode_threads(lik.dim)):
            return lik.mode(start, tol=tol)

    def _run_hmc(self, lik, x0, cov0, rng):
        """Dispersed starts N(mode, INIT_SCALE² F⁻¹), adapted dense-metric HMC, and up to
        :data:`MAX_EXTENSIONS` extensions, each :data:`EXTENSION_SHARE` (``missing="mar"``:
        :data:`EXTENSION_SHARE_MAR`) of the first run, while the cells' R̂ / ESS miss their targets;
        each extension starts with the coordinate map (:data:`MARGINAL_MAP`) and
        the metric re-estimated from all draws so far (a finite adaptation between runs: every run
        is a valid HMC kernel for the fixed target, started where the chains stopped); under
        :data:`TRANSIENT_MODES` a check may leave out the first :func:`transient_start` draws as a
        transient (``diagnostics_["transient_draws"]``). ``"hmc"``: the chains
        target the surrogate and the draws are reweighted to the exact posterior by
        Pareto-smoothed importance sampling; ``"hmc-da"``: delayed acceptance, exact but sticky."""
        delayed = self.inference_ == "hmc-da"
        cov0 = 0.5 * (cov0 + cov0.T)
        chol0 = torch.linalg.cholesky(cov0)
        init = x0 + INIT_SCALE * torch.as_tensor(rng.standard_normal((self.mcmc_chains_, lik.dim)), dtype=DTYPE) @ chol0.T
        fit_map = fit_marginal_map if MARGINAL_MAP else None
        target = cov0.numpy() if METRIC_TARGET == "laplace" else None

        def metric_of(flat):  # the shrunk covariance of draws (in the chains' coordinates)
            return torch.as_tensor(shrunk_covariance(flat.numpy(), target), dtype=DTYPE)

        def thinned(run):
            return run.draws[:, self.mcmc_thin_ - 1::self.mcmc_thin_]

        warmup, last_window = self.mcmc_warmup_, None
        wide = lik.dim >= SPLIT_MIN_DIM
        split, long_path = CHAIN_PROCESSES > 1 and wide, SAMPLING_PATH_LENGTH if wide else None
        if self.missing_mode_ == "mar" and self.mcmc_warmup is None:  # left at its default: by width
            warmup, last_window = mar_warmup(warmup, lik.dim, self.mcmc_chains_)

        def adapted_run(start, cov):
            """A run with its own warm-up from ``start`` (metric starting at ``cov``): the result, its
            kept draws and the density the draws are reweighted from."""
            run = hmc(lik.log_posterior, start, cov=cov, warmup=warmup, draws=self.mcmc_draws_ * self.mcmc_thin_,
                      rng=rng, surrogate=lik.surrogate, delayed_acceptance=delayed, fit_transform=fit_map,
                      metric_target=target, split_chains=split, last_window=last_window, sampling_path_length=long_path)
            kept = thinned(run)
            return run, kept, run.target if not delayed else lik.surrogate(kept.reshape(-1, lik.dim).mean(0))

        note(f"NAPSU-MQ sampler: {self.mcmc_chains_} chains, {lik.dim} parameters, {warmup} warm-up iterations, "
             f"then {self.mcmc_draws_} draws per chain and more until R-hat and ESS meet their targets")
        res, draws, guide = adapted_run(init, cov0)
        seconds, n_grad = res.seconds, res.gradient_evaluations
        last, retuned = res, 0  # the latest run: its step size and acceptance rate
        log_ratios = torch.zeros((draws.shape[0], 0), dtype=DTYPE)  # exact − surrogate; NaN: not evaluated
        probs = GrowingCellProbs(self._cell_probs)  # every check sees the draws of the checks before

        def reweight(draws, start=0):
            nonlocal log_ratios  # kept across checks, grown to the draws so far
            grown = torch.full(draws.shape[:2], math.nan, dtype=DTYPE)
            grown[:, :log_ratios.shape[1]] = log_ratios
            log_ratios = grown  # its slice is a view: the draws evaluated are filled in here
            return self._importance_diagnostics(draws[:, start:], lik, guide, log_ratios[:, start:],
                                                probs(draws)[:, start:])

        def run_row(run, draws):  # a run's draws per chain after it, step, acceptance, leapfrog steps, seconds
            return int(draws.shape[1]), *(round(v, k) for v, k in zip(
                (run.step_size, run.accept_rate, run.n_leapfrog, run.seconds), (4, 3, 1, 1)))

        runs = [run_row(res, draws)]
        # seconds of each check, of each extension's map and metric, and of each check inside an extension
        phases = {"check": [], "prepare": [], "inside": []}
        worst, inside = None, None  # the last full check's worst cells; a check inside that found the run mixed

        def checkpoint(draws, cells):
            point = (int(draws.shape[1]), cells.get("rhat_max_cells", math.nan), cells.get("ess_bulk_min_cells", math.nan))
            expected = draws_to_target(point[0] - start, point[1], self.rhat_target)
            note(f"NAPSU-MQ sampler: {point[0]} draws per chain, R-hat {format_rhat(point[1], self.rhat_target, 4)} (target <= {self.rhat_target}), "
                 + (f"ESS {point[2]:.0f}" if math.isfinite(point[2]) else "ESS not computed")
                 + f" (target >= {self.ess_target:.0f}), {n_grad} gradients, {seconds:.0f} s"
                 + (f"; if R-hat - 1 falls as 1/draws, ~{start + expected} draws per chain meet it" if expected else ""))
            return point

        def diagnose_from(draws, start, screen=None):
            # the exact evaluations behind the importance weights (most of a fit's cost beside the chains)
            # only when the chains' R̂ already meets its target, and so is the chains' ESS (the reweighting
            # computes the ESS of the draws a fit ends with in any case); R̂ on one core while a map fits beside
            with one_core(pending is not None):
                cells = self._cell_diagnostics(draws[:, start:], probs(draws)[:, start:], lazy=not delayed,
                                               screen=screen)
            if not delayed and cells.get("rhat_max_cells", math.inf) <= self.rhat_target:
                cells.update(reweight(draws, start))
            return cells

        def diagnose(draws, screen=None, phase="check"):
            """The diagnostics of all draws or, where those miss R̂ and the mode allows
            (:data:`TRANSIENT_MODES`), of the draws after a possible transient if those meet every
            target; sets ``start``, the draws per chain left out. ``screen``: cells whose R̂ is
            computed first (a check inside an extension: :data:`INSIDE_CHECK_DRAWS`)."""
            nonlocal start, worst
            t_check = time.perf_counter()
            start, cells = 0, diagnose_from(draws, 0, screen=screen)
            found = cells.pop("worst_cells", None)  # None where the screen missed
            worst = found if found is not None else worst
            late = transient_start(draws.shape[1], first) if self.missing_mode_ in TRANSIENT_MODES else 0
            if late and cells.get("rhat_max_cells", math.inf) > self.rhat_target:
                later = diagnose_from(draws, late, screen=worst)
                later.pop("worst_cells", None)
                if self._mixed(later):
                    start, cells = late, later
            phases[phase].append(round(time.perf_counter() - t_check, 2))
            return cells

        def stop_inside(new):  # a check inside an extension, from the last check's worst cells
            nonlocal inside
            so_far = torch.cat([draws, new[:, self.mcmc_thin_ - 1::self.mcmc_thin_]], dim=1)
            found = diagnose(so_far, screen=worst, phase="inside")
            inside = found if self._mixed(found) else None
            return inside is not None

        def flat_of(draws):  # every draw so far, evenly thinned to METRIC_DRAWS
            flat = draws.reshape(-1, lik.dim)
            return flat[::math.ceil(flat.shape[0] / METRIC_DRAWS)]

        map_beside = MAP_BESIDE_CHECK and split and fit_map is not None
        pending = None  # the next map's fit on its own thread, started beside a check: MAP_BESIDE_CHECK

        def check(draws, extended):  # diagnose, with the next extension's map fitted beside it if one may follow
            nonlocal pending
            pending = beside(fit_map, flat_of(draws)) if map_beside and extended < MAX_EXTENSIONS else None
            return diagnose(draws)

        first, start = draws.shape[1], 0
        cells = check(draws, 0)
        path = [checkpoint(draws, cells)]  # (draws per chain, R̂, ESS) at every check
        extended = restarts = 0
        share = EXTENSION_SHARE_MAR if self.missing_mode_ == "mar" else EXTENSION_SHARE
        while not self._mixed(cells) and extended < MAX_EXTENSIONS:
            # the metric from every draw so far: warm-up's last window saw fewer, less mixed draws
            flat = flat_of(draws)
            if RESTART_AFTER is not None and not restarts and extended >= RESTART_AFTER and \
                    stalled([rhat for _, rhat, _ in path], floor=1.0 + STALL_ABOVE * (self.rhat_target - 1.0)):
                # stalled after RESTART_AFTER extensions: adapt afresh, keep the new run's draws (one of MAX_EXTENSIONS)
                if pending is not None:
                    pending.result()  # not used: its thread ends before the chains start
                res, draws, guide = adapted_run(draws[:, -1], metric_of(flat))
                last = res
                log_ratios = torch.zeros((draws.shape[0], 0), dtype=DTYPE)
                probs = GrowingCellProbs(self._cell_probs)
                seconds, n_grad, extended = seconds + res.seconds, n_grad + res.gradient_evaluations, extended + 1
                restarts += 1
                runs.append(run_row(res, draws))
                cells = check(draws, extended)
                path.append(checkpoint(draws, cells))
                continue
            t_prepare = time.perf_counter()
            tmap = pending.result() if pending is not None else fit_map(flat) if fit_map is not None else res.transform
            pending = None
            metric = metric_of(tmap.inverse(flat))
            phases["prepare"].append(round(time.perf_counter() - t_prepare, 2))
            retune = last.accept_rate > RETUNE_ACCEPT
            checked = len(phases["inside"])
            more = hmc(lik.log_posterior, draws[:, -1], cov=metric, warmup=RETUNE_WARMUP if retune else 0, rng=rng,
                       step_size=last.step_size, draws=math.ceil(share * self.mcmc_draws_) * self.mcmc_thin_,
                       surrogate=lambda _c, _d=None: guide, delayed_acceptance=delayed, transform=tmap,
                       adapt_metric=False, split_chains=split, stop=stop_inside if split and INSIDE_CHECK_DRAWS else None,
                       stop_every=INSIDE_CHECK_DRAWS * self.mcmc_thin_, sampling_path_length=long_path)  # stop_every: with a stop
            more.seconds -= sum(phases["inside"][checked:])  # the chains' seconds, as a run's without checks
            last, retuned = more, retuned + retune
            draws = torch.cat([draws, thinned(more)], dim=1)
            runs.append(run_row(more, draws))
            seconds, n_grad, extended = seconds + more.seconds, n_grad + more.gradient_evaluations, extended + 1
            cells = inside if inside is not None else check(draws, extended)  # mixed inside: checked there
            path.append(checkpoint(draws, cells))
        if pending is not None:  # mixed: the map fitted beside the last check is not needed
            pending.result()
        if not delayed and cells and "weights" not in cells:  # the chains target the surrogate: reweight
            cells.update(reweight(draws, start))
        self.weights_ = cells.pop("weights", None)
        self.draws_ = cells.pop("kept", draws[:, start:]).detach()
        if delayed:
            self.diagnostics_["second_stage_accept"] = res.second_stage_accept
        self.diagnostics_.update({"accept_rate": res.accept_rate, "step_size": res.step_size,
                                  "n_leapfrog": res.n_leapfrog, "divergences": res.divergences,
                                  "step_size_last": last.step_size, "accept_rate_last": last.accept_rate,
                                  "step_retuned": retuned,
                                  "warmup_restarts": res.strays,
                                  "gradient_evaluations": n_grad, "mcmc_seconds": seconds,
                                  "chains": int(draws.shape[0]), "draws_per_chain": int(draws.shape[1]),
                                  "transient_draws": start,
                                  "warmup": warmup,
                                  "extended": extended, "restarts": restarts, "mixing_path": path,
                                  "runs": runs, "check_seconds": phases["check"],
                                  "prepare_seconds": phases["prepare"], "inside_seconds": phases["inside"], **cells})
        self._report_mixing(cells)

    def _keep_draws(self, res):
        self.draws_, self.weights_ = res.draws.detach(), None
        cells = self._cell_diagnostics(self.draws_)
        self.diagnostics_.update({"mcmc_seconds": res.seconds, **cells})
        self._report_mixing(cells)

    def _mixed(self, cells: dict) -> bool:
        return bool(cells) and cells["rhat_max_cells"] <= self.rhat_target and \
            cells["ess_bulk_min_cells"] >= self.ess_target and cells.get("pareto_k", 0.0) <= PARETO_K_MAX

    def _report_mixing(self, cells: dict):
        self.diagnostics_["mixed"] = self._mixed(cells)
        if not self.diagnostics_["mixed"]:
            msg = self._not_mixed_message()
            if self.on_not_mixed == "raise":
                raise PosteriorNotMixedError(msg)
            warnings.warn(msg, PosteriorNotMixedWarning, stacklevel=4)

    def _not_mixed_message(self) -> str:
        d = self.diagnostics_
        k_hat = d.get("pareto_k")  # the importance weights' tail, where the draws were reweighted
        return (f"NAPSU-MQ's posterior sampler did not mix: split R-hat of the released cells' probabilities "
                f"{format_rhat(d.get('rhat_max_cells', float('nan')), self.rhat_target)} (target <= {self.rhat_target}), bulk ESS "
                f"{d.get('ess_bulk_min_cells', float('nan')):.0f} (target >= {self.ess_target:.0f})"
                + ("" if k_hat is None else f", Pareto k-hat of the importance weights {k_hat:.2f} (target <= {PARETO_K_MAX})")
                + ". Pooled intervals from these datasets may be too narrow or too wide; raise mcmc_draws / "
                "mcmc_warmup, or measure fewer or coarser tables")

    # ------------------------------------------------------------------ posterior and sampling
    def _cell_diagnostics(self, draws: torch.Tensor, probs: np.ndarray | None = None, lazy: bool = False,
                          screen: np.ndarray | None = None) -> dict:
        """R̂ and bulk ESS (arviz-stats) of the released cells' probabilities (what the synthetic
        data depend on; θ of a near-empty cell can wander in the prior's tail while its
        probability stays ≈ 0), on every draw (:data:`DIAGNOSTIC_DRAWS`). ``probs``:
        those probabilities at every draw, if already computed (:class:`GrowingCellProbs`).
        ``lazy``: the ESS only where R̂ meets its target (NaN otherwise; a third of the cost), and
        ``worst_cells``, the :data:`SCREEN_CELLS` cells of highest R̂. ``screen``: such cells, whose R̂
        is computed first; where one misses the target (by :data:`SCREEN_MARGIN`) the run has not mixed
        and the others are left out (``rhat_max_cells`` is then theirs, a lower bound)."""
        if draws.shape[1] < 4:
            return {}
        thin = 1 if DIAGNOSTIC_DRAWS is None else max(1, math.ceil(draws.shape[1] / DIAGNOSTIC_DRAWS))
        p = self._cell_probs(draws[:, thin - 1::thin]) if probs is None else probs[:, thin - 1::thin]
        if screen is not None:  # a cell's R̂ does not depend on the other cells computed with it
            rhat_screen = finite_extreme(np.max, np.atleast_1d(rhat_and_ess(p[..., screen], ess=False)[0]))
            if rhat_screen > self.rhat_target + SCREEN_MARGIN:
                return {"rhat_max_cells": rhat_screen, "ess_bulk_min_cells": math.nan}
        rhat, ess = rhat_and_ess(p, ess=not lazy)
        rhat_max = finite_extreme(np.max, np.atleast_1d(rhat))
        if ess is None and rhat_max <= self.rhat_target:
            ess = ess_bulk(p)
        worst = np.argsort(np.nan_to_num(np.atleast_1d(rhat), nan=-np.inf))[-SCREEN_CELLS:] if lazy else None
        return {"rhat_max_cells": rhat_max,
                "ess_bulk_min_cells": math.nan if ess is None else finite_extreme(np.min, np.atleast_1d(ess)),
                **({} if worst is None else {"worst_cells": np.sort(worst)})}

    def _importance_diagnostics(self, draws: torch.Tensor, lik, proposal, log_ratios: torch.Tensor,
                                probs: np.ndarray) -> dict:
        """The draws (chains targeting ``proposal``, the surrogate) reweighted to
        ``lik.log_posterior`` by PSIS over at most :data:`IMPORTANCE_DRAWS` of them, thinned evenly
        by a power-of-two stride: first over every fourth one of those, then every other one, and
        over all only while the ESS or k̂ target is missed (each draw costs one exact evaluation:
        2.3 ms with every Adult-10 column MCAR, 14 ms on the bundled Adult's first 10 columns; half
        the draws kept 89 % of the bulk ESS on an Adult-10 MAR fit; with the expanded-V surrogate of
        incomplete data, importance efficiency ≈ 0.95, a quarter meets the target). The strides nest (a draw thinned at stride
        2s is one at stride s), so the log ratios of draws evaluated at an earlier check are kept
        and reused: ``log_ratios`` (chains, draws) holds them, NaN where not yet evaluated, and is
        filled in place; a check after an extension evaluates only draws it has not seen. The ESS
        reported is the kept draws' bulk ESS times the importance efficiency,
        ``pareto_k`` is k̂. ``probs``: the released cells' probabilities at every draw
        (:class:`GrowingCellProbs`)."""
        chains, n = draws.shape[:2]
        step = 1 << max(0, math.ceil(math.log2(chains * n / IMPORTANCE_DRAWS)))
        index = torch.arange(step - 1, n, step)
        half = (index + 1) % (2 * step) == 0                # the draws a stride of 2 step keeps
        quarter = (index + 1) % (4 * step) == 0
        done = torch.zeros_like(half)
        parts = (quarter, half & ~quarter, ~half) if len(index) >= 8 else (half, ~half) if len(index) >= 4 else (~done,)
        for part in parts:
            cols = index[part]
            chain, col = torch.nonzero(torch.isnan(log_ratios[:, cols]), as_tuple=True)
            if chain.numel():
                points = draws[chain, cols[col]]
                with torch.no_grad():
                    log_ratios[chain, cols[col]] = lik.log_posterior_many(points) - proposal(points)
            done = done | part
            cols = index[done]
            cells = self._weighted(draws[:, cols], log_ratios[:, cols], probs[:, cols.numpy()])
            met = cells["ess_bulk_min_cells"] >= self.ess_target and cells["pareto_k"] <= PARETO_K_MAX
            if bool(done.all()) or met:
                return cells

    def _weighted(self, kept: torch.Tensor, log_ratio: torch.Tensor, probs: np.ndarray) -> dict:
        """PSIS weights of the draws ``kept`` (chains, draws, dim) from their log ratios, and the
        diagnostics of :meth:`_importance_diagnostics` (``probs``: the kept draws' cell probabilities)."""
        ess_kept = finite_extreme(np.min, np.atleast_1d(ess_bulk(probs)))
        r_eff = ess_kept / log_ratio.numel() if np.isfinite(ess_kept) else 1.0
        w, khat, eff = psis_weights(log_ratio.reshape(-1).numpy(), r_eff=min(max(r_eff, 0.05), 1.0))
        return {"weights": w, "kept": kept, "pareto_k": khat, "importance_efficiency": eff,
                "importance_draws": int(log_ratio.numel()), "ess_bulk_min_cells_chains": ess_kept,
                "ess_bulk_min_cells": ess_kept * eff}

    def _cell_probs(self, draws: torch.Tensor) -> np.ndarray:
        """The released cells' probabilities (…, P) at each draw, :data:`CELL_CHUNK` draws at a time
        (the chunks spread over the machine's cores: :func:`dpsynth.graphical.chunks.map_chunks`)."""
        theta = draws[..., :self.model_.D]
        probs = map_chunks(self.model_.table_marginals, theta.reshape(-1, theta.shape[-1]).split(CELL_CHUNK))
        return torch.cat(probs).reshape(theta.shape[:-1] + (-1,)).numpy()

    def posterior_draws(self, m: int, rng: np.random.Generator) -> torch.Tensor:
        """m draws of x = (θ, v) from the fitted posterior. Laplace: fresh Gaussian draws. MCMC:
        m of the kept draws of all chains, picked at random without replacement (with more
        datasets than kept draws, draws repeat)."""
        if self.draws_ is None:
            return self.laplace_.sample(m, rng)
        flat = self.draws_.reshape(-1, self.draws_.shape[-1])
        weights = getattr(self, "weights_", None)
        if weights is not None:  # sampling-importance-resampling from the reweighted draws
            return flat[torch.as_tensor(rng.choice(flat.shape[0], size=m, replace=True, p=weights))]
        pick = np.concatenate([rng.permutation(flat.shape[0]) for _ in range(-(-m // flat.shape[0]))])[:m]
        return flat[torch.as_tensor(pick)]
