"""DP-MisGAN: per-sample gradients with a gradient penalty, accounting, neighbours, output.

Fast tests use a few hundred rows and one or two epochs; the 8,000-row Adult quality check is
marked slow (run with ``-m slow``)."""
import math

import numpy as np
import pandas as pd
import pytest

import dpsynth
from dpsynth.generators import dpsgd, misgan
from dpsynth.generators.misgan import DPMisGAN
from dpsynth.privacy import distance, record_noise_inputs, sgm_epsilon

torch = pytest.importorskip("torch")


def _critics(width=5, d=3, seed=0):
    torch.manual_seed(seed)
    d_x = misgan.mlp([width, 8, 1], lambda: torch.nn.LeakyReLU(0.2))
    d_m = misgan.mlp([d, 8, 1], lambda: torch.nn.LeakyReLU(0.2))
    return d_x, d_m


def _rows(b, width=5, d=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(b, width, generator=g), torch.rand(b, width, generator=g), torch.rand(b, 1, generator=g),
            (torch.rand(b, d, generator=g) > 0.3).float(), torch.rand(b, d, generator=g),
            torch.rand(b, 1, generator=g))


def test_per_sample_gradients_with_gradient_penalty_match_autograd():
    """vmap(grad) of the per-row WGAN-GP loss equals a per-row double-backward with autograd
    (the case where opacus's GradSampleModule fails)."""
    d_x, d_m = _critics()
    lam = 10.0
    loss = misgan.critic_row_loss(d_x, d_m, lam)
    params = {**{f"dx.{k}": p.detach() for k, p in d_x.named_parameters()},
              **{f"dm.{k}": p.detach() for k, p in d_m.named_parameters()}}
    batch = _rows(4)
    summed, norms = dpsgd.clipped_gradient_sum(loss, params, batch, clip=1e6)  # no clipping
    expected = torch.zeros_like(summed)
    for i in range(4):
        xr, xf, a, mr, mf, b = (t[i:i + 1] for t in batch)
        total = 0
        for crit, real, fake, w in ((d_x, xr, xf, a), (d_m, mr, mf, b)):
            hat = (w * real + (1 - w) * fake).requires_grad_(True)
            (g,) = torch.autograd.grad(crit(hat).sum(), hat, create_graph=True)
            total = total + crit(fake).sum() - crit(real).sum() + lam * (g.norm() - 1) ** 2
        grads = torch.autograd.grad(total, list(d_x.parameters()) + list(d_m.parameters()))
        flat = torch.cat([g.reshape(-1) for g in grads])
        assert float(flat.norm()) == pytest.approx(float(norms[i]), rel=1e-4)
        expected += flat
    assert torch.allclose(summed, expected, atol=1e-4)


def test_critic_loss_is_per_row():
    """A row's clipped gradient does not depend on the other rows of the batch, so adding one row
    moves the clipped sum by at most C."""
    d_x, d_m = _critics()
    loss = misgan.critic_row_loss(d_x, d_m, 10.0)
    params = {**{f"dx.{k}": p.detach() for k, p in d_x.named_parameters()},
              **{f"dm.{k}": p.detach() for k, p in d_m.named_parameters()}}
    batch = _rows(6)
    clip = 0.3
    full, _ = dpsgd.clipped_gradient_sum(loss, params, batch, clip)
    less, _ = dpsgd.clipped_gradient_sum(loss, params, tuple(t[:5] for t in batch), clip)
    one, _ = dpsgd.clipped_gradient_sum(loss, params, tuple(t[5:] for t in batch), clip)
    assert torch.allclose(full, less + one, atol=1e-5)
    assert float((full - less).norm()) <= clip + 1e-6


