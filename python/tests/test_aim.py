"""Issue 17: MST, AIM and AIM-E on the shared marginals / graphical-model code."""
import math

import numpy as np
import pandas as pd
import pytest

import dpsynth
from dpsynth.generators import available_methods, make_generator
from dpsynth.graphical import Domain
from dpsynth.graphical.estimation import GraphicalModel, NoisyTable
from dpsynth.marginals.aim import aim_measure
from dpsynth.marginals.measure import estimate_totals, expected_total, measure_marginals
from dpsynth.privacy import NoiseSource, PrivacyLedger, cdp_rho

SMALL_AIM = dict(rounds=30, round_iters=10, final_iters=100)


def _toy(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = (a + (rng.random(n) < 0.1)) % 3
    c = rng.integers(0, 2, n)
    df = pd.DataFrame({"a": a, "b": b, "c": c})
    schema = dpsynth.Schema.from_dict({k: {"type": "categorical", "categories": list(range(3 if k != "c" else 2))}
                                       for k in df})
    return df, schema


def test_methods_registered():
    assert {"mst", "aim", "aim-e"} <= set(available_methods())


def test_graphical_model_fits_consistent_marginals():
    dom = Domain(["a", "b", "c"], [2, 3, 2])
    rng = np.random.default_rng(1)
    p = rng.dirichlet(np.ones(12)).reshape(2, 3, 2)
    tabs = [NoisyTable(("a", "b"), 1000 * p.sum(2), 1.0, 1000.0), NoisyTable(("b", "c"), 1000 * p.sum(0), 1.0, 1000.0)]
    model = GraphicalModel(dom, [("a", "b"), ("b", "c")]).fit(tabs, iters=500)
    assert np.allclose(model.marginal(("a", "b")), p.sum(2), atol=2e-3)
    assert np.allclose(model.marginal(("c", "b")), p.sum(0).T, atol=2e-3)
    # a pair outside every clique: the model's conditional independence a ⟂ c | b
    pab, pbc = p.sum(2), p.sum(0)
    expect = np.einsum("ab,bc->ac", pab / pab.sum(0), pbc)
    assert np.allclose(model.pair_marginals([("a", "c")])[("a", "c")], expect, atol=2e-3)


def test_aim_spends_exactly_the_budget_and_never_more():
    df, schema = _toy()
    codes = schema.encode(df)
    for eps, delta in [(0.3, 1e-6), (1.0, 1e-9), (5.0, 1e-6)]:
        rho = cdp_rho(eps, delta)
        led = PrivacyLedger(eps, delta)
        res = aim_measure(codes, Domain(list(df), schema.domain_sizes), rho, led, NoiseSource(2), rounds=12,
                          round_iters=5, final_iters=10)
        assert led.total_rho() <= rho and math.isclose(led.total_rho(), rho, rel_tol=1e-9)
        assert led.total_epsilon() <= eps
        # every round: one exponential mechanism and one Gaussian measurement, all in zCDP
        frame = led.to_frame()
        assert (frame["mechanism"] == "exponential mechanism").sum() == res.rounds
        assert frame["rho"].notna().all() and set(frame["relation"]) == {"add-remove"}


def test_aim_finds_the_strong_pair():
    df, schema = _toy()
    gen = make_generator("aim", 1.0, 1e-6, **SMALL_AIM).fit(df, schema, seed=1)
    assert ("a", "b") in gen.selected_
    syn = gen.sample(seed=2).datasets[0]
    assert (syn["a"].astype(int) == syn["b"].astype(int)).mean() > 0.8


def test_mst_quality_and_ledger():
    df, schema = _toy()
    gen = make_generator("mst", 1.0, 1e-6).fit(df, schema, seed=1)
    assert ("a", "b") in gen.selected_ and len(gen.selected_) == 2
    led = gen.ledger
    assert math.isclose(led.total_rho(), cdp_rho(1.0, 1e-6), rel_tol=1e-9) and led.total_epsilon() <= 1.0
    syn = gen.sample(seed=2).datasets[0]
    assert abs(len(syn) - len(df)) < 200
    assert dpsynth.metrics.tvd(df, syn, schema, k=2, mode="schema") < 0.05


def test_complete_rows_by_default_and_partial_for_aim_e():
    df, schema = _toy()
    miss = dpsynth.missing.ampute(df, mechanism="MCAR", p=0.3, seed=1)
    aim = make_generator("aim", 1.0, 1e-6, **SMALL_AIM).fit(miss, schema, seed=1)
    aime = make_generator("aim-e", 1.0, 1e-6, **SMALL_AIM).fit(miss, schema, seed=1)
    n_cc = int(miss.notna().all(axis=1).sum())
    assert abs(aim.default_n() - n_cc) < 0.1 * len(df)       # models the complete rows
    assert abs(aime.default_n() - len(df)) < 0.1 * len(df)   # estimates N from the 1-way missing cells
    assert aime.sample(n=10, seed=1).datasets[0].notna().all().all()
    assert aim.method == "aim" and aime.method == "aim-e"


def test_measure_with_missing_cell_and_totals():
    codes = np.array([[0, 1], [1, -1], [-1, 0], [1, 1]])
    dom = Domain(["x", "y"], [2, 2])
    ms = measure_marginals(codes, dom, [("x",), ("y",)], PrivacyLedger(1e4, 1e-3), NoiseSource(1), "t", rho=100.0,
                           with_missing=True)
    assert [m.missing for m in ms] == [1.0, 1.0] and [m.total for m in ms] == [3.0, 3.0]
    totals, n_hat = estimate_totals(ms, partial=True)
    assert n_hat == 4.0 and expected_total(("x", "y"), totals, n_hat) == pytest.approx(4 * 0.75 * 0.75)
    with pytest.raises(ValueError, match="1-way"):
        measure_marginals(codes, dom, [("x", "y")], PrivacyLedger(1.0, 1e-3), NoiseSource(1), "t", rho=0.1,
                          with_missing=True)


def test_bad_input_messages():
    with pytest.raises(ValueError, match="missing must be"):
        make_generator("mst", 1.0, 1e-9, missing="drop")
    with pytest.raises(ValueError, match="fixes"):
        make_generator("aim-e", 1.0, 1e-9, missing="complete-rows")
    with pytest.raises(ValueError, match="delta"):
        make_generator("aim", 1.0)
    with pytest.raises(ValueError, match="alpha"):
        make_generator("aim", 1.0, 1e-9, alpha=1.5)
    df, schema = _toy(300)
    with pytest.raises(ValueError, match="rounds >= "):
        make_generator("aim", 1.0, 1e-9, rounds=1).fit(df, schema, seed=1)


def test_napsu_takes_aim_queries():
    df, schema = _toy(2000)
    gen = make_generator("napsu-mq", 1.0, 1e-6, queries="aim", inference="laplace").fit(df, schema, seed=1)
    assert ("a", "b") in gen.selected_queries_
    assert gen.ledger.total_epsilon() <= 1.0 + 1e-9
    assert any("AIM" in s for s in gen.ledger.to_frame()["step"])


@pytest.mark.slow
def test_aim_e_beats_aim_on_adult_mcar(mcar_tvd):
    res = mcar_tvd(("aim", "aim-e"), 1.0, 1e-9)
    assert res["aim-e"] < res["aim"], res


def test_within_bin_refinement_neighbours_and_spikes():
    """The fine histograms move by at most √k (k columns) in L2 when a row is added, and a spike
    inside a bin is reproduced (instead of being spread uniformly over the bin)."""
    from dpsynth.marginals.refine import measure_refinements, refinement_cells
    from dpsynth.privacy import NoiseSource, PrivacyLedger, record_noise_inputs

    schema = dpsynth.Schema.from_dict({
        "h": {"type": "numeric", "lower": 1, "upper": 99, "bins": 4, "integer": True},
        "x": {"type": "numeric", "lower": 0, "upper": 1e6, "bins": 4},
        "g": {"type": "categorical", "categories": ["a", "b"]}})
    assert refinement_cells(schema["g"]) is None and len(refinement_cells(schema["h"])[0]) == 99
    assert len(refinement_cells(schema["x"])[0]) == 4 * 16
    df = pd.DataFrame({"h": [40] * 900 + [20] * 100, "x": np.linspace(0, 1e6, 1000), "g": ["a"] * 1000})
    values = []
    for d in (df, pd.concat([df, pd.DataFrame({"h": [99], "x": [5.0], "g": ["b"]})], ignore_index=True)):
        with record_noise_inputs() as rec:
            refs = measure_refinements(d, schema, PrivacyLedger(3.0, 1e-6), NoiseSource(1), rho=0.05, step="t")
        (call,) = rec.calls
        values.append(np.asarray(call.value, dtype=float))
        assert call.sensitivity == pytest.approx(np.sqrt(2))
    assert np.linalg.norm(values[0] - values[1]) <= np.sqrt(2) + 1e-12
    h = refs[0].draw(np.full(2000, 1), np.random.default_rng(0))  # bin 1 = [25.75, 50.5): the spike at 40
    assert np.mean(h == 40) > 0.95
