"""Where the private rows live: a pandas DataFrame, DuckDB (a Parquet/CSV path or a relation) or Spark.

:func:`open_table` wraps the caller's data in a :class:`Table` with three operations:

* ``validate(schema)``: the checks of :meth:`Schema.validate` (columns, categories inside the public
  list, numeric types), run as queries where the data live, with the same errors;
* ``rows(schema)``: a :class:`~dpsynth.marginals.Rows` to count marginals from. SQL backends encode
  every row by the public schema in SQL (``CASE`` expressions: categories in schema order, numerics
  clipped and binned by the schema's edges, NULL/NaN → MISSING) and group the encoded rows; the
  distinct encoded rows and their multiplicities come back to Python if there are at most
  ``max_distinct`` of them, otherwise every table is a ``GROUP BY GROUPING SETS`` query
  (:class:`SQLRows`). No private row is read into Python by either. The second path is for data
  whose encoded rows are nearly all distinct; it is slow for PrivBayes, which scores thousands of
  candidate tables (1M Adult rows: about 640 s against 4 s grouped, same synthetic data);
* ``to_pandas(schema, method)``: the rows as a DataFrame, for the generators that train on rows
  (DP-SGD, column-wise, pMSE, the missing-data strategies); refused with a clear error when the
  table is larger than ``max_cells_in_memory`` cells (rows × columns).

Spark needs ``pip install dpsynth[spark]`` and Java. A CSV file is read with the cells
``""``, ``"NA"`` and ``"?"`` as missing (as ``dpsynth synthesize`` reads CSV) and the schema's
categorical columns as text.
"""
from __future__ import annotations

import copy
import json
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
import pandas as pd

from ..schema.checks import unknown_categories_message
from ..schema.column import MISSING
from .rows import EncodedRows, Rows, table_spec

if TYPE_CHECKING:
    from ..schema import Schema

NA_STRINGS = ("", "NA", "?")
MAX_DISTINCT = 1_000_000            # distinct encoded rows brought into Python; beyond, counting stays in SQL
MAX_CELLS_IN_MEMORY = 100_000_000   # rows × columns a row-reading method may load from a path or a relation
DUCKDB_MEMORY_LIMIT = "512MB"       # for the connection dpsynth opens on a path (DuckDB spills beyond it)
_PARQUET = (".parquet", ".pq")
_CSV = (".csv", ".tsv", ".csv.gz", ".tsv.gz")
_INTEGER_TYPES = {"tinyint", "smallint", "int", "integer", "bigint", "hugeint", "utinyint", "usmallint",
                  "uinteger", "ubigint", "uhugeint", "long", "short", "byte", "int2", "int4", "int8"}
_FLOAT_TYPES = {"float", "double", "real", "float4", "float8"}


def open_table(data, schema: Schema | None = None, *, max_distinct: int = MAX_DISTINCT,
               max_cells_in_memory: int = MAX_CELLS_IN_MEMORY) -> "Table":
    """Wrap ``data`` (DataFrame, path to a Parquet/CSV file or a folder of Parquet files, DuckDB
    relation, Spark DataFrame, or a Table already) without reading its rows. ``schema`` (optional)
    makes a CSV file's categorical columns read as text."""
    if isinstance(data, Table):
        return data
    opts = dict(max_distinct=max_distinct, max_cells_in_memory=max_cells_in_memory)
    if isinstance(data, pd.DataFrame):
        return FrameTable(data, **opts)
    if isinstance(data, (str, os.PathLike)):
        return DuckDBTable.from_path(data, schema, **opts)
    module = type(data).__module__ or ""
    if module.startswith("duckdb") and type(data).__name__ == "DuckDBPyRelation":
        return DuckDBTable(data, str(type(data).__name__), **opts)
    if module.startswith("pyspark.sql") and type(data).__name__ == "DataFrame":
        return SparkTable(data, **opts)
    raise TypeError(f"cannot read private data from a {type(data).__name__}; pass a pandas DataFrame, a path to a "
                    "Parquet or CSV file, a DuckDB relation (duckdb.sql(...)) or a Spark DataFrame")


