"""Combining rules, pooled fits and the comparison with a real fit (dpsynth.inference).

Fast tests check the formulas against mice's numbers and the fit/pool plumbing; the slow tests
(``pytest -m slow``) are the validity simulations: coverage of the "synthetic" rule with datasets
drawn from a correct (non-DP) posterior predictive, of the two two-stage rules, and the null
rejection rate of the D1 test.
"""

import warnings

import numpy as np
import pandas as pd
import pytest

import dpsynth
from dpsynth.inference import (RULES, DegenerateFitWarning, ci_overlap, compare_fit, fit_pooled, pool,
                               wald_test)
from dpsynth.inference.rules import d1_from_moments, pool_terms, scalar_table

Q = [1.0, 1.2, 0.9, 1.1, 1.05]
U = [0.04, 0.05, 0.045, 0.05, 0.048]
MICE_COLUMNS = ["term", "estimate", "ubar", "b", "t", "dfcom", "df", "riv", "lambda", "fmi", "std.error",
                "statistic", "p.value", "conf.low", "conf.high"]


# ---------------------------------------------------------------------------------------------
# pool(): the example against mice::pool.scalar (numbers from R 4.2.2, mice 3.15.0:
# pool.scalar(Q, U, n = 100, k = 2, rule = ...); see shared_tests/cases/pool_scalar.json)
# ---------------------------------------------------------------------------------------------

def test_mi_row_equals_mice_pool_scalar_rubin1987():
    row = pool(Q, U, rule="mi", dfcom=98).iloc[0]
    assert list(pool(Q, U, rule="mi").columns[:15]) == MICE_COLUMNS
    assert row["estimate"] == pytest.approx(1.05)
    assert row["t"] == pytest.approx(0.0616, abs=1e-12)
    assert row["df"] == pytest.approx(34.9833725064069, abs=1e-9)
    assert row["riv"] == pytest.approx(0.321888412017167, abs=1e-12)
    assert row["fmi"] == pytest.approx(0.283339370714325, abs=1e-12)
    assert row["rule"] == "mi" and row["m"] == 5 and not row["fallback"]


def test_reiter2003_row_equals_mice_pool_scalar():
    row = pool(Q, U, rule="reiter2003", dfcom=98).iloc[0]
    assert row["t"] == pytest.approx(0.0491, abs=1e-12)
    assert row["df"] == pytest.approx(1542.9184, abs=1e-6)
    assert np.isnan(row["lambda"]) and np.isnan(row["fmi"])  # NA in mice too


def test_synthetic_rule_falls_back_to_ubar_and_says_so():
    row = pool(Q, U, rule="synthetic").iloc[0]
    m, b, ubar = 5, np.var(Q, ddof=1), np.mean(U)
    assert (1 + 1 / m) * b - ubar < 0
    assert bool(row["fallback"]) is True
    assert row["t"] == pytest.approx(ubar)
    assert row["df"] == pytest.approx((m - 1) * (1 - ubar / ((1 + 1 / m) * b)) ** 2)  # kept from the formula
    assert row["std.error"] == pytest.approx(np.sqrt(ubar))


def test_synthetic_fallback_scales_by_n_syn_over_n_orig():
    row = pool(Q, U, rule="synthetic", n_syn=500, n_orig=1000).iloc[0]
    assert row["t"] == pytest.approx(0.5 * np.mean(U))
    with pytest.raises(ValueError, match="both n_syn and n_orig"):
        pool(Q, U, rule="synthetic", n_syn=500)


def test_synthetic_rule_without_fallback():
    q, u = [0.5, 1.5, 0.8, 1.3, 0.9, 1.2], [0.05, 0.06, 0.04, 0.05, 0.055, 0.045]
    row = pool(q, u).iloc[0]  # default rule: synthetic
    m, b, ubar = 6, np.var(q, ddof=1), np.mean(u)
    assert row["rule"] == "synthetic" and not row["fallback"]
    assert row["t"] == pytest.approx((1 + 1 / m) * b - ubar)
    assert row["riv"] == pytest.approx((1 + 1 / m) * b / ubar)
    from scipy import stats
    half = stats.t.ppf(0.975, row["df"]) * np.sqrt(row["t"])
    assert row["conf.high"] - row["estimate"] == pytest.approx(half)


def test_mi_without_dfcom_uses_rubin_df():
    row = pool(Q, U, rule="mi").iloc[0]
    lam = (1 + 1 / 5) * np.var(Q, ddof=1) / row["t"]
    assert row["df"] == pytest.approx(4 / lam ** 2)
    assert np.isinf(row["dfcom"])


