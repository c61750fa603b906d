"""PrivBayes / PrivBayesE: privacy (neighbours, score sensitivities), structure, sampling."""
import itertools
import math

import numpy as np
import pandas as pd
import pytest

import dpsynth
from dpsynth.persist import to_bytes
from dpsynth.marginals import EncodedRows
from dpsynth.generators.privbayes import (PrivBayes, _maximal_parent_sets,
                                          _mi_score, _r_score)
from dpsynth.privacy import distance, record_noise_inputs

MODES = ["complete-rows", "partial"]


def _neighbours(df):
    """remove a row / add an all-NA row / set a value to NA / replace a row by another row."""
    all_na = pd.DataFrame({c: [None] for c in df.columns}).astype(df.dtypes)
    return {
        "remove": df.iloc[1:],
        "add all-NA": pd.concat([df, all_na], ignore_index=True),
        "value to NA": df.assign(age=df["age"].where(df.index != 2)),
        "replace": pd.concat([df.iloc[[5]], df.iloc[1:]], ignore_index=True),
    }


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("score", ["R", "MI"])
def test_neighbours_stay_within_declared_sensitivity(toy, mode, score):
    """Grey-box test (replace-one, n public): same seed on D and D', identical steps and candidate
    lists, and every value handed to the noise within its declared sensitivity. Removing a row or
    adding an all-NA row are not replace-one neighbours (n changes), but the counts and scores
    still move within the declared bounds and the public τ does not cross a table size here."""
    df, schema = toy
    df = df.copy()
    df.loc[3, "grp"] = np.nan
    with record_noise_inputs() as rec:
        PrivBayes(4.0, missing=mode, score=score).fit(df, schema, seed=3)
    assert rec.calls and {c.mechanism for c in rec.calls} >= {"discrete Laplace", "exponential mechanism"}
    for name, d2 in _neighbours(df).items():
        with record_noise_inputs() as rec2:
            PrivBayes(4.0, missing=mode, score=score).fit(d2, schema, seed=3)
        assert rec.steps() == rec2.steps(), name
        for c1, c2 in zip(rec.calls, rec2.calls):
            assert c1.value.shape == c2.value.shape, (name, c1.step)
            assert distance(c1.value, c2.value, c1.norm) <= c1.sensitivity + 1e-9, (name, c1.step)


def _random_codes(rng, n, widths, p_missing):
    codes = np.column_stack([rng.integers(0, w, n) for w in widths])
    codes[rng.random(codes.shape) < p_missing] = -1
    return codes


@pytest.mark.parametrize("score_fn", [_r_score, _mi_score])
def test_count_scores_have_the_declared_sensitivity(score_fn):
    """Worst observed change of the count-scale score over random datasets with missing cells and
    each kind of neighbour, against the bounds of the module docstring (a declared 2 would be wrong
    for R), while the normalised score the C++ used moves by more than 3/N, its declared
    sensitivity with N = all rows."""
    rng = np.random.default_rng(0)
    widths = [[2], [3], [4, 2]]
    worst = {"replace": 0.0, "add/remove": 0.0}
    normalised_excess = 0.0
    for _ in range(400):
        n = int(rng.integers(3, 25))
        codes = _random_codes(rng, n, [w[0] for w in widths], rng.uniform(0, 0.6))
        other = codes.copy()
        i = int(rng.integers(n))
        kind = rng.choice(["replace", "remove", "to NA"])
        if kind == "replace":
            other[i] = _random_codes(rng, 1, [w[0] for w in widths], 0.2)[0]
        elif kind == "remove":
            other = np.delete(other, i, axis=0)
        else:
            other[i, int(rng.integers(3))] = -1
        par = ((1, 0), (2, int(rng.integers(2))))
        sizes = [w[0] for w in widths]
        t1 = EncodedRows(codes, sizes).table(par + ((0, 0),)).reshape(-1, widths[0][0])
        t2 = EncodedRows(other, sizes).table(par + ((0, 0),)).reshape(-1, widths[0][0])
        delta = abs(score_fn(t1) - score_fn(t2))
        worst["replace" if kind == "replace" else "add/remove"] = max(worst["replace" if kind == "replace"
                                                                          else "add/remove"], delta)
        if score_fn is _r_score and kind != "remove" and t1.sum() and t2.sum():
            r1, r2 = _r_score(t1) / t1.sum(), _r_score(t2) / t2.sum()
            normalised_excess = max(normalised_excess, abs(r1 - r2) - 3.0 / n)
    if score_fn is _r_score:
        assert worst["replace"] <= 3.0 + 1e-9 and worst["add/remove"] < 2.0
        # a replacement that moves the score by more than 2 (so 2 would be too small a declaration)
        t1, t2 = np.array([[0, 4, 3], [0, 3, 0], [1, 0, 0]]), np.array([[0, 4, 3], [0, 3, 1], [0, 0, 0]])
        assert abs(_r_score(t1) - _r_score(t2)) > 2.15
        assert normalised_excess > 0  # the upstream sensitivity 6/N (L1 without ½) is too small
    else:
        bound = 2 * (math.log(25 + 1) + 1)
        assert worst["replace"] <= bound and worst["add/remove"] <= bound / 2