class Table:
    """Private data where they live (see the module docstring)."""

    columns: list
    kind = ""

    def __init__(self, max_distinct: int = MAX_DISTINCT, max_cells_in_memory: int = MAX_CELLS_IN_MEMORY):
        self.max_distinct = int(max_distinct)
        self.max_cells_in_memory = int(max_cells_in_memory)

    ignored: frozenset = frozenset()  # columns never read (a schema's derived columns: ``without``)

    def without(self, names) -> "Table":
        """This table with the columns ``names`` left unread (:mod:`dpsynth.schema.derived`)."""
        out = copy.copy(self)
        out.ignored = frozenset(names)
        return out

    def validate(self, schema: Schema, allow_empty: bool = False) -> None:  # pragma: no cover
        raise NotImplementedError

    def rows(self, schema: Schema) -> Rows:  # pragma: no cover
        raise NotImplementedError

    def to_pandas(self, schema: Schema, method: str = "this method") -> pd.DataFrame:  # pragma: no cover
        raise NotImplementedError

    def count(self, schema: Schema) -> int:  # pragma: no cover
        """Number of rows (validating the table against ``schema`` first where that is a query)."""
        raise NotImplementedError


class FrameTable(Table):
    """A pandas DataFrame: encoded in memory by :meth:`Schema.encode`, then grouped (hash group-by)."""

    kind = "pandas"

    def __init__(self, df: pd.DataFrame, **opts):
        super().__init__(**opts)
        self.df = df
        self.columns = [str(c) for c in df.columns]

    def without(self, names):
        names = set(names)
        return FrameTable(self.df[[c for c in self.df.columns if str(c) not in names]],
                          max_distinct=self.max_distinct, max_cells_in_memory=self.max_cells_in_memory)

    def validate(self, schema, allow_empty=False):
        schema.validate(self.df, allow_empty=allow_empty)

    def rows(self, schema):
        return EncodedRows.grouped(schema.encode(self.df[schema.names]), schema.domain_sizes)

    def to_pandas(self, schema, method="this method"):
        return self.df

    def count(self, schema):
        return len(self.df)


