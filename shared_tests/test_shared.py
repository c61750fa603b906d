"""Run the language-neutral cases in shared_tests/cases with the Python engine (testthat runs the
same files through the R package)."""
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dpsynth
from dpsynth import privacy

CASES = []
for f in sorted((Path(__file__).parent / "cases").glob("*.json")):
    spec = json.loads(f.read_text())
    for case in spec["cases"]:
        CASES.append(pytest.param(spec["kind"], case, id=f"{f.stem}:{case['name']}"))


def frame(data):
    return pd.DataFrame({k: pd.Series(v, dtype=object) for k, v in data.items()})


def run_case(kind, case):
    inp, exp, tol = case["input"], case["expected"], case.get("tol", 1e-6)
    if kind == "gaussian_sigma":
        got = privacy.gaussian_sigma(inp["epsilon"], inp["delta"], inp["sensitivity"])
        assert got == pytest.approx(exp["sigma"], abs=tol)
    elif kind == "cdp_rho":
        assert privacy.cdp_rho(inp["epsilon"], inp["delta"]) == pytest.approx(exp["rho"], abs=tol)
    elif kind == "cdp_eps":
        assert privacy.cdp_eps(inp["rho"], inp["delta"]) == pytest.approx(exp["epsilon"], abs=tol)
    elif kind == "schema_error":
        err = {"ValueError": ValueError, "TypeError": TypeError}[exp["error"]]
        with pytest.raises(err) as info:
            dpsynth.Schema.from_dict(inp["schema"]).validate(frame(inp["data"]))
        assert type(info.value).__name__ == exp["error"]
        assert re.search(exp["match"], str(info.value))
    elif kind == "roundtrip":
        schema = dpsynth.Schema.from_dict(inp["schema"])
        df = frame(inp["data"])
        codes = schema.encode(df)
        assert codes.tolist() == exp["codes"]
        back = schema.decode(codes, np.random.default_rng(0))
        for name, col in schema.columns.items():
            orig = df[name]
            assert back[name].isna().tolist() == orig.isna().tolist()
            if col.is_categorical:
                assert list(back[name].cat.categories) == list(col.categories)
                obs = orig.notna()
                assert [str(v) for v in back[name][obs]] == [str(v) for v in orig[obs]]
            else:
                # de-binned values fall in the same bin as the originals
                assert schema.encode(back)[:, list(schema.columns).index(name)].tolist() == codes[:, list(
                    schema.columns).index(name)].tolist()
    elif kind == "pool":
        run_pool_case(inp, exp, case, tol)
    elif kind == "congeniality":
        from dpsynth.analyses import congeniality_messages
        got = congeniality_messages(inp["formula"], inp["columns"], inp["queries"])
        assert len(got) == len(exp["missing"]), got
        for message, start in zip(got, exp["missing"]):
            assert message.startswith(start), (message, start)
    elif kind == "schema_from_data":
        run_schema_from_data_case(inp, exp)
    else:
        pytest.skip(f"kind {kind!r} has no Python runner yet")


def typed_frame(data, types):
    """The case's data with the dtypes an R user's data.frame would bring (see run_shared_tests.R)."""
    cols = {}
    for name, values in data.items():
        kind = types[name]["type"]
        if kind == "factor":
            cols[name] = pd.Categorical(values, categories=types[name]["levels"])
        elif kind == "integer":
            cols[name] = pd.array(values, dtype="Int64")
        elif kind == "double":
            cols[name] = pd.array([np.nan if v is None else v for v in values], dtype="float64")
        elif kind == "logical":
            cols[name] = pd.array(values, dtype="boolean")
        else:
            cols[name] = pd.Series(values, dtype=object)
    return pd.DataFrame(cols)


def run_schema_from_data_case(inp, exp):
    df = typed_frame(inp["data"], inp["types"])
    kwds = {k: inp[k] for k in ("bounds", "levels", "bins", "epsilon", "delta", "seed") if k in inp}
    if "error" in exp:
        with pytest.raises({"ValueError": ValueError, "TypeError": TypeError}[exp["error"]]) as info:
            dpsynth.Schema.from_dataframe(df, **kwds)
        for name in exp["names"]:
            assert name in str(info.value)
        assert re.search(exp["match"], str(info.value))
        return
    got = dpsynth.Schema.from_dataframe(df, **kwds).to_dict()
    for name, want in exp["columns"].items():
        col = {k: v for k, v in got["columns"][name].items() if k != "source"}
        assert col == want, (name, col)
    if "privacy" in exp:
        assert got["privacy"]["epsilon"] == pytest.approx(exp["privacy"]["epsilon"])
        assert got["privacy"]["delta"] == pytest.approx(exp["privacy"]["delta"])
        assert len(got["privacy"]["spends"]) == exp["privacy"]["spends"]
    else:
        assert "privacy" not in got


def run_pool_case(inp, exp, case, tol):
    """dpsynth.pool (and, with a "wald" entry, dpsynth.inference.wald_test) against the expected
    table; JSON null = NaN (e.g. lambda and fmi of the synthetic-data rules)."""
    from dpsynth.inference import wald_test
    args = {k: inp.get(k) for k in ("dfcom", "n_syn", "n_orig")}
    tab = dpsynth.pool(inp["estimates"], inp["variances"], rule=inp["rule"], terms=inp.get("terms"), **args)
    for col, want in exp.items():
        got = tab[col].tolist()
        assert len(got) == len(want), col
        for g, w in zip(got, want):
            if w is None:
                assert np.isnan(g), f"{col}: expected NaN, got {g}"
            elif isinstance(w, (bool, str)):
                assert g == w, col
            else:
                assert g == pytest.approx(w, abs=tol, rel=tol), col
    if "wald" in case:
        want = case["wald"]
        got = wald_test(inp["estimates"], inp["variances"], rule=inp["rule"], terms=want["terms"],
                        names=inp.get("terms"), dfcom=inp.get("dfcom"))
        for key in ("statistic", "df1", "df2", "p.value", "riv"):
            assert got[key] == pytest.approx(want[key], abs=tol, rel=tol), key


@pytest.mark.parametrize("kind,case", CASES)
def test_shared_case(kind, case):
    run_case(kind, case)
