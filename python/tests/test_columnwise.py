"""Kamino / KaminoI (ColumnwiseSynth) and the shared DP-SGD machinery (generators/dpsgd.py).

Fast tests use a few hundred to 2,000 rows and one or two epochs; the 8,000-row Adult quality check
is marked slow (run with ``-m slow``)."""
import math

import numpy as np
import pandas as pd
import pytest

import dpsynth
from dpsynth.persist import to_bytes
from dpsynth.generators import columnwise, dpsgd
from dpsynth.generators.columnwise import ColumnwiseSynth
from dpsynth.privacy import NoiseSource, PrivacyLedger, distance, record_noise_inputs, sgm_epsilon

torch = pytest.importorskip("torch")


# ====================================================================== shared machinery
def _linear_loss(model):
    def loss(params, x, y):
        out = torch.func.functional_call(model, dpsgd.split_params(params, "m"), (x.unsqueeze(0),))[0]
        return -(y * torch.log_softmax(out, dim=0)).sum()
    return loss


def test_clipped_gradient_sum_matches_per_row_autograd():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    x = torch.randn(6, 4) * 3
    y = torch.nn.functional.one_hot(torch.tensor([0, 1, 2, 0, 1, 2]), 3).float()
    params = {f"m.{k}": p.detach() for k, p in model.named_parameters()}
    clip = 0.5
    summed, norms = dpsgd.clipped_gradient_sum(_linear_loss(model), params, (x, y), clip)
    expected = torch.zeros_like(summed)
    for i in range(6):
        model.zero_grad()
        loss = -(y[i] * torch.log_softmax(model(x[i:i + 1])[0], dim=0)).sum()
        loss.backward()
        g = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        assert float(g.norm()) == pytest.approx(float(norms[i]), rel=1e-5)
        expected += g * min(1.0, clip * (1 - dpsgd.CLIP_MARGIN) / float(g.norm()))
    assert torch.allclose(summed, expected, atol=1e-5)
    assert (norms > clip).any()  # the clipping was exercised
    # adding one row moves the sum by at most C (the declared L2 sensitivity)
    more, _ = dpsgd.clipped_gradient_sum(_linear_loss(model), params, (torch.cat([x, 100 * x[:1]]),
                                                                         torch.cat([y, y[:1]])), clip)
    assert float((more - summed).norm()) <= clip + 1e-6
    empty, _ = dpsgd.clipped_gradient_sum(_linear_loss(model), params, (x[:0], y[:0]), clip)
    assert float(empty.abs().sum()) == 0.0


def test_mlp_fast_path_equals_vmap_path():
    """The outer-product per-row clipping used for the column models equals vmap(grad)."""
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 4))
    x = torch.randn(9, 5) * 2
    y = torch.nn.functional.one_hot(torch.randint(0, 4, (9,)), 4).float()
    y[3] = 0.0  # a missing target: zero loss, zero gradient
    params = {f"m.{k}": p.detach() for k, p in model.named_parameters()}
    slow, slow_norms = dpsgd.clipped_gradient_sum(_linear_loss(model), params, (x, y), 0.7)
    fast, fast_norms = dpsgd.mlp_clipped_gradient_sum(
        model, lambda out, t: -(t * torch.log_softmax(out, dim=1)).sum(dim=1), x, (y,), 0.7)
    assert torch.allclose(fast_norms, slow_norms, atol=1e-5) and float(fast_norms[3]) == 0.0
    assert torch.allclose(fast, slow, atol=1e-5)
    with pytest.raises(TypeError, match="Linear"):
        dpsgd.mlp_clipped_gradient_sum(torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.LayerNorm(4)),
                                       lambda out, t: out.sum(1), x, (y,), 1.0)