class SQLTable(Table):
    """Rows behind SQL: the schema's encoding as SQL expressions, counting as GROUP BY queries.
    Subclasses say how to quote, how to run a query on the source (named ``self.view``) and the
    source's column names and types."""

    grouping_batch = 256  # tables per GROUPING SETS query in SQLRows (DuckDB: one scan, a hash table per set)

    def __init__(self, **opts):
        super().__init__(**opts)
        self._checked: dict = {}  # schema → (number of rows, distinct encoded rows or None), once validated

    # --- dialect (DuckDB's; Spark overrides)
    @staticmethod
    def ident(name: str) -> str:
        return '"' + str(name).replace('"', '""') + '"'

    @staticmethod
    def string(value: str) -> str:
        return "'" + str(value).replace("'", "''") + "'"

    def _fetch(self, sql: str) -> dict:  # pragma: no cover
        """Run ``sql`` (which reads the source as ``self.view``): column name → numpy array (a float
        array with NaN for NULL where a column has NULLs)."""
        raise NotImplementedError

    def _types(self) -> list[str]:  # pragma: no cover
        raise NotImplementedError

    def _collect(self, method: str) -> pd.DataFrame:  # pragma: no cover
        raise NotImplementedError

    # --- encoding by the public schema
    def encoded_sql(self, schema: Schema) -> str:
        """``SELECT <code of each schema column> AS c0, c1, ... FROM <source>``: integer codes, MISSING
        for NULL/NaN, -2 for a value outside the schema's categories (refused by :meth:`validate`)."""
        types = dict(zip(self.columns, self._types()))
        exprs = []
        for j, (name, col) in enumerate(schema.columns.items()):
            base = _base_type(types[name])
            exprs.append(f"{self._encode_column(col, self.ident(name), base)} AS c{j}")
        return f"SELECT {', '.join(exprs)} FROM {self.view}"

    def _encode_column(self, col, ident: str, base: str) -> str:
        numeric = base in _INTEGER_TYPES or base in _FLOAT_TYPES or base.startswith("decimal")
        if not col.is_categorical:  # clip to the edges and bin: searchsorted(edges, x, "right") - 1
            v = f"CAST({ident} AS DOUBLE)"
            edges = col.edges()
            whens = " ".join(f"WHEN {v} < {_double(e)} THEN {i}" for i, e in enumerate(edges[1:-1]))
            return f"CASE WHEN {v} IS NULL OR isnan({v}) THEN {MISSING} {whens} ELSE {len(edges) - 2} END"
        nan = f" OR isnan({ident})" if base in _FLOAT_TYPES else ""
        whens = []
        for i, c in enumerate(col.categories):
            if numeric:  # pandas' lookup: a number matches an equal number, or a category written as it
                value = _as_number(c)
                if value is not None:
                    whens.append(f"WHEN {ident} = {_double(value)} THEN {i}")
            else:
                whens.append(f"WHEN CAST({ident} AS STRING) = {self.string(str(c))} THEN {i}")
        return f"CASE WHEN {ident} IS NULL{nan} THEN {MISSING} {' '.join(whens)} ELSE -2 END"

    # --- validation and the distinct encoded rows (one scan)
    def validate(self, schema, allow_empty=False):
        if self.count(schema) == 0 and not allow_empty:
            raise ValueError(f"the {self.kind} table has no rows; pass the private table with at least one row")

    def count(self, schema) -> int:
        """Number of rows (validating the table against ``schema`` first)."""
        return self._scan(schema)[0]

    def rows(self, schema):
        n, distinct = self._scan(schema)
        return SQLRows(self, schema, n=n) if distinct is None else distinct

    def _scan(self, schema) -> tuple:
        """(number of rows, EncodedRows of the distinct encoded rows or None when there are more than
        ``max_distinct``), after the schema checks; one GROUP BY over the encoded rows (a second,
        counting query only when they are too many), cached per schema."""
        key = json.dumps(schema.to_dict(), sort_keys=True, default=str)
        if key not in self._checked:
            self._check_types(schema)
            d = len(schema)
            radix = [c.size + 2 for c in schema.columns.values()]  # codes -2..size-1, shifted by 2
            chunks = _pack_chunks(radix)
            packs = ", ".join(f"{_pack_sql(chunk, radix)} AS k{i}" for i, chunk in enumerate(chunks))
            keys = ", ".join(f"k{i}" for i in range(len(chunks)))
            out = self._fetch(f"SELECT {keys}, COUNT(*) AS n FROM (SELECT {packs} FROM ({self.encoded_sql(schema)}) "
                              f"AS t) AS p GROUP BY {keys} LIMIT {self.max_distinct + 1}")
            if len(out["n"]) <= self.max_distinct:
                codes = np.empty((len(out["n"]), d), dtype=np.int64)
                for i, chunk in enumerate(chunks):
                    rest = out[f"k{i}"].astype(np.int64)
                    for j in reversed(chunk):
                        rest, codes[:, j] = np.divmod(rest, radix[j])
                codes -= 2
                bad = (codes == -2).any(axis=0)
                counts = out["n"].astype(np.int64)
                n, distinct = int(counts.sum()), EncodedRows(codes, schema.domain_sizes, counts)
            else:
                cats = [j for j, c in enumerate(schema.columns.values()) if c.is_categorical]
                flags = "".join(f", MAX(CASE WHEN c{j} = -2 THEN 1 ELSE 0 END) AS bad{j}" for j in cats)
                out = self._fetch(f"SELECT COUNT(*) AS n{flags} FROM ({self.encoded_sql(schema)}) AS t")
                bad = np.zeros(d, dtype=bool)
                bad[cats] = [np.nan_to_num(out[f"bad{j}"][0]) > 0 for j in cats]
                n, distinct = int(out["n"][0]), None
            for j in np.flatnonzero(bad):  # a domain check: the message names no value
                name = schema.names[j]
                raise ValueError(unknown_categories_message(
                    name, f"SELECT DISTINCT {self.ident(name)} on the {self.kind} table"))
            self._checked[key] = (n, distinct)
        return self._checked[key]

    def _check_types(self, schema) -> None:
        if not self.columns:
            raise ValueError(f"the {self.kind} table has no columns")
        schema.check_columns([c for c in self.columns if c not in self.ignored])
        for name, typ in zip(self.columns, self._types()):
            if name in self.ignored:
                continue
            col = schema.columns[name]
            base = _base_type(typ)
            if not col.is_categorical and not (base in _INTEGER_TYPES or base in _FLOAT_TYPES
                                               or base.startswith("decimal")):
                raise TypeError(f"column {name!r} is numeric in the schema but has type {typ} in the {self.kind} "
                                "table; cast it to a number (CAST(... AS DOUBLE)) or declare it categorical")

    def grouping_sets(self, schema, sets: Sequence[tuple], where: str = "") -> dict:
        """Counts of the encoded rows grouped by each attribute set (attribute indices, sorted),
        in one query: set → (codes k × len(set), multiplicities k)."""
        union = sorted({a for s in sets for a in s})
        cols = ", ".join(f"c{a}" for a in union)
        groups = ", ".join("(" + ", ".join(f"c{a}" for a in s) + ")" for s in sets)
        out = self._fetch(f"SELECT {cols}, COUNT(*) AS n FROM ({self.encoded_sql(schema)}) AS t {where} "
                          f"GROUP BY GROUPING SETS ({groups})")
        present = np.zeros(len(out["n"]), dtype=np.int64)  # which columns a result row is grouped by
        for k, a in enumerate(union):
            present |= (~np.isnan(out[f"c{a}"])).astype(np.int64) << k
        result = {}
        for s in sets:
            mask = present == sum(1 << union.index(a) for a in s)
            keys = np.column_stack([out[f"c{a}"][mask] for a in s]).astype(np.int64).reshape(-1, len(s))
            result[tuple(s)] = (keys, out["n"][mask].astype(np.float64))
        return result

    def to_pandas(self, schema, method="this method"):
        n = self.count(schema)
        cells = n * len(self.columns)
        if cells > self.max_cells_in_memory:
            raise ValueError(f"method {method!r} trains on rows and needs them in memory, but the {self.kind} table "
                             f"has {n:,} rows × {len(self.columns)} columns ({cells:,} cells, limit "
                             f"{self.max_cells_in_memory:,}). Pass a sample of the rows as a DataFrame, or use a "
                             "method that only counts marginals where the data live: independent, privbayes, "
                             "privbayes-e or napsu-mq")
        return self._collect(method)


