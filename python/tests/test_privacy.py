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


# --------------------------------------------------------------------- issue #16: discrete Gaussian δ
def _discrete_gaussian_delta(sigma: float, shift, epsilon: float) -> float:
    """Exact hockey-stick divergence sup_S P(S) − e^ε Q(S) = Σ_x (P(x) − e^ε Q(x))₊ between the
    discrete Gaussians N_Z(0, σ²)^k and N_Z(shift, σ²)^k (integer shift vector), summed over all
    integer points within 40σ + 50 of both centres (the rest has mass < 1e-300)."""
    from scipy.special import logsumexp

    shift = np.atleast_1d(np.asarray(shift, dtype=float))
    half = int(math.ceil(40 * sigma + 50 + np.abs(shift).max()))
    x = np.arange(-half, half + 1, dtype=float)
    log_z = logsumexp(-x**2 / (2 * sigma**2))  # the same normaliser for an integer shift
    grids = np.meshgrid(*[x] * shift.size, indexing="ij")
    log_p = sum(-g**2 / (2 * sigma**2) for g in grids) - shift.size * log_z
    loss = sum((-(g**2) + (g - s) ** 2) / (2 * sigma**2) for g, s in zip(grids, shift))  # log P/Q
    return float(np.sum(np.exp(log_p) * np.clip(-np.expm1(epsilon - loss), 0.0, None)))


def _sigma_of_gaussian_counts(epsilon, delta, sensitivity):
    led = PrivacyLedger(epsilon, delta)
    _, sigma = gaussian_counts(np.zeros(3, dtype=np.int64), epsilon=epsilon, delta=delta, sensitivity=sensitivity,
                               ledger=led, source=NoiseSource(0), step="m", relation="add-remove")
    return sigma, led


def test_hockey_stick_of_the_analytic_calibration_is_exact_for_the_continuous_gaussian():
    """Check of the checker: as σ grows the discrete Gaussian approaches the continuous one, whose
    δ at the analytic σ is exactly the target."""
    sigma = privacy.gaussian_sigma(0.1, 1e-3, 1.0)
    assert sigma > 15 and _discrete_gaussian_delta(sigma, 1, 0.1) == pytest.approx(1e-3, rel=1e-3)


@pytest.mark.parametrize("epsilon, delta, sens", [(1.0, 1e-5, 1), (3.0, 1e-3, 1), (5.0, 1e-3, 1), (8.0, 1e-5, 2)])
def test_old_analytic_calibration_breaks_the_discrete_gaussian(epsilon, delta, sens):
    """The continuous analytic-Gaussian σ (what gaussian_counts used for (ε, δ)) gives the discrete
    Gaussian a δ above the claim: ×1.035 at (1, 1e-5), ×1.98 at (5, 1e-3)."""
    sigma_old = privacy.gaussian_sigma(epsilon, delta, sens)
    assert _discrete_gaussian_delta(sigma_old, sens, epsilon) > 1.03 * delta


@pytest.mark.parametrize("epsilon, delta, sens", [(1.0, 1e-5, 1), (3.0, 1e-3, 1), (5.0, 1e-3, 1), (8.0, 1e-5, 2),
                                                  (0.5, 1e-9, 3), (2.0, 1e-7, 1), (10.0, 1e-7, 1)])
def test_gaussian_counts_delivers_its_epsilon_delta(epsilon, delta, sens):
    """gaussian_counts(ε, δ): the exact δ of the discrete Gaussian at the σ it uses, for the worst
    integer shift of the declared sensitivity, is at most δ; the spend is recorded in zCDP with ρ
    from the CKS conversion, and the ledger's total is (ε, δ)."""
    sigma, led = _sigma_of_gaussian_counts(epsilon, delta, sens)
    assert _discrete_gaussian_delta(sigma, sens, epsilon) <= delta
    (spend,) = led.spends
    assert spend.rho == pytest.approx(privacy.cdp_rho(epsilon, delta)) and spend.kind == "zCDP"
    assert led.total_epsilon() <= epsilon * (1 + 1e-9) and led.total_delta() <= delta


def test_gaussian_counts_vector_shift_delivers_its_epsilon_delta():
    """Two tables (L2 sensitivity √2, as measure_marginals): the neighbour moves one cell of each by
    1; the exact 2-d hockey-stick divergence at the σ used stays below δ."""
    epsilon, delta = 3.0, 1e-3
    sigma, _ = _sigma_of_gaussian_counts(epsilon, delta, math.sqrt(2))
    assert _discrete_gaussian_delta(sigma, [1, 1], epsilon) <= delta
    assert _discrete_gaussian_delta(privacy.gaussian_sigma(epsilon, delta, math.sqrt(2)), [1, 1], epsilon) > delta


def test_gaussian_counts_needs_a_complete_budget():
    led = PrivacyLedger(1.0, 1e-6)
    with pytest.raises(ValueError, match="epsilon and delta"):
        gaussian_counts(np.zeros(2, dtype=np.int64), epsilon=1.0, sensitivity=1, ledger=led, source=NoiseSource(0),
                        step="m", relation="add-remove")
    with pytest.raises(ValueError, match="not both"):
        gaussian_counts(np.zeros(2, dtype=np.int64), rho=0.1, epsilon=1.0, delta=1e-6, sensitivity=1, ledger=led,
                        source=NoiseSource(0), step="m", relation="add-remove")
    assert not led.spends


