import json
import warnings

import numpy as np
import pandas as pd
import pytest

import dpsynth
from dpsynth.schema import MISSING, DataDerivedSchemaWarning, Schema


def test_load_adult_shape_and_missing(adult):
    df, schema = adult
    assert df.shape == (32561, 15)
    assert int(df.isna().sum().sum()) == 4262
    assert df.dropna().shape[0] == 30162
    assert isinstance(df["workclass"].dtype, pd.CategoricalDtype)
    assert list(df["sex"].cat.categories) == ["Female", "Male"]
    assert schema.names == list(df.columns)


@pytest.mark.parametrize("name,shape", [("bank", (45211, 17)), ("national", (15012, 19))])
def test_load_other_datasets(name, shape):
    df, schema = dpsynth.load_dataset(name)
    assert df.shape == shape
    schema.validate(df)
    codes = schema.encode(df)
    assert (codes >= 0).all()  # no missing cells in these files


def test_every_schema_bound_has_a_source():
    for name in ("adult", "bank", "national"):
        _, schema = dpsynth.load_dataset(name)
        for col in schema.columns.values():
            assert col.source, f"{name}.{col.name} has no documented source"


def test_unknown_dataset():
    with pytest.raises(ValueError, match="bundled datasets"):
        dpsynth.load_dataset("iris")


def test_encode_decode_roundtrip(toy):
    df, schema = toy
    codes = schema.encode(df)
    assert codes.shape == (len(df), 3)
    assert ((codes == MISSING) == df.isna().to_numpy()).all()
    back = schema.decode(codes, np.random.default_rng(1))
    assert (schema.encode(back) == codes).all()
    assert list(back["grp"].cat.categories) == ["a", "b", "c"]


def test_encode_clips_to_public_bounds():
    s = Schema.from_dict({"x": {"type": "numeric", "lower": 0, "upper": 10, "bins": 2}})
    assert s.encode(pd.DataFrame({"x": [-5.0, 4.9, 5.0, 50.0]}))[:, 0].tolist() == [0, 0, 1, 1]


def test_validate_does_not_modify_input(toy):
    df, schema = toy
    before = df.copy()
    schema.encode(df)
    schema.coerce(df)
    pd.testing.assert_frame_equal(df, before)


def test_duplicate_names_rejected():
    s = Schema.from_dict({"a": {"type": "numeric", "lower": 0, "upper": 1}})
    df = pd.DataFrame([[0.1, 0.2]], columns=["a", "a"])
    with pytest.raises(ValueError, match="duplicate column names"):
        s.validate(df)


def test_empty_frame_and_wrong_type():
    s = Schema.from_dict({"a": {"type": "numeric", "lower": 0, "upper": 1}})
    with pytest.raises(ValueError, match="no rows"):
        s.validate(pd.DataFrame({"a": []}))
    with pytest.raises(TypeError, match="DataFrame"):
        s.validate({"a": [1]})


def test_json_roundtrip_is_atomic_and_lossless(tmp_path, adult):
    _, schema = adult
    p = tmp_path / "s.json"
    schema.to_json(p)
    again = Schema.from_json(p)
    assert again.to_dict() == schema.to_dict()
    assert [f.name for f in tmp_path.iterdir()] == ["s.json"]  # no temporary file left


def test_from_dataframe_warns_and_marks(toy):
    df, _ = toy
    with pytest.warns(DataDerivedSchemaWarning):
        s = Schema.from_dataframe(df, read_private_domains=True)
    assert s.data_derived
    gen = dpsynth.IndependentMarginals(1.0).fit(df, s, seed=0)
    assert gen.ledger.total_epsilon() == float("inf")
    assert "NOT PRIVATE" in gen.ledger.to_frame()["step"].tolist()


def test_numeric_without_bounds_needs_declaration():
    s = Schema.from_dict({"x": {"type": "numeric"}})
    with pytest.raises(ValueError, match="no public bounds"):
        s.require_bounds()


def test_missing_is_a_public_declaration_that_round_trips():
    """``"missing": true`` declares that a column may be missing; from_dataframe takes it as an
    argument (never from the rows), to_dict/from_dict keep it, a non-bool is a TypeError."""
    df = pd.DataFrame({"sex": pd.Categorical(["F", None, "M"]), "age": [31.0, np.nan, 60.0]})
    s = Schema.from_dataframe(df, bounds={"age": (0, 120)})
    assert s.incomplete == []  # the NAs in the rows declare nothing
    s = Schema.from_dataframe(df, bounds={"age": (0, 120)}, missing=["age"])
    assert s.incomplete == ["age"] and Schema.from_dict(s.to_dict()).incomplete == ["age"]
    assert Schema.from_dataframe(df, bounds={"age": (0, 120)}, missing=True).incomplete == ["sex", "age"]
    with pytest.raises(ValueError, match="not in the data"):
        Schema.from_dataframe(df, bounds={"age": (0, 120)}, missing=["weight"])
    with pytest.raises(TypeError, match="'missing' must be true or false"):
        Schema.from_dict({"a": {"type": "categorical", "categories": [0, 1], "missing": "yes"}})
    with pytest.raises(ValueError, match="not in the schema"):
        s.declare_missing(["weight"])