class SQLRows(Rows):
    """Counting that stays in the backend: each batch of tables is one GROUP BY GROUPING SETS query
    (used when the rows have more than ``max_distinct`` distinct encodings)."""

    def __init__(self, table: SQLTable, schema: Schema, missing_level=(), complete_only: bool = False,
                 n: int | None = None):
        super().__init__(schema.domain_sizes, missing_level)
        self.source, self.schema, self.complete_only = table, schema, complete_only
        d = len(schema)
        self._where = ("WHERE " + " AND ".join(f"c{j} >= 0" for j in range(d))) if complete_only else ""
        if n is None:
            n = table._fetch(f"SELECT COUNT(*) AS n FROM ({table.encoded_sql(schema)}) AS t {self._where}")["n"][0]
        self.n = int(n)

    def tables(self, tables, missing_cell=False):
        specs = [table_spec(t) for t in tables]
        batch = self.source.grouping_batch
        for start in range(0, len(specs), batch):
            chunk = specs[start:start + batch]
            for spec in chunk:
                self._check_cells(spec)
            sets = list(dict.fromkeys(tuple(sorted({a for a, _ in s})) for s in chunk if s))
            grouped = self.source.grouping_sets(self.schema, sets, self._where) if sets else {}
            for spec in chunk:
                if not spec:
                    yield np.array(self.n, dtype=np.int64)
                    continue
                attrs = tuple(sorted({a for a, _ in spec}))
                keys, weights = grouped[attrs]
                yield self._dense(spec, [keys[:, attrs.index(a)] for a, _ in spec], weights, missing_cell)

    def complete(self):
        return SQLRows(self.source, self.schema, self.missing_level, complete_only=True)

    def with_missing_level(self, attrs):
        rows = SQLRows.__new__(SQLRows)
        rows.__dict__.update(self.__dict__)
        rows.missing_level = self.missing_level | set(attrs)
        return rows


class DuckDBTable(SQLTable):
    """A DuckDB relation (``duckdb.sql(...)``, ``conn.read_parquet(...)``), or a Parquet/CSV path that
    dpsynth opens on its own in-memory connection (``DUCKDB_MEMORY_LIMIT``; DuckDB spills to disk)."""

    kind = "DuckDB"

    def __init__(self, relation, label: str = "relation", **opts):
        super().__init__(**opts)
        self.relation, self.label = relation, label
        self.columns = [str(c) for c in relation.columns]
        self.view = "dpsynth_src_" + uuid.uuid4().hex[:12]

    @classmethod
    def from_path(cls, path, schema: Schema | None = None, **opts) -> "DuckDBTable":
        import duckdb

        p = Path(path)
        if not p.exists():
            raise ValueError(f"no such file or folder: {str(path)!r}; pass the path to a Parquet or CSV file")
        name = p.name.lower()
        conn = duckdb.connect(":memory:", config={"memory_limit": DUCKDB_MEMORY_LIMIT})
        conn.execute("SET enable_progress_bar = false")
        if p.is_dir():
            if not any(p.glob("*.parquet")):
                raise ValueError(f"folder {str(path)!r} holds no .parquet files; pass a Parquet or CSV file")
            rel = conn.read_parquet(str(p / "*.parquet"))
        elif name.endswith(_PARQUET):
            rel = conn.read_parquet(str(p))
        elif name.endswith(_CSV):
            rel = conn.read_csv(str(p), header=True, na_values=list(NA_STRINGS))
            cats = {c: "VARCHAR" for c in rel.columns if schema is not None and c in schema.columns
                    and schema[c].is_categorical}
            if cats:
                rel = conn.read_csv(str(p), header=True, na_values=list(NA_STRINGS), dtype=cats)
        else:
            raise ValueError(f"cannot tell the format of {str(path)!r}: name it *.parquet, *.pq or *.csv, or open "
                             "it yourself with duckdb (duckdb.read_csv / read_parquet) and pass the relation")
        table = cls(rel, str(path), **opts)
        table.connection = conn  # keep it open while the relation is used
        return table

    def _fetch(self, sql):
        out = self.relation.query(self.view, sql).fetchnumpy()
        return {k: _plain_array(v) for k, v in out.items()}

    def _types(self):
        return [str(t) for t in self.relation.types]

    def _collect(self, method):
        return self.relation.df()