# --------------------------------------------------------------------- issue #16: exact selection sampler
def test_zcdp_exponential_mechanism_uses_opendp_without_a_seed(monkeypatch):
    """A ρ-zCDP selection without a seed draws from OpenDP's exact Gumbel report-noisy-max, never
    from the float numpy Gumbel sampler, and follows the exponential mechanism's law exp(ε q/(2Δ)),
    ε = √(8ρ)."""
    def no_float_gumbel(self, size):
        raise AssertionError("float Gumbel noise used on an unseeded run")

    monkeypatch.setattr(NoiseSource, "gumbel", no_float_gumbel)
    q = np.array([0.0, 1.0, 2.0])
    rho = 1.0 / 8  # ε = √(8ρ) = 1
    led = PrivacyLedger(delta=1e-6)
    picks = [exponential_mechanism(q, rho=rho, sensitivity=1.0, ledger=led, source=NoiseSource(), step="s",
                                   relation="add-remove") for _ in range(40)]
    assert set(picks) <= {0, 1, 2} and led.total_rho() == pytest.approx(40 * rho)
    # the law of the sampler behind it (called directly: 6000 ledger spends would be slow)
    from dpsynth.privacy.mechanisms import _opendp_noisy_max

    draws = [_opendp_noisy_max(q, scale=2.0, sensitivity=1.0, rho=rho, epsilon=None) for _ in range(3000)]
    expected = np.exp(q / 2) / np.exp(q / 2).sum()
    assert np.bincount(draws, minlength=3) / len(draws) == pytest.approx(expected, abs=0.03)
    with pytest.raises(AssertionError, match="privacy map"):  # OpenDP's own map is checked against the charge
        _opendp_noisy_max(q, scale=2.0, sensitivity=1.0, rho=rho / 2, epsilon=None)


def test_seeded_exponential_mechanism_stays_reproducible():
    def run(seed):
        src, led = NoiseSource(seed), PrivacyLedger(delta=1e-6)
        return [exponential_mechanism(np.arange(6.0), rho=0.05, sensitivity=1.0, ledger=led, source=src, step="s",
                                      relation="add-remove") for _ in range(30)]

    assert run(3) == run(3)


def test_exponential_mechanism_needs_one_budget():
    with pytest.raises(ValueError, match="exactly one"):
        exponential_mechanism([0.0, 1.0], epsilon=1.0, rho=0.1, sensitivity=1.0, ledger=PrivacyLedger(delta=1e-6),
                              source=NoiseSource(0), step="s", relation="add-remove")


# --------------------------------------------------------------------- issue #16: one privacy layer
def test_generators_reach_noise_only_through_public_privacy_names():
    """No generator imports a private name (``_observe``, ``_release``, ...) from the privacy layer,
    and the DP-SGD sampling plan lives in dpsynth.privacy."""
    import ast
    import pathlib

    import dpsynth.generators as gens
    from dpsynth.generators import dpsgd

    for path in pathlib.Path(gens.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and "privacy" in (node.module or ""):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports private {private} from {node.module}"
    assert privacy.observe_noise_input and privacy.release_noise_output
    assert dpsgd.SGMPlan is privacy.SGMPlan and dpsgd.poisson_indices is privacy.poisson_indices
    assert privacy.SGMPlan.__module__ == "dpsynth.privacy.dpsgd_accounting"


def test_dpsgd_privacy_side_and_encoding_have_one_home():
    """Issue 19: the DP-SGD sampling randomness and the released row count live in
    privacy/dpsgd_accounting.py, the row encoding in generators/encoding.py; generators.dpsgd
    re-exports them, so the old import paths keep working."""
    from dpsynth.generators import dpsgd, encoding
    from dpsynth.privacy import dpsgd_accounting as acc

    for name in ("step_rng", "released_row_count", "poisson_indices", "SGMPlan"):
        assert getattr(dpsgd, name) is getattr(acc, name)
    for name in ("MixedEncoder", "Block", "block_log_likelihood", "complete_rows", "draw_rows", "values_in_bins"):
        assert getattr(dpsgd, name) is getattr(encoding, name)
    assert acc.step_rng(3, 1, 2).random() == np.random.default_rng(np.random.SeedSequence([3, 1, 2])).random()
    led = PrivacyLedger(1.0)
    n = acc.released_row_count(100, 0.5, led, NoiseSource(0), "add-remove", step="rows")
    assert n >= 1 and led.spends[0].step == "rows" and led.total_epsilon() == pytest.approx(0.5)


def test_public_recorder_round_trip():
    """observe_noise_input / release_noise_output record a value and its output, and replay forces
    the recorded output."""
    from dpsynth.privacy import observe_noise_input, release_noise_output, replay_noise_outputs

    with record_noise_inputs() as rec:
        out = release_noise_output(observe_noise_input("s", "custom", np.array([1, 2]), 1.0, "L1"), np.array([3, 4]))
    assert out.tolist() == [3, 4] and rec.calls[0].output.tolist() == [3, 4] and rec.calls[0].norm == "L1"
    with replay_noise_outputs([np.array([7, 8])]):
        forced = release_noise_output(observe_noise_input("s", "custom", np.array([1, 2]), 1.0, "L1"),
                                      np.array([3, 4]))
    assert forced.tolist() == [7, 8]
