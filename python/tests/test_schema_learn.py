"""Schema.from_dataframe: declared metadata, or domains paid for under DP (privacy/domains.py)."""
import math

import numpy as np
import pandas as pd
import pytest

import dpsynth
from dpsynth.privacy import NoiseSource, PrivacyLedger, distance, record_noise_inputs
from dpsynth.privacy.domains import (default_candidates, private_categories, quantile_scores, threshold_for,
                                     value_counts)
from dpsynth.schema import Schema


@pytest.fixture
def frame():
    rng = np.random.default_rng(3)
    n = 400
    return pd.DataFrame({
        "sex": pd.Categorical(rng.choice(["F", "M"], n), categories=["F", "M", "X"]),
        "age": rng.integers(18, 90, n),
        "income": np.where(rng.random(n) < 0.1, np.nan, rng.gamma(2.0, 20000.0, n)),
        "city": rng.choice(["north", "south", "east"], n).astype(object),
        "smoker": rng.random(n) < 0.3,
    })


def test_declared_metadata_gives_the_schema_and_records_its_source(frame):
    before = frame.copy()
    s = Schema.from_dataframe(frame, bounds={"age": (0, 120), "income": (0, 1e6)},
                              levels={"city": ["north", "south", "east", "west"]}, bins={"age": 12})
    pd.testing.assert_frame_equal(frame, before)  # caller data never modified
    assert s["sex"].categories == ("F", "M", "X")  # unused declared level kept
    assert "declared public" in s["sex"].source
    assert (s["age"].lower, s["age"].upper, s["age"].integer, s["age"].bins) == (0, 120, True, 12)
    assert s["income"].bins == dpsynth.schema.DEFAULT_BINS and not s["income"].integer
    assert s["city"].categories == ("north", "south", "east", "west")
    assert s["smoker"].categories == (False, True)
    assert s.privacy is None and not s.data_derived
    gen = dpsynth.IndependentMarginals(1.0).fit(frame, s, seed=0)
    assert gen.ledger.total_epsilon() == pytest.approx(1.0)


def test_missing_bounds_name_every_column_and_the_fix(frame):
    with pytest.raises(ValueError) as err:
        Schema.from_dataframe(frame)
    msg = str(err.value)
    for name in ("age", "income", "city"):
        assert name in msg
    assert "bounds={'age': (lo, hi), 'income': (lo, hi)}" in msg and "epsilon=" in msg
    with pytest.raises(ValueError, match="not in the data"):
        Schema.from_dataframe(frame, bounds={"agee": (0, 1)})
    with pytest.raises(ValueError, match="two numbers"):
        Schema.from_dataframe(frame, bounds={"age": 5})
    with pytest.raises(ValueError, match="not numeric"):
        Schema.from_dataframe(frame, bounds={"sex": (0, 1)}, epsilon=1, delta=1e-6)
    with pytest.raises(TypeError, match="dict keyed by column name"):
        Schema.from_dataframe(frame, bounds=[(0, 1)])
    with pytest.raises(ValueError, match="needs delta"):
        Schema.from_dataframe(frame, epsilon=1.0)
    with pytest.raises(ValueError, match="epsilon must be a finite number > 0"):
        Schema.from_dataframe(frame, epsilon=-1.0, delta=1e-6)


def test_learned_domains_are_charged_to_the_release(frame):
    before = frame.copy()
    s = Schema.from_dataframe(frame, bounds={"income": (0, 1e6)}, epsilon=2.0, delta=1e-6, seed=4)
    pd.testing.assert_frame_equal(frame, before)
    assert s.privacy["epsilon"] == pytest.approx(2.0) and s.privacy["delta"] == pytest.approx(1e-6)
    assert len(s.privacy["spends"]) == 3  # two quantiles for age, one histogram for city
    assert s["age"].lower < 30 and 80 < s["age"].upper <= 150 and s["age"].source.startswith("learned")
    assert set(s["city"].categories) == {"north", "south", "east"}
    again = Schema.from_dict(s.to_dict())  # the record survives JSON / R lists
    assert again.privacy == s.privacy
    res = dpsynth.synthesize(frame, s, "privbayes", epsilon=1.0, m=2, seed=1)
    led = res.ledger.to_frame()
    schema_rows = led[led["step"].str.startswith("schema: ")]
    assert len(schema_rows) == 3 and set(schema_rows["relation"]) == {"replace-one"}
    assert res.ledger.total_epsilon() == pytest.approx(3.0)
    assert res.ledger.total_delta() == pytest.approx(1e-6)
    # an add-remove generator records the same spends under add-remove, with that relation's sensitivity
    res2 = dpsynth.synthesize(frame, s, "independent", epsilon=1.0, m=1, seed=1)
    led2 = res2.ledger.to_frame()
    rows2 = led2[led2["step"].str.startswith("schema: ")]
    assert set(rows2["relation"]) == {"add-remove"}
    assert (rows2["sensitivity"].to_numpy() < schema_rows["sensitivity"].to_numpy()).all()
    assert res2.ledger.total_epsilon() == pytest.approx(3.0)


