"""Columns the public schema declares to be a function of another column (``derived_from``).

Some tables hold the same fact twice: the UCI Adult file has ``education`` (16 named levels) and
``education-num`` (the same 16 levels, numbered 1-16; adult.names). Modelled as two columns, the
pair's table is 240 structurally empty cells of 256 that any noisy measurement fills with noise,
and a posterior over such a table does not mix. Declared in the schema
(``"education": {"type": "categorical", "categories": [...], "derived_from": "education-num"}``),
the generators model ``education-num`` only and write ``education`` after sampling, from the
declared map: post-processing of the release, no budget. The private values of a derived column
are never read (nor checked: checking them would reveal whether the declaration holds for every
private row), so the synthetic data follow the declaration exactly.

A derived column has the missing value where its source is missing.

Example
-------
>>> import pandas as pd
>>> from dpsynth.schema import Schema
>>> s = Schema.from_dict({"years": {"type": "numeric", "lower": 0, "upper": 3, "bins": 3},
...                       "level": {"type": "categorical", "categories": ["low", "high"],
...                                 "derived_from": {"column": "years", "map": ["low", "low", "high"]}}})
>>> s.derived, s.modelled().names
(['level'], ['years'])
>>> derive(pd.DataFrame({"years": [0.5, 2.5, None]}), s)["level"].tolist()
['low', 'high', nan]
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import numpy as np
import pandas as pd

from .codes import decode_column, encode_column
from .column import MISSING, Column

if TYPE_CHECKING:
    from .table import Schema


def check_derivations(columns: Mapping[str, Column]) -> None:
    """ValueError unless every ``derived_from`` names another, underived column of the schema and
    its map gives one of this column's categories for each of that column's levels."""
    for name, col in columns.items():
        if col.derived_from is None:
            continue
        source = columns.get(col.derived_from)
        if source is None or col.derived_from == name:
            raise ValueError(f"column {name!r} is derived_from {col.derived_from!r}, which is not another "
                             f"column of the schema; name one of {[n for n in columns if n != name]}")
        if source.derived_from is not None:
            raise ValueError(f"column {name!r} is derived_from {col.derived_from!r}, itself derived from "
                             f"{source.derived_from!r}; derive both from {source.derived_from!r}")
        if col.derived_map is None:
            if source.size != col.size:
                raise ValueError(f"column {name!r} ({col.size} categories) is derived_from {col.derived_from!r} "
                                 f"({source.size} levels) level by level, so both need the same number of levels; "
                                 f"give a 'map' with one of {name!r}'s categories for each level of "
                                 f"{col.derived_from!r}")
            continue
        if len(col.derived_map) != source.size:
            raise ValueError(f"column {name!r}: derived_from's map has {len(col.derived_map)} entries; it needs one "
                             f"category of {name!r} for each of the {source.size} levels of {col.derived_from!r}")
        unknown = [v for v in col.derived_map if v not in col.categories]
        if unknown:
            raise ValueError(f"column {name!r}: derived_from's map names {unknown}, which are not categories of "
                             f"{name!r} ({list(col.categories)})")


def code_map(col: Column) -> np.ndarray:
    """The derived column's code for each code of its source."""
    if col.derived_map is None:
        return np.arange(col.size)
    index = {c: i for i, c in enumerate(col.categories)}
    return np.array([index[v] for v in col.derived_map], dtype=np.int64)


def derive(frame: pd.DataFrame, schema: "Schema") -> pd.DataFrame:
    """``frame`` (the modelled columns, as sampled) with the schema's derived columns added, in the
    schema's column order; the frame passed is not modified."""
    out = frame.copy()
    for name in schema.derived:
        col = schema[name]
        source = encode_column(frame[col.derived_from], schema[col.derived_from])
        codes = np.where(source >= 0, code_map(col)[np.maximum(source, 0)], MISSING)
        out[name] = decode_column(codes, col, None).values  # a Categorical, row by row
    return out[[n for n in schema.names if n in out.columns]]
