"""Constructors store what the user passed (scikit-learn style), and one set of parameter checks
(dpsynth.validation) applies at every boundary."""
import inspect

import pytest

import dpsynth
from dpsynth import validation
from dpsynth.generators import generator_class, make_generator

# Generators whose constructors this test covers: every registered method.
OWNED = ["independent", "privbayes", "privbayes-e", "dp-misgan", "mst", "aim", "aim-e", "dpautogan", "dpctgan",
         "kamino", "kamino-i", "napsu-mq", "pmse", "complete-rows", "impute-random", "impute-dp-mean"]
EXPLICIT = {"privbayes": {"k": 2}, "privbayes-e": {"k": 2}, "aim": {"rounds": 7}, "aim-e": {"rounds": 7},
            "kamino": {"order": ["b", "a"]}, "kamino-i": {"order": ("a", "b")}}


def _changed(value):
    """A value other than the default, of the same kind and in range."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    return value + 1 if isinstance(value, int) else value * 0.5


def _arguments(method):
    cls, fixed = generator_class(method)
    params = inspect.signature(cls.__init__).parameters
    args = {name: _changed(p.default) for name, p in params.items()
            if name not in ("self", "epsilon", "delta") and p.kind is not p.VAR_KEYWORD}
    return {"epsilon": 2, "delta": 1e-7, **args, **EXPLICIT.get(method, {}), **fixed}


@pytest.mark.parametrize("method", OWNED)
def test_get_params_round_trips_the_constructor_arguments(method):
    args = _arguments(method)
    gen = make_generator(method, args.pop("epsilon"), args.pop("delta"),
                         **{k: v for k, v in args.items() if k not in generator_class(method)[1]})
    params = gen.get_params()
    assert params == {"epsilon": 2, "delta": 1e-7, **args}
    assert all(params[k] is v for k, v in args.items())  # the very objects passed, not rewritten copies
    copy = type(gen)(**params)
    assert copy.get_params() == params and copy.method == gen.method


@pytest.mark.parametrize("method", OWNED)
def test_sklearn_clone(method):
    from sklearn.base import clone

    gen = make_generator(method, 1.0, 1e-6)
    twin = clone(gen)
    assert twin is not gen and twin.get_params() == gen.get_params()


def test_the_method_name_follows_the_options_not_the_construction():
    gen = dpsynth.PrivBayes(1.0, missing="partial")
    assert gen.method == "privbayes-e"
    assert dpsynth.AIM(1.0, 1e-9, missing="partial").method == "aim-e"
    assert dpsynth.ColumnwiseSynth(1.0, 1e-6, impute=False).method == "kamino"


@pytest.mark.parametrize("check", [validation.check_count, validation.check_positive_int])
def test_one_rule_for_integers(check):
    assert check(3, "n") == 3 and check(3.0, "n") == 3  # R's numbers arrive as doubles
    assert type(check(3.0, "n")) is int
    for bad in (True, 2.5, float("nan"), "3", None):
        with pytest.raises(TypeError, match="n must be a whole number"):
            check(bad, "n")
    with pytest.raises(ValueError, match="n must be at least 1, got 0"):
        check(0, "n")


def test_integer_options_accept_whole_floats_everywhere(toy):
    df, schema = toy
    gen = dpsynth.MST(1.0, 1e-6, iters=5.0)  # what dp_synthesize(..., iters = 5) sends
    assert gen.iters == 5 and type(gen.iters) is int
    res = gen.fit(df, schema, seed=1).sample(n=10.0, m=2.0, seed=3.0)
    assert len(res.datasets) == 2 and len(res.datasets[0]) == 10
    with pytest.raises(TypeError, match="m must be a whole number"):
        gen.sample(n=10, m=1.5)
    with pytest.raises(TypeError, match="batch_size must be a whole number"):
        dpsynth.DPCTGAN(1.0, 1e-6, batch_size=True)


def test_numbers_flags_and_choices():
    assert validation.check_share(0.5, "s") == 0.5
    for bad in (0, 1, float("nan")):
        with pytest.raises(ValueError, match="s must be a fraction of the budget strictly between 0 and 1"):
            validation.check_share(bad, "s")
    with pytest.raises(TypeError, match="s must be a number"):
        validation.check_share("0.5", "s")
    with pytest.raises(TypeError, match="keep_missing must be True or False"):
        dpsynth.IndependentMarginals(1.0, keep_missing=1)
    with pytest.raises(ValueError, match="missing must be 'complete-rows'"):
        dpsynth.MST(1.0, 1e-6, missing="drop")
    assert validation.check_seed(None) is None and validation.check_seed(4.0) == 4
    with pytest.raises(ValueError, match="seed must be at least 0"):
        validation.check_seed(-1)


def test_old_import_paths_still_work():
    from dpsynth.generators.base import check_count
    from dpsynth.privacy import check_epsilon, check_seed
    from dpsynth.privacy.validation import check_positive_float

    assert check_count is validation.check_count and check_seed is validation.check_seed
    assert check_epsilon is validation.check_epsilon and check_positive_float is validation.check_positive_float


def test_napsu_stores_its_options_as_passed_and_derives_in_fit():
    """NAPSU-MQ keeps the objects passed (list-of-lists queries, the old inference name "mcmc", a
    bare column name, int shifts, None sampler settings); fit derives what it uses (``*_``)."""
    import numpy as np
    import pandas as pd

    queries, shift = [["x1", "x2"], ["x2", "y"]], {"x2": 1}
    gen = dpsynth.NAPSUMQ(2.0, 1e-6, queries=queries, inference="mcmc", incomplete="x2", mnar_shift=shift,
                          mcmc_chains=2, mcmc_warmup=10, mcmc_draws=5)
    params = gen.get_params()
    assert params["queries"] is queries and params["mnar_shift"] is shift
    assert params["inference"] == "mcmc" and params["incomplete"] == "x2" and params["mcmc_thin"] is None
    rng = np.random.default_rng(0)
    df = pd.DataFrame({c: rng.integers(0, 2, 300) for c in ("x1", "x2", "y")}).astype(float)
    df.loc[rng.random(300) < 0.2, "x2"] = np.nan
    schema = dpsynth.Schema.from_dict({c: {"type": "categorical", "categories": [0, 1]} for c in ("x1", "x2", "y")})
    with pytest.warns(dpsynth.PosteriorNotMixedWarning):
        gen.fit(df, schema, seed=1)
    assert gen.get_params() == params and gen.queries is queries
    assert gen.queries_ == [("x1", "x2"), ("x2", "y")] and gen.inference_ == "hmc"
    assert gen.incomplete_ == ["x2"] and gen.mnar_shift_ == {"x2": 1.0} and (gen.mcmc_chains_, gen.mcmc_thin_) == (2, 1)
    assert gen.diagnostics_["inference"] == "hmc"
    with pytest.raises(TypeError, match="mcmc_draws must be None or a whole number"):
        dpsynth.NAPSUMQ(1.0, 1e-6, mcmc_draws=2.5)
    with pytest.raises(ValueError, match="selection_share must be a fraction"):
        dpsynth.NAPSUMQ(1.0, 1e-6, selection_share=1.0)


def test_napsu_sampler_defaults_follow_the_missing_data_mode():
    """Sampler settings left at None come from MCMC_DEFAULTS for complete data and from
    MCMC_DEFAULTS_MAR once fit knows that the declared-incomplete columns make the mode "mar";
    settings passed are kept in either mode. The posterior is not sampled (stopped before)."""
    import numpy as np
    import pandas as pd
    from dpsynth.generators.napsu_sampling import MCMC_DEFAULTS, MCMC_DEFAULTS_MAR

    assert MCMC_DEFAULTS["hmc"] != MCMC_DEFAULTS_MAR["hmc"]
    rng = np.random.default_rng(0)
    df = pd.DataFrame({c: rng.integers(0, 2, 300) for c in ("x1", "x2", "y")}).astype(float)
    schema = dpsynth.Schema.from_dict({c: {"type": "categorical", "categories": [0, 1]} for c in ("x1", "x2", "y")})

    class Stop(Exception):
        pass

    def settings(**options):
        gen = dpsynth.NAPSUMQ(2.0, 1e-6, queries=[("x1", "x2"), ("x2", "y")], **options)
        gen._fit_posterior = lambda *a, **k: (_ for _ in ()).throw(Stop())
        with pytest.raises(Stop):
            gen.fit(df, schema, seed=1)
        return gen.missing_mode_, tuple(getattr(gen, k + "_") for k in ("mcmc_chains", "mcmc_warmup",
                                                                         "mcmc_draws", "mcmc_thin"))

    assert settings() == ("available-case", MCMC_DEFAULTS["hmc"])
    assert settings(incomplete="x2") == ("mar", MCMC_DEFAULTS_MAR["hmc"])
    assert settings(incomplete="x2", mcmc_chains=4)[1] == (4, *MCMC_DEFAULTS_MAR["hmc"][1:])
    assert settings(missing="available-case", mcmc_warmup=7)[1] == (MCMC_DEFAULTS["hmc"][0], 7,
                                                                    *MCMC_DEFAULTS["hmc"][2:])


def test_pmse_stores_its_options_as_passed_and_derives_in_fit():
    """PMSEMechanism keeps ``cart``, ``order`` and the None sampler settings as passed; fit fills
    in the defaults (``n_candidates_``, ``n_stages_``, ``cart_``)."""
    import numpy as np

    from dpsynth.generators.pmse.paper import UNBOUNDED, paper_data

    cart, order = {"maxdepth": 3}, ("x2", "x1")
    gen = dpsynth.PMSEMechanism(1.0, tree="paper", cart=cart, order=order, n_releases=1, n_candidates=20)
    assert gen.cart is cart and gen.order is order and gen.n_stages is None
    gen.fit(paper_data(60, np.random.default_rng(0)), UNBOUNDED, seed=1)
    assert gen.get_params()["cart"] is cart and (gen.n_candidates_, gen.n_stages_) == (20, 4)
    assert gen.cart_ == {"maxdepth": 3, "cp": 0.01, "minsplit": 2, "minbucket": 1}
    from dpsynth.report.sections import settings_table

    shown = dict(settings_table(gen.sample(m=1, seed=2)).values)  # the report shows the values in use
    assert (shown["n_stages"], shown["n_candidates"], shown["order"]) == ("4", "20", "('x2', 'x1')")
    with pytest.raises(ValueError, match="cart must be None or a dict with keys among"):
        dpsynth.PMSEMechanism(1.0, cart={"depth": 3})
    with pytest.raises(TypeError, match="keep_diagnostics must be True or False"):
        dpsynth.PMSEMechanism(1.0, keep_diagnostics=1)


def test_missing_data_wrappers_store_what_the_user_passed(toy):
    """CompleteRows and ImputeFirst keep their arguments and the wrapped generator's options as passed
    (get_params returns both, clone copies them); fit derives count_share_, impute_share_, impute_columns_."""
    from sklearn.base import clone

    from dpsynth.missing.strategies import CompleteRows, ImputeFirst

    df, schema = toy
    order = ["grp", "sex", "age"]
    gen = CompleteRows(1.0, 1e-6, generator="kamino", order=order, epochs=1)  # add/remove: no count_share
    assert gen.get_params() == {"epsilon": 1.0, "delta": 1e-6, "generator": "kamino", "n_complete": None,
                                "count_share": None, "order": order, "epochs": 1}
    assert gen.get_params()["order"] is order and clone(gen).get_params()["order"] is not order
    gen = CompleteRows(1.0, generator="privbayes", k=1.0)  # replace-one: 2% of ε for the count when None
    twin = clone(gen)
    assert twin.get_params() == gen.get_params() and twin.method == "complete-rows:privbayes"
    gen.fit(df, schema, seed=1)
    assert gen.count_share is None and gen.count_share_ == 0.02 and gen.generator_.k == 1
    assert CompleteRows(1.0, generator="privbayes", n_complete=50.0).n_complete == 50  # a whole float from R
    columns = ("age", "sex")
    gen = ImputeFirst(2.0, generator="independent", imputation="dp-mean", impute_columns=columns)
    gen.fit(df, schema, seed=1)
    assert gen.get_params()["impute_columns"] is columns and gen.impute_share is None
    assert gen.impute_columns_ == ["age", "sex"] and gen.impute_share_ == 0.25
    assert ImputeFirst(1.0, imputation="dp-mean", impute_columns="age").fit(df, schema, seed=1).impute_columns_ == ["age"]
    with pytest.raises(ValueError, match="count_share must be a fraction of the budget"):
        CompleteRows(1.0, generator="privbayes", count_share=1.5)
    with pytest.raises(TypeError, match="n_complete must be a whole number"):
        CompleteRows(1.0, generator="privbayes", n_complete=2.5)
    with pytest.raises(ValueError, match="impute_share must be a fraction of the budget"):
        ImputeFirst(1.0, imputation="dp-mean", impute_share=1.0)
    with pytest.raises(TypeError, match="impute_share must be a number"):
        ImputeFirst(1.0, imputation="dp-mean", impute_share="0.5")
    with pytest.raises(TypeError, match="impute_columns must be None, a column name or a list"):
        ImputeFirst(1.0, impute_columns=3)


def test_pmse_comparators_check_through_validation():
    """NoisyBayesSynth and SmoothHistogram store their counts as passed, checked by dpsynth.validation."""
    from sklearn.base import clone

    from dpsynth.generators.comparators import NoisyBayesSynth, SmoothHistogram

    gen = NoisyBayesSynth(1.0, n_releases=3)
    assert gen.get_params() == {"epsilon": 1.0, "delta": None, "n_releases": 3} and clone(gen).n_releases == 3
    assert type(NoisyBayesSynth(1.0, n_releases=2.0).n_releases) is int  # R's 2
    with pytest.raises(TypeError, match="n_releases must be a whole number"):
        NoisyBayesSynth(1.0, n_releases=2.5)
    with pytest.raises(ValueError, match="n_releases must be at least 1, got 0"):
        NoisyBayesSynth(1.0, n_releases=0)
    gen = SmoothHistogram(1.0, bins=4)
    assert gen.get_params() == {"epsilon": 1.0, "delta": None, "bins": 4, "k": None}
    assert clone(gen).get_params() == gen.get_params()
    with pytest.raises(TypeError, match="k must be None or a whole number"):
        SmoothHistogram(1.0, k=True)
    with pytest.raises(ValueError, match="bins must be at least 1"):
        SmoothHistogram(1.0, bins=0)