def test_accounting_matches_training_loop(monkeypatch, toy):
    """The count of noisy critic steps equals the T handed to the accountant, the loop samples at
    the accountant's q, the ledger's ε is the accountant's for (σ, q, T), and generator steps are
    T // n_critic and add nothing to the ledger."""
    df, schema = toy
    rates, gen_steps = [], []
    real_sample, real_gstep = misgan.poisson_indices, DPMisGAN._generator_step

    def spy_sample(rng, n, q):
        rates.append(q)
        return real_sample(rng, n, q)

    def spy_gstep(self, *args):
        gen_steps.append(1)
        return real_gstep(self, *args)

    monkeypatch.setattr(misgan, "poisson_indices", spy_sample)
    monkeypatch.setattr(DPMisGAN, "_generator_step", spy_gstep)
    gen = DPMisGAN(3.0, 1e-6, epochs=2, batch_size=50, n_critic=3, hidden=16, critic_hidden=16)
    with record_noise_inputs() as rec:
        gen.fit(df, schema, seed=4)
    plan = gen.plan_
    sgd_calls = [c for c in rec.calls if c.mechanism == "DP-SGD step"]
    assert plan.sample_rate == pytest.approx(min(1.0, 50 / gen.n_))
    assert plan.steps == math.ceil(2 / plan.sample_rate) == len(sgd_calls) == len(rates) == plan.steps_taken
    assert set(rates) == {plan.sample_rate}
    # what the RDP accountant is handed is what the loop ran
    assert plan.history() == [(plan.noise_multiplier, rates[0], len(sgd_calls))]
    assert len(gen_steps) == plan.steps // 3
    assert all(c.sensitivity == plan.clip and c.norm == "L2" for c in sgd_calls)
    frame = gen.ledger.to_frame()
    assert list(frame["mechanism"]) == ["discrete Laplace", dpsgd.DPSGD_MECHANISM]  # row count, critics
    sgd = frame.iloc[1]
    assert sgd["epsilon"] == pytest.approx(sgm_epsilon(plan.noise_multiplier, plan.sample_rate, plan.steps, 1e-6),
                                           rel=1e-9)
    assert sgd["delta"] == 1e-6 and sgd["relation"] == "add-remove" and f"T={plan.steps}" in sgd["note"]
    assert gen.ledger.total_epsilon() <= 3.0 + 1e-9
    assert frame["epsilon"].iloc[0] == pytest.approx(0.01 * 3.0)


def test_neighbour_first_critic_step_within_clip(toy):
    """Grey-box neighbour test with the same seed: a row added at the end (q = 1, so it is in the
    first batch) moves the first clipped critic-gradient sum by more than 0 and at most C; the
    control flow (steps, their number) is identical."""
    df, schema = toy
    extra = df.iloc[[3]].assign(sex=pd.Categorical([None], categories=["F", "M"]), age=1.0)
    df2 = pd.concat([df, extra], ignore_index=True)
    runs = []
    for data in (df, df2):
        with record_noise_inputs() as rec:
            DPMisGAN(3.0, 1e-6, epochs=2, batch_size=10_000, hidden=16, critic_hidden=16,
                     clip=0.05).fit(data, schema, seed=6)
        runs.append(rec)
    a, b = runs
    assert a.steps() == b.steps() and len(a.calls) == 1 + 2
    assert distance(a.calls[0].value, b.calls[0].value, "L1") == 1  # the row count
    dist = distance(a.calls[1].value, b.calls[1].value, "L2")
    assert 0 < dist <= a.calls[1].sensitivity + 1e-6