def test_vector_pool_equals_termwise_pool_and_keeps_names():
    rng = np.random.default_rng(3)
    est = pd.DataFrame(rng.normal(size=(6, 3)), columns=["a", "b", "c"])
    covs = [np.diag(rng.uniform(0.01, 0.05, 3)) + 0.002 for _ in range(6)]
    tab = pool(est, covs, rule="mi", dfcom=40)
    assert list(tab["term"]) == ["a", "b", "c"]
    for j, name in enumerate("abc"):
        one = pool(est[name].tolist(), [c[j, j] for c in covs], rule="mi", dfcom=40).iloc[0]
        row = tab.iloc[j]
        for col in ("estimate", "ubar", "b", "t", "df", "fmi", "conf.low"):
            assert row[col] == pytest.approx(one[col])


def test_two_stage_synthetic_with_one_synthesis_per_imputation_is_the_synthetic_rule():
    rng = np.random.default_rng(4)
    q, u = rng.normal(1, 0.3, 8), rng.uniform(0.01, 0.02, 8)
    nested = pool(q[:, None], u[:, None], rule="two-stage-synthetic").iloc[0]
    flat = pool(q, u, rule="synthetic").iloc[0]
    for col in ("estimate", "t", "df", "riv", "conf.low"):
        assert nested[col] == pytest.approx(flat[col])
    assert nested["imputations"] == 8 and nested["syntheses"] == 1


def test_two_stage_rule_formula():
    q = np.array([[1.0, 1.3, 0.7], [1.1, 1.6, 1.2], [0.9, 1.4, 1.05], [1.25, 0.8, 1.15]])
    u = np.full_like(q, 0.02)
    row = pool(q, u, rule="two-stage").iloc[0]
    M, r = q.shape
    B, W = q.mean(1).var(ddof=1), q.var(1, ddof=1).mean()
    t = 0.02 + (1 + 1 / M) * B - W / r
    assert row["t"] == pytest.approx(t) and row["b"] == pytest.approx(B) and row["w"] == pytest.approx(W)
    assert row["df"] == pytest.approx(t ** 2 / (((1 + 1 / M) * B) ** 2 / (M - 1) + (W / r) ** 2 / (M * (r - 1))))
    assert row["m"] == 12
    with pytest.raises(ValueError, match="r ≥ 2"):
        pool(q[:, :1], u[:, :1], rule="two-stage")


@pytest.mark.parametrize("kwargs, match", [
    (dict(estimates=[1.0], variances=[0.1]), "at least 2 analyses"),
    (dict(estimates=[1.0, np.nan], variances=[0.1, 0.1]), "NaN"),
    (dict(estimates=[1.0, 2.0], variances=[0.1, -0.1]), "non-negative"),
    (dict(estimates=[1.0, 2.0], variances=[0.1, 0.1, 0.1]), "variances must be"),
    (dict(estimates=[1.0, 2.0], variances=[0.1, 0.1], rule="bayes"), "unknown rule"),
    (dict(estimates=[[1.0, 2.0], [2.0, 3.0]], variances=[[0.1, 0.1]] * 2, terms=["a"]), "terms has 1"),
    (dict(estimates=[1.0, 2.0], variances=[0.1, 0.1], rule="two-stage"), "shape M×r"),
    (dict(estimates=[1.0, 2.0], variances=[0.1, 0.1], dfcom=0), "dfcom"),
])
def test_pool_rejects_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        pool(**kwargs)


def test_rule_aliases_and_types():
    assert pool(Q, U, rule="rubin1987").loc[0, "rule"] == "mi"
    with pytest.raises(TypeError):
        pool(Q, U, rule=None)
    assert set(RULES) == {"synthetic", "mi", "reiter2003", "two-stage", "two-stage-synthetic"}


# ---------------------------------------------------------------------------------------------
# D1
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rule", ["mi", "reiter2003", "synthetic"])
def test_wald_for_one_term_is_the_squared_t_statistic(rule):
    q, u = [0.5, 1.5, 0.8, 1.3, 0.9, 1.2], [0.05, 0.06, 0.04, 0.05, 0.055, 0.045]
    res = wald_test(q, u, rule=rule)
    row = pool(q, u, rule=rule).iloc[0]
    assert res["df1"] == 1 and res["statistic"] == pytest.approx(row["statistic"] ** 2)


def test_wald_golden_against_mitml():
    # mitml::testConstraints(qhat, uhat, c("a","b"), method = "D1") in R, for the matrices below
    Qm = np.array([[-0.6264538, 0.1836433], [-0.8356286, 1.5952808], [0.3295078, -0.8204684],
                   [0.4874291, 0.7383247], [0.5757814, -0.3053884]])
    Um = [np.array([[0.4, 0.1], [0.1, 0.6]])] * 5
    res = wald_test(Qm, Um, rule="mi", names=["a", "b"])
    assert res["statistic"] == pytest.approx(0.02471145, abs=1e-7)
    assert res["df2"] == pytest.approx(12.01977, abs=1e-5) and res["riv"] == pytest.approx(1.803059, abs=1e-6)
    res = wald_test(Qm, Um, rule="mi", names=["a", "b"], dfcom=50)
    assert res["df2"] == pytest.approx(6.615082, abs=1e-5)
    with pytest.raises(ValueError, match="unknown term"):
        wald_test(Qm, Um, rule="mi", terms=["zz"])