def test_maximal_parent_sets_match_brute_force():
    widths = [[16, 8, 4, 2], [3], [2], [5, 3, 2], [7]]
    placed = [0, 1, 2, 3, 4]
    for budget in [1, 2, 3.5, 7, 12, 30, 64, 200]:
        got = set(_maximal_parent_sets(placed, widths, budget))
        options = [[None] + list(range(len(widths[a]))) for a in placed]
        feasible = []
        for choice in itertools.product(*options):
            par = tuple((a, lvl) for a, lvl in zip(placed, choice) if lvl is not None)
            if math.prod(widths[a][lvl] for a, lvl in par) <= budget:
                feasible.append(dict(par))

        def dominated(p, q):  # q strictly finer/larger than p
            return p != q and all(a in q and q[a] <= lvl for a, lvl in p.items())

        want = {tuple(sorted(p.items())) for p in feasible if not any(dominated(p, q) for q in feasible)}
        assert got == want, budget


@pytest.mark.parametrize("mode", MODES)
def test_fit_sample_and_ledger(toy, mode):
    df, schema = toy
    before = df.copy()
    gen = PrivBayes(1.0, missing=mode).fit(df, schema, seed=1)
    pd.testing.assert_frame_equal(df, before)
    res = gen.sample(m=2, seed=4)
    out = res.datasets[0]
    assert out.shape == df.shape and list(out.columns) == list(df.columns)
    assert not out.isna().any().any()
    assert set(out["grp"].astype(str)) <= {"a", "b", "c"}
    assert out["age"].between(0, 100).all()
    assert res.ledger.total_epsilon() == pytest.approx(1.0)
    assert res.ledger.relation == "replace-one"
    frame = res.ledger.to_frame()
    assert (frame["step"].str.startswith("structure round")).sum() == 2
    assert (frame["step"].str.startswith("table")).sum() == 3
    # the fitted generator holds no private rows
    blob = to_bytes(gen)
    assert len(blob) < 20_000
    assert not any(isinstance(v, np.ndarray) and v.shape[:1] == (len(df),) for v in vars(gen).values())


def test_registry_and_options(toy):
    df, schema = toy
    res = dpsynth.synthesize(df, schema, "privbayes-e", epsilon=1.0, seed=2)
    assert res.method == "privbayes-e" and res.datasets[0].shape == df.shape
    assert dpsynth.synthesize(df, schema, "privbayes", epsilon=1.0, seed=2).method == "privbayes"
    for bad in [dict(missing="drop"), dict(beta=1.0), dict(k=-1), dict(theta=0), dict(score="F")]:
        with pytest.raises(ValueError):
            PrivBayes(1.0, **bad)


def test_fixed_degree(toy):
    df, schema = toy
    gen = PrivBayes(2.0, missing="partial", k=1).fit(df, schema, seed=5)
    assert [len(p) for _, p in gen.network_] == [0, 1, 1]
    assert all(lvl == 0 for _, p in gen.network_ for _, lvl in p)


