"""Analyses → congenial queries, and the congeniality check on the analyst's side (issue #21)."""
import dataclasses
import math
import warnings

import numpy as np
import pandas as pd
import pytest

import dpsynth
from dpsynth.analyses import (Analysis, PredictorStar, UncongenialAnalysisWarning, association, congenial_queries,
                              missing_dependencies, parse_analyses, parse_analysis, quote_columns, star_cliques)
from dpsynth.result import SynthResult

ADULT = ["age", "workclass", "race", "sex", "hours-per-week", "education-num", "income"]


# ------------------------------------------------------------------------------------------ parsing
@pytest.mark.parametrize("formula, response, predictors, interactions", [
    ("income ~ age + race + sex", "income", ("age", "race", "sex"), ()),
    ("income ~ age + C(race, Treatment('White')) + C(sex)", "income", ("age", "race", "sex"), ()),
    ("income ~ C(race, Treatment(reference='White'))", "income", ("race",), ()),
    ("np.log(age) ~ I(age ** 2) + sex", None, None, None),  # response repeated → error (below)
    ("income ~ np.log(age) + I(age**2) + sex", "income", ("age", "sex"), ()),
    ('income ~ Q("hours-per-week") + age', "income", ("hours-per-week", "age"), ()),
    ("income ~ hours-per-week + education-num", "income", ("hours-per-week", "education-num"), ()),
    ("income ~ `hours-per-week` + sex", "income", ("hours-per-week", "sex"), ()),  # R's deparse
    ("income ~ age * sex + race", "income", ("age", "sex", "race"), (("age", "sex"),)),
    ("income ~ sex:age + race", "income", ("sex", "age", "race"), (("sex", "age"),)),
    ("income ~ (age + sex + race)**2", "income", ("age", "sex", "race"),
     (("age", "sex"), ("age", "race"), ("sex", "race"))),
    ("income ~ age:sex:race - 1", "income", ("age", "sex", "race"), (("age", "sex", "race"),)),
    ("income ~ I(age * sex)", "income", ("age", "sex"), (("age", "sex"),)),
])
def test_parse_formula(formula, response, predictors, interactions):
    if response is None:
        with pytest.raises(ValueError, match="also appears on the right-hand side"):
            parse_analysis(formula, ADULT)
        return
    a = parse_analysis(formula, ADULT)
    assert (a.response, a.predictors, a.interactions) == (response, predictors, interactions)
    assert a.formula == formula


def test_parse_pair_and_list():
    a = parse_analysis(("income", ["age", "hours-per-week", "age"]), ADULT)
    assert a == Analysis("income ~ age + Q('hours-per-week')", "income", ("age", "hours-per-week"), ())
    # the built formula reads back to the same analysis
    assert parse_analysis(a.formula, ADULT).predictors == a.predictors
    assert [x.response for x in parse_analyses("income ~ age", ADULT)] == ["income"]
    assert [x.response for x in parse_analyses(("income", ["age"]), ADULT)] == ["income"]
    assert len(parse_analyses(["income ~ age", ("sex", ["race"])], ADULT)) == 2


@pytest.mark.parametrize("spec, error, match", [
    ("income ~ age + salary", ValueError, r"\['salary'\].*not columns.*available columns: \['age'"),
    (("income", ["age", "salary"]), ValueError, r"\['salary'\].*available columns"),
    ("income ~ C(race, levels=lv)", ValueError, r"\['lv'\]"),
    ("~ age", ValueError, "exactly one column"),
    ("age + sex", ValueError, "needs a response"),
    ("I(age + sex) ~ race", ValueError, "exactly one column"),
    ("income ~ .", ValueError, "not supported"),
    ("income ~ age +", ValueError, "cannot parse"),
    ("income ~ Q(age)", ValueError, "Q\\(\\) takes one quoted column name"),
    (("income", ["income", "age"]), ValueError, "also listed as a predictor"),
    (42, TypeError, "formula string"),
    (("income", [1, 2]), TypeError, "column names as strings"),
])
def test_parse_errors(spec, error, match):
    with pytest.raises(error, match=match):
        parse_analysis(spec, ADULT)


