"""The engine halves of dpsynthr's functions (dpsynth.bridge's R calls, wald_per_dataset,
compare_estimates, metrics.utility, audit_report, Schema.describe): the R package only converts
and prints, so what it shows is checked here, without R."""
import json
import warnings

import numpy as np
import pandas as pd
import pytest

import dpsynth
from dpsynth import audit, bridge
from dpsynth.analyses import UncongenialAnalysisWarning
from dpsynth.inference import compare_fit, fit_pooled, pool_fits, wald_per_dataset
from dpsynth.inference.compare import compare_estimates


def frames(m=5, n=200, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(m):
        x = rng.normal(size=n)
        g = rng.choice(["a", "b", "c"], n)
        out.append(pd.DataFrame({"x": x, "g": pd.Categorical(g, categories=["a", "b", "c"]),
                                 "y": 1 + 2 * x + (g == "b") + rng.normal(size=n)}))
    return out


def records(res):
    """What dpsynthr sends for each fit: the statsmodels fits of a PooledResult, R-style."""
    out = []
    for f in res.fits:
        coef = {t: float(f.params[t]) for t in f.params.index}
        out.append({"coef": coef, "vcov": f.cov.to_numpy().tolist(), "nobs": f.nobs, "df_resid": f.df_resid,
                    "n_missing": f.n_missing, "notes": list(f.notes)})
    return out


def test_to_r_json_keeps_lists_none_non_finite_frames_and_vectors():
    df = pd.DataFrame({"a": [1.5, np.nan], "b": pd.Categorical(["u", None]), "c": [np.inf, 1.0]})
    out = json.loads(bridge.to_r_json({"x": [1, None, float("nan")], "f": df, "v": bridge.r_vec(["p", "q"]),
                                       "n": bridge.r_vec({"a": 0.5}), "i": np.int64(3), "t": (1.0, -np.inf)}))
    assert out["x"] == [1, None, {"$num": "NaN"}]
    assert out["v"] == {"$vec": ["p", "q"]} and out["n"] == {"$vec": {"a": 0.5}}
    assert out["i"] == 3 and out["t"] == [1.0, {"$num": "-Inf"}]
    cols = {c: spec for c, spec in zip(out["f"]["$frame"]["names"], out["f"]["$frame"]["columns"])}
    assert cols["a"]["values"] == [1.5, 0.0] and cols["a"]["mask"] == [False, True]
    assert cols["b"]["codes"] == [0, -1] and cols["c"]["values"][0] == {"$num": "Inf"}


def test_call_for_r_returns_warnings_with_r_classes_words_and_data():
    def noisy():
        warnings.warn("fit_pooled: 2 dataset(s) dropped; see .dropped", dpsynth.inference.DegenerateFitWarning)
        w = UncongenialAnalysisWarning("not carried")
        w.missing = ["x-y"]
        warnings.warn(w)
        return {"ok": True}

    out = json.loads(bridge.call_for_r(noisy, r_caller="dp_lm"))
    assert out["value"] == {"ok": True}
    first, second = out["warnings"]
    assert first["class"] == "dpsynth_degenerate_fit_warning"
    assert first["message"] == "dp_lm: 2 data set(s) dropped; see $dropped"
    assert second["class"] == "dpsynth_uncongenial_warning" and second["data"] == {"missing": ["x-y"]}


def test_pool_fits_for_r_equals_fit_pooled_and_numbers_datasets_from_one():
    data = frames()
    data[1] = data[1].assign(g=data[1]["g"].where(data[1]["g"] != "c", "a"))  # level c absent from dataset 2
    with pytest.warns(dpsynth.inference.DegenerateFitWarning):
        ref = fit_pooled(data, "y ~ x + g", rule="mi")
    with pytest.warns(dpsynth.inference.DegenerateFitWarning):
        out = bridge.pool_fits_for_r(records(ref), formula="y ~ x + g", family="lm(y ~ x + g)", rule="mi")
    table = out["table"]
    assert list(table.columns[:8]) == ["term", "estimate", "std.error", "statistic", "df", "p.value", "conf.low",
                                       "conf.high"]
    want = ref.to_frame().set_index("term")
    for col in ("estimate", "std.error", "df", "conf.low", "m"):
        np.testing.assert_allclose(table.set_index("term")[col], want[col], rtol=1e-10)
    assert out["dropped"]["dataset"].tolist() == [2]
    assert np.isnan(out["qhat"][1, list(out["terms"]).index("g[T.c]")])
    assert out["uhat"][0].shape == (4, 4)
    assert "fmi" in out["display"]["columns"]


def test_pool_fits_for_r_warns_uncongenial_with_the_r_remedy():
    data = frames(m=3)
    ref = fit_pooled(data, "y ~ x + g")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = bridge.pool_fits_for_r(records(ref), formula="y ~ x + g", family="lm", columns=["x", "g", "y"],
                                     queries=[["x", "y"], ["g"]])
    w = [c for c in caught if issubclass(c.category, UncongenialAnalysisWarning)]
    assert len(w) == 1 and w[0].message.missing == list(out["congeniality"])
    assert 'analyses = list(y ~ x + g)' in str(w[0].message)
    assert any("UNCONGENIAL" in line for line in out["display"]["footer"])


def test_wald_per_dataset_equals_the_pooled_results_test():
    data = frames(m=6, seed=3)
    ref = fit_pooled(data, "y ~ x + g", rule="mi")
    pieces = ref.per_dataset()
    got = wald_per_dataset(pieces["qhat"], pieces["uhat"], pieces["terms"], rule="mi", terms="g", dfcom=ref.dfcom)
    want = ref.wald_test(["g[T.b]", "g[T.c]"])
    assert got["terms"] == "g[T.b], g[T.c]"
    for key in ("statistic", "df1", "df2", "p.value", "riv"):
        assert got[key] == pytest.approx(want[key], rel=1e-10)
    everything = wald_per_dataset(pieces["qhat"], pieces["uhat"], pieces["terms"], rule="mi")
    assert everything["df1"] == 3  # all but the intercept
    with pytest.raises(ValueError, match="must name coefficients"):
        wald_per_dataset(pieces["qhat"], pieces["uhat"], pieces["terms"], terms="nothere")


def test_pooled_display_names_the_rule_and_notes_the_fallback():
    tab = dpsynth.pool([1.0, 1.2, 0.9, 1.1, 1.05], [0.04, 0.05, 0.045, 0.05, 0.048])
    d = bridge.pooled_display(tab, "synthetic", 5, 0.9, method="napsu-mq", epsilon=1.25)
    assert d["header"][0] == "Class: dpsynth_pooled    m = 5    rule = synthetic"
    assert "Synthesis: napsu-mq, epsilon spent = 1.25 (dp_ledger())" in d["header"]
    assert d["header"][-1].endswith("90% intervals")
    assert "fmi" not in d["columns"]
    assert any(line.startswith("* t = (1 + 1/m) b - ubar") for line in d["footer"])


def test_compare_estimates_matches_compare_fit_for_ols():
    data = frames(m=4, seed=5)
    real = frames(m=1, n=300, seed=6)[0]
    pooled = fit_pooled(data, "y ~ x + g")
    ref = compare_fit(pooled, real)
    res = ref.real_fit
    got = compare_estimates(pooled.to_frame(), list(res.params.index), res.params.to_numpy(), res.bse.to_numpy(),
                            conf_level=0.95, family="gaussian", df_resid=res.df_resid)
    pd.testing.assert_frame_equal(got["table"], ref.to_frame(), check_exact=False, rtol=1e-10)
    assert got["mean_ci_overlap"] == pytest.approx(ref.mean_ci_overlap)
    normal = compare_estimates(pooled.to_frame(), ["x"], [2.0], [0.1], family="binomial", df_resid=5)
    assert normal["table"].set_index("term").loc["x", "conf.high.obs"] == pytest.approx(2 + 1.959964 * 0.1)


def test_utility_of_identical_copies_is_zero():
    df, schema = dpsynth.load_dataset("adult")
    real = df.head(400)
    out = dpsynth.metrics.utility(real, [real, real], schema, pmse=True, pmse_method="logit")
    assert out["summary"]["measure"].tolist() == ["tvd_1way", "tvd_2way", "pmse", "s_pmse"]
    np.testing.assert_allclose(out["summary"]["value"], 0.0, atol=1e-12)
    assert list(out["per_dataset"].columns) == ["measure", "syn1", "syn2"]
    assert out["notes"][-1].startswith("Computed from the real data")


def test_audit_report_and_schema_printouts():
    res = audit.distinguishing_audit("independent", epsilon=1.0, runs=6, seed=0)
    lines = audit.audit_report(res)
    assert lines[0].startswith("Distinguishing audit of 'independent' (6 runs per side")
    assert any("empirical lower bound eps_lo" in line for line in lines)
    sch = bridge.schema_from_r(json.dumps({"columns": {"g": {"type": "categorical", "categories": "a"},
                                                       "x": {"type": "numeric", "lower": 0, "upper": 9}}}))
    assert sch.describe()["domain"].tolist() == ["a", "[0, 9], 16 bins"]
    with pytest.raises(ValueError, match=r"(?s)numeric columns without bounds: x, z;.*bounds = list\(x = c\(lo, hi\)"):
        dpsynth.Schema.from_dataframe(pd.DataFrame({"x": [1.0], "z": [2]}), syntax="r")


def test_coef_plot_clips_exploded_intervals_and_aligns_the_real_fit():
    tab = pd.DataFrame({"term": ["(Intercept)", "a", "b", "c"], "estimate": [0.0, 1.0, 2.0, np.nan],
                        "conf.low": [-1, 0.5, -1e40, np.nan], "conf.high": [1, 1.5, 1e40, np.nan]})
    cmp = pd.DataFrame({"term": ["b", "a"], "estimate.obs": [2.1, 0.9], "conf.low.obs": [1.9, 0.7],
                        "conf.high.obs": [2.3, 1.1]})
    out = bridge.coef_plot(tab, cmp)
    assert list(out["terms"]) == ["a", "b"]
    assert list(out["clip_lo"]) == [False, True] and list(out["clip_hi"]) == [False, True]
    assert out["obs"]["estimate.obs"].tolist() == [0.9, 2.1]
    assert -10 < out["xlim"][0] < 0.5 and 2.3 < out["xlim"][1] < 10


def test_synthesis_notes_flag_an_unmixed_sampler():
    assert bridge.synthesis_notes({}) == []
    ok = bridge.synthesis_notes({"rhat_max_cells": 1.004, "mixed": True})
    assert "did NOT mix" not in ok[0]
    assert "did NOT mix" in bridge.synthesis_notes({"rhat_max_cells": 1.004, "mixed": False})[0]
    assert bridge.synthesis_notes(None, "MAR", {"a": 0.25})[0] == (
        "Missing values filled in; assumption: MAR. Released share missing: a 25.0%.")


def test_every_engine_name_dpsynthr_calls_exists():
    """dpsynthr calls the engine by name (dp_bridge()$f, reticulate::import("dpsynth.x")$f, dp_py()$f):
    every such name in rpkg/R and the report template must exist where R looks for it."""
    import importlib
    import re
    from pathlib import Path

    rpkg = Path(__file__).resolve().parents[2] / "rpkg"
    text = "\n".join(p.read_text() for p in [*rpkg.glob("R/*.R"), rpkg / "inst" / "report" / "analyst.Rmd"])
    calls = {("dpsynth.bridge", f) for f in re.findall(r"dp_bridge\(\)\$(\w+)", text)}
    calls |= {("dpsynth", f) for f in re.findall(r"dp_py\(\)\$(\w+)", text)}
    calls |= set(re.findall(r'import\("(dpsynth[\w.]*)"[^)]*\)\$(\w+)', text))
    for var, mod in re.findall(r'(\w+) <- reticulate::import\("(dpsynth[\w.]*)"', text):
        calls |= {(mod, f) for f in re.findall(rf"\b{var}\$(\w+)", text)}
    assert {("dpsynth.bridge", "pool_fits_for_r"), ("dpsynth.audit", "audit_report")} <= calls
    missing = [f"{m}.{f}" for m, f in sorted(calls) if not hasattr(importlib.import_module(m), f)]
    assert not missing, missing
