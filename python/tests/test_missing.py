"""Missingness simulators (ampute) and the vanilla strategies (CompleteRows, ImputeFirst)."""
import numpy as np
import pandas as pd
import pytest

import dpsynth
from dpsynth.missing import PRESETS, CompleteRows, ImputeFirst, ampute
from dpsynth.schema import cast_to_schema
from dpsynth.privacy import distance, record_noise_inputs


@pytest.fixture(scope="module")
def truth(adult):
    """The paper's ground truth: Adult's complete rows."""
    df, schema = adult
    return df.dropna().reset_index(drop=True), schema


# ----------------------------------------------------------------------------- ampute
def test_mcar_rate_and_no_mutation(truth):
    gt, schema = truth
    before = gt.copy()
    out = ampute(gt, "MCAR", p=0.2, seed=1, schema=schema)
    pd.testing.assert_frame_equal(gt, before)  # the input is never changed
    assert out is not gt and list(out.columns) == list(gt.columns) and out.index.equals(gt.index)
    rate = out.isna().to_numpy().mean()
    assert abs(rate - 0.20) <= 0.01
    per_col = out.isna().mean()
    assert per_col.between(0.18, 0.22).all()
    # observed cells are unchanged
    seen = out.notna()
    for c in gt.columns:
        assert (out.loc[seen[c], c].astype(object) == gt.loc[seen[c], c].astype(object)).all()


def test_mar_keeps_half_the_columns_observed(truth):
    gt, schema = truth
    before = gt.copy()
    out = ampute(gt, "MAR", p=0.2, seed=2, schema=schema)
    pd.testing.assert_frame_equal(gt, before)
    rates = out.isna().mean()
    observed = rates[rates == 0]
    masked = rates[rates > 0]
    assert len(observed) >= 7  # ⌊0.5·15⌋ = 7 always-observed columns
    assert len(masked) == 15 - 7
    assert np.allclose(masked, 0.2, atol=0.015)  # intercepts by bisection: each masked column ≈ p
    # MAR: missingness depends on the observed columns, so it is not MCAR on them
    miss_any = out[masked.index].isna().any(axis=1)
    shifts = [abs(gt.loc[miss_any, c].astype("category").cat.codes.mean()
                  - gt.loc[~miss_any, c].astype("category").cat.codes.mean()) for c in observed.index
              if gt[c].dtype.name == "category"]
    assert max(shifts) > 0.05


def test_mnar_logistic_rate_and_dependence_on_own_value(truth):
    gt, schema = truth
    out, mask = ampute(gt, "MNAR", p=0.2, seed=3, schema=schema, return_mask=True)
    assert mask.shape == gt.shape
    assert np.allclose(out.isna().mean(), 0.2, atol=0.015)  # inputs MCAR at p, others logistic at p
    assert abs(out.isna().to_numpy().mean() - 0.2) <= 0.01


def test_mnarq_censors_tails(truth):
    gt, schema = truth
    out = ampute(gt, "MNARQ", p=0.2, seed=4, schema=schema)
    rates = out.isna().mean()
    masked = rates[rates > 0]
    assert 1 <= len(masked) <= int(0.5 * 15)
    assert (masked <= 0.2 + 0.015).all()
    # on a numeric masked column, missing cells sit in the tails: none strictly between the quantiles
    for c in masked.index:
        if schema[c].is_categorical:
            continue
        x = gt[c].astype(float).to_numpy()
        lo, hi = np.sort(x)[int(0.2 * len(x)) - 1], np.sort(x)[int(0.8 * len(x)) - 1]
        gone = out[c].isna().to_numpy()
        assert not np.any(gone & (x > lo) & (x < hi))


def test_quantile_mask_hand_case():
    """10 distinct values, q = 0.2: the 2nd smallest (2) and the 8th smallest (8) are the cuts;
    with p close to 1 exactly the tail cells {1, 2, 8, 9, 10} go missing."""
    df = pd.DataFrame({"x": np.arange(1.0, 11.0), "y": np.arange(1.0, 11.0)})
    out, mask = ampute(df, "MNARQ", p=0.999999, seed=0, p_params=0.5, return_mask=True)
    col = int(np.flatnonzero(mask.any(axis=0))[0])
    assert sorted(df.iloc[mask[:, col], col]) == [1.0, 2.0, 8.0, 9.0, 10.0]


def test_mcar_hand_case_small_frame():
    df = pd.DataFrame({"a": pd.Categorical(["u", "v"] * 50), "b": np.arange(100)})
    out = ampute(df, "MCAR", p=0.5, seed=7)
    mask = out.isna().to_numpy()
    expected = np.random.default_rng(7).random((100, 2)) < 0.5  # MCAR is one uniform draw per cell
    assert (mask == expected).all()
    assert out["b"].dtype == "Int64" and out["a"].dtype == df["a"].dtype