def test_sgm_plan_matches_accountant_and_refuses_extra_steps():
    plan = dpsgd.SGMPlan.calibrate(epsilon=0.8, delta=1e-6, sample_rate=0.05, steps=40, clip=2.0)
    assert plan.epsilon <= 0.8
    assert plan.epsilon == pytest.approx(sgm_epsilon(plan.noise_multiplier, 0.05, 40, 1e-6), rel=1e-9)
    assert plan.accountant_epsilon() == pytest.approx(plan.epsilon, rel=1e-9)
    assert plan.history() == [(plan.noise_multiplier, 0.05, 40)]
    gen = NoiseSource(0).torch_generator()
    with pytest.raises(RuntimeError, match="charge"):
        plan.release(torch.zeros(3), gen, "s")
    led = PrivacyLedger(1.0, 1e-6)
    plan.charge(led, "model (DP-SGD)")
    row = led.to_frame().iloc[0]
    assert row["mechanism"] == dpsgd.DPSGD_MECHANISM and row["relation"] == "add-remove"
    assert row["sensitivity"] == 2.0 and row["norm"] == "L2" and "T=40" in row["note"]
    with pytest.raises(RuntimeError, match="already"):
        plan.charge(led, "again")
    for _ in range(39):
        plan.release(torch.zeros(3), gen, "s")
    with pytest.raises(RuntimeError, match="39 noisy steps but 40"):
        plan.finish()
    noisy = plan.release(torch.zeros(3), gen, "s")
    assert float(noisy.abs().sum()) > 0  # noise was added
    plan.finish()
    with pytest.raises(RuntimeError, match="exceeds"):
        plan.release(torch.zeros(3), gen, "s")


def test_poisson_sampling_rate():
    q, n, reps = 0.1, 500, 200
    sizes = [len(dpsgd.poisson_indices(dpsgd.step_rng(3, t), n, q)) for t in range(reps)]
    mean = np.mean(sizes)
    sd = math.sqrt(n * q * (1 - q) / reps)
    assert abs(mean - n * q) < 5 * sd
    assert np.std(sizes) > 0  # variable batch size, not fixed
    with pytest.raises(ValueError):
        dpsgd.poisson_indices(dpsgd.step_rng(0), 10, 0.0)


def test_mixed_encoder_uses_public_bounds(toy):
    df, schema = toy
    enc = dpsgd.MixedEncoder(schema)
    X, M = enc.encode(df.assign(age=df["age"].fillna(500.0)))  # 500 is clipped to the public upper 100
    assert X.shape == (len(df), 2 + 3 + 1) and M.shape == (len(df), 3)
    assert X[:, -1].max() == 1.0 and X[:, -1].min() >= 0.0
    miss = df["sex"].isna().to_numpy()
    assert (X[miss, :2] == 0).all() and (M[miss, 0] == 0).all() and (X[~miss, :2].sum(axis=1) == 1).all()


# ====================================================================== ColumnwiseSynth
def _dependent(n=600, seed=0):
    """x → y almost deterministic, z independent; 20% MCAR in y and z."""
    rng = np.random.default_rng(seed)
    x = rng.choice(["a", "b", "c"], n)
    y = np.where(rng.random(n) < 0.95, x, rng.choice(["a", "b", "c"], n))
    z = rng.integers(0, 50, n).astype(float)
    df = pd.DataFrame({"x": pd.Categorical(x, categories=["a", "b", "c"]),
                       "y": pd.Categorical(y, categories=["a", "b", "c"]), "z": z})
    df.loc[rng.random(n) < 0.2, "y"] = np.nan
    df.loc[rng.random(n) < 0.2, "z"] = np.nan
    schema = dpsynth.Schema.from_dict({"x": {"type": "categorical", "categories": ["a", "b", "c"]},
                                       "y": {"type": "categorical", "categories": ["a", "b", "c"]},
                                       "z": {"type": "numeric", "lower": 0, "upper": 50, "bins": 5,
                                             "integer": True}})
    return df, schema


