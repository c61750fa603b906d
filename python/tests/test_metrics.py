"""Utility metrics: k-way TVD, pMSE / S_pMSE (CART and logit), train-synthetic/test-real F1."""
import numpy as np
import pandas as pd
import pytest

import dpsynth
from dpsynth.metrics import RpartLikeTree, f1_average, pmse, tvd


@pytest.fixture(scope="module")
def adult_sample(adult):
    df, schema = adult
    return df.sample(4000, random_state=11).reset_index(drop=True), schema


def uniform_noise(schema, n, seed=0):
    """Rows drawn uniformly from the public domain."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, col in schema.columns.items():
        if col.is_categorical:
            out[name] = pd.Categorical(rng.choice(list(col.categories), n), categories=list(col.categories))
        else:
            out[name] = rng.integers(int(col.lower), int(col.upper) + 1, n)
    return pd.DataFrame(out)


# ----------------------------------------------------------------------------- TVD
@pytest.fixture
def small():
    schema = dpsynth.Schema.from_dict({
        "a": {"type": "categorical", "categories": ["x", "y"]},
        "b": {"type": "categorical", "categories": ["u", "v"]},
        "z": {"type": "numeric", "lower": 0, "upper": 16, "bins": 4},
    })
    real = pd.DataFrame({"a": ["x", "x", "y", "y"], "b": ["u", "v", "u", "v"], "z": [0.0, 4.0, 8.0, 16.0]})
    synth = pd.DataFrame({"a": ["x", "x", "x", "y"], "b": ["u", "u", "v", "v"], "z": [0.0, 1.0, 16.0, 16.0]})
    return real, synth, schema


def test_tvd_zero_on_identical(adult):
    df, schema = adult
    for k in (1, 2):
        assert tvd(df, df, schema, k=k) == 0.0
    assert tvd(df.iloc[:3000], df.iloc[:3000], schema, k=3) == 0.0
    assert tvd(df, df.sample(frac=1.0, random_state=1), schema, k=2, mode="schema") == 0.0


def test_tvd_hand_computed(small):
    real, synth, schema = small
    # 1-way: a: real (.5,.5), synth (.75,.25) → .25; b: (.5,.5) vs (.5,.5) → 0;
    # z (paper bins of width 1 on [0,16], the max in bin 16): real {0,4,8,16}, synth {0,1,16,16}
    #   → ½(|.25−.25| + .25 + .25 + |.25−.5| + .25) = .5
    assert tvd(real, synth, schema, k=1, per_combination=True).round(12).to_dict() == {
        ("a",): 0.25, ("b",): 0.0, ("z",): 0.5}
    assert tvd(real, synth, schema, k=1) == pytest.approx((0.25 + 0 + 0.5) / 3)
    # 2-way (a, b): real uniform over 4 cells; synth xu .5, xv .25, yv .25 → ½(.25 + 0 + .25 + 0) = .25
    pair = tvd(real, synth, schema, k=2, per_combination=True)
    assert pair[("a", "b")] == pytest.approx(0.25)
    # schema bins (4 bins of width 4 on [0, 16]): real {0,1,2,3}, synth {0,0,3,3} → ½(.25+.25+.25+.25)=.5
    assert tvd(real, synth, schema, k=1, mode="schema", per_combination=True)[("z",)] == pytest.approx(0.5)


def test_tvd_paper_mode_drops_incomplete_rows(small):
    real, synth, schema = small
    noisy = pd.concat([synth, pd.DataFrame({"a": [None], "b": ["u"], "z": [3.0]})], ignore_index=True)
    assert tvd(real, noisy, schema, k=2) == tvd(real, synth, schema, k=2)
    # available-case (schema mode) uses the extra row on (b, z) only
    assert tvd(real, noisy, schema, k=1, mode="schema", per_combination=True)[("a",)] == pytest.approx(0.25)


def test_tvd_bad_input(small):
    real, synth, schema = small
    with pytest.raises(ValueError, match="k must be"):
        tvd(real, synth, schema, k=4)
    with pytest.raises(ValueError, match="lacks"):
        tvd(real, synth.drop(columns="b"), schema)
    with pytest.raises(ValueError, match="mode"):
        tvd(real, synth, schema, mode="exact")


# ----------------------------------------------------------------------------- pMSE
def test_pmse_hand_computed_tree():
    """One clean split: leaves {x=0: 40 real + 10 synth} and {x=1: 10 real + 40 synth}; c = ½,
    p̂ = .2 / .8, pMSE = (.3)² = .09 (= c(1−c) − G/2 = .25 − .16)."""
    x = np.r_[np.zeros(50), np.ones(50)]
    t = np.r_[np.zeros(40), np.ones(10), np.zeros(10), np.ones(40)]
    tree = RpartLikeTree(cp=0.01, minsplit=20, minbucket=7).fit(x.reshape(-1, 1), t)
    p = tree.predict_proba1(x.reshape(-1, 1))
    assert tree.n_splits_ == 1
    assert np.mean((p - 0.5) ** 2) == pytest.approx(0.09)
    # the same split does not survive cp = 0.7: it removes 30 of 50 errors, 30 < 0.7·50 = 35
    assert RpartLikeTree(cp=0.7).fit(x.reshape(-1, 1), t).n_splits_ == 0


def test_pmse_cart_through_api_hand_case():
    real = pd.DataFrame({"g": pd.Categorical(["a"] * 40 + ["b"] * 10)})
    synth = pd.DataFrame({"g": pd.Categorical(["a"] * 10 + ["b"] * 40)})
    res = pmse(real, synth, method="cart", nperm=5, seed=1)
    assert res.pmse == pytest.approx(0.09)
    assert res.method == "cart" and res.null_kind == "permutation" and res.nperm == 5
    assert res.s_pmse == pytest.approx(res.pmse / res.null) if res.null > 0 else np.isinf(res.s_pmse)


def test_pmse_logit_null_formula():
    """Two numeric predictors: k = 3, E₀ = (k−1)(1−c)²c/N; c = 1/3 with 100 real and 50 synthetic rows."""
    rng = np.random.default_rng(0)
    real = pd.DataFrame({"u": rng.normal(size=100), "v": rng.normal(size=100)})
    synth = pd.DataFrame({"u": rng.normal(size=50), "v": rng.normal(size=50)})
    res = pmse(real, synth, method="logit")
    c, N = 50 / 150, 150
    assert res.k == 3
    assert res.null == pytest.approx(2 * (1 - c) ** 2 * c / N)
    assert res.null_sd == pytest.approx(np.sqrt(4) * (1 - c) ** 2 * c / N)
    assert res.s_pmse == pytest.approx(res.pmse / res.null)
    # aliased columns are not counted (R's glm gives them NA)
    res2 = pmse(real.assign(w=real["u"] * 2), synth.assign(w=synth["u"] * 2), method="logit")
    assert res2.k == 3 and res2.pmse == pytest.approx(res.pmse, rel=1e-6)


def test_s_pmse_halves_small_noise_large(adult_sample):
    df, schema = adult_sample
    a, b = df.iloc[:2000], df.iloc[2000:]
    noise = uniform_noise(schema, 2000)
    for method, kw in (("cart", {"nperm": 10}), ("logit", {})):
        halves = pmse(a, b, method=method, schema=schema, **kw)
        against_noise = pmse(a, noise, method=method, schema=schema, **kw)
        assert halves.s_pmse < 3, (method, halves)
        assert against_noise.s_pmse > 10, (method, against_noise)
        assert against_noise.pmse > 10 * halves.pmse


def test_pmse_result_and_bad_input(adult_sample):
    df, schema = adult_sample
    res = pmse(df.iloc[:300], df.iloc[300:600], method="cart", schema=schema, nperm=3)
    assert set(res.to_dict()) >= {"pmse", "s_pmse", "null", "method"}
    assert res["s_pmse"] == res.s_pmse
    old = pmse(df.iloc[:300], df.iloc[300:600], method="cart", schema=schema, nperm=3, synthpop_version="<1.7")
    assert old.null == pytest.approx(2 * res.null)  # synthpop < 1.7 did not halve the permutation null
    with pytest.raises(ValueError, match="method"):
        pmse(df, df, method="rf")
    with pytest.raises(ValueError, match="missing from"):
        pmse(df, df.drop(columns="age"), method="logit")


# ----------------------------------------------------------------------------- F1
def test_f1_two_classifiers(adult):
    df, schema = adult
    gt = df.dropna()
    fast = ["DecisionTree", "BernoulliNB"]
    real = f1_average(gt, gt, ["income", "sex"], fast, schema=schema, n_sample=3000, seed=1)
    assert list(real.table.columns) == ["target", "classifier", "f1", "accuracy"]
    assert len(real.table) == 4
    assert real.f1 == pytest.approx(real.table["f1"].mean())
    assert real.by_target()["income"] > 0.5  # the paper reports 0.85 (9-model mean) real-on-real
    # a synthetic table with the label flipped: classifiers learn the opposite rule
    flipped = gt.assign(income=gt["income"].map({"<=50K": ">50K", ">50K": "<=50K"}).astype(gt["income"].dtype))
    bad = f1_average(gt, flipped, ["income"], fast, schema=schema, n_sample=3000, seed=1)
    assert bad.f1 < real.by_target()["income"] - 0.3


def test_f1_hand_case_single_class_and_labels():
    """A single-class training set predicts that class: all-negative → F1 0; interval targets use
    [left, right) (age 50 is positive, 45 is not); a perfectly separating feature gives F1 1."""
    real = pd.DataFrame({"age": [20, 30, 50, 60] * 10, "x": [0, 0, 1, 1] * 10})
    synth = pd.DataFrame({"age": [20, 30, 40, 45] * 10, "x": [0, 0, 1, 1] * 10})
    res = f1_average(real, synth, {"age": (50, 100)}, ["DecisionTree"], n_sample=40, test_size=0.5, seed=0)
    assert res.f1 == 0.0 and res.table["accuracy"].iloc[0] < 1
    res2 = f1_average(real, real, {"age": (50, 100)}, ["DecisionTree"], n_sample=40, seed=0, real_test=real)
    assert res2.f1 == 1.0


def test_f1_bad_input(adult):
    df, schema = adult
    with pytest.raises(ValueError, match="no F1 targets"):
        f1_average(df, df, "national")
    with pytest.raises(ValueError, match="unknown classifier"):
        f1_average(df, df, ["income"], ["XGBoost"])


@pytest.mark.slow
def test_s_pmse_full_adult_halves(adult):
    """Full Adult, synthpop's settings: random halves give S_pMSE < 3, uniform noise > 10
    (CART with rpart defaults, cp = 1e-3/minbucket = 5 as utility.gen, and logit)."""
    df, schema = adult
    shuffled = df.sample(frac=1.0, random_state=3).reset_index(drop=True)
    half = len(df) // 2
    a, b = shuffled.iloc[:half], shuffled.iloc[half:]
    noise = uniform_noise(schema, half, seed=3)
    for method, kw in (("cart", {}), ("cart", {"cp": 1e-3, "minbucket": 5}), ("logit", {})):
        halves = pmse(a, b, method=method, schema=schema, **kw)
        against_noise = pmse(a, noise, method=method, schema=schema, **kw)
        print(method, kw, halves.to_dict(), against_noise.s_pmse)
        assert halves.s_pmse < 3 and against_noise.s_pmse > 10
