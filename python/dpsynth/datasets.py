"""Bundled public datasets (``data/<name>/<name>.csv`` with ``schema.json``), reading a CSV file
with a public schema, and the data of the ``dpsynth demo`` (which its tests share)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from .schema import Schema

DATASETS = ("adult", "bank", "national")


def data_dir() -> Path:
    """The folder with the bundled data: $DPSYNTH_DATA, else ``data/`` of the source checkout."""
    env = os.environ.get("DPSYNTH_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "data"


def load_dataset(name: str) -> tuple[pd.DataFrame, Schema]:
    """Load a bundled dataset with its public schema; real missing values are kept as NA and
    categorical columns are pandas ``category`` with the schema's levels.

    >>> df, schema = load_dataset("adult")
    >>> df.shape, int(df.isna().sum().sum())
    ((32561, 15), 4262)
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; bundled datasets are {list(DATASETS)}")
    folder = data_dir() / name
    schema = Schema.from_json(folder / "schema.json")
    return schema.coerce(read_csv(folder / f"{name}.csv", schema, na_values=("",))), schema


def read_csv(path, schema: Schema, na_values=("", "NA", "?")) -> pd.DataFrame:
    """A CSV file as the schema reads it: categorical columns as strings (object dtype, so that
    "01" stays "01"), the cells in ``na_values`` (only those) missing as None; not yet coerced to the
    schema (:meth:`Schema.coerce`)."""
    dtypes = {c: "string" for c, col in schema.columns.items() if col.is_categorical}
    df = pd.read_csv(path, dtype=dtypes, keep_default_na=False, na_values=list(na_values))
    df = df.astype({c: object for c in dtypes if c in df.columns})
    return df.where(df.notna(), None)


#: the demo's analysis (Räisä et al. 2023, Sec. 5.2); NAPSU-MQ is told it, so that it measures what the model needs
DEMO_FORMULA = "income ~ age + sex + race"


def demo_data(method: str) -> tuple[pd.DataFrame, Schema, dict]:
    """(data, schema, generator options) of ``dpsynth demo``: Adult with its real missing values; for
    NAPSU-MQ the paper's public discretisation (Räisä et al. 2023, Supp. E), which keeps the
    likelihood's matrices small, and the demo's analysis named to it.

    >>> data, schema, options = demo_data("privbayes-e")
    >>> data.shape, options
    ((32561, 15), {})
    """
    df, schema = load_dataset("adult")
    if method != "napsu-mq":
        return df, schema, {}
    d, s = adult_reduced(df, schema)
    # workclass is the one column of the 10 the public schema declares may be missing (the dataset's
    # documentation): NAPSU-MQ's default missing="auto" measures it with missing as its own level and
    # releases datasets completed under MAR
    return d, s, {"analyses": [DEMO_FORMULA]}


def demo_analysis_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """The columns of the demo's model from either layout of :func:`demo_data` (post-processing of
    released data): age as a number (bucket midpoints in the discretised layout). A copy; the
    input is not changed."""
    out = frame.copy()
    out["age"] = pd.to_numeric(out["age"].astype(object).where(out["age"].notna(), None)).astype(float)
    return out


#: The paper's Adult setting (Supp. E): 10 columns; the 2-way marginals its analysis needs.
ADULT_COLUMNS = ["age", "workclass", "education", "marital-status", "race", "sex", "capital-gain", "capital-loss",
                 "hours-per-week", "income"]
ADULT_FORCED_QUERIES = [("age", "income"), ("race", "income"), ("sex", "income"), ("race", "sex"),
                        ("hours-per-week", "income")]


def adult_reduced(df, schema):
    """The paper's discretised Adult (Räisä et al. 2023, Supp. E) as a *public* transformation of
    ``dpsynth.load_dataset("adult")``: the 10 columns above; age and hours-per-week in 5 equal-width
    buckets of the schema's public bounds (17–90, 1–99); capital gain and loss as positive-or-not.
    Returns (DataFrame of categoricals, Schema); missing values are kept, and so are the schema's
    declarations of which columns may be missing. Bucket labels are the bucket midpoints (the
    paper's analysis uses age as the midpoint).

    >>> import dpsynth
    >>> d, s = adult_reduced(*dpsynth.load_dataset("adult"))
    >>> s.domain_sizes
    [5, 8, 16, 7, 5, 2, 2, 2, 5, 2]
    """
    out, spec = {}, {}
    for c in ADULT_COLUMNS:
        col = schema[c]
        if c in ("age", "hours-per-week"):
            edges = np.linspace(col.lower, col.upper, 6)
            mids = [f"{(a + b) / 2:g}" for a, b in zip(edges[:-1], edges[1:])]
            code = np.clip(np.searchsorted(edges, df[c].to_numpy(dtype=float), side="right") - 1, 0, 4)
            vals = np.where(df[c].isna(), None, np.array(mids, dtype=object)[code])
            out[c], spec[c] = vals, mids
        elif c in ("capital-gain", "capital-loss"):
            x = df[c].to_numpy(dtype=float)
            out[c] = np.where(np.isnan(x), None, np.where(x > 0, "positive", "zero"))
            spec[c] = ["zero", "positive"]
        else:
            out[c] = df[c].astype(object).where(df[c].notna(), None).to_numpy()
            spec[c] = list(col.categories)
    frame = pd.DataFrame({c: pd.Categorical(out[c], categories=spec[c]) for c in ADULT_COLUMNS}, index=df.index)
    sch = Schema.from_dict({"name": "adult-reduced", "columns": {
        c: {"type": "categorical", "categories": spec[c], **({"missing": True} if schema[c].missing else {}),
            "source": "public transformation of the adult schema (Räisä et al. 2023, Supp. E)"} for c in ADULT_COLUMNS}})
    return frame, sch