@pytest.mark.parametrize("impute", [True, False])
def test_accounting_matches_training_loop(monkeypatch, toy, impute):
    """The accountant is told (σ, q, T); the loop samples at exactly q and runs exactly T noisy steps."""
    df, schema = toy
    rates = []
    real = columnwise.poisson_indices

    def spy(rng, n, q):
        rates.append(q)
        return real(rng, n, q)

    monkeypatch.setattr(columnwise, "poisson_indices", spy)
    gen = ColumnwiseSynth(1.0, 1e-6, impute=impute, epochs=2, batch_size=40)
    with record_noise_inputs() as rec:
        gen.fit(df, schema, seed=3)
    plan = gen.plan_
    sgd_calls = [c for c in rec.calls if c.mechanism == "DP-SGD step"]
    d = len(schema.names)
    steps_per_model = math.ceil(2 / plan.sample_rate)
    assert plan.steps == (d - 1) * steps_per_model == len(sgd_calls) == len(rates) == plan.steps_taken
    assert set(rates) == {plan.sample_rate}
    # what the RDP accountant is handed is what the loop ran
    assert plan.history() == [(plan.noise_multiplier, rates[0], len(sgd_calls))]
    assert plan.sample_rate == pytest.approx(min(1.0, 40 / gen.n_))
    assert all(c.sensitivity == plan.clip and c.norm == "L2" for c in sgd_calls)
    # one record per column model in the grey-box log, in the fitted order
    assert [c.step.split(": ")[1] for c in sgd_calls[::steps_per_model]] == gen.order_[1:]
    frame = gen.ledger.to_frame()
    sgd = frame[frame["mechanism"] == dpsgd.DPSGD_MECHANISM]
    assert len(sgd) == 1
    assert sgd["epsilon"].iloc[0] == pytest.approx(
        sgm_epsilon(plan.noise_multiplier, plan.sample_rate, plan.steps, 1e-6), rel=1e-9)
    assert f"T={plan.steps}" in sgd["note"].iloc[0]
    assert gen.ledger.total_epsilon() <= 1.0 + 1e-9 and gen.ledger.total_delta() <= 1e-6
    # order (L1 sensitivity d) + first histogram (sensitivity 1) + DP-SGD
    assert list(frame["sensitivity"]) == [float(d), 1.0, plan.clip]


def test_order_by_dp_missing_rate_and_given_order(toy):
    df, schema = toy
    df = df.copy()
    df.loc[df.index % 2 == 0, "grp"] = np.nan  # grp: 50% missing, age 14%, sex 9%
    gen = ColumnwiseSynth(20.0, 1e-6, epochs=1, order_share=0.5, first_share=0.1).fit(df, schema, seed=1)
    assert gen.order_ == ["grp", "age", "sex"]
    given = ColumnwiseSynth(1.0, 1e-6, epochs=1, order=["age", "sex", "grp"]).fit(df, schema, seed=1)
    assert given.order_ == ["age", "sex", "grp"]
    assert not any("order" in s for s in given.ledger.to_frame()["step"])  # a given order is free
    with pytest.raises(ValueError, match="every column"):
        ColumnwiseSynth(1.0, 1e-6, order=["age", "sex"]).fit(df, schema)


def test_neighbour_all_missing_row_changes_only_counts(toy):
    """Grey-box neighbour test with the same seed. An added all-missing row is in the order counts
    (≤ d) and in the first histogram's missing cell (≤ 1); under KaminoI its imputed cells never
    reach a model as a target, so every DP-SGD step's clipped sum must be unchanged (coupled streams)."""
    df, schema = toy
    df2 = pd.concat([df, pd.DataFrame({c: [None] for c in df.columns}).astype(df.dtypes)], ignore_index=True)
    runs = []
    for data in (df, df2):
        with record_noise_inputs() as rec:
            ColumnwiseSynth(1.0, 1e-6, impute=True, epochs=2, batch_size=10_000).fit(data, schema, seed=5)
        runs.append(rec)
    a, b = runs
    assert a.steps() == b.steps() and len(a.calls) == 2 + 2 * 2  # order, histogram, 2 models × 2 steps
    for c1, c2 in zip(a.calls, b.calls):
        dist = distance(c1.value, c2.value, c1.norm)
        assert dist <= c1.sensitivity + 1e-9, c1.step
        if c1.mechanism == "DP-SGD step":
            assert dist < 1e-4, c1.step  # float summation order only
    assert distance(a.calls[0].value, b.calls[0].value, "L1") == len(schema.names)  # +1 missing per column


def test_neighbour_added_row_first_step_within_clip(toy):
    """Add a complete row at the end (q = 1, so it is in the first batch): the first DP-SGD step's
    clipped gradient sum moves by more than 0 and at most C."""
    df, schema = toy
    df2 = pd.concat([df, df.iloc[[0]].assign(sex="F", grp="c", age=99.0)], ignore_index=True)
    df2 = df2.astype(df.dtypes)
    runs = []
    for data in (df, df2):
        with record_noise_inputs() as rec:
            ColumnwiseSynth(1.0, 1e-6, impute=True, epochs=1, batch_size=10_000, order="schema",
                            clip=0.1).fit(data, schema, seed=7)
        runs.append([c for c in rec.calls if c.mechanism == "DP-SGD step"])
    first_a, first_b = runs[0][0], runs[1][0]
    dist = distance(first_a.value, first_b.value, "L2")
    assert 0 < dist <= first_a.sensitivity + 1e-6


