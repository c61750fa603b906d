"""Where :meth:`Schema.validate <dpsynth.schema.table.Schema.validate>` sends data that are not a
pandas DataFrame (a Parquet/CSV path, a DuckDB relation, a Spark DataFrame).

Such data are checked where they live, by queries, and the package that reads them provides the
:class:`Source` that runs those queries: :mod:`dpsynth.marginals` registers its ``open_table``
with :func:`register_opener` when it is imported (``import dpsynth`` imports it). The schema so
imports nothing from the packages above it (dependency inversion), and the checks of data kept in
DuckDB or Spark stay with the SQL that encodes them (:mod:`dpsynth.marginals.backends`).
"""
from __future__ import annotations

from typing import Callable, Protocol


class Source(Protocol):
    """Data where they live, able to run :meth:`Schema.validate`'s checks there."""

    def validate(self, schema, allow_empty: bool = False) -> None:
        """Raise what :meth:`Schema.validate` raises for a DataFrame that broke the same rule."""


_OPENER: list = []  # the registered opener, (data, schema) -> Source; at most one


def register_opener(opener: Callable[..., Source]) -> None:
    """Make ``opener(data, schema)`` the way to reach data that are not a DataFrame (the last one
    registered wins)."""
    _OPENER[:] = [opener]


def open_source(data, schema) -> Source:
    """``data`` (not a DataFrame) as a :class:`Source`, through the registered opener."""
    if not _OPENER:
        raise TypeError(f"cannot validate a {type(data).__name__} here: pass a pandas DataFrame, or import dpsynth "
                        "(its marginals package reads Parquet/CSV paths, DuckDB relations and Spark DataFrames)")
    return _OPENER[0](data, schema)


__all__ = ["Source", "register_opener", "open_source"]