def test_wald_synthetic_fallback_flagged():
    res = wald_test(Q, U, rule="synthetic")
    assert res["fallback"] and res["statistic"] == pytest.approx(np.mean(Q) ** 2 / np.mean(U))


# ---------------------------------------------------------------------------------------------
# fit_pooled
# ---------------------------------------------------------------------------------------------

def make_frames(m=4, n=150, seed=0, levels=("a", "b", "c")):
    rng = np.random.default_rng(seed)
    frames = []
    for _ in range(m):
        x = rng.normal(size=n)
        g = rng.choice(list(levels), n)
        y = 1 + 2 * x + (g == "b") + rng.normal(size=n)
        p = 1 / (1 + np.exp(-(0.3 + x)))
        inc = np.where(rng.random(n) < p, ">50K", "<=50K")
        frames.append(pd.DataFrame({"x": x, "g": pd.Categorical(g, categories=list(levels)), "y": y,
                                    "income": pd.Categorical(inc, categories=["<=50K", ">50K"])}))
    return frames


def test_fit_pooled_ols_equals_pooling_statsmodels_results():
    import statsmodels.formula.api as smf
    frames = make_frames()
    res = fit_pooled(frames, "y ~ x + g")
    assert res.rule == "synthetic"  # the default
    fits = [smf.ols("y ~ x + g", f).fit() for f in frames]
    est = pd.DataFrame([f.params for f in fits])
    covs = [f.cov_params().to_numpy() for f in fits]
    want = pool(est, covs, rule="synthetic", dfcom=fits[0].df_resid)
    got = res.to_frame()
    assert list(got.columns) == MICE_COLUMNS + ["rule", "m", "fallback"]
    pd.testing.assert_frame_equal(got.drop(columns="m"), want.drop(columns="m"), check_exact=False, rtol=1e-10)
    assert res.params["x"] == pytest.approx(want.set_index("term").loc["x", "estimate"])
    from_fits = pool(fits, rule="synthetic")  # a list of statsmodels results works directly
    pd.testing.assert_frame_equal(from_fits, want)
    assert wald_test(fits, rule="mi", terms=["x"])["statistic"] == pytest.approx(
        pool(fits, rule="mi").set_index("term").loc["x", "statistic"] ** 2)
    with pytest.raises(TypeError, match="variances is missing"):
        pool([1.0, 2.0])
    assert res.cov_params().shape == (4, 4) and res.dropped.empty


def test_binomial_two_level_outcome_codes_second_level_as_one():
    frames = make_frames()
    before = [f.copy() for f in frames]
    res = fit_pooled(frames, "income ~ x", family="binomial", rule="mi")
    coded = [f.assign(inc01=(f["income"] == ">50K").astype(float)) for f in frames]
    manual = fit_pooled(coded, "inc01 ~ x", family="binomial", rule="mi")
    assert res.to_frame()["estimate"].tolist() == pytest.approx(manual.to_frame()["estimate"].tolist())
    assert res.params["x"] > 0  # P(">50K") rises with x
    assert "'>50K' = 1" in str(res.summary())
    for f, g in zip(frames, before):  # the caller's frames are untouched
        pd.testing.assert_frame_equal(f, g)


def test_fit_pooled_accepts_a_synth_result(toy):
    df, schema = toy
    syn = dpsynth.synthesize(df, schema, "independent", epsilon=2.0, m=3, seed=1)
    res = fit_pooled(syn, "age ~ sex + grp", rule="mi")
    assert res.m == 3 and "sex[T.M]" in res.terms
    missing = sum(f.n_missing for f in res.fits)
    assert missing == sum(d[["age", "sex", "grp"]].isna().any(axis=1).sum() for d in syn.datasets)


def test_aliased_term_is_dropped_for_that_dataset_and_reported():
    frames = make_frames(m=4)
    frames[1] = frames[1][frames[1]["g"] != "c"].reset_index(drop=True)  # level c absent: g[T.c] aliased
    with pytest.warns(DegenerateFitWarning, match="1 coefficient"):
        res = fit_pooled(frames, "y ~ x + g", rule="mi")
    tab = res.to_frame().set_index("term")
    assert tab.loc["g[T.c]", "m"] == 3 and tab.loc["x", "m"] == 4
    assert res.dropped.iloc[0]["dataset"] == 1 and "aliased" in res.dropped.iloc[0]["reason"]
    assert "aliased: 1" in str(res.summary())
    assert list(res.cov_params().index) == res.terms and res.wald_test(["g[T.c]"])["m"] == 3


