import numpy as np
import pandas as pd
import pytest

import dpsynth
from dpsynth.generators.base import Generator
from dpsynth.schema import output_dtype


def test_synthesize_independent(adult):
    df, schema = adult
    before = df.copy()
    res = dpsynth.synthesize(df, schema, "independent", epsilon=1.0, m=2, seed=3)
    pd.testing.assert_frame_equal(df, before)
    assert res.m == 2
    for d in res.datasets:
        assert list(d.columns) == list(df.columns)
        assert [str(t) for t in d.dtypes] == [str(output_dtype(schema[c])) for c in df.columns]
        assert d.notna().all().all()
    assert res.ledger.total_epsilon() <= 1.0 + 1e-9
    again = dpsynth.synthesize(df, schema, "independent", epsilon=1.0, m=2, seed=3)
    pd.testing.assert_frame_equal(res.datasets[1], again.datasets[1])


def test_output_dtypes_come_from_the_schema_not_the_private_data(toy):
    """Issue 16: the synthetic columns copied the private dtypes (age int64 without a private NA,
    float64 with one; strings as object), so the output revealed whether any private cell was
    missing. Now every column has the schema's dtype, whatever the private data."""
    df, schema = toy
    complete = df.dropna().reset_index(drop=True)
    variants = [complete.astype({"age": "int64"}), complete.astype({"age": "int64", "sex": object}), df,
                df.astype({"grp": object})]
    seen = []
    for d in variants:
        gen = dpsynth.IndependentMarginals(1.0).fit(d, schema, seed=1)
        out = gen.sample(n=20, seed=2).datasets[0]
        seen.append(out.dtypes.astype(str).tolist())
        assert not hasattr(gen, "dtypes_")
        assert list(out["grp"].cat.categories) == ["a", "b", "c"]
    assert seen == [["category", "category", "Int64"]] * len(variants)


@pytest.mark.parametrize("kwargs,err", [
    ({"epsilon": -1}, ValueError), ({"epsilon": 0}, ValueError), ({"epsilon": float("nan")}, ValueError),
    ({"epsilon": float("inf")}, ValueError), ({"epsilon": "1"}, TypeError), ({"delta": 1.0}, ValueError),
    ({"m": 0}, ValueError), ({"method": "nope"}, ValueError),
])
def test_synthesize_rejects_bad_input_before_work(toy, kwargs, err):
    df, schema = toy
    args = {"method": "independent", "epsilon": 1.0, **kwargs}
    with pytest.raises(err):
        dpsynth.synthesize(df, schema, **args)


def test_save_load_draws_without_data(tmp_path, toy):
    df, schema = toy
    gen = dpsynth.IndependentMarginals(1.0).fit(df, schema, seed=1)
    gen.save(tmp_path / "g.npz")
    again = Generator.load(tmp_path / "g.npz")
    a, b = gen.sample(n=30, seed=4).datasets[0], again.sample(n=30, seed=4).datasets[0]
    pd.testing.assert_frame_equal(a, b)
    res = gen.sample(n=10, m=3, seed=1)
    paths = res.to_csv(tmp_path / "out")
    assert len(paths) == 4 and all(p.exists() for p in paths)


def test_sample_before_fit():
    with pytest.raises(ValueError, match="not fitted"):
        dpsynth.IndependentMarginals(1.0).sample(10)


def test_independent_neighbour(toy):
    """Grey-box neighbour test: same seed on D and D' (row removed / all-NA row added / value set
    to NA / row replaced), identical control flow, recorded values within the declared sensitivity."""
    from dpsynth.privacy import distance, record_noise_inputs

    df, schema = toy
    neighbours = {
        "remove": df.iloc[1:],
        "add all-NA": pd.concat([df, pd.DataFrame({c: [None] for c in df.columns}).astype(df.dtypes)],
                                ignore_index=True),
        "value to NA": df.assign(age=df["age"].where(df.index != 1)),
    }
    with record_noise_inputs() as rec:
        dpsynth.IndependentMarginals(1.0).fit(df, schema, seed=9)
    for name, d2 in neighbours.items():
        with record_noise_inputs() as rec2:
            dpsynth.IndependentMarginals(1.0).fit(d2, schema, seed=9)
        assert rec.steps() == rec2.steps(), name
        for c1, c2 in zip(rec.calls, rec2.calls):
            # value→NA moves one count between cells: 2 under add/remove composition of remove+add
            bound = c1.sensitivity * (2 if name == "value to NA" else 1)
            assert distance(c1.value, c2.value, c1.norm) <= bound, name