def test_sample_output_and_mask(tmp_path, toy):
    df, schema = toy
    gen = DPMisGAN(3.0, 1e-6, epochs=3, batch_size=50, hidden=16, critic_hidden=16).fit(df, schema, seed=2)
    out = gen.sample(n=400, seed=3).datasets[0]
    assert list(out.columns) == list(df.columns) and len(out) == 400
    assert not out.isna().any().any()  # complete data by default
    assert out["age"].between(0, 100).all() and (out["age"] % 1 == 0).all()
    assert set(out["grp"].astype(str)) <= {"a", "b", "c"}
    assert out["sex"].dtype == df["sex"].dtype
    gen.keep_missing = True
    holes = gen.sample(n=400, seed=3).datasets[0]
    assert holes.isna().any().any() and not holes.isna().all().all()
    for name, value in vars(gen).items():
        if isinstance(value, (np.ndarray, pd.DataFrame)):
            assert len(value) != len(df), name
    gen.keep_missing = False
    gen.save(tmp_path / "g.npz")
    again = DPMisGAN.load(tmp_path / "g.npz")
    pd.testing.assert_frame_equal(gen.sample(n=30, seed=5).datasets[0], again.sample(n=30, seed=5).datasets[0])


def test_learns_marginals_with_large_budget():
    """With a large ε the data generator must move away from its initial output towards a skewed
    marginal (85% 'a') and a numeric concentrated near 80 (a check that the training signal flows
    through the DP critics into the generators)."""
    rng = np.random.default_rng(0)
    n = 1500
    df = pd.DataFrame({"g": pd.Categorical(np.where(rng.random(n) < 0.85, "a", "b"), categories=["a", "b"]),
                       "x": np.clip(rng.normal(80, 5, n), 0, 100)})
    df.loc[rng.random(n) < 0.2, "x"] = np.nan
    schema = dpsynth.Schema.from_dict({"g": {"type": "categorical", "categories": ["a", "b"]},
                                       "x": {"type": "numeric", "lower": 0, "upper": 100}})
    gen = DPMisGAN(50.0, 1e-5, epochs=10, batch_size=100, hidden=32, critic_hidden=32, lr=2e-3,
                   lr_generator=2e-3).fit(df, schema, seed=1)
    out = gen.sample(n=2000, seed=2).datasets[0]
    assert (out["g"] == "a").mean() > 0.7
    assert abs(out["x"].median() - 80) < 15


def test_registry_and_validation(toy):
    df, schema = toy
    res = dpsynth.synthesize(df, schema, "dp-misgan", epsilon=3.0, delta=1e-6, seed=1, n=25, epochs=1,
                             batch_size=50, hidden=8, critic_hidden=8)
    assert res.method == "dp-misgan" and res.datasets[0].shape == (25, 3)
    with pytest.raises(ValueError, match="delta"):
        DPMisGAN(3.0)
    with pytest.raises(ValueError, match="epochs"):
        DPMisGAN(3.0, 1e-6, epochs=0)
    with pytest.raises(TypeError, match="n_critic must be a whole number"):  # dpsynth.validation: a count is an integer
        DPMisGAN(3.0, 1e-6, n_critic=1.5)
    with pytest.raises(TypeError, match="keep_missing"):
        DPMisGAN(3.0, 1e-6, keep_missing="no")
    before = df.copy()
    DPMisGAN(3.0, 1e-6, epochs=1, batch_size=50, hidden=8, critic_hidden=8).fit(df, schema, seed=1)
    pd.testing.assert_frame_equal(df, before)


# ====================================================================== slow: Adult quality
@pytest.mark.slow
def test_adult_mcar_quality_against_uniform(adult_mcar_8000):
    """8,000 complete Adult rows, 20% MCAR, ε = 3, δ = 1e-6, default settings: within budget and
    2-way TVD ≤ 0.6 × that of uniform noise."""
    metrics = pytest.importorskip("dpsynth.metrics")
    truth, masked, schema, tvd_uniform = adult_mcar_8000
    gen = DPMisGAN(3.0, 1e-6).fit(masked, schema, seed=21)
    assert gen.ledger.total_epsilon() <= 3.0 + 1e-9 and gen.ledger.total_delta() <= 1e-6
    tvd = metrics.tvd(truth, gen.sample(n=8000, seed=22).datasets[0], schema, k=2)
    print({"tvd_dp_misgan": tvd, "tvd_uniform": tvd_uniform})
    assert tvd <= 0.6 * tvd_uniform