def test_a_level_never_observed_leaves_the_joint_covariance_to_the_others():
    frames = make_frames(m=3, levels=("a", "b", "c"))
    frames = [f.assign(g=f["g"].cat.add_categories("d")) for f in frames]  # declared, never drawn
    with pytest.warns(DegenerateFitWarning):
        res = fit_pooled(frames, "y ~ x + g", rule="mi")
    assert res.to_frame().set_index("term").loc["g[T.d]", "m"] == 0
    assert "g[T.d]" not in res.cov_params().index and res.cov_params().shape == (4, 4)
    with pytest.raises(ValueError, match="unknown term"):
        res.wald_test(["g[T.d]"])


def test_exploding_standard_error_from_separation_is_dropped():
    frames = make_frames(m=5, n=300)
    f = frames[2].copy()
    f.loc[f["g"] == "c", "income"] = "<=50K"  # quasi-separation: no ">50K" in level c
    frames[2] = f
    with pytest.warns(DegenerateFitWarning):
        res = fit_pooled(frames, "income ~ x + g", family="binomial")
    reasons = res.dropped.set_index("term")["reason"]
    assert "exploded" in reasons["g[T.c]"]
    assert res.to_frame().set_index("term").loc["g[T.c]", "m"] == 4
    assert np.isfinite(res.to_frame()["std.error"]).all()


def test_perfect_separation_is_noted_and_its_coefficients_dropped():
    frames = make_frames(m=5, n=300)
    f = frames[2]
    frames[2] = f.assign(income=pd.Categorical(np.where(f["x"] > 0, ">50K", "<=50K"), categories=["<=50K", ">50K"]))
    with pytest.warns(DegenerateFitWarning, match="2 coefficient"):
        res = fit_pooled(frames, "income ~ x", family="binomial", rule="mi")
    assert "perfect separation detected" in res.fits[2].notes
    assert set(res.dropped["dataset"]) == {2} and res.to_frame()["m"].tolist() == [4, 4]
    assert "perfect separation detected in 1 dataset(s)" in " ".join(str(res.summary()).split())


def test_failed_dataset_is_dropped_whole():
    frames = make_frames(m=4)
    frames[3] = frames[3].assign(y=np.nan)
    with pytest.warns(DegenerateFitWarning, match="1 dataset"):
        res = fit_pooled(frames, "y ~ x", rule="mi")
    assert res.to_frame()["m"].tolist() == [3, 3]
    assert res.dropped["term"].isna().sum() == 1


def test_two_stage_fit_needs_nested_data_and_matches_pool():
    nests = [make_frames(m=3, seed=s) for s in range(4)]
    res = fit_pooled(nests, "y ~ x", rule="two-stage")
    est = np.array([[fit.params["x"] for fit in res.fits[l * 3:(l + 1) * 3]] for l in range(4)])
    var = np.array([[fit.cov.loc["x", "x"] for fit in res.fits[l * 3:(l + 1) * 3]] for l in range(4)])
    want = pool(est, var, rule="two-stage").iloc[0]
    got = res.to_frame().set_index("term").loc["x"]
    assert got["t"] == pytest.approx(want["t"]) and got["df"] == pytest.approx(want["df"])
    assert "4 imputations × 3" in str(res.summary())
    with pytest.raises(ValueError, match="needs nested data"):
        fit_pooled(make_frames(), "y ~ x", rule="two-stage")
    with pytest.raises(ValueError, match="two-stage"):
        fit_pooled(nests, "y ~ x", rule="mi")


def test_summary_names_the_rule_and_marks_fallback():
    frame = make_frames(m=1)[0]
    res = fit_pooled([frame] * 3, "y ~ x")  # identical copies: b = 0, so T = −ubar < 0 everywhere
    assert res.to_frame()["fallback"].all()
    text = str(res.summary())
    assert "rule = 'synthetic'" in text and "Raghunathan" in text
    assert "x *" in text and "* T <= 0" in text
    assert "fallback" not in str(fit_pooled(make_frames(), "y ~ x", rule="mi").summary()).lower()


def test_pooled_wald_method_matches_module_function():
    frames = make_frames()
    res = fit_pooled(frames, "y ~ x + g", rule="mi")
    got = res.wald_test(["x", "g[T.b]"])
    est = np.array([[f.params["x"], f.params["g[T.b]"]] for f in res.fits])
    covs = np.array([f.cov.loc[["x", "g[T.b]"], ["x", "g[T.b]"]].to_numpy() for f in res.fits])
    want = wald_test(est, covs, rule="mi", dfcom=res.dfcom)
    assert got["statistic"] == pytest.approx(want["statistic"]) and got["df2"] == pytest.approx(want["df2"])