def _derived_schema():
    return Schema.from_dict({
        "years": {"type": "numeric", "lower": 0, "upper": 3, "bins": 3, "missing": True},
        "level": {"type": "categorical", "categories": ["low", "high"],
                  "derived_from": {"column": "years", "map": ["low", "low", "high"]}},
        "g": {"type": "categorical", "categories": ["a", "b"]}})


def test_derived_column_declaration_round_trips_and_is_checked(tmp_path):
    s = _derived_schema()
    assert s.derived == ["level"] and s.modelled().names == ["years", "g"]
    s.to_json(tmp_path / "s.json")
    again = Schema.from_json(tmp_path / "s.json")
    assert again["level"].derived_from == "years" and again["level"].derived_map == ("low", "low", "high")
    # leaving the source out makes the column an ordinary one
    assert s.subset(["level", "g"]).derived == []
    base = {"x": {"type": "categorical", "categories": ["p", "q"]}}
    with pytest.raises(ValueError, match="not another column"):
        Schema.from_dict({**base, "y": {"type": "categorical", "categories": ["u", "v"], "derived_from": "nope"}})
    with pytest.raises(ValueError, match="same number of levels"):
        Schema.from_dict({**base, "y": {"type": "categorical", "categories": ["u", "v", "w"], "derived_from": "x"}})
    with pytest.raises(ValueError, match="not categories"):
        Schema.from_dict({**base, "y": {"type": "categorical", "categories": ["u", "v"],
                                        "derived_from": {"column": "x", "map": ["u", "z"]}}})
    with pytest.raises(ValueError, match="one category"):
        Schema.from_dict({**base, "y": {"type": "categorical", "categories": ["u", "v"],
                                        "derived_from": {"column": "x", "map": ["u"]}}})
    with pytest.raises(ValueError, match="only a categorical"):
        Schema.from_dict({**base, "y": {"type": "numeric", "lower": 0, "upper": 1, "derived_from": "x"}})


def test_derived_column_is_never_read_and_follows_its_source():
    """The derived column's private values do not reach the generator: data that differ only there
    give the same release (same seed), and every synthetic row follows the declared map."""
    s = _derived_schema()
    rng = np.random.default_rng(0)
    years = rng.uniform(0, 3, 400)
    years[:40] = np.nan
    df = pd.DataFrame({"years": years, "level": np.where(years >= 2, "high", "low"),
                       "g": rng.choice(["a", "b"], 400)})
    df.loc[np.isnan(years), "level"] = None
    other = df.copy()
    other["level"] = "not a category"  # would be refused if it were read
    before = df.copy()
    a = dpsynth.PrivBayes(1.0).fit(df, s, seed=3).sample(m=1, seed=4).datasets[0]
    b = dpsynth.PrivBayes(1.0).fit(other, s, seed=3).sample(m=1, seed=4).datasets[0]
    pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(df, before)
    assert list(a.columns) == ["years", "level", "g"] and str(a["level"].dtype) == "category"
    expect = np.where(a["years"].isna(), None, np.where(a["years"] >= 2, "high", "low"))
    assert (a["level"].astype(object).where(a["level"].notna(), None).to_numpy() == expect).all()
    with pytest.raises(ValueError, match="not in the schema"):
        dpsynth.PrivBayes(1.0).fit(df.drop(columns="level").assign(extra=1), s)
    # a derived column may be left out of the data: the synthetic data then have the data's columns
    c = dpsynth.PrivBayes(1.0).fit(df.drop(columns="level"), s, seed=3).sample(m=1, seed=4).datasets[0]
    pd.testing.assert_frame_equal(c, a.drop(columns="level"))


def test_bundled_adult_declares_education_derived(adult):
    df, schema = adult
    assert schema.derived == ["education"] and schema["education"].derived_from == "education-num"
    from dpsynth.schema.codes import encode_column
    assert (encode_column(df["education"], schema["education"])
            == encode_column(df["education-num"], schema["education-num"])).all()


def test_cast_to_schema_builds_an_integer_column_as_pandas_astype_would():
    """Integer numeric columns are built as nullable Int64 directly (not by astype): the same
    values, NAs and dtype, fractional values floored, the caller's frame untouched."""
    from dpsynth.schema import cast_to_schema

    schema = dpsynth.Schema.from_dict({"x": {"type": "numeric", "lower": -5, "upper": 90, "integer": True}})
    df = pd.DataFrame({"x": [1.0, np.nan, 89.0, -4.5, 0.0]})
    out = cast_to_schema(df, schema)["x"]
    expected = pd.Series([1.0, np.nan, 89.0, -5.0, 0.0]).astype("Int64")
    assert out.dtype == pd.Int64Dtype() and out.equals(expected)
    assert np.isnan(df["x"][1]) and df["x"][3] == -4.5
