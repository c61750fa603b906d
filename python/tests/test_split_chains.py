"""The chains' gradients split over two processes (dpsynth.graphical.split_chains, hmc(split_chains=True))."""
from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
import torch

from dpsynth.graphical.posterior import hmc
from dpsynth.graphical.split_chains import SplitDensity

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
SCALE = torch.linspace(0.5, 2.0, 6, dtype=torch.float64)


class Gaussian:
    """N(0, diag(SCALE²)) with its gradient by hand; ``fail_above`` rows make it raise."""

    def __init__(self, fail_above: float | None = None):
        self.fail_above = fail_above

    def __call__(self, x):
        return -0.5 * ((x / SCALE) ** 2).sum(-1)

    def value_and_grad(self, x):
        if self.fail_above is not None and bool((x > self.fail_above).any()):
            raise ValueError("a row above the limit")
        return self(x), -x / SCALE ** 2


def _helper_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_split_density_gives_each_rows_values_and_ends_its_helper():
    x = torch.as_tensor(np.random.default_rng(0).normal(size=(7, 6)))
    split = SplitDensity(Gaussian())
    pid = split._pid
    f, g = split.value_and_grad(x)
    assert torch.equal(f, Gaussian()(x)) and torch.equal(g, -x / SCALE ** 2)
    one_f, one_g = split.value_and_grad(x[:1])  # a single row stays here
    assert torch.equal(one_f, f[:1]) and torch.equal(one_g, g[:1])
    split.close()
    assert _helper_gone(pid)


def test_split_density_raises_the_helpers_error_and_two_helpers_close_in_any_order():
    x = torch.zeros((4, 6), dtype=torch.float64)
    x[3, 0] = 5.0  # in the helper's half
    first, second = SplitDensity(Gaussian(fail_above=1.0)), SplitDensity(Gaussian())
    with pytest.raises(RuntimeError, match="a row above the limit"):
        first.value_and_grad(x)
    assert torch.equal(first.value_and_grad(torch.zeros((4, 6), dtype=torch.float64))[0], torch.zeros(4, dtype=torch.float64))
    pids = first._pid, second._pid
    first.close()  # the second helper, forked later, must not hold the first's socket open
    second.close()
    assert all(_helper_gone(p) for p in pids)


def test_hmc_with_split_chains_takes_the_same_draws_for_a_row_wise_density():
    # a density computed row by row gives bitwise the same values for any batch, so the split run
    # must be the same run: warm-up windows rebuild the surrogate (and the helper) several times
    def surrogate(centre, draws=None):
        return Gaussian()

    init = torch.zeros((8, 6), dtype=torch.float64)
    runs = [hmc(Gaussian(), init, warmup=150, draws=100, rng=np.random.default_rng(3), surrogate=surrogate,
                delayed_acceptance=False, split_chains=split) for split in (False, True)]
    assert torch.equal(runs[0].draws, runs[1].draws)
    sd = runs[1].draws.reshape(-1, 6).std(0)
    assert torch.allclose(sd, SCALE, rtol=0.25)


def test_hmc_with_split_chains_and_a_coordinate_map_takes_the_same_draws():
    # the helper makes its chains' leapfrog drift (velocity product) and the map itself
    # (posterior.DriftThenGradient): still the same run as in one process
    from dpsynth.graphical.transport import MarginalMap

    def surrogate(centre, draws=None):
        return Gaussian()

    tmap = MarginalMap(torch.zeros(6, dtype=torch.float64), SCALE.clone(), torch.full((6,), 0.2, dtype=torch.float64),
                       torch.full((6,), 1.1, dtype=torch.float64))
    init = torch.zeros((8, 6), dtype=torch.float64)
    runs = [hmc(Gaussian(), init, warmup=150, draws=100, rng=np.random.default_rng(5), surrogate=surrogate,
                delayed_acceptance=False, transform=tmap, split_chains=split) for split in (False, True)]
    assert torch.equal(runs[0].draws, runs[1].draws)
    assert runs[0].accept_rate > 0.5


