"""Counting marginals: the one place that reads encoded private rows.

Every marginal-based generator (independent, PrivBayes/PrivBayesE, NAPSU-MQ's MST selection and
measurements) sees the private data only through a :class:`Rows` object and its contingency
tables. A table counts the rows observed on all of its attributes (available-case, PrivBayesE's
partial marginal observation; the seed paper, Alg. 2). Each row adds at most 1 to one cell, so under
add/remove a table's L1 and L2 sensitivity is 1; under replace-one it is 2 (L1) and √2 (L2).

Where the rows live (:func:`open_table`, in :mod:`dpsynth.marginals.backends`):

* a pandas DataFrame: encoded in memory by :meth:`Schema.encode`;
* a path to a Parquet or CSV file, or a DuckDB relation: encoded and grouped by DuckDB;
* a Spark DataFrame: encoded and grouped by Spark SQL.

Each backend first reduces the rows to the **distinct encoded rows and their multiplicities**
(the non-empty cells of the full contingency table, a sufficient statistic for every marginal)
with one ``GROUP BY``; :class:`EncodedRows` then counts any marginal from it in numpy. Only if
that reduction has more than ``max_distinct`` rows does counting stay in the backend, one
``GROUP BY GROUPING SETS`` query per batch of tables (:class:`dpsynth.marginals.backends.SQLRows`).
Either way the counts are integers, identical whatever the backend, so the same seed gives the
same noise and the same synthetic data.

A table is given as a sequence of attribute indices (schema order) or of ``(attribute, level)``
pairs: level ℓ merges 2^ℓ neighbouring bins (code >> ℓ), PrivBayes's generalisation hierarchy.

Example
-------
>>> import numpy as np
>>> codes = np.array([[0, 1], [1, 1], [-1, 0]])
>>> count_marginal(codes, [0, 1], [2, 2]).tolist()
[[0, 1], [0, 1]]
>>> rows = EncodedRows(codes, sizes=[2, 2])
>>> rows.n, rows.table([1]).tolist(), rows.table([0], missing_cell=True).tolist()
(3, [1, 2], [1, 1, 1])
"""
from __future__ import annotations

from ..schema.sources import register_opener
from .rows import (MAX_CELLS, EncodedRows, Rows, as_rows, count_marginal, count_with_missing, observed_mask,
                   table_spec)


def open_table(data, schema=None, **options):
    """The private ``data`` (DataFrame, Parquet/CSV path, DuckDB relation or Spark DataFrame) as a
    :class:`~dpsynth.marginals.backends.Table`; see :mod:`dpsynth.marginals.backends`."""
    from .backends import open_table as _open

    return _open(data, schema, **options)


register_opener(open_table)  # Schema.validate on a path, a DuckDB relation or a Spark DataFrame


__all__ = ["MAX_CELLS", "Rows", "EncodedRows", "as_rows", "open_table", "count_marginal", "count_with_missing",
           "observed_mask", "table_spec"]
