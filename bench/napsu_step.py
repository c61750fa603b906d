"""Where NAPSU-MQ's sampler spends its time at full width: a leapfrog gradient, and the warm-up.

The model of ``bench/napsu_scale.py`` (the bundled Adult, 15 columns, real NAs, ε = 1, its MST
selection run as in a fit; ``--seed``), its posterior mode (Fisher scoring from zero) and the
Laplace covariance F⁻¹ there; 16 chains at N(mode, 0.3² F⁻¹), as a fit starts them.

- ``step_ms``: ms per value and gradient of the expanded-V surrogate (fitted to 64 of those points)
  with the leapfrog drift (:class:`dpsynth.graphical.posterior.DriftThenGradient`, the Laplace
  covariance as metric), each the median of ``--rounds`` blocks of 100 calls at fixed points:
  ``rows_8_one_process`` (what each process of a split computes), ``rows_16_split`` (8 here, 8 in the
  forked helper: :class:`dpsynth.graphical.split_chains.SplitDensity`) and ``rows_16_one_process``.
- ``hmc_ms_per_gradient``: the same 16 chains moving in :func:`dpsynth.graphical.posterior.hmc` (no
  warm-up, step 0.07, 40 draws, split over two processes), with a sinh–arcsinh map fitted to
  perturbed points (``map``) and without one (``identity``): what a gradient costs in the sampler,
  where the chains' states change from step to step.
- ``warmup``: one warm-up as a fit runs it under ``missing="mar"`` (:func:`dpsynth.generators.napsu_sampling.mar_warmup`:
  short early windows, a last slow window of 128 iterations) from those starts, and the seconds
  of its parts: the gradients (``calls``: whole leapfrog trajectories, one per iteration,
  :class:`dpsynth.graphical.leapfrog.LeapfrogPaths`), the surrogate's fitted linear term (``fitted_slope``, of which
  ``exact_evaluations``: its :func:`dpsynth.graphical.noise_aware.fit_draws` exact log densities),
  the coordinate maps, the expanded-V builds; ``other`` is the rest.
- ``level_pass_ms`` (``--compile``): the forward message pass of the surrogate's model at 8 and 16
  rows as torch operations (:func:`dpsynth.graphical.level_pass.torch_forward`, its maps CSR
  products: ``csr_*``), as the compiled loops the sampler runs (:mod:`dpsynth.graphical.level_kernels`:
  ``loops_*``, and ``loops_backward_*`` against ``csr_backward_*`` for the hand-written backward), and
  written with index operations (:func:`index_forward`: ``index_add`` / ``index_select``, which
  ``torch.compile`` fuses; CSR tensors break its graph) and compiled (``index_compiled_*``): ms per
  pass, the seconds the compiling took, and the largest difference in log Z and beliefs.

Usage: python bench/napsu_step.py [--seed 17] [--rounds 3] [--no-warmup] [--compile]
Prints progress on stderr and one JSON object on the last line of stdout.
"""
from __future__ import annotations

import argparse
import collections
import math
import statistics
import time
import types

import numpy as np
import torch

import _common
import napsu_scale


def timed(fn, calls: int = 100) -> float:
    """ms per call of ``fn`` over ``calls`` calls, after one call."""
    fn()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return 1e3 * (time.perf_counter() - t0) / calls


