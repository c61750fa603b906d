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
    all_na = df.assign(age=np.nan)
    return [
        ("empty frame", df.iloc[:0], {}, ValueError, "no rows"),
        ("unknown column", extra, {}, ValueError, "not in the schema"),
        ("missing column", df.drop(columns="grp"), {}, ValueError, "missing from the data"),
        ("category outside schema", outside, {}, ValueError, "outside the schema's categories"),
        ("strings in numeric", strings, {}, TypeError, "numeric in the schema"),
        ("duplicate names", dup, {}, ValueError, "duplicate column names"),
        ("all-NA column", all_na, {}, ValueError, "no observed value"),
        ("epsilon 0", df, {"epsilon": 0}, ValueError, "epsilon"),
        ("epsilon NaN", df, {"epsilon": float("nan")}, ValueError, "epsilon"),
        ("epsilon inf", df, {"epsilon": float("inf")}, ValueError, "epsilon"),
        ("delta 1", df, {"delta": 1.0}, ValueError, "delta"),
        ("m 0", df, {"m": 0}, ValueError, "m must be"),
        ("unknown method", df, {"method": "magic"}, ValueError, "unknown method"),
        ("not a frame", df.to_dict(), {}, TypeError, "DataFrame"),
        ("schema not a Schema", df, {"schema": {"age": {}}}, TypeError, "dpsynth.Schema"),
    ]


@pytest.mark.parametrize("i", range(15))
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
