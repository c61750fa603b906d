"""Public metadata: column kinds, category lists, numeric bounds and bins.

A :class:`Schema` is the *public* description of a table. Every generator reads
domains (categories, bounds, bins) from here, never from the private rows: a
domain read from the data leaks membership (a unique category shows up in the
output even at ε → 0). ``Schema.from_dataframe`` exists for exploration only;
it warns and marks the schema as data-derived, and the ledger records that.

Encoding: categorical values become integer codes 0..K-1 in schema order,
numeric values are clipped to [lower, upper] and binned by the schema's bins;
a missing cell is :data:`MISSING` (-1) in both cases. Missing is never a category.

Example
-------
>>> import pandas as pd
>>> from dpsynth.schema import Schema
>>> s = Schema.from_dict({"sex": {"type": "categorical", "categories": ["F", "M"]},
...                       "age": {"type": "numeric", "lower": 0, "upper": 100, "bins": 4}})
>>> s.encode(pd.DataFrame({"sex": ["M", None], "age": [30, 99]})).tolist()
[[1, 1], [-1, 3]]

Modules: :mod:`~dpsynth.schema.column` (one column, read from a dict), :mod:`~dpsynth.schema.table`
(the :class:`Schema`), :mod:`~dpsynth.schema.codes` (encoding, decoding, output dtypes),
:mod:`~dpsynth.schema.checks` (argument checks and their messages), :mod:`~dpsynth.schema.learn`
(domains learned under DP) and :mod:`~dpsynth.schema.sources` (where data that are not a DataFrame
are validated: the opener :mod:`dpsynth.marginals` registers).
"""
from __future__ import annotations

from ..files import atomic_write_bytes, atomic_write_text
from .checks import check_frame, unknown_categories_message
from .codes import cast_to_schema, output_dtype
from .column import DEFAULT_BINS, MISSING, Column, DataDerivedSchemaWarning
from .table import Schema

__all__ = ["MISSING", "DEFAULT_BINS", "DataDerivedSchemaWarning", "Column", "Schema", "output_dtype",
           "cast_to_schema", "check_frame", "unknown_categories_message", "atomic_write_text",
           "atomic_write_bytes"]