def test_ampute_seeded_and_existing_na_kept(toy):
    df, schema = toy
    a = ampute(df, "MAR", p=0.3, seed=5, schema=schema)
    b = ampute(df, "MAR", p=0.3, seed=5, schema=schema)
    pd.testing.assert_frame_equal(a, b)
    assert (a.isna().to_numpy() >= df.isna().to_numpy()).all()  # old holes stay holes


@pytest.mark.parametrize("kwargs,err", [
    ({"mechanism": "MNARX"}, ValueError), ({"p": 1.2}, ValueError), ({"p": "0.2"}, ValueError),
    ({"mechanism": "MAR", "q": 0.1}, ValueError), ({"mechanism": "MNARQ", "q": 0.7}, ValueError),
])
def test_ampute_rejects_bad_input(toy, kwargs, err):
    df, _ = toy
    before = df.copy()
    args = {"mechanism": "MCAR", "p": 0.2, **kwargs}
    with pytest.raises(err):
        ampute(df, **args)
    pd.testing.assert_frame_equal(df, before)


def test_presets_are_muzellec():
    assert PRESETS["MAR"] == {"p_obs": 0.5}
    assert PRESETS["MNAR"] == {"p_params": 0.3, "exclude_inputs": True}
    assert PRESETS["MNARQ"] == {"q": 0.2, "cut": "both", "p_params": 0.5}


# ----------------------------------------------------------------------------- strategies
def test_complete_rows_uses_complete_rows_only(toy):
    df, schema = toy
    gen = CompleteRows(1.0, generator="independent").fit(df, schema, seed=1)
    res = gen.sample(seed=2)
    n_complete = len(df.dropna())
    assert abs(gen.default_n() - n_complete) < 20  # released n ≈ complete rows, not all rows
    assert res.datasets[0].notna().all().all()
    assert gen.generator_.ledger is gen.ledger and gen.ledger.total_epsilon() <= 1.0 + 1e-9
    assert res.method == "complete-rows:independent"


def test_impute_random_spends_nothing_and_completes(toy):
    df, schema = toy
    before = df.copy()
    gen = ImputeFirst(1.0, generator="independent", imputation="random").fit(df, schema, seed=1)
    pd.testing.assert_frame_equal(df, before)
    steps = gen.ledger.to_frame()["step"].tolist()
    assert not any(s.startswith("impute") for s in steps)
    assert abs(gen.ledger.total_epsilon() - 1.0) < 1e-9
    out = gen.sample(n=500, seed=3).datasets[0]
    assert out.notna().all().all() and (out.dtypes == cast_to_schema(df, schema).dtypes).all()


def test_impute_dp_mean_charges_share_to_the_same_ledger(toy):
    df, schema = toy
    gen = ImputeFirst(2.0, generator="independent", imputation="dp-mean", impute_share=0.25).fit(df, schema, seed=1)
    led = gen.ledger.to_frame()
    imp = led[led["step"].str.startswith("impute")]
    assert np.isclose(imp["epsilon"].sum(), 0.5)  # 25 % of ε = 2
    assert np.isclose(led["epsilon"].sum(), 2.0)
    assert gen.generator_.ledger is gen.ledger
    # sensitivities: count 1, centred clipped sum (upper − lower)/2 = 50 for age in [0, 100]
    sums = imp[imp["step"].str.contains("sum")]
    assert sums["sensitivity"].tolist() == [50.0]
    assert set(imp[imp["step"].str.contains("count")]["sensitivity"]) == {1.0}
    # the DP mean is near the true mean at a large ε
    big = ImputeFirst(1000.0, imputation="dp-mean", impute_share=0.5).fit(df, schema, seed=2)
    assert abs(big.imputation_values_["age"] - df["age"].mean()) < 1.5
    assert np.allclose(big.imputation_values_["sex"], df["sex"].value_counts(normalize=True)[["F", "M"]], atol=0.02)


def test_impute_dp_mean_neighbour(toy):
    """Grey-box neighbour test of the imputation step: same seed on D and D minus a row."""
    df, schema = toy
    with record_noise_inputs() as r1:
        ImputeFirst(1.0, imputation="dp-mean").fit(df, schema, seed=4)
    with record_noise_inputs() as r2:
        ImputeFirst(1.0, imputation="dp-mean").fit(df.iloc[1:], schema, seed=4)
    assert r1.steps() == r2.steps()
    for c1, c2 in zip(r1.calls, r2.calls):
        if c1.step.startswith("impute"):
            assert distance(c1.value, c2.value, c1.norm) <= c1.sensitivity + 1e-9, c1.step


def test_strategies_via_synthesize_and_bad_input(toy):
    df, schema = toy
    res = dpsynth.synthesize(df, schema, "impute-dp-mean", epsilon=1.0, seed=1, generator="independent",
                             impute_share=0.5)
    assert res.datasets[0].notna().all().all() and res.ledger.total_epsilon() <= 1.0 + 1e-9
    with pytest.raises(ValueError, match="spends no budget"):
        ImputeFirst(1.0, imputation="random", impute_share=0.3)
    with pytest.raises(ValueError, match="imputation"):
        ImputeFirst(1.0, imputation="knn")
    with pytest.raises(TypeError, match="class or registry name"):
        CompleteRows(1.0, generator=dpsynth.IndependentMarginals(1.0))
    with pytest.raises(ValueError, match="unknown method"):
        CompleteRows(1.0, generator="nope")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["adult", "bank", "national"])
