"""Calibration goldens, the ledger, and neighbour tests of each noise primitive."""
import math

import numpy as np
import pytest

from dpsynth import privacy
from dpsynth.marginals import count_marginal, count_with_missing
from dpsynth.privacy import (BudgetExceededError, NoiseSource, PrivacyLedger, exponential_mechanism,
                             gaussian_counts, laplace_counts, record_noise_inputs)


def test_goldens():
    assert privacy.gaussian_sigma(1.0, 1e-5, 1.0) == pytest.approx(3.7306, abs=1e-3)
    assert privacy.cdp_rho(1.0, 1e-9) == pytest.approx(0.014973, abs=1e-6)
    assert privacy.sgm_epsilon(1.5, 0.04, 2250, 1e-5) == pytest.approx(7.33, abs=1e-2)
    # inverse pairs
    s = privacy.gaussian_sigma(0.7, 1e-6, 1.0)
    assert privacy.gaussian_epsilon(s, 1e-6) == pytest.approx(0.7, abs=1e-6)
    assert privacy.cdp_eps(privacy.cdp_rho(2.0, 1e-7), 1e-7) == pytest.approx(2.0, abs=1e-6)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf")])
def test_bad_epsilon(bad):
    with pytest.raises(ValueError):
        privacy.gaussian_sigma(bad, 1e-5)
    with pytest.raises(ValueError):
        PrivacyLedger(epsilon=bad)


@pytest.mark.parametrize("bad", [1.0, 1.5, -0.1, float("nan")])
def test_bad_delta(bad):
    with pytest.raises(ValueError):
        privacy.gaussian_sigma(1.0, bad)


def test_ledger_refuses_overspend_and_records_nothing():
    led = PrivacyLedger(epsilon=1.0)
    led.spend("a", "Laplace", epsilon=0.6, sensitivity=1, relation="add-remove")
    with pytest.raises(BudgetExceededError):
        led.spend("b", "Laplace", epsilon=0.5, sensitivity=1, relation="add-remove")
    assert len(led.spends) == 1 and led.total_epsilon() == pytest.approx(0.6)
    frame = led.to_frame()
    assert list(frame.columns[:7]) == ["step", "mechanism", "epsilon", "delta", "rho", "sensitivity", "norm"]


def test_ledger_zcdp_converts_once():
    eps, delta = 1.0, 1e-9
    rho = privacy.cdp_rho(eps, delta)
    led = PrivacyLedger(epsilon=eps, delta=delta)
    for _ in range(3):
        led.spend("m", "Gaussian", rho=rho / 3, sensitivity=1, relation="add-remove", norm="L2")
    assert led.total_epsilon() == pytest.approx(eps, abs=1e-6)
    assert led.to_frame()["epsilon"].sum() == pytest.approx(eps, abs=1e-6)
    with pytest.raises(BudgetExceededError):
        led.spend("m", "Gaussian", rho=rho / 100, sensitivity=1, relation="add-remove", norm="L2")


def test_seeded_noise_is_reproducible_and_default_is_not():
    a = NoiseSource(5).discrete_laplace(3.0, 50)
    b = NoiseSource(5).discrete_laplace(3.0, 50)
    assert (a == b).all()
    c, d = NoiseSource().discrete_laplace(3.0, 50), NoiseSource().discrete_laplace(3.0, 50)
    assert not (c == d).all()


@pytest.mark.parametrize("seed", [1, None])
def test_discrete_laplace_variance(seed):
    x = NoiseSource(seed).discrete_laplace(4.0, 20000)
    # var of the discrete Laplace with t: 2 e^{-1/t} / (1 - e^{-1/t})^2
    q = math.exp(-1 / 4.0)
    assert x.var() == pytest.approx(2 * q / (1 - q) ** 2, rel=0.08)


@pytest.mark.parametrize("seed", [1, None])
def test_discrete_gaussian_variance(seed):
    x = NoiseSource(seed).discrete_gaussian(5.0, 20000)
    assert abs(x.mean()) < 0.2
    assert x.std() == pytest.approx(5.0, rel=0.05)


def _hockey_stick(a, b, eps):
    """δ̂ = Σ_x max(0, p̂_a(x) − e^ε p̂_b(x)) (Google's verifyApproximateDp)."""
    vals = np.union1d(a, b)
    pa = np.array([(a == v).mean() for v in vals])
    pb = np.array([(b == v).mean() for v in vals])
    return float(np.maximum(0, pa - math.exp(eps) * pb).sum())


def test_laplace_counts_neighbour():
    """Neighbouring histograms (one row removed) → L1 distance of recorded values ≤ declared Δ, the
    same seed gives the same noise, and the output distributions satisfy ε-DP empirically."""
    codes = np.array([[0], [1], [1], [2], [-1]])
    d_prime = codes[:-1]  # remove a row
    sizes = [3]
    led, led2 = PrivacyLedger(1.0), PrivacyLedger(1.0)
    with record_noise_inputs() as rec:
        out = laplace_counts(count_with_missing(codes, 0, 3), epsilon=1.0, sensitivity=1, ledger=led,
                             source=NoiseSource(3), step="h", relation="add-remove")
        out2 = laplace_counts(count_with_missing(d_prime, 0, 3), epsilon=1.0, sensitivity=1, ledger=led2,
                              source=NoiseSource(3), step="h", relation="add-remove")
    v, v2 = rec.calls[0].value, rec.calls[1].value
    assert privacy.distance(v, v2, "L1") <= rec.calls[0].sensitivity
    assert ((out - out2) == (v - v2)).all()  # same seed, same noise
    src = NoiseSource(11)
    a = np.array([src.discrete_laplace(1.0, 1)[0] for _ in range(20000)])
    b = a + 1  # the neighbouring count, same noise law
    # sampling error of δ̂ at 20,000 draws is a few 1e-2; the true δ is 0 at ε = 1 and ≈ 0.24 at ε = 0.5
    assert _hockey_stick(a, b, 1.0) < 0.05 and _hockey_stick(b, a, 1.0) < 0.05
    assert _hockey_stick(a, b, 0.5) > 0.15  # and the test can fail: ε = 0.5 is violated
    pmf = np.array([(a == k).mean() for k in range(-3, 4)])
    exact = (1 - math.exp(-1)) / (1 + math.exp(-1)) * np.exp(-np.abs(np.arange(-3, 4)))
    assert pmf == pytest.approx(exact, abs=0.01)