@pytest.mark.parametrize("call, err, match", [
    (lambda f: fit_pooled(f[0], "y ~ x"), TypeError, "not a single DataFrame"),
    (lambda f: fit_pooled(f, "y ~ x", family="gamma-ish"), ValueError, "unknown family"),
    (lambda f: fit_pooled(f, "income ~ x"), ValueError, "needs a numeric outcome"),
    (lambda f: fit_pooled(f, "g ~ x", family="binomial"), ValueError, "3 levels"),
    (lambda f: fit_pooled(f, "y x"), ValueError, "outcome ~ terms"),
    (lambda f: fit_pooled(f, "y ~ nothere"), ValueError, "could not build the design"),
])
def test_fit_pooled_rejects_bad_input(call, err, match):
    with pytest.raises(err, match=match):
        call(make_frames(m=2))


# ---------------------------------------------------------------------------------------------
# compare_fit
# ---------------------------------------------------------------------------------------------

def test_ci_overlap_values():
    assert ci_overlap(0, 1, 0, 1) == pytest.approx(1.0)
    assert ci_overlap(0, 2, 1, 3) == pytest.approx(0.5)
    assert ci_overlap(0, 1, 2, 3) == pytest.approx(-1.0)  # disjoint: negative, as synthpop


def test_compare_fit_identical_copies_and_a_known_shift():
    real = make_frames(m=1, n=400, seed=9)[0]
    copies = [real.copy() for _ in range(4)]
    cmp = compare_fit(fit_pooled(copies, "y ~ x", rule="mi"), real)
    tab = cmp.to_frame().set_index("term")
    assert tab["std.diff"].abs().max() < 1e-10
    assert tab["ci.overlap"].min() > 0.99
    shifted = [real.assign(y=real["y"] + 0.3) for _ in range(4)]
    cmp = compare_fit(fit_pooled(shifted, "y ~ x", rule="mi"), real)
    tab = cmp.to_frame().set_index("term")
    se = cmp.real_fit.bse["Intercept"]
    assert tab.loc["Intercept", "std.diff"] == pytest.approx(0.3 / se)
    assert tab.loc["x", "std.diff"] == pytest.approx(0.0, abs=1e-10)
    assert "Karr" in cmp.summary() and cmp.mean_abs_std_diff == pytest.approx(0.3 / se / 2)


def test_compare_fit_reports_real_rows_dropped():
    real = make_frames(m=1, n=100, seed=5)[0]
    real.loc[:9, "x"] = np.nan
    cmp = compare_fit(fit_pooled(make_frames(m=3), "y ~ x"), real)
    assert cmp.n_dropped == 10 and cmp.n_real == 90
    with pytest.raises(TypeError):
        compare_fit("not pooled", real)


# ---------------------------------------------------------------------------------------------
# Slow validity simulations. A population y = 1 + 2x + e, x, e ~ N(0, 1); the "true" analysis is
# OLS of y on x with estimand β = (1, 2). Synthetic data come from the posterior predictive of a
# correct Bayesian model (flat-prior normal linear model for y | x; normal model for x), as in
# Raghunathan, Reiter & Rubin (2003). Everything is vectorised over repetitions.
# ---------------------------------------------------------------------------------------------

BETA = np.array([1.0, 2.0])


def _ols(x, y, w=None):
    """y ~ 1 + x over the last axis (w: 0/1 row mask) → β̂ (..., 2), s², (X'X)⁻¹, residual df."""
    w = np.ones_like(x) if w is None else w.astype(float)
    n, sx, sxx = w.sum(-1), (w * x).sum(-1), (w * x * x).sum(-1)
    sy, sxy = (w * y).sum(-1), (w * x * y).sum(-1)
    det = n * sxx - sx ** 2
    V = np.stack([np.stack([sxx, -sx], -1), np.stack([-sx, n], -1)], -2) / det[..., None, None]
    beta = np.einsum("...ij,...j->...i", V, np.stack([sy, sxy], -1))
    resid = y - beta[..., :1] - beta[..., 1:] * x
    return beta, (w * resid ** 2).sum(-1) / (n - 2), V, n - 2


def _posterior(beta_hat, s2, V, df, k, rng):
    """k draws of (β, σ²) per leading index: σ² = df s² / χ²_df, β ~ N(β̂, σ² V)."""
    shape = s2.shape + (k,)
    sig2 = df[..., None] * s2[..., None] / rng.chisquare(np.broadcast_to(df[..., None], shape))
    z = rng.standard_normal(shape + (2,))
    beta = beta_hat[..., None, :] + np.sqrt(sig2)[..., None] * np.einsum("...ij,...kj->...ki", np.linalg.cholesky(V), z)
    return beta, sig2