class Stopwatch:
    """Seconds and calls of the methods it wraps (:meth:`wrap`), until :meth:`restore`."""

    def __init__(self):
        self.seconds, self.calls, self._undo = collections.Counter(), collections.Counter(), []

    def wrap(self, owner, name: str, label: str) -> None:
        original = getattr(owner, name)

        def watched(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - t0
                self.calls[label] += 1
        setattr(owner, name, watched)
        self._undo.append((owner, name, original))

    def restore(self) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo = []


def starts(seed: int):
    """(likelihood, its mode, F⁻¹ there, 64 starting points N(mode, 0.3² F⁻¹))."""
    import dpsynth

    df, schema = dpsynth.load_dataset("adult")
    gen, measurements = napsu_scale.built_model(df, schema, napsu_scale.ORDER, seed=seed)
    lik = gen.likelihood(measurements)
    mode, fisher = lik.mode(torch.zeros(lik.dim, dtype=torch.float64), tol=20.0)
    cov = torch.linalg.inv(fisher)
    cov = 0.5 * (cov + cov.T)
    rng = np.random.default_rng(seed)
    points = mode + 0.3 * torch.as_tensor(rng.standard_normal((64, lik.dim))) @ torch.linalg.cholesky(cov).T
    return lik, mode, cov, points


def step_costs(lik, mode, cov, points, rounds: int) -> dict:
    from dpsynth.graphical.posterior import DriftThenGradient
    from dpsynth.graphical.split_chains import SplitDensity
    from dpsynth.graphical.transport import MarginalMap

    guide = lik.surrogate(mode, points)
    step = DriftThenGradient(guide, MarginalMap.identity(lik.dim), cov.to(torch.float32))
    moves = 0.01 * torch.as_tensor(np.random.default_rng(0).standard_normal((16, lik.dim)))
    packed = DriftThenGradient.pack(points[:16], moves, 0.01)
    out = collections.defaultdict(list)
    with SplitDensity(step) as split:
        for _ in range(rounds):
            out["rows_8_one_process"].append(timed(lambda: step.value_and_grad(packed[:8])))
            out["rows_16_split"].append(timed(lambda: split.value_and_grad(packed)))
            out["rows_16_one_process"].append(timed(lambda: step.value_and_grad(packed)))
    return guide, {k: round(statistics.median(v), 2) for k, v in out.items()}


def hmc_costs(lik, cov, points, guide, rounds: int) -> dict:
    from dpsynth.graphical.posterior import hmc
    from dpsynth.graphical.transport import MarginalMap, fit_marginal_map

    spread = points.repeat(8, 1) + 0.05 * torch.as_tensor(np.random.default_rng(1).standard_normal((512, lik.dim)))
    maps = {"map": fit_marginal_map(spread), "identity": MarginalMap.identity(lik.dim)}
    out = collections.defaultdict(list)
    for r in range(rounds):
        for name, tmap in maps.items():
            res = hmc(lik.log_posterior, points[:16], cov=cov, warmup=0, draws=40, rng=np.random.default_rng(r),
                      step_size=0.07, surrogate=lambda _c, _d=None: guide, delayed_acceptance=False, transform=tmap,
                      adapt_metric=False, split_chains=True)
            out[name].append(1e3 * res.seconds / res.gradient_evaluations)
    return {k: round(statistics.median(v), 2) for k, v in out.items()}


def warmup_costs(lik, cov, points, seed: int) -> dict:
    from dpsynth.generators.napsu_sampling import mar_warmup
    from dpsynth.graphical import noise_aware, posterior, split_chains
    from dpsynth.graphical.transport import fit_marginal_map

    watch = Stopwatch()
    watch.wrap(split_chains.SplitDensity, "value_and_grad", "gradients")
    watch.wrap(noise_aware.NoiseAwareLikelihood, "_fitted_slope", "fitted_slope")
    watch.wrap(noise_aware.NoiseAwareLikelihood, "log_posterior_many", "exact_evaluations")
    watch.wrap(noise_aware.NoiseAwareLikelihood, "_expanded_v", "expanded_v")
    watch.wrap(posterior, "shrunk_covariance", "metrics")
    maps = types.SimpleNamespace(fit=fit_marginal_map)
    watch.wrap(maps, "fit", "maps")
    warmup, last = mar_warmup(200, lik.dim, 16)
    try:
        t0 = time.perf_counter()
        res = posterior.hmc(lik.log_posterior, points[:16], cov=cov, warmup=warmup, draws=1,
                            rng=np.random.default_rng(seed), surrogate=lik.surrogate, delayed_acceptance=False,
                            fit_transform=maps.fit, metric_target=cov.numpy(),
                            split_chains=True, last_window=last)
        total = time.perf_counter() - t0
    finally:
        watch.restore()
    parts = {k: round(v, 2) for k, v in watch.seconds.items()}
    # the exact evaluations run inside the fitted slope: count them once
    other = total - sum(v for k, v in watch.seconds.items() if k != "exact_evaluations")
    return {"iterations": warmup, "last_window": last, "seconds": round(total, 1),
            "gradient_evaluations": res.gradient_evaluations, "step_size": round(res.step_size, 4),
            "parts_seconds": parts, "calls": dict(watch.calls), "other_seconds": round(other, 2)}


def index_forward(levels):
    """:func:`dpsynth.graphical.level_pass.level_forward`'s (log Z, beliefs) as a function of the
    log-potentials (cells, B), with the sparse maps as index operations over ``levels``' indices."""
    from dpsynth.graphical.level_pass import TINY

    sizes = [lv["size"] for lv in levels]

    def forward(flat):
        rows = flat.shape[1]
        pieces = torch.split(flat, sizes, dim=0)
        up, below = [None] * len(levels), [None] * len(levels)
        for d in reversed(range(len(levels))):
            lv, b = levels[d], pieces[d]
            if d + 1 < len(levels):  # add_up: each cell gets its children's separator messages
                cell, sep, _ = lv["pairs"]
                b = b + flat.new_zeros(lv["size"], rows).index_add(0, cell, up[d + 1].index_select(0, sep))
            below[d] = b
            if d > 0:
                top = flat.new_full((lv["n"], rows), -math.inf).scatter_reduce(
                    0, lv["clique"][:, None].expand(-1, rows), b, "amax")
                sums = flat.new_zeros(lv["sep_size"], rows).index_add(
                    0, lv["sep"], torch.exp(b - top.index_select(0, lv["clique"])))
                up[d] = torch.log(sums.clamp_min(TINY)) + top.index_select(0, lv["sep_clique"])
        log_z = torch.logsumexp(below[0], dim=0)
        belief = [torch.exp(below[0] - log_z)]
        for d in range(1, len(levels)):
            cell, sep, _ = levels[d - 1]["pairs"]
            onto = flat.new_zeros(levels[d]["sep_size"], rows).index_add(0, sep, belief[d - 1].index_select(0, cell))
            belief.append(torch.exp(below[d] + (torch.log(onto.clamp_min(TINY)) - up[d]).index_select(0, levels[d]["sep"])))
        return log_z, torch.cat(belief, dim=0)
    return forward


def pass_costs(lik, points, rounds: int) -> dict:
    from dpsynth.graphical import level_kernels
    from dpsynth.graphical.level_pass import torch_backward, torch_forward

    model = lik.model
    levels = model.pass_maps()[2]
    flat8 = model.lifted_potentials(points[:8, :model.D]).contiguous()
    batches = {"rows_8": flat8, "rows_16": torch.cat([flat8, flat8 + 0.01], dim=1).contiguous()}
    compiled, seconds = torch.compile(index_forward(levels), dynamic=False), {}
    with torch.no_grad():
        for name, flat in batches.items():
            t0 = time.perf_counter()
            compiled(flat)
            seconds[name] = round(time.perf_counter() - t0, 1)
        diff = max(float((a - b).abs().max()) for flat in batches.values() for other in
                   (compiled(flat), level_kernels.forward(levels, flat)[:2])
                   for a, b in zip(torch_forward(levels, flat)[:2], other))
        out = collections.defaultdict(list)
        for _ in range(rounds):
            for name, flat in batches.items():
                weights = torch.ones_like(flat)
                saved_csr, saved_loops = torch_forward(levels, flat)[2], level_kernels.forward(levels, flat)[2]
                out[f"csr_{name}"].append(timed(lambda: torch_forward(levels, flat), 300))
                out[f"loops_{name}"].append(timed(lambda: level_kernels.forward(levels, flat), 300))
                out[f"index_compiled_{name}"].append(timed(lambda: compiled(flat), 300))
                out[f"csr_backward_{name}"].append(timed(lambda: torch_backward(levels, saved_csr, None, weights), 300))
                out[f"loops_backward_{name}"].append(
                    timed(lambda: level_kernels.backward(levels, saved_loops, None, weights), 300))
    return {**{k: round(statistics.median(v), 3) for k, v in out.items()}, "compile_seconds": seconds,
            "max_abs_difference": diff}


def main(argv=None):
    from dpsynth.graphical import reused_memory

    ap = _common.parser(__doc__)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--compile", action="store_true", help="also time the level pass as torch operations, compiled loops and compiled index operations (level_pass_ms)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    lik, mode, cov, points = starts(args.seed)
    out = {"machine": _common.machine(), "note": _common.CONTENTION, "seed": args.seed, "dim": lik.dim}
    with reused_memory():
        guide, out["step_ms"] = step_costs(lik, mode, cov, points, args.rounds)
        _common.log(f"step: {out['step_ms']}")
        out["hmc_ms_per_gradient"] = hmc_costs(lik, cov, points, guide, args.rounds)
        _common.log(f"hmc: {out['hmc_ms_per_gradient']}")
        if args.warmup:
            out["warmup"] = warmup_costs(lik, cov, points, args.seed)
            _common.log(f"warm-up: {out['warmup']}")
        if args.compile:
            out["level_pass_ms"] = pass_costs(lik, points, args.rounds)
            _common.log(f"level pass: {out['level_pass_ms']}")
    _common.emit(out)


if __name__ == "__main__":
    main()