def test_parse_accepts_a_schema():
    df, schema = dpsynth.load_dataset("adult")
    a = parse_analysis("income ~ age + hours-per-week", schema)
    assert a.predictors == ("age", "hours-per-week")


def test_quote_columns_leaves_quoted_text_and_other_names_alone():
    cols = ["hours-per-week", "hours", "y"]
    assert quote_columns("y ~ hours-per-week + hours", cols) == "y ~ Q('hours-per-week') + hours"
    assert quote_columns("y ~ C(hours, Treatment('hours-per-week'))", cols) == \
        "y ~ C(hours, Treatment('hours-per-week'))"
    assert quote_columns("y ~ Q('hours-per-week')", cols) == "y ~ Q('hours-per-week')"
    assert quote_columns("y ~ `hours-per-week` + C(hours, Treatment('`x`'))", cols) == \
        "y ~ Q('hours-per-week') + C(hours, Treatment('`x`'))"


# ------------------------------------------------------------------------------------------ planning
SIZES = {"y": 2, "a": 3, "b": 4, "c": 5, "d": 2, "e": 2, "big": 400, "big2": 300}
COLS = list(SIZES)


def test_plan_two_predictors_measure_their_pair():
    plan = congenial_queries(parse_analyses("y ~ a + b", COLS), SIZES)
    assert plan.fixed == [("y", "a"), ("y", "b"), ("a", "b")] and plan.select_among == []
    assert missing_dependencies(parse_analysis("y ~ a + b", COLS), plan.fixed) == []


def test_plan_three_predictors_measure_their_joint_table_when_small():
    plan = congenial_queries(parse_analyses("y ~ a + b + c", COLS), SIZES)
    assert plan.fixed == [("y", "a"), ("y", "b"), ("y", "c"), ("a", "b", "c")] and plan.select_among == []
    assert plan.covered == {"y", "a", "b", "c"}
    # congenial: no fixed clique holds y with two predictors, and the design is measured whole
    assert not any("y" in q and len(q) > 2 for q in plan.fixed)
    assert missing_dependencies(parse_analysis("y ~ a + b + c", COLS), plan.fixed) == []


def test_plan_large_joint_leaves_predictor_pairs_to_a_private_tree():
    a = parse_analysis("y ~ a + b + c", COLS)
    plan = congenial_queries([a], SIZES, max_joint_cells=59)  # a × b × c = 60 cells
    assert plan.fixed == [("y", "a"), ("y", "b"), ("y", "c")]
    assert plan.select_among == [("a", "b"), ("a", "c"), ("b", "c")]
    assert missing_dependencies(a, plan.fixed + [("a", "b"), ("b", "c")]) == []
    assert plan.stars == [PredictorStar("y", ("a", "b", "c"))]  # a generator may build a star instead
    assert congenial_queries([a], SIZES).stars == []  # the joint fits: measured whole