def _x_posterior(x, k, rng):
    n = x.shape[-1]
    tau2 = (n - 1) * x.var(-1, ddof=1)[..., None] / rng.chisquare(n - 1, x.shape[:-1] + (k,))
    return rng.normal(x.mean(-1)[..., None], np.sqrt(tau2 / n)), tau2


def _new_rows(mu, tau2, beta, sig2, n, rng, x=None):
    """Rows from the posterior predictive: new x (unless given) and y | x."""
    if x is None:
        x = mu[..., None] + np.sqrt(tau2)[..., None] * rng.standard_normal(mu.shape + (n,))
    y = beta[..., :1] + beta[..., 1:] * x + np.sqrt(sig2)[..., None] * rng.standard_normal(sig2.shape + (n,))
    return x, y


def _analyse(x, y):
    b, s2, V, _ = _ols(x, y)
    return b, s2[..., None] * np.diagonal(V, axis1=-2, axis2=-1)


def _population(reps, n, rng):
    x = rng.standard_normal((reps, n))
    return x, BETA[0] + BETA[1] * x + rng.standard_normal((reps, n))


def _coverage(rule, q, u, lead, ratio=1.0):
    """Pool every repetition and term at once (terms are independent in the scalar rules)."""
    reps = q.shape[-2]
    res = pool_terms(rule, q.reshape(lead + (reps * 2,)), u.reshape(lead + (reps * 2,)), ratio=ratio)
    tab = scalar_table(list(range(reps * 2)), res, rule, 1, None)
    truth = np.tile(BETA, reps)
    hit = ((tab["conf.low"] <= truth) & (truth <= tab["conf.high"])).to_numpy().reshape(reps, 2)
    err2 = ((res.estimate - truth) ** 2).reshape(reps, 2)
    return hit, res.t.reshape(reps, 2), err2, res.fallback.reshape(reps, 2)


def sim_fully_synthetic(reps, n, m, rng, k=1):
    """m fully synthetic datasets of k·n rows from the posterior predictive, per repetition."""
    x, y = _population(reps, n, rng)
    beta, sig2 = _posterior(*_ols(x, y), m, rng)
    mu, tau2 = _x_posterior(x, m, rng)
    q, u = _analyse(*_new_rows(mu, tau2, beta, sig2, k * n, rng))   # (reps, m, 2)
    return _coverage("synthetic", np.moveaxis(q, 1, 0), np.moveaxis(u, 1, 0), (m,), ratio=k)


def sim_two_stage(reps, n, M, r, rng, rule):
    """y missing at random given x (about 30 %); M proper imputations from the complete-case
    posterior; from each completed dataset r syntheses: y replaced (x kept) for "two-stage",
    new x and y for "two-stage-synthetic"."""
    x, y = _population(reps, n, rng)
    miss = rng.random((reps, n)) < 1 / (1 + np.exp(1 - x))
    beta, sig2 = _posterior(*_ols(x, y, ~miss), M, rng)                       # (reps, M, ·)
    _, y_imp = _new_rows(None, None, beta, sig2, n, rng, x=np.broadcast_to(x[:, None], (reps, M, n)))
    yc = np.where(miss[:, None], y_imp, y[:, None])
    xc = np.broadcast_to(x[:, None], yc.shape)
    beta2, sig22 = _posterior(*_ols(xc, yc), r, rng)                           # (reps, M, r, ·)
    if rule == "two-stage":
        xs, ys = _new_rows(None, None, beta2, sig22, n, rng, x=np.broadcast_to(x[:, None, None], (reps, M, r, n)))
    else:
        mu, tau2 = _x_posterior(xc, r, rng)
        xs, ys = _new_rows(mu, tau2, beta2, sig22, n, rng)
    q, u = _analyse(xs, ys)                                                    # (reps, M, r, 2)
    return _coverage(rule, np.moveaxis(q, 0, 2), np.moveaxis(u, 0, 2), (M, r))


def _run(sim, chunks, *args, **kwargs):
    hit, t, err2, fallback = (np.concatenate(z) for z in zip(*(sim(*args, **kwargs) for _ in range(chunks))))
    figures = {"reps": len(hit), "coverage (β0, β1)": hit.mean(0).round(4).tolist(),
               "T/MSE": (t.mean(0) / err2.mean(0)).round(3).tolist(), "fallback": fallback.mean(0).round(4).tolist()}
    setting = ", ".join(f"{k}={v}" for k, v in kwargs.items() if k not in ("rng", "reps"))
    print(f"\n{sim.__name__}({setting}): {figures}")
    return figures