def test_cli_help_and_synthesize(tmp_path, toy):
    from dpsynth.cli import main

    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    df, schema = toy
    df.to_csv(tmp_path / "d.csv", index=False)
    schema.to_json(tmp_path / "s.json")
    rc = main(["synthesize", str(tmp_path / "d.csv"), "--schema", str(tmp_path / "s.json"), "--method",
               "independent", "--epsilon", "1", "--m", "2", "--seed", "1", "--out", str(tmp_path / "o"),
               "--quiet"])
    assert rc == 0
    assert (tmp_path / "o" / "synthetic_2.csv").exists() and (tmp_path / "o" / "generator.npz").exists()
    assert main(["synthesize", str(tmp_path / "d.csv"), "--schema", str(tmp_path / "s.json"), "--epsilon",
                 "-1", "--out", str(tmp_path / "o2"), "--method", "independent"]) == 2


def test_demo_data_and_analysis_frame():
    """The demo's data (dpsynth.datasets.demo_data, which ``dpsynth demo`` uses) and its analysis
    transform: age is a float in both layouts (bucket midpoints in NAPSU-MQ's), the input unchanged."""
    from dpsynth.datasets import DEMO_FORMULA, demo_analysis_frame, demo_data

    full, schema, opts = demo_data("privbayes-e")
    assert opts == {} and full.shape == (32561, 15) and full.isna().any().any()
    reduced, rschema, ropts = demo_data("napsu-mq")
    assert ropts == {"analyses": [DEMO_FORMULA]} and reduced.shape[1] == 10 and set(rschema.names) == set(reduced)
    for frame in (full, reduced):
        before = frame.copy()
        out = demo_analysis_frame(frame)
        pd.testing.assert_frame_equal(frame, before)
        assert out["age"].dtype == float and out["age"].notna().all()
    assert sorted(demo_analysis_frame(reduced)["age"].unique()) == sorted({float(a) for a in reduced["age"]})


def test_cli_demo_writes_both_reports(tmp_path):
    from dpsynth.cli import main

    assert main(["demo", "--method", "independent", "--m", "2", "--seed", "1", "--out", str(tmp_path), "--quiet"]) == 0
    assert (tmp_path / "report.html").exists() and (tmp_path / "holder-report.html").exists()
    assert (tmp_path / "synthetic" / "synthetic_2.csv").exists() and (tmp_path / "generator.npz").exists()


def test_cli_audit_runs():
    from dpsynth.cli import main

    assert main(["audit", "--method", "independent", "--epsilon", "1", "--runs", "20", "--seed", "3"]) == 0


def test_cli_report_from_synthesize_output(tmp_path, toy):
    from dpsynth.cli import main

    df, schema = toy
    df.to_csv(tmp_path / "d.csv", index=False)
    schema.to_json(tmp_path / "s.json")
    assert main(["synthesize", str(tmp_path / "d.csv"), "--schema", str(tmp_path / "s.json"), "--method",
                 "independent", "--epsilon", "1", "--m", "3", "--seed", "1", "--out", str(tmp_path / "o"),
                 "--quiet"]) == 0
    out = tmp_path / "r" / "report.html"
    assert main(["report", str(tmp_path / "o"), "--formula", "age ~ sex + grp", "--real", str(tmp_path / "d.csv"),
                 "--out", str(out), "--quiet"]) == 0
    assert "Releasable" in out.read_text()
    assert "NOT FOR RELEASE" in (tmp_path / "r" / "report-holder.html").read_text()
