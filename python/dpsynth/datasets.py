"""Bundled public datasets (``data/<name>/<name>.csv`` with ``schema.json``)."""
from __future__ import annotations

import os
from pathlib import Path

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
    dtypes = {c: "string" for c, col in schema.columns.items() if col.is_categorical}
    raw = pd.read_csv(folder / f"{name}.csv", dtype=dtypes, keep_default_na=False, na_values=[""])
    raw = raw.astype({c: object for c in dtypes})
    raw = raw.where(raw.notna(), None)
    return schema.coerce(raw), schema