@pytest.mark.slow
def test_synthetic_rule_covers_with_a_correct_posterior_predictive():
    """NAPSU-MQ's setting without DP noise: n = 200, m = 100 datasets of n rows, 2,000 repetitions."""
    fig = _run(sim_fully_synthetic, 20, reps=100, n=200, m=100, rng=np.random.default_rng(2023))
    assert all(0.93 <= c <= 0.97 for c in fig["coverage (β0, β1)"]), fig
    assert all(0.9 <= r <= 1.1 for r in fig["T/MSE"]), fig   # T is unbiased for Var(q̄ − Q)


@pytest.mark.slow
def test_synthetic_rule_with_larger_synthetic_sets():
    """m = 20 datasets of 5n rows (the fallback would use n_syn/n_orig = 5), 2,000 repetitions.
    (With n_syn = n and m = 20, ν ≈ 5 and the intervals over-cover, ≈ 0.995: use m ≈ 100 there.)"""
    fig = _run(sim_fully_synthetic, 20, reps=100, n=200, m=20, rng=np.random.default_rng(7), k=5)
    assert all(0.93 <= c <= 0.97 for c in fig["coverage (β0, β1)"]), fig
    assert all(0.9 <= r <= 1.1 for r in fig["T/MSE"]), fig


@pytest.mark.slow
def test_synthetic_rule_with_few_datasets_errs_on_the_safe_side():
    """m = 20 datasets of n rows: ν ≈ 5, so the t intervals over-cover (≈ 0.995) but never
    under-cover; T itself stays unbiased. 2,000 repetitions."""
    fig = _run(sim_fully_synthetic, 20, reps=100, n=200, m=20, rng=np.random.default_rng(8))
    assert all(c >= 0.95 for c in fig["coverage (β0, β1)"]), fig
    assert all(0.9 <= r <= 1.1 for r in fig["T/MSE"]), fig


@pytest.mark.slow
@pytest.mark.parametrize("rule", ["two-stage", "two-stage-synthetic"])
def test_two_stage_rules_cover(rule):
    """M = 20 imputations × r = 5 syntheses, n = 200, 2,000 repetitions: the derivation in
    rules._two_stage gives an unbiased T and calibrated intervals."""
    fig = _run(sim_two_stage, 20, reps=100, n=200, M=20, r=5, rng=np.random.default_rng(11), rule=rule)
    assert all(0.93 <= c <= 0.97 for c in fig["coverage (β0, β1)"]), fig
    assert all(0.9 <= r <= 1.1 for r in fig["T/MSE"]), fig


@pytest.mark.slow
@pytest.mark.parametrize("rule, m", [("mi", 5), ("reiter2003", 10), ("synthetic", 100)])
def test_d1_rejects_a_true_null_at_the_nominal_rate(rule, m):
    """Joint test of (β0, β1) = (1, 2), which is true: rejection at 5 % over 2,000 repetitions."""
    rng = np.random.default_rng(5)
    reject = []
    for _ in range(10):
        x, y = _population(200, 200, rng)
        if rule == "mi":
            miss = rng.random(x.shape) < 1 / (1 + np.exp(1 - x))
            beta, sig2 = _posterior(*_ols(x, y, ~miss), m, rng)
            _, y_imp = _new_rows(None, None, beta, sig2, 200, rng, x=np.broadcast_to(x[:, None], (200, m, 200)))
            xs, ys = np.broadcast_to(x[:, None], y_imp.shape), np.where(miss[:, None], y_imp, y[:, None])
        else:
            beta, sig2 = _posterior(*_ols(x, y), m, rng)
            if rule == "reiter2003":
                xs, ys = _new_rows(None, None, beta, sig2, 200, rng, x=np.broadcast_to(x[:, None], (200, m, 200)))
            else:
                xs, ys = _new_rows(*_x_posterior(x, m, rng), beta, sig2, 200, rng)
        b, s2, V, df = _ols(xs, ys)
        covs = s2[..., None, None] * V
        for i in range(200):
            res = d1_from_moments(rule, m, b[i].mean(0), covs[i].mean(0), np.cov(b[i], rowvar=False),
                                  null=BETA, dfcom=df[i, 0] if rule == "mi" else None)
            reject.append(res["p.value"] < 0.05)
    rate = float(np.mean(reject))
    print(f"\nD1 {rule} m={m}: rejection rate {rate:.4f} over {len(reject)}")
    assert 0.03 <= rate <= 0.07


def test_synthetic_rule_warns_for_generators_that_are_not_noise_aware(toy):
    import dpsynth
    from dpsynth.inference.fit import NotNoiseAwareWarning

    df, schema = toy
    res = dpsynth.synthesize(df, schema, "independent", epsilon=1.0, m=3, seed=1)
    with pytest.warns(NotNoiseAwareWarning, match="napsu-mq"):
        dpsynth.fit_pooled(res, "age ~ sex", rule="synthetic")