class Walled(Gaussian):
    """The Gaussian with zero density (log −∞) where the first coordinate exceeds 1.5."""

    def __call__(self, x):
        lp = super().__call__(x)
        return torch.where(x[..., 0] > 1.5, torch.full_like(lp, -float("inf")), lp)


def test_leapfrog_paths_are_the_step_by_step_leapfrog_bit_for_bit_here_and_split():
    # hmc's trajectories, whole in each process (leapfrog.LeapfrogPaths), against the leapfrog it
    # ran before, one step (and, split, one message) at a time: the same numbers, rows that leave
    # the support (u = inf, gradient 0) included
    from dpsynth.graphical.leapfrog import LeapfrogPaths
    from dpsynth.graphical.posterior import DriftThenGradient
    from dpsynth.graphical.transport import MarginalMap

    rng = np.random.default_rng(0)
    metric = torch.as_tensor(np.diag(rng.uniform(0.5, 2.0, 6)), dtype=torch.float32)
    step = DriftThenGradient(Walled(), MarginalMap.identity(6), metric)
    z = torch.as_tensor(rng.standard_normal((8, 6)))
    p = torch.as_tensor(rng.standard_normal((8, 6))) * 2.0
    eps = torch.as_tensor(rng.uniform(0.05, 0.3, (8, 1)))
    _, lp0, g0 = step.drift_and_grad(z, None, 0.0)
    zn, pn = z.clone(), p - 0.5 * eps * -g0  # the loop hmc ran until 2026-12-06
    for s in range(12):
        zn, lp, g = step.drift_and_grad(zn, pn, eps)
        if s < 11:
            pn = pn - eps * -g
    pn = pn - 0.5 * eps * -g
    un = -lp
    un[~torch.isfinite(un)] = float("inf")
    assert bool(torch.isinf(un).any()) and bool(torch.isfinite(un).any())
    paths = LeapfrogPaths(step)
    here = paths.run(z, p, -g0, eps, 12)
    for got, want in zip(here, (zn, pn, un, -g)):
        assert torch.equal(got, want)
    with SplitDensity(paths) as split:
        u_split, out = split.value_and_grad(LeapfrogPaths.pack(z, p, -g0, eps, 12))
        u_at, out_at = split.value_and_grad(LeapfrogPaths.pack(z, torch.zeros_like(z), torch.zeros_like(z), 0.0, 0))
    assert torch.equal(u_split, un) and torch.equal(out, torch.cat([zn, pn, -g], dim=-1))
    u0 = -lp0
    u0[~torch.isfinite(u0)] = float("inf")
    assert torch.equal(u_at, u0) and torch.equal(out_at[:, 12:], -g0)


def test_hmc_stopped_by_an_error_closes_its_helper_at_once(monkeypatch):
    # the exception (and its traceback, which keeps hmc's frame alive) is still held when the
    # helpers are checked: they must have been closed by hmc itself, not by garbage collection
    from dpsynth.graphical import split_chains

    made = []
    monkeypatch.setattr(split_chains.SplitDensity, "__init__", _recording(split_chains.SplitDensity.__init__, made))

    def surrogate(centre, draws=None):
        return Gaussian(fail_above=2.5)

    init = torch.zeros((8, 6), dtype=torch.float64)
    with pytest.raises((ValueError, RuntimeError), match="a row above the limit") as caught:
        hmc(Gaussian(), init, warmup=300, draws=300, rng=np.random.default_rng(0), surrogate=surrogate,
            delayed_acceptance=False, split_chains=True)
    assert caught.value.__traceback__ is not None
    assert made and all(s._pid == 0 for s in made)


