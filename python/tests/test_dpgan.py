"""Issue 17: DPautoGAN and DP-CTGAN on the shared DP-SGD plumbing (complete rows, private count)."""
import os
import tempfile

import numpy as np
import pytest

import dpsynth
from dpsynth.generators import available_methods, make_generator
from dpsynth.generators.base import Generator

SMALL = {"dpautogan": dict(ae_epochs=1, gan_epochs=1, batch_size=64, hidden=16, latent=4, nz=4),
         "dpctgan": dict(epochs=1, batch_size=64, hidden=16, nz=4)}


@pytest.fixture(scope="module")
def adult_small():
    df, schema = dpsynth.load_dataset("adult")
    cols = ["age", "workclass", "sex", "hours-per-week", "income"]
    return df.iloc[:1500][cols].reset_index(drop=True), schema.subset(cols)


@pytest.mark.parametrize("method", ["dpautogan", "dpctgan"])
def test_fit_sample_ledger(method, adult_small):
    df, schema = adult_small
    assert method in available_methods()
    before = df.copy()
    gen = make_generator(method, 2.0, 1e-6, **SMALL[method]).fit(df, schema, seed=1)
    assert df.equals(before)
    res = gen.sample(n=200, seed=2)
    out = res.datasets[0]
    assert list(out.columns) == list(df.columns) and len(out) == 200 and out.notna().all().all()
    led = gen.ledger
    assert led.total_epsilon() <= 2.0 * (1 + 1e-9) and led.total_delta() <= 1e-6
    frame = led.to_frame()
    # the number of complete rows is released with noise, never used raw
    assert "number of complete rows" in set(frame["step"])
    n_cc = int(df.notna().all(axis=1).sum())
    assert abs(gen.default_n() - n_cc) < 100
    assert gen.plan_.steps_taken == gen.plan_.steps
    assert set(frame["relation"]) == {"add-remove"}
    if method == "dpctgan":
        assert "category frequencies (conditional sampler)" in set(frame["step"])
        assert set(out["sex"]) <= {"Female", "Male"}


@pytest.mark.parametrize("method", ["dpautogan", "dpctgan"])
def test_save_load(method, adult_small):
    df, schema = adult_small
    gen = make_generator(method, 2.0, 1e-6, **SMALL[method]).fit(df, schema, seed=1)
    path = os.path.join(tempfile.mkdtemp(), "g.npz")
    gen.save(path)
    again = Generator.load(path)
    assert again.sample(n=30, seed=5).datasets[0].equals(gen.sample(n=30, seed=5).datasets[0])


@pytest.mark.parametrize("method", ["dpautogan", "dpctgan"])
def test_seeded_runs_repeat(method, adult_small):
    df, schema = adult_small
    a = make_generator(method, 2.0, 1e-6, **SMALL[method]).fit(df, schema, seed=3).sample(n=50, seed=4)
    b = make_generator(method, 2.0, 1e-6, **SMALL[method]).fit(df, schema, seed=3).sample(n=50, seed=4)
    assert a.datasets[0].equals(b.datasets[0])


def test_bad_input():
    with pytest.raises(ValueError, match="delta"):
        make_generator("dpautogan", 1.0)
    with pytest.raises(ValueError, match="cond_share"):
        make_generator("dpctgan", 1.0, 1e-6, cond_share=0.995)
    with pytest.raises(ValueError, match="batch_size"):
        make_generator("dpctgan", 1.0, 1e-6, batch_size=0)
    with pytest.raises(ValueError, match="weight_clip"):
        make_generator("dpautogan", 1.0, 1e-6, weight_clip=-1)


def test_wrapped_by_impute_first(adult_small):
    """The vanilla strategies wrap the new generators like any other (one ledger)."""
    df, schema = adult_small
    gen = make_generator("impute-random", 2.0, 1e-6, generator="dpautogan", **SMALL["dpautogan"]).fit(df, schema, seed=1)
    assert gen.ledger.total_epsilon() <= 2.0 * (1 + 1e-9)
    assert abs(gen.default_n() - len(df)) < 100  # imputed table: every row is complete


def test_wgan_critic_step_public_fake_term():
    """The fake term is added after the release: with a zero-noise plan the step equals the exact
    clipped gradient of mean D(fake) − (1/B) Σ D(real)."""
    import torch
    from dpsynth.generators.dpsgd import DPSGD, SGMPlan, critic_real_row_loss, wgan_critic_step
    from dpsynth.privacy import PrivacyLedger

    torch.manual_seed(0)
    critic = torch.nn.Sequential(torch.nn.Linear(3, 1)).double()
    plan = SGMPlan(noise_multiplier=0.0, sample_rate=0.5, steps=1, clip=1e6, delta=1e-6, epsilon=1.0)
    plan.charge(PrivacyLedger(1.0, 1e-6), "c")
    opt = DPSGD({"d": critic}, plan, torch.Generator(), expected_batch_size=2.0, step="c",
                row_losses=critic_real_row_loss, lr=1.0)
    opt.optimizer = torch.optim.SGD(critic.parameters(), lr=1.0)
    real, fake = torch.randn(2, 3, dtype=torch.float64), torch.randn(4, 3, dtype=torch.float64)
    w0 = critic[0].weight.detach().clone()
    wgan_critic_step(opt, critic, real, fake)
    expect = -(fake.mean(0) - real.sum(0) / 2.0)
    assert np.allclose((critic[0].weight.detach() - w0).numpy().ravel(), expect.numpy())


@pytest.mark.slow
def test_dp_misgan_beats_dpautogan_on_complete_rows(mcar_tvd):
    res = mcar_tvd(("dp-misgan", "dpautogan"), 3.0, 1e-6, n=8000)
    assert res["dp-misgan"] < res["dpautogan"], res
