import numpy as np
import pandas as pd
import pytest

import dpsynth


@pytest.fixture(scope="session")
def adult():
    return dpsynth.load_dataset("adult")


@pytest.fixture(scope="session")
def adult_mcar_8000(adult):
    """8,000 complete Adult rows, the same rows with 20 % MCAR cells, the schema, and the 2-way TVD
    of uniform noise to the complete rows (the yardstick of the slow quality tests)."""
    from dpsynth import metrics, missing

    df, schema = adult
    truth = df.dropna().sample(n=8000, random_state=0).reset_index(drop=True)
    masked = missing.ampute(truth, mechanism="MCAR", p=0.2, seed=1)
    rng = np.random.default_rng(0)
    uniform = schema.decode(np.column_stack([rng.integers(0, k, 8000) for k in schema.domain_sizes]), rng)
    return truth, masked, schema, metrics.tvd(truth, uniform, schema, k=2)


@pytest.fixture(scope="session")
def mcar_tvd(adult_mcar_8000):
    """``mcar_tvd(methods, epsilon, delta, **sample)``: for each method, the 2-way TVD to the complete
    rows of one dataset from a fit (seed 1) on the MCAR rows of :func:`adult_mcar_8000` (dataset
    seed 2), after checking that the fit spent no more than ``epsilon``; {method: TVD}."""
    from dpsynth import metrics
    from dpsynth.generators import make_generator

    truth, mcar, schema, _ = adult_mcar_8000

    def tvd_by_method(methods, epsilon: float, delta: float, **sample) -> dict:
        res = {}
        for m in methods:
            gen = make_generator(m, epsilon, delta).fit(mcar, schema, seed=1)
            res[m] = metrics.tvd(truth, gen.sample(seed=2, **sample).datasets[0], schema, k=2)
            assert gen.ledger.total_epsilon() <= epsilon * (1 + 1e-9)
        return res
    return tvd_by_method


@pytest.fixture
def toy():
    """A small table with missing values in each kind of column (declared public: any column may be
    missing, so NAPSU-MQ's default completes them under MAR)."""
    schema = dpsynth.Schema.from_dict({
        "sex": {"type": "categorical", "categories": ["F", "M"], "missing": True},
        "grp": {"type": "categorical", "categories": ["a", "b", "c"], "missing": True},
        "age": {"type": "numeric", "lower": 0, "upper": 100, "bins": 5, "integer": True, "missing": True},
    })
    rng = np.random.default_rng(0)
    n = 200
    df = pd.DataFrame({
        "sex": pd.Categorical(rng.choice(["F", "M"], n), categories=["F", "M"]),
        "grp": pd.Categorical(rng.choice(["a", "b", "c"], n), categories=["a", "b", "c"]),
        "age": rng.integers(0, 100, n).astype(float),
    })
    df.loc[::7, "age"] = np.nan
    df.loc[::11, "sex"] = np.nan
    return df, schema
