"""Python pooled tables against R's glm + mice::pool on the same datasets (dpsynth.bridge, rpy2).

Skipped, with the reason, where R, the mice package or rpy2 (>= 3.5, < 3.6 for R 4.2) is missing.
"""
import numpy as np
import pandas as pd
import pytest

import dpsynth
from dpsynth import bridge

OK, WHY = bridge.available()
pytestmark = pytest.mark.skipif(not OK, reason=f"R/mice bridge unavailable: {WHY}")

NUMERIC = ["estimate", "ubar", "b", "t", "dfcom", "df", "riv", "lambda", "fmi", "std.error", "statistic",
           "p.value", "conf.low", "conf.high", "m"]


def datasets(m=5, n=250, seed=0):
    """m datasets with a factor (with NA), a numeric covariate (with NA), a count, a two-level
    categorical outcome and a numeric outcome."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(m):
        x = rng.normal(size=n)
        g = rng.choice(["a", "b", "c"], n)
        d = pd.DataFrame({
            "x": x, "g": pd.Categorical(g, categories=["a", "b", "c"]),
            "y": 1 + 2 * x + (g == "b") + rng.normal(size=n),
            "cnt": rng.poisson(np.exp(0.2 + 0.3 * x)),
            "income": pd.Categorical(np.where(rng.random(n) < 1 / (1 + np.exp(-x)), ">50K", "<=50K"),
                                     categories=["<=50K", ">50K"]),
        })
        d.loc[rng.random(n) < 0.05, "x"] = np.nan
        d.loc[rng.random(n) < 0.05, "g"] = np.nan
        out.append(d)
    return out


def test_pool_scalar_rows_equal_mice():
    Q, U = [1.0, 1.2, 0.9, 1.1, 1.05], [0.04, 0.05, 0.045, 0.05, 0.048]
    for rule in ("mi", "reiter2003"):
        ref = bridge.pool_scalar(Q, U, n=100, k=2, rule=rule)
        row = dpsynth.pool(Q, U, rule=rule, dfcom=98).iloc[0]
        assert row["t"] == pytest.approx(ref["t"], abs=1e-6)
        assert row["df"] == pytest.approx(ref["df"], abs=1e-6)
        assert row["riv"] == pytest.approx(ref["r"], abs=1e-6)
        assert (np.isnan(row["fmi"]) and np.isnan(ref["fmi"])) or row["fmi"] == pytest.approx(ref["fmi"], abs=1e-6)


@pytest.mark.parametrize("family, formula", [("gaussian", "y ~ x + g"), ("binomial", "income ~ x + g"),
                                             ("poisson", "cnt ~ x")])
@pytest.mark.parametrize("rule", ["mi", "reiter2003"])
def test_python_and_r_pooled_tables_agree(family, formula, rule):
    frames = datasets()
    r_tab = bridge.mice_pool(frames, formula, family, rule)
    py_tab = dpsynth.fit_pooled(frames, formula, family, rule).to_frame()
    assert sorted(py_tab["term"]) == sorted(r_tab["term"])
    py_tab = py_tab.set_index("term").loc[r_tab["term"]].reset_index()
    for col in NUMERIC:
        got, want = py_tab[col].to_numpy(float), r_tab[col].to_numpy(float)
        assert np.array_equal(np.isnan(got), np.isnan(want)), col
        ok = ~np.isnan(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=0, atol=1e-6, err_msg=col)


@pytest.mark.parametrize("family, formula", [("gaussian", "y ~ x + g"), ("binomial", "income ~ x + g")])
def test_wald_d1_equals_mice_D1(family, formula):
    frames = datasets(seed=3)
    ref = bridge.mice_D1(frames, formula, family)  # tests every non-intercept coefficient = 0
    res = dpsynth.fit_pooled(frames, formula, family, rule="mi")
    got = res.wald_test([t for t in res.terms if t != "Intercept"])
    for key in ("statistic", "df1", "df2", "p.value", "riv"):
        assert got[key] == pytest.approx(ref[key], abs=1e-6, rel=1e-8), key


def test_r_data_frame_keeps_missing_values_in_every_type():
    import rpy2.robjects as ro
    df = pd.DataFrame({
        "f": pd.Categorical(["a", None, "b"], categories=["a", "b", "unused"], ordered=True),
        "i": pd.array([1, None, 3], dtype="Int64"),
        "l": pd.array([True, None, False], dtype="boolean"),
        "d": [0.5, np.nan, 2.0],
        "s": ["x", None, "z"],
    })
    before = df.copy()
    rdf = bridge.r_data_frame(df)
    describe = ro.r("""function(d) list(na = sapply(d, function(v) sum(is.na(v))),
                                        cls = sapply(d, function(v) class(v)[1]),
                                        lev = levels(d$f), ordered = is.ordered(d$f),
                                        vals = c(d$i[3], as.numeric(d$l[1]), d$d[3]))""")
    out = describe(rdf)
    assert list(out.rx2("na")) == [1, 1, 1, 1, 1]
    assert list(out.rx2("cls")) == ["ordered", "integer", "logical", "numeric", "character"]
    assert list(out.rx2("lev")) == ["a", "b", "unused"] and out.rx2("ordered")[0]
    assert list(out.rx2("vals")) == [3.0, 1.0, 2.0]
    pd.testing.assert_frame_equal(df, before)


def test_patsy_term_names():
    assert bridge.patsy_term("(Intercept)") == "Intercept"
    assert bridge.patsy_term("gb", ["g"]) == "g[T.b]"
    assert bridge.patsy_term("x:gb", ["g"]) == "x:g[T.b]"
    with pytest.raises(ValueError, match="rules"):
        bridge.mice_pool(datasets(m=2), "y ~ x", rule="synthetic")