def test_ancestral_sampling_reproduces_the_conditionals(toy):
    """With a hand-set network, sampled frequencies match P(X1) P(X2 | X1) (non-private check)."""
    df, schema = toy
    gen = PrivBayes(1.0, missing="partial").fit(df, schema, seed=0)
    p_sex = np.array([0.3, 0.7])
    p_grp = np.array([[0.8, 0.1, 0.1], [0.1, 0.2, 0.7]])
    p_age = np.full((3, 5), 0.2)
    gen.network_ = [(0, ()), (1, ((0, 0),)), (2, ((1, 0),))]
    gen.conditionals_ = [p_sex[None, :], p_grp, p_age]
    codes = gen._sample_codes(40_000, np.random.default_rng(1), 0)
    joint = np.bincount(codes[:, 0] * 3 + codes[:, 1], minlength=6).reshape(2, 3) / len(codes)
    assert np.abs(joint - p_sex[:, None] * p_grp).max() < 0.01


def test_learns_a_strong_dependence():
    """Large ε: the network links two copies of the same variable and the synthetic data keep it."""
    rng = np.random.default_rng(3)
    n = 3000
    a = rng.choice(list("pqrs"), n)
    df = pd.DataFrame({"a": a, "b": a, "c": rng.choice(list("xy"), n)}).astype("category")
    schema = dpsynth.Schema.from_dict({c: {"type": "categorical", "categories": sorted(set(df[c]))} for c in df})
    df.loc[rng.random(n) < 0.2, "a"] = np.nan
    gen = PrivBayes(50.0, missing="partial").fit(df, schema, seed=1)
    out = gen.sample(seed=2).datasets[0]
    assert (out["a"].astype(str) == out["b"].astype(str)).mean() > 0.95


@pytest.mark.parametrize("mode", MODES)
def test_ground_truth_epsilon_of_a_fitted_model(toy, mode):
    df, schema = toy
    gen = PrivBayes(1.0, missing=mode).fit(df, schema, seed=1)
    spends = gen.ledger.spends
    tables = [s for s in spends if s.step.startswith("table")]
    if mode == "partial":
        assert all(set(s.attributes) < set(schema.names) for s in tables if "|" not in s.step)
    else:
        assert all(s.attributes == tuple(schema.names) for s in spends)
    rates = {"sex": 0.1, "grp": 0.2, "age": 0.15}
    eps_bar, det = gen.ledger.ground_truth_epsilon(rates, return_details=True)
    assert 0 < eps_bar < gen.ledger.total_epsilon()
    # a guarantee over every network the selection could pick, at least this run's (ex post) value;
    # complete-rows mode reads fixed attribute sets, so there the two coincide
    assert det["bound"] == "ex-ante bound over all selections"
    assert eps_bar >= det["ex_post"]["epsilon_bar"] - 1e-12
    if mode == "complete-rows":
        assert eps_bar == pytest.approx(det["ex_post"]["epsilon_bar"])
    else:
        assert [s.min_attributes for s in tables] == [1, 1, 1]
        fixed_k = PrivBayes(1.0, missing=mode, k=1).fit(df, schema, seed=1).ledger.spends
        assert [s.min_attributes for s in fixed_k if s.step.startswith("table")] == [1, 2, 2]
    assert gen.ledger.ground_truth_epsilon({c: 0.0 for c in rates}) == pytest.approx(1.0)


@pytest.mark.slow
def test_adult_mcar_utility():
    """Adult complete rows, 20 % MCAR, ε = 1: PrivBayesE 2-way TVD ≤ 0.20 and better than
    complete rows (upstream C++: 0.221 and 0.425)."""
    metrics = pytest.importorskip("dpsynth.metrics")
    missing = pytest.importorskip("dpsynth.missing")
    if not hasattr(metrics, "tvd") or not hasattr(missing, "ampute"):
        pytest.skip("dpsynth.metrics.tvd / dpsynth.missing.ampute not available yet")
    df, schema = dpsynth.load_dataset("adult")
    truth = df.dropna().reset_index(drop=True)
    masked = missing.ampute(truth, mechanism="MCAR", p=0.2, seed=0)
    tv = {}
    for mode in MODES:
        out = PrivBayes(1.0, missing=mode).fit(masked, schema, seed=1).sample(seed=2).datasets[0]
        tv[mode] = metrics.tvd(truth, out, schema, k=2)
    assert tv["partial"] <= 0.20 < tv["complete-rows"]
