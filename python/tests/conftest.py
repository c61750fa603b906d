import numpy as np
import pandas as pd
import pytest

import dpsynth


@pytest.fixture(scope="session")
def adult():
    return dpsynth.load_dataset("adult")


@pytest.fixture
def toy():
    """A small table with missing values in each kind of column."""
    schema = dpsynth.Schema.from_dict({
        "sex": {"type": "categorical", "categories": ["F", "M"]},
        "grp": {"type": "categorical", "categories": ["a", "b", "c"]},
        "age": {"type": "numeric", "lower": 0, "upper": 100, "bins": 5, "integer": True},
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