def test_gaussian_counts_neighbour():
    codes = np.array([[0, 1], [1, 1], [1, 0], [0, 0]])
    replaced = codes.copy()
    replaced[0] = [1, 0]
    led = PrivacyLedger(1.0, 1e-6)
    with record_noise_inputs() as rec:
        for c in (codes, replaced):
            gaussian_counts(count_marginal(c, [0, 1], [2, 2]), rho=0.01, sensitivity=math.sqrt(2), ledger=led,
                            source=NoiseSource(1), step="m", relation="replace-one")
    assert privacy.distance(rec.calls[0].value, rec.calls[1].value, "L2") <= math.sqrt(2) + 1e-12


def test_count_marginal_neighbours():
    rng = np.random.default_rng(0)
    codes = rng.integers(0, 3, (50, 3))
    codes[rng.random((50, 3)) < 0.2] = -1
    base = count_marginal(codes, [0, 2], [3, 3, 3])
    removed = count_marginal(codes[1:], [0, 2], [3, 3, 3])
    all_na = count_marginal(np.vstack([codes, [-1, -1, -1]]), [0, 2], [3, 3, 3])
    to_na = codes.copy()
    to_na[np.flatnonzero((codes[:, [0, 2]] >= 0).all(1))[0], 0] = -1
    value_na = count_marginal(to_na, [0, 2], [3, 3, 3])
    repl = codes.copy()
    repl[0] = [2, 2, 2]
    replaced = count_marginal(repl, [0, 2], [3, 3, 3])
    assert np.abs(base - removed).sum() <= 1
    assert np.abs(base - all_na).sum() == 0
    assert np.abs(base - value_na).sum() == 1
    assert np.abs(base - replaced).sum() <= 2


def test_exponential_mechanism_neighbour_and_exact_ratio():
    q = np.array([0.0, 1.0, 2.0])
    q2 = q + np.array([1.0, -1.0, 0.0])  # neighbouring scores, Δ = 1
    eps = 1.0
    counts = []
    for scores in (q, q2):
        src = NoiseSource(7)
        led = PrivacyLedger()
        picks = [exponential_mechanism(scores, epsilon=eps, sensitivity=1.0, ledger=led, source=src, step="s",
                                       relation="add-remove") for _ in range(30000)]
        counts.append(np.bincount(picks, minlength=3) / len(picks))
        assert led.total_epsilon() == pytest.approx(30000 * eps)
    expected = np.exp(eps * q / 2) / np.exp(eps * q / 2).sum()
    assert counts[0] == pytest.approx(expected, abs=0.01)
    ratio = np.log(counts[0] / counts[1])
    assert np.all(np.abs(ratio) <= eps + 0.05)


def test_opendp_noisy_max_prefers_best():
    picks = [exponential_mechanism([0.0, 0.0, 50.0], epsilon=1.0, sensitivity=1.0, ledger=PrivacyLedger(),
                                   source=NoiseSource(), step="s", relation="add-remove") for _ in range(20)]
    assert picks.count(2) >= 18


@pytest.mark.parametrize("use_torch", [False, True])
def test_float_mechanisms_neighbour(use_torch):
    """Clipped means of D and D' (one row removed) handed to laplace_values / gaussian_values:
    recorded distance within the declared sensitivity; same seed → same noise; ledger charged."""
    from dpsynth.privacy import gaussian_values, laplace_values

    x = np.clip(np.random.default_rng(0).normal(5, 3, 101), 0, 10)
    sens = 10 / 100  # sum over clipped rows / public n = 100 changes by ≤ 10/100 under replace-one
    vals = [np.array([x[:100].sum() / 100]), np.array([np.r_[x[:99], 0.0].sum() / 100])]
    if use_torch:
        import torch

        vals = [torch.tensor(v) for v in vals]
    for prim, kw in ((laplace_values, {"epsilon": 0.5}), (gaussian_values, {"epsilon": 0.5, "delta": 1e-6})):
        outs = []
        with record_noise_inputs() as rec:
            for v in vals:
                led = PrivacyLedger(1.0, 1e-5)
                out = prim(v, sensitivity=sens, ledger=led, source=NoiseSource(2), step="mean",
                           relation="replace-one", **kw)
                outs.append(out[0] if isinstance(out, tuple) else out)
                assert led.total_epsilon() == pytest.approx(0.5)
        a, b = rec.calls
        assert privacy.distance(a.value, b.value, a.norm) <= a.sensitivity
        diff = np.asarray(outs[0], dtype=float) - np.asarray(outs[1], dtype=float)
        assert diff == pytest.approx(np.asarray(a.value) - np.asarray(b.value))