def test_association_is_the_squared_correlation_for_a_binary_response():
    """η² (numeric predictor at its index) and Cramér's V² (categorical) both equal corr(y, coding)²
    when y is binary, so predictors of both kinds are ranked on one scale; noisy negatives clip."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 6, 4000)
    y = (rng.random(4000) < 0.2 + 0.1 * x).astype(int)
    table = np.zeros((2, 6))
    np.add.at(table, (y, x), 1)
    assert association(table, numeric=True) == pytest.approx(np.corrcoef(x, y)[0, 1] ** 2)
    b = (x > 2).astype(int)
    t2 = np.zeros((2, 2))
    np.add.at(t2, (y, b), 1)
    assert association(t2, numeric=False) == pytest.approx(np.corrcoef(b, y)[0, 1] ** 2)
    assert association(t2.T, numeric=False) == pytest.approx(association(t2, numeric=False))
    assert association(table - 1e6, numeric=True) == 0.0  # everything clipped: no association
    noisy = table.copy()
    noisy[0, 0] = -30.0
    assert 0.0 <= association(noisy, numeric=True) <= 1.0


def test_star_cliques_hub_is_the_strongest_predictor_then_what_fits():
    star = PredictorStar("y", ("a", "b", "c", "d", "e"))
    sizes = {"a": 16, "b": 16, "c": 16, "d": 2, "e": 5}

    def fits(cliques, limit=512):
        return all(math.prod(sizes[x] for x in c) <= limit for c in cliques)

    strength = {"a": 0.05, "b": 0.11, "c": 0.04, "d": 0.045, "e": 0.01}
    hub, cliques = star_cliques(star, strength, fits)
    assert hub == ["b", "d"]  # a and c do not fit beside b and another 16-level column; e neither
    assert cliques == [("b", "d"), ("b", "a"), ("d", "a"), ("b", "c"), ("d", "c"), ("b", "e"), ("d", "e")]
    assert star_cliques(star, {**strength, "a": 0.2}, fits)[0] == ["a", "d"]  # the hub follows the data
    assert star_cliques(star, strength, lambda c: fits(c, 256)) == (["b"], [("b", "a"), ("b", "c"), ("b", "d"),
                                                                           ("b", "e")])  # pairs: the cliques
    # the strongest cannot be a hub: no star around a weaker one (the caller keeps the tree)
    assert star_cliques(star, strength, lambda c: fits(c, 100)) == ([], [])
    assert star_cliques(star, strength, lambda c: False) == ([], [])  # nothing fits: the caller keeps the tree


def test_plan_interaction_becomes_a_triple_and_absorbs_its_pairs():
    plan = congenial_queries(parse_analyses("y ~ a*b", COLS), SIZES)
    assert plan.fixed == [("y", "a", "b")]


def test_plan_large_k_leaves_predictor_pairs_to_a_private_spanning_tree():
    a = parse_analysis("y ~ a + b + c + d + e", COLS)
    plan = congenial_queries([a], SIZES, max_joint_cells=100)  # 240 cells
    assert plan.fixed == [("y", p) for p in "abcde"]
    assert len(plan.select_among) == 10 and all("y" not in p for p in plan.select_among)


def test_plan_skips_oversized_pairs_and_says_so():
    plan = congenial_queries(parse_analyses("y ~ a + big + big2", COLS), SIZES, max_pair_cells=1500)
    assert ("big", "big2") not in plan.fixed + plan.select_among and ("a", "big") in plan.select_among
    assert ("y", "big") in plan.fixed  # response pairs are always measured
    assert plan.notes == ["big–big2: 120000 cells > max_pair_cells=1500; not measured as a pair"]
    with pytest.raises(ValueError, match="max_pair_cells"):
        congenial_queries(parse_analyses("y ~ a + b", COLS), SIZES, max_pair_cells=0)


def test_plan_several_analyses_deduplicated():
    plan = congenial_queries(parse_analyses(["y ~ a + b", "y ~ b + a", "a ~ y"], COLS), SIZES)
    assert plan.fixed == [("y", "a"), ("y", "b"), ("a", "b")]


def test_plan_errors():
    a = parse_analyses("y ~ a", COLS)
    with pytest.raises(ValueError, match=r"no size for \['a'\]"):
        congenial_queries(a, {"y": 2})
    with pytest.raises(ValueError, match="max_joint_cells"):
        congenial_queries(a, SIZES, max_joint_cells=0)
    with pytest.raises(TypeError, match="parse_analyses"):
        congenial_queries(["y ~ a"], SIZES)


# ------------------------------------------------------------------------------------------ checking
def test_missing_dependencies_names_the_missing_response_pair():
    a = parse_analysis("y ~ a + b", COLS)
    msgs = missing_dependencies(a, [("y", "a"), ("a", "b")])
    assert msgs == ["b–y: no measured table holds both; the model links them only through other columns"]
    assert missing_dependencies(a, [("y", "a"), ("y", "b"), ("a", "b")]) == []
    assert missing_dependencies(a, [("y", "a", "b")]) == []


def test_missing_dependencies_interaction_needs_its_triple():
    a = parse_analysis("y ~ a + b + a:b", COLS)
    msgs = missing_dependencies(a, [("y", "a"), ("y", "b"), ("a", "b")])
    assert len(msgs) == 1 and msgs[0].startswith("a:b on y") and "a × b" in msgs[0]
    assert missing_dependencies(a, [("y", "a", "b")]) == []


def test_missing_dependencies_predictors_linked_only_through_the_response():
    a = parse_analysis("y ~ a + b + c", COLS)
    msgs = missing_dependencies(a, [("y", "a"), ("y", "b"), ("y", "c"), ("a", "b")])
    assert len(msgs) == 1 and "naive Bayes" in msgs[0] and "a, b | c" in msgs[0]
    # a path through another column counts as a link (a spanning tree need not hold every pair)
    assert missing_dependencies(a, [("y", "a"), ("y", "b"), ("y", "c"), ("a", "e"), ("e", "b"), ("b", "c")]) == []


def test_missing_dependencies_with_one_way_tables_only():
    a = parse_analysis("y ~ a + b", COLS)
    msgs = missing_dependencies(a, [("y",), ("a",), ("b",)])
    assert [m.split(":")[0] for m in msgs] == ["a–y", "b–y", "predictors linked only through y (a | b)"]


def test_missing_dependencies_argument_checks():
    with pytest.raises(TypeError, match="Analysis"):
        missing_dependencies("y ~ a", [("y", "a")])
    with pytest.raises(TypeError, match="column tuples"):
        missing_dependencies(parse_analysis("y ~ a", COLS), "ya")


# ------------------------------------------------------------------------------------------ fit_pooled
@pytest.fixture
def frames():
    rng = np.random.default_rng(3)
    out = []
    for _ in range(4):
        x1, x2 = rng.normal(size=80), rng.normal(size=80)
        out.append(pd.DataFrame({"x1": x1, "x2": x2, "y": 1 + x1 - x2 + rng.normal(size=80)}))
    return out


def synth(frames, queries):
    return SynthResult(datasets=frames, ledger=None, method="napsu-mq", queries=queries)


def test_fit_pooled_warns_when_a_response_pair_was_not_measured(frames):
    with pytest.warns(UncongenialAnalysisWarning, match=r"x2–y: no measured table") as rec:
        res = dpsynth.fit_pooled(synth(frames, [("y", "x1"), ("x1", "x2")]), "y ~ x1 + x2")
    text = str(rec[0].message)
    assert "analyses=['y ~ x1 + x2']" in text and "x1–y" not in text
    assert res.congeniality == ["x2–y: no measured table holds both; the model links them only through other columns"]
    assert "UNCONGENIAL" in res.summary().as_text()


def test_fit_pooled_silent_when_the_queries_carry_the_model(frames):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UncongenialAnalysisWarning)
        res = dpsynth.fit_pooled(synth(frames, [("y", "x1"), ("y", "x2"), ("x1", "x2")]), "y ~ x1 + x2")
        assert res.congeniality == []
        # unknown queries (None) or plain frames: nothing to check
        assert dpsynth.fit_pooled(synth(frames, None), "y ~ x1 + x2").congeniality == []
        assert dpsynth.fit_pooled(frames, "y ~ x1 + x2", rule="mi").congeniality == []
    assert "UNCONGENIAL" not in res.summary().as_text()


def test_fit_pooled_warns_for_an_unmeasured_interaction(frames):
    with pytest.warns(UncongenialAnalysisWarning, match=r"x1:x2 on y"):
        res = dpsynth.fit_pooled(synth(frames, [("y", "x1"), ("y", "x2"), ("x1", "x2")]), "y ~ x1 * x2")
    assert len(res.congeniality) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", UncongenialAnalysisWarning)
        dpsynth.fit_pooled(synth(frames, [("y", "x1", "x2")]), "y ~ x1 * x2")


def test_fit_pooled_reads_plain_names_with_dashes(frames):
    renamed = [f.rename(columns={"x2": "x-2"}) for f in frames]
    res = dpsynth.fit_pooled(renamed, "y ~ x1 + x-2", rule="mi")
    assert res.formula == "y ~ x1 + x-2" and len(res.terms) == 3


def test_result_keeps_queries_through_replace_and_generator(toy):
    df, schema = toy
    res = dpsynth.synthesize(df, schema, "independent", epsilon=1.0, m=2, seed=1)
    assert res.queries == [("sex",), ("grp",), ("age",)] and res.analyses == []
    copy = dataclasses.replace(res, datasets=[f.copy() for f in res.datasets])
    assert copy.queries == res.queries
    with pytest.warns(UncongenialAnalysisWarning, match="sex–age"):
        dpsynth.fit_pooled(res, "age ~ sex + grp", rule="reiter2003")


def test_privbayes_releases_its_network_as_queries(toy):
    df, schema = toy
    gen = dpsynth.PrivBayes(2.0, missing="partial", k=1).fit(df, schema, seed=2)
    res = gen.sample(n=20, seed=1)
    # one released table per attribute: (parents..., attribute), as the fitted network says
    assert res.queries == [tuple(schema.names[a] for a, _ in par) + (schema.names[x],) for x, par in gen.network_]
    assert sorted(q[-1] for q in res.queries) == sorted(schema.names)


def test_top_level_warning_class():
    assert dpsynth.UncongenialAnalysisWarning is UncongenialAnalysisWarning
    assert issubclass(UncongenialAnalysisWarning, UserWarning)


# ------------------------------------------------------------------------------------------ plumbing
def test_synthesize_forwards_analyses_to_the_generator(monkeypatch, toy):
    import dpsynth.api as api

    seen = {}

    def fake_make(method, epsilon, delta, **options):
        seen.update(options)
        raise RuntimeError("stop before fitting")

    monkeypatch.setattr(api, "make_generator", fake_make)
    df, schema = toy
    with pytest.raises(RuntimeError, match="stop before fitting"):
        dpsynth.synthesize(df, schema, "napsu-mq", epsilon=1.0, delta=1e-6, analyses=["age ~ sex + grp"])
    assert seen == {"analyses": ["age ~ sex + grp"]}


def test_cli_analysis_option_is_repeatable(monkeypatch, tmp_path, toy):
    from dpsynth.cli import main

    df, schema = toy
    df.to_csv(tmp_path / "d.csv", index=False)
    schema.to_json(tmp_path / "s.json")
    seen = []

    def fake_synthesize(*args, **kwargs):
        seen.append(kwargs)
        raise ValueError("stop")

    monkeypatch.setattr(dpsynth, "synthesize", fake_synthesize)
    base = ["synthesize", str(tmp_path / "d.csv"), "--schema", str(tmp_path / "s.json"), "--epsilon", "1",
            "--out", str(tmp_path / "o"), "--quiet"]
    assert main(base + ["--analysis", "age ~ sex", "--analysis", "age ~ grp"]) == 2
    assert main(base) == 2
    assert seen[0]["analyses"] == ["age ~ sex", "age ~ grp"] and "analyses" not in seen[1]


def test_analyst_report_shows_the_warning_beside_the_table(tmp_path, frames):
    from dpsynth.privacy import PrivacyLedger
    from dpsynth.report import analyst_report

    res = SynthResult(datasets=frames, ledger=PrivacyLedger(1.0, 0.0), method="napsu-mq",
                      queries=[("y", "x1"), ("x1", "x2")])
    with pytest.warns(UncongenialAnalysisWarning):
        page = analyst_report(res, "y ~ x1 + x2", path=tmp_path / "r.html").read_text()
    box = page.index("Uncongenial analysis")
    assert page.index("Pooled estimates") < box < page.index("<table", box)
    assert "x2–y: no measured table holds both" in page
