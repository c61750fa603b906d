"""Reports: content a reader needs, atomic writes, the private/releasable split, a browser render."""
import re
import shutil
import subprocess

import pytest

import dpsynth
from dpsynth.report import analyst_report, holder_report

FORMULA = "y ~ x + g"


@pytest.fixture(scope="module")
def small():
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    n = 400
    g = rng.choice(["a", "b"], n)
    x = rng.uniform(0, 10, n)
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-(x - 5) / 2)), "yes", "no")
    df = pd.DataFrame({"x": x, "g": pd.Categorical(g, ["a", "b"]), "y": pd.Categorical(y, ["no", "yes"])})
    df.loc[::9, "g"] = None
    schema = dpsynth.Schema.from_dict({"x": {"type": "numeric", "lower": 0, "upper": 10, "bins": 8},
                                       "g": {"type": "categorical", "categories": ["a", "b"], "missing": True},
                                       "y": {"type": "categorical", "categories": ["no", "yes"]}})
    res = dpsynth.synthesize(df, schema, "independent", epsilon=2.0, m=4, seed=2)
    return df, schema, res


def test_analyst_report_content(tmp_path, small):
    _, _, res = small
    p = analyst_report(res, FORMULA, family="binomial", path=tmp_path / "report.html")
    text = p.read_text()
    assert len(re.findall(r"<img ", text)) >= 2
    assert "fmi" in text and "conf.low" in text and "synthetic" in text
    assert "ε = 2" in text or "ε = 1.99" in text or "ε = 2.0" in text
    assert "Releasable" in text and "NOT FOR RELEASE" not in text
    assert [f.name for f in tmp_path.iterdir()] == ["report.html"]  # written atomically, no temp left


def test_analyst_report_shows_posterior_diagnostics(tmp_path, small):
    """A noise-aware generator's R̂ / ESS reach the analyst (they are post-processing of released
    values); slow mixing is spelled out; a generator without diagnostics gets no such section."""
    df, schema, res = small
    assert res.diagnostics == {}
    text = analyst_report(res, FORMULA, family="binomial", path=tmp_path / "a.html").read_text()
    assert "Posterior diagnostics" not in text
    napsu = dpsynth.synthesize(df, schema, "napsu-mq", epsilon=2.0, delta=1e-6, m=4, seed=2,
                               queries=[("x", "y"), ("g", "y")])
    diag = napsu.diagnostics
    assert diag["inference"] == "hmc" and 1.0 <= diag["rhat_max_cells"] < 10 and diag["ess_bulk_min_cells"] > 0
    text = analyst_report(napsu, "y ~ g", family="binomial", path=tmp_path / "b.html").read_text()
    assert "Posterior diagnostics" in text and "rhat_max_cells" in text
    napsu.generator.diagnostics_.update(rhat_max_cells=3.5, mixed=False)
    text = analyst_report(napsu, "y ~ g", family="binomial", path=tmp_path / "c.html").read_text()
    assert "did not mix" in text and "3.500" in text and "No claim of validity" in text
    napsu.generator.diagnostics_.update(rhat_max_cells=1.0102)  # just over the target: not shown as "1.010"
    text = analyst_report(napsu, "y ~ g", family="binomial", path=tmp_path / "d.html").read_text()
    assert "did not mix" in text and "probabilities 1.0102, target ≤ 1.01" in text
    napsu.generator.diagnostics_.update(rhat_max_cells=1.004, pareto_k=0.93)  # R̂ met, the weights' tail not
    text = analyst_report(napsu, "y ~ g", family="binomial", path=tmp_path / "e.html").read_text()
    assert "did not mix" in text and "Pareto k̂ of the importance weights 0.93" in text


def test_holder_report_is_marked_private(tmp_path, small):
    df, schema, res = small
    p = holder_report(df, res, schema, FORMULA, family="binomial", path=tmp_path / "holder.html", target="y")
    text = p.read_text()
    assert "NOT FOR RELEASE" in text
    for needle in ("2-way TVD", "S_pMSE", "classifier F1", "std.diff", "Missingness of the real data"):
        assert needle in text, needle


@pytest.mark.chromium
@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")
def test_report_renders_in_headless_chromium(tmp_path, small):
    _, _, res = small
    p = analyst_report(res, FORMULA, family="binomial", path=tmp_path / "report.html")
    shot = tmp_path / "shot.png"
    cmd = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,1600", f"--screenshot={shot}",
           p.resolve().as_uri()]
    subprocess.run(cmd, check=True, timeout=120, capture_output=True)
    assert shot.exists() and shot.stat().st_size > 20_000  # a page with plots, not a blank one