class SparkTable(SQLTable):
    """A ``pyspark.sql.DataFrame``: queries run on a temporary view in its session."""

    kind = "Spark"
    grouping_batch = 32  # Spark expands each row once per grouping set

    def __init__(self, df, **opts):
        super().__init__(**opts)
        self.df = df
        self.columns = [str(c) for c in df.columns]
        self.view = "dpsynth_src_" + uuid.uuid4().hex[:12]
        df.createOrReplaceTempView(self.view)

    @staticmethod
    def ident(name):
        return "`" + str(name).replace("`", "``") + "`"

    @staticmethod
    def string(value):
        return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"

    def _fetch(self, sql):
        result = self.df.sparkSession.sql(sql)
        names = result.columns
        rows = result.collect()
        return {n: _plain_array([r[j] for r in rows]) for j, n in enumerate(names)}

    def _types(self):
        return [t for _, t in self.df.dtypes]

    def _collect(self, method):
        return self.df.toPandas()


# ---------------------------------------------------------------------- helpers
def _base_type(typ: str) -> str:
    return str(typ).split("(")[0].strip().lower()


def _double(x) -> str:
    """A DOUBLE literal in both dialects (an exponent makes DuckDB and Spark read a double, not a decimal)."""
    r = repr(float(x))
    return r if "e" in r else r + "e0"


def _as_number(c):
    """The number a category matches in a numeric column (pandas' lookup: equal numbers, or the
    category written as the number's text: '1' matches 1 and 1.0), or None."""
    if isinstance(c, (bool, np.bool_)):
        return None
    if isinstance(c, (int, float, np.integer, np.floating)):
        return float(c)
    try:
        f = float(c)
    except (TypeError, ValueError):
        return None
    if not np.isfinite(f):
        return None
    text = str(int(f)) if f.is_integer() else repr(f)
    return f if text == str(c) else None


def _plain_array(v) -> np.ndarray:
    """A query's column as numpy: integers stay int64 (packed keys need all 63 bits); a column with
    NULLs becomes float64 with NaN (codes and counts are small)."""
    if isinstance(v, np.ma.MaskedArray):
        if np.ma.getmaskarray(v).any():
            return np.ma.filled(v.astype(np.float64), np.nan)
        v = v.data
    if isinstance(v, list):
        if any(x is None for x in v):
            return np.array([np.nan if x is None else x for x in v], dtype=np.float64)
        v = np.array(v, dtype=np.int64 if all(isinstance(x, int) for x in v) else np.float64)
    return np.asarray(v)


def _pack_chunks(radix: Sequence[int], limit: int = 2 ** 62) -> list[list[int]]:
    """Consecutive groups of columns whose mixed-radix key fits a BIGINT."""
    chunks, prod = [[]], 1
    for j, r in enumerate(radix):
        if chunks[-1] and prod * r >= limit:
            chunks.append([])
            prod = 1
        chunks[-1].append(j)
        prod *= r
    return chunks


def _pack_sql(chunk: Sequence[int], radix: Sequence[int]) -> str:
    """Σ (c_j + 2)·stride_j over ``chunk`` as a BIGINT (Horner form, first column most significant)."""
    expr = ""
    for j in chunk:
        term = f"(CAST(c{j} AS BIGINT) + 2)"
        expr = term if not expr else f"({expr}) * {radix[j]} + {term}"
    return expr