def test_quantile_scores_of_neighbours_differ_by_at_most_the_declared_sensitivity():
    rng = np.random.default_rng(0)
    cands = default_candidates()
    for alpha in (0.01, 0.5, 0.99):
        for trial in range(20):
            d = rng.normal(50, 30, rng.integers(1, 60))
            added = np.append(d, rng.normal(50, 300))          # add-remove neighbour
            replaced = d.copy()
            replaced[rng.integers(len(d))] = rng.normal(0, 1e4)  # replace-one neighbour
            q, sens = quantile_scores(d, cands, alpha)
            assert distance(q, quantile_scores(added, cands, alpha)[0], "Linf") <= sens["add-remove"]
            assert distance(q, quantile_scores(replaced, cands, alpha)[0], "Linf") <= sens["replace-one"]


def test_recorded_noise_inputs_of_neighbours_stay_within_sensitivity(frame):
    """Grey-box: run the whole learning on D and on D' (one row replaced, one row added); every value
    handed to the noise differs by at most its declared sensitivity."""
    other = frame.copy()
    other.loc[0, ["age", "city"]] = [200, "lonely-town"]  # a unique category in D' only
    plus = pd.concat([frame, other.iloc[[0]]], ignore_index=True)
    kw = dict(bounds={"income": (0, 1e6)}, epsilon=0.5, delta=1e-6, seed=9)
    with record_noise_inputs() as base:
        Schema.from_dataframe(frame, **kw)
    for neighbour in (other, plus):
        with record_noise_inputs() as rec:
            Schema.from_dataframe(neighbour, **kw)
        assert rec.steps() == base.steps()
        for a, b in zip(base.calls, rec.calls):
            if a.mechanism == "thresholded Laplace histogram":
                continue  # compared over the union of keys below
            assert distance(a.value, b.value, a.norm) <= a.sensitivity + 1e-9
    # the histogram's exact counts, over the union of the values seen in D and D'
    for neighbour, bound in ((other, 2), (plus, 1)):
        c1, c2 = value_counts(frame["city"]), value_counts(neighbour["city"])
        keys = set(c1) | set(c2)
        assert sum(abs(c1.get(k, 0) - c2.get(k, 0)) for k in keys) <= bound


def test_thresholded_histogram_does_not_release_a_rare_category():
    values = pd.Series(["a"] * 500 + ["b"] * 300 + ["unique"], dtype=object)
    led = PrivacyLedger(1.0, 1e-6)
    seen = set()
    for seed in range(30):
        led = PrivacyLedger(1.0, 1e-6)
        seen |= set(private_categories(values, epsilon=1.0, delta=1e-6, ledger=led, source=NoiseSource(seed),
                                       step="categories"))
    assert seen == {"a", "b"}
    row = led.to_frame().iloc[0]
    assert row["epsilon"] == 1.0 and row["delta"] == 1e-6 and row["relation"] == "replace-one"
    # the threshold is the smallest at which OpenDP's map meets delta
    scale = 2.0
    t = threshold_for(scale, 1e-6)
    assert t > 1 + scale * math.log(1 / 1e-6) / 2


def test_unseeded_learning_uses_opendp(frame):
    s = Schema.from_dataframe(frame[["age", "city"]], epsilon=2.0, delta=1e-6)
    assert s["age"].lower < s["age"].upper and set(s["city"].categories) <= {"north", "south", "east"}


def test_a_missing_data_wrapper_charges_the_schema_once(frame):
    from dpsynth.missing.strategies import CompleteRows

    s = Schema.from_dataframe(frame[["age", "sex"]], epsilon=1.0, seed=1)
    gen = CompleteRows(1.0, generator="independent").fit(frame[["age", "sex"]], s, seed=2)
    steps = gen.ledger.to_frame()["step"]
    assert steps.str.startswith("schema: ").sum() == 2  # the two quantiles, not twice over
    assert gen.ledger.total_epsilon() == pytest.approx(2.0)