def test_pool_fits_applies_fit_pooleds_policy_to_fits_made_elsewhere():
    """The one pooling policy: pool_fits on the per-dataset estimates and covariances that
    fit_pooled's own statsmodels fits produce gives the same table, drops and notes."""
    import statsmodels.formula.api as smf

    from dpsynth.inference import NotNoiseAwareWarning, pool_fits

    rng = np.random.default_rng(5)
    frames = []
    for _ in range(5):
        x = rng.normal(size=80)
        frames.append(pd.DataFrame({"x": x, "y": 1 + 0.5 * x + rng.normal(size=80)}))
    frames[2]["x"] = 0.0  # aliased slope in dataset 3
    for rule in ("synthetic", "mi", "reiter2003"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = dpsynth.fit_pooled(frames, "y ~ x", rule=rule)
        params, covs, dfs, nobs = [], [], [], []
        for f in ref.fits:
            p = {t: (f.params[t] if t in f.params.index else np.nan) for t in ["Intercept", "x"]}
            params.append(p)
            covs.append(f.cov.to_numpy().tolist())
            dfs.append(f.df_resid)
            nobs.append(f.nobs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = pool_fits(params, covs, rule=rule, df_resid=dfs, nobs=nobs, formula="y ~ x")
        cols = ["estimate", "ubar", "b", "t", "df", "std.error", "conf.low", "conf.high"]
        np.testing.assert_allclose(got.to_frame()[cols].to_numpy(float), ref.to_frame()[cols].to_numpy(float),
                                   rtol=1e-10, equal_nan=True)
        assert got.dropped["reason"].tolist() == ref.dropped["reason"].tolist()
        assert got.notes() == ref.notes()
    with pytest.warns(NotNoiseAwareWarning):
        pool_fits(params, covs, df_resid=dfs, noise_aware=False, method="privbayes")
    with pytest.raises(ValueError, match="covariance matrix"):
        pool_fits(params, [[[1.0]]] * 5)
    with pytest.raises(ValueError, match="at least 2"):
        pool_fits(params[:1], covs[:1])
    failed = pool_fits([None] + params[1:], [None] + covs[1:], errors=["the fit failed: boom"] + [None] * 4,
                       df_resid=dfs)
    assert failed.dropped["reason"].iloc[0] == "the fit failed: boom"


def test_string_columns_are_read_as_categoricals_with_patsys_levels():
    """Columns of strings reach patsy as Categoricals of their sorted values (a fast path): the same
    coefficients as before, C(x, levels=...) still honoured, and the caller's frame left as it was."""
    rng = np.random.default_rng(3)
    n = 400
    df = pd.DataFrame({"y": rng.integers(0, 2, n), "g": rng.choice(["b", "a", "c"], n).astype(object),
                       "x": rng.normal(size=n)})
    df.loc[::25, "g"] = None
    before = df.copy()
    res = dpsynth.fit_pooled([df, df.copy()], "y ~ g + x", family="binomial").to_frame().set_index("term")
    assert list(res.index) == ["Intercept", "g[T.b]", "g[T.c]", "x"]
    coded = df.assign(g=pd.Categorical(df["g"], categories=["a", "b", "c"]))
    want = dpsynth.fit_pooled([coded, coded.copy()], "y ~ g + x", family="binomial").to_frame().set_index("term")
    np.testing.assert_allclose(res["estimate"], want["estimate"], rtol=0, atol=1e-12)
    lev = dpsynth.fit_pooled([df, df.copy()], "y ~ C(g, levels=['c', 'b', 'a']) + x", family="binomial").to_frame()
    assert lev["term"].tolist()[1:3] == ["C(g, levels=['c', 'b', 'a'])[T.b]", "C(g, levels=['c', 'b', 'a'])[T.a]"]
    pd.testing.assert_frame_equal(df, before)


def test_only_a_levels_argument_turns_the_categorical_fast_path_off(monkeypatch):
    """A column whose name merely contains "levels" keeps the fast path; ``levels=`` turns it off."""
    from dpsynth.inference import dataset_fit

    calls = []
    monkeypatch.setattr(dataset_fit, "categorical_strings", lambda f: calls.append(1) or f)
    rng = np.random.default_rng(4)
    df = pd.DataFrame({"y": rng.integers(0, 2, 200), "levels_g": rng.choice(["a", "b"], 200).astype(object),
                       "x": rng.normal(size=200)})
    dpsynth.fit_pooled([df, df], "y ~ levels_g + x", family="binomial")
    assert len(calls) == 2
    dpsynth.fit_pooled([df, df], "y ~ C(levels_g, levels = ['b', 'a']) + x", family="binomial")
    assert len(calls) == 2