def test_rates_on_all_datasets(name):
    """Realised cell rates at p = 0.1, 0.2 against the artifact's committed masks (missing-data.md §3):
    MCAR/MNAR ≈ p, MAR ≈ p·(d − ⌊d/2⌋)/d, MNARQ below p·⌊d/2⌋/d (ties in codes)."""
    df, schema = dpsynth.load_dataset(name)
    gt = df.dropna().reset_index(drop=True)
    d = gt.shape[1]
    for p in (0.1, 0.2):
        for seed in (1, 2, 3):
            rate = {m: ampute(gt, m, p, seed=seed, schema=schema).isna().to_numpy().mean() for m in
                    ("MCAR", "MAR", "MNAR", "MNARQ")}
            print(name, p, seed, {m: round(float(r), 4) for m, r in rate.items()})
            assert abs(rate["MCAR"] - p) < 0.005 and abs(rate["MNAR"] - p) < 0.005
            assert abs(rate["MAR"] - p * (d - d // 2) / d) < 0.01
            assert 0 < rate["MNARQ"] <= p * (d // 2) / d + 0.005


# ----------------------------------------------------------------------------- issue 16: complete-row count
def _one_more_incomplete(df):
    """D': the first complete row gets a missing age (a replace-one neighbour with one complete row fewer)."""
    out = df.copy()
    first = out.index[out.notna().all(axis=1)][0]
    out.loc[first, "age"] = np.nan
    return out


def test_complete_rows_replace_one_generator_count_is_noisy_and_charged(toy):
    """Issue 16: around a replace-one generator the number of complete rows was handed on exactly (the
    generator's n and the default synthetic size: ε = ∞, not in the ledger). Now it is released with a
    declared 2 % of ε, the generator runs on exactly that many rows, and every spend is add/remove."""
    df, schema = toy
    gen = CompleteRows(1.0, generator="privbayes-e").fit(df, schema, seed=1)
    led = gen.ledger.to_frame()
    count = led[led["step"] == "number of complete rows"]
    assert len(count) == 1 and np.isclose(count["epsilon"].iloc[0], 0.02) and count["sensitivity"].iloc[0] == 1
    assert set(led["relation"]) == {"add-remove"} and gen.ledger.relation == "add-remove"
    assert np.isclose(gen.ledger.total_epsilon(), 1.0)
    assert gen.default_n() == gen.table_size_ == gen.generator_.n_  # the noisy count sizes table and output
    assert gen.sample(seed=2).datasets[0].shape[0] == gen.table_size_


def test_complete_rows_public_n_complete_does_not_follow_the_data(toy):
    df, schema = toy
    sizes = [CompleteRows(1.0, generator="privbayes", n_complete=120).fit(d, schema, seed=1).default_n()
             for d in (df, _one_more_incomplete(df))]
    assert sizes == [120, 120]
    gen = CompleteRows(1.0, generator="privbayes-e", n_complete=400).fit(df, schema, seed=1)  # padded
    assert "number of complete rows" not in set(gen.ledger.to_frame()["step"])
    assert gen.generator_.n_ == 400 and gen.sample(seed=1).datasets[0].notna().all().all()
    with pytest.raises(ValueError, match="replace-one generators"):
        CompleteRows(1.0, generator="independent", n_complete=100)
    with pytest.raises(ValueError, match="count_share"):
        CompleteRows(1.0, generator="privbayes", count_share=1.5)
    with pytest.raises(ValueError, match="not both"):
        CompleteRows(1.0, generator="privbayes", n_complete=10, count_share=0.1)


def test_complete_rows_replace_one_generator_is_neighbour_safe_under_add_remove(toy):
    """The composed release (fixed-size table, replace-one generator) passes the grey-box neighbour
    check under add/remove of the input, including a row whose missingness changes."""
    from dpsynth.audit import assert_neighbour_safe

    df, schema = toy
    make = lambda: CompleteRows(1.0, generator="privbayes-e", n_complete=250)  # noqa: E731
    row = int(np.flatnonzero(df.notna().all(axis=1).to_numpy())[0])  # a complete row: n_cc moves
    for r in (0, row):
        assert_neighbour_safe(make, df, schema, seed=3, row=r)


def test_wrapper_refuses_an_unsized_replace_one_composition(toy):
    df, schema = toy
    gen = CompleteRows(1.0, generator="privbayes", n_complete=50)
    gen._fit = lambda codes, data, source: gen._fit_inner(data, gen.epsilon, source)  # size not fixed
    with pytest.raises(RuntimeError, match="public or released size"):
        gen.fit(df, schema, seed=1)