def test_napsu_fit_with_the_chains_split_over_two_processes_mixes_and_leaves_no_helper(monkeypatch):
    from dpsynth.generators import napsu_sampling
    from dpsynth.generators.napsu import NAPSUMQ
    from dpsynth.graphical import split_chains

    from test_napsu import TOY_QUERY, TOY_SCHEMA, toy_data

    made = []
    monkeypatch.setattr(napsu_sampling, "CHAIN_PROCESSES", 2)
    monkeypatch.setattr(napsu_sampling, "SPLIT_MIN_DIM", 0)
    monkeypatch.setattr(split_chains.SplitDensity, "__init__", _recording(split_chains.SplitDensity.__init__, made))
    df = toy_data(2000, np.random.default_rng(0))
    gen = NAPSUMQ(1.0, 1 / 2000 ** 2, queries=TOY_QUERY).fit(df, TOY_SCHEMA, seed=1)
    d = gen.diagnostics_
    assert made and all(s._pid == 0 for s in made)  # helpers were used, and each was closed
    assert d["rhat_max_cells"] <= gen.rhat_target and d["ess_bulk_min_cells"] >= gen.ess_target


def _recording(init, made):
    def wrapped(self, density):
        init(self, density)
        made.append(self)
    return wrapped


def test_napsu_fit_with_each_extensions_map_fitted_beside_its_check_takes_the_same_draws(monkeypatch):
    """MAP_BESIDE_CHECK fits the next extension's coordinate map on a thread of its own while the
    check runs: the same map, so the same draws, the same path (a run held to two extensions)."""
    from dpsynth.generators import napsu_sampling
    from dpsynth.generators.napsu import NAPSUMQ

    from test_napsu import TOY_QUERY, TOY_SCHEMA, toy_data

    monkeypatch.setattr(napsu_sampling, "CHAIN_PROCESSES", 2)
    monkeypatch.setattr(napsu_sampling, "SPLIT_MIN_DIM", 0)
    monkeypatch.setattr(napsu_sampling, "MAX_EXTENSIONS", 2)
    df = toy_data(2000, np.random.default_rng(0))
    fits = {}
    for beside in (False, True):
        monkeypatch.setattr(napsu_sampling, "MAP_BESIDE_CHECK", beside)
        gen = NAPSUMQ(1.0, 1 / 2000 ** 2, queries=TOY_QUERY, rhat_target=1.0001, mcmc_chains=4, mcmc_warmup=60,
                      mcmc_draws=40)
        with warnings.catch_warnings():  # held short of its target: not mixed, and warned so
            warnings.simplefilter("ignore", napsu_sampling.PosteriorNotMixedWarning)
            fits[beside] = gen.fit(df, TOY_SCHEMA, seed=1)
    before, after = fits[False].diagnostics_, fits[True].diagnostics_
    assert after["extended"] == 2 and len(after["prepare_seconds"]) == 2
    assert torch.equal(fits[False].draws_, fits[True].draws_)
    assert before["mixing_path"] == after["mixing_path"]


def test_hmc_stop_ends_a_split_run_at_the_first_check_that_says_so_and_keeps_its_draws():
    # ``stop`` sees the kept draws every stop_every of them and takes nothing from the random
    # stream: a run it never ends is the run without it, and one it ends is that run's first draws
    seen = []

    def stop_at(k):
        def stop(kept):
            seen.append(kept.shape[1])
            return kept.shape[1] >= k
        return stop

    init = torch.zeros((8, 6), dtype=torch.float64)

    def run(stop=None):
        return hmc(Gaussian(), init, warmup=60, draws=40, rng=np.random.default_rng(5), delayed_acceptance=False,
                   surrogate=lambda c, d=None: Gaussian(), split_chains=True, stop=stop, stop_every=10)

    full, never, ended = run(), run(stop_at(10 ** 6)), run(stop_at(20))
    assert torch.equal(never.draws, full.draws)
    assert seen == [10, 20, 30, 10, 20]  # not after the last draw; the second run ends at its second check
    assert ended.draws.shape[1] == 20 and torch.equal(ended.draws, full.draws[:, :20])
    assert ended.gradient_evaluations < full.gradient_evaluations