@pytest.mark.parametrize("impute", [True, False])
def test_sample_is_complete_valid_and_learns_dependence(impute):
    df, schema = _dependent(n=1500)
    gen = ColumnwiseSynth(8.0, 1e-5, impute=impute, epochs=5, batch_size=256, lr=0.02, order=["x", "y", "z"])
    res = gen.fit(df, schema, seed=2).sample(n=2000, seed=3)
    out = res.datasets[0]
    assert list(out.columns) == list(df.columns) and len(out) == 2000
    assert not out.isna().any().any()
    assert out["z"].between(0, 50).all() and (out["z"] % 1 == 0).all()
    assert set(out["x"].astype(str)) <= {"a", "b", "c"}
    agree = float((out["x"].astype(str) == out["y"].astype(str)).mean())
    assert agree > 0.7  # independence would give about 1/3
    assert res.ledger.total_epsilon() <= 8.0 + 1e-9
    assert gen.method == ("kamino-i" if impute else "kamino")


def test_fitted_generator_holds_no_private_rows(tmp_path):
    df, schema = _dependent(n=800)
    gen = ColumnwiseSynth(1.0, 1e-6, epochs=1).fit(df, schema, seed=1)
    for name, value in vars(gen).items():
        if isinstance(value, (np.ndarray, pd.DataFrame)):
            assert len(value) != len(df), name
    blob = to_bytes(gen)
    assert len(blob) < 200_000
    gen.save(tmp_path / "g.npz")
    again = ColumnwiseSynth.load(tmp_path / "g.npz")
    a = gen.sample(n=50, seed=4).datasets[0]
    b = again.sample(n=50, seed=4).datasets[0]
    pd.testing.assert_frame_equal(a, b)


def test_registry_and_validation(toy):
    df, schema = toy
    res = dpsynth.synthesize(df, schema, "kamino-i", epsilon=1.0, delta=1e-6, seed=1, n=30, epochs=1)
    assert res.method == "kamino-i" and res.datasets[0].shape == (30, 3)
    res = dpsynth.synthesize(df, schema, "kamino", epsilon=1.0, delta=1e-6, seed=1, n=30, epochs=1)
    assert res.method == "kamino"
    with pytest.raises(ValueError, match="delta"):
        ColumnwiseSynth(1.0)
    with pytest.raises(TypeError, match="impute"):
        ColumnwiseSynth(1.0, 1e-6, impute="yes")
    with pytest.raises(ValueError, match="batch_size"):
        ColumnwiseSynth(1.0, 1e-6, batch_size=0)
    with pytest.raises(ValueError, match="first_share"):
        ColumnwiseSynth(1.0, 1e-6, first_share=1.5)
    before = df.copy()
    ColumnwiseSynth(1.0, 1e-6, epochs=1).fit(df, schema, seed=1)
    pd.testing.assert_frame_equal(df, before)  # the caller's frame is untouched


# ====================================================================== slow: Adult quality
@pytest.mark.slow
def test_adult_mcar_quality_against_uniform(adult_mcar_8000):
    """8,000 complete Adult rows, 20% MCAR, ε = 1, δ = 1e-6: 2-way TVD ≤ 0.6 × that of uniform
    noise, and KaminoI no worse than Kamino (complete rows)."""
    metrics = pytest.importorskip("dpsynth.metrics")
    truth, masked, schema, tvd_uniform = adult_mcar_8000
    tvd = {}
    for impute in (True, False):
        gen = ColumnwiseSynth(1.0, 1e-6, impute=impute).fit(masked, schema, seed=11)
        assert gen.ledger.total_epsilon() <= 1.0 + 1e-9 and gen.ledger.total_delta() <= 1e-6
        tvd[impute] = metrics.tvd(truth, gen.sample(n=8000, seed=12).datasets[0], schema, k=2)
    print({"tvd_kamino_i": tvd[True], "tvd_kamino": tvd[False], "tvd_uniform": tvd_uniform})
    assert tvd[True] <= 0.6 * tvd_uniform
    assert tvd[True] <= tvd[False]
