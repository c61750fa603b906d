"""Bad input through the front door: a clear error, and the caller's frame unchanged."""
import numpy as np
import pandas as pd
import pytest

import dpsynth
from dpsynth.marginals import count_marginal


def _cases(df, schema):
    extra = df.assign(zip=1)
    dup = pd.concat([df, df[["age"]]], axis=1)
    outside = df.copy()
    outside["grp"] = outside["grp"].cat.add_categories(["zzz"])
    outside.loc[0, "grp"] = "zzz"
    strings = df.assign(age=df["age"].astype(object).where(df["age"].isna(), "old"))
    return [
        ("empty frame", df.iloc[:0], {}, ValueError, "no rows"),
        ("unknown column", extra, {}, ValueError, "not in the schema"),
        ("missing column", df.drop(columns="grp"), {}, ValueError, "missing from the data"),
        ("category outside schema", outside, {}, ValueError, "outside the schema's categories"),
        ("strings in numeric", strings, {}, TypeError, "numeric in the schema"),
        ("duplicate names", dup, {}, ValueError, "duplicate column names"),
        ("epsilon 0", df, {"epsilon": 0}, ValueError, "epsilon"),
        ("epsilon NaN", df, {"epsilon": float("nan")}, ValueError, "epsilon"),
        ("epsilon inf", df, {"epsilon": float("inf")}, ValueError, "epsilon"),
        ("delta 1", df, {"delta": 1.0}, ValueError, "delta"),
        ("m 0", df, {"m": 0}, ValueError, "m must be"),
        ("unknown method", df, {"method": "magic"}, ValueError, "unknown method"),
        ("not a frame", df.to_dict(), {}, TypeError, "DataFrame"),
        ("schema not a Schema", df, {"schema": {"age": {}}}, TypeError, "dpsynth.Schema"),
    ]


@pytest.mark.parametrize("i", range(14))
def test_bad_input_clean_error_and_input_unchanged(toy, i):
    df, schema = toy
    name, data, kw, err, match = _cases(df, schema)[i]
    snapshot = data.copy() if isinstance(data, pd.DataFrame) else dict(data)
    args = {"schema": schema, "method": "independent", "epsilon": 1.0, **kw}
    with pytest.raises(err, match=match):
        dpsynth.synthesize(data, **args)
    if isinstance(data, pd.DataFrame):
        pd.testing.assert_frame_equal(data, snapshot)


def test_domain_too_large_for_memory():
    codes = np.zeros((5, 4), dtype=np.int64)
    with pytest.raises(ValueError, match="cells"):
        count_marginal(codes, [0, 1, 2, 3], [1000, 1000, 1000, 1000])


@pytest.mark.parametrize("method,options", [
    ("independent", {}), ("privbayes-e", {}), ("privbayes", {}),
    ("complete-rows", {"generator": "independent"}), ("complete-rows", {"generator": "privbayes-e"}),
    ("impute-dp-mean", {"generator": "independent"}),
])
def test_no_error_depends_on_the_private_rows(toy, method, options):
    """Issue 16: fitting raised on a column with no observed value and, in the complete-rows strategy,
    on data without a complete row; each is a neighbour of data that fit (one cell observed), so the
    error released a private fact with ε = ∞. Both neighbours now fit, with the same noise calls."""
    from dpsynth.privacy import record_noise_inputs

    df, schema = toy
    one_seen = df.assign(age=np.nan)
    one_seen.loc[5, "age"] = 40.0  # row 5 is complete on the other columns: one complete row
    assert one_seen.notna().all(axis=1).sum() == 1
    none_seen = one_seen.assign(age=np.nan)  # the neighbour: that cell set to NA
    steps = []
    for data in (one_seen, none_seen):
        with record_noise_inputs() as rec:
            res = dpsynth.synthesize(data, schema, method, epsilon=1.0, seed=3, **options)
        steps.append(rec.steps())
        assert res.datasets[0].shape[1] == 3
    assert steps[0] == steps[1]


def test_category_error_names_no_private_value(toy):
    df, schema = toy
    outside = df.copy()
    outside["grp"] = outside["grp"].cat.add_categories(["secret-value"])
    outside.loc[0, "grp"] = "secret-value"
    with pytest.raises(ValueError, match="outside the schema's categories") as info:
        dpsynth.synthesize(outside, schema, "independent", epsilon=1.0)
    assert "secret" not in str(info.value)
