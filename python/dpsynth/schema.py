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
>>> s = Schema.from_dict({"sex": {"type": "categorical", "categories": ["F", "M"]},
...                       "age": {"type": "numeric", "lower": 0, "upper": 100, "bins": 4}})
>>> s.encode(pd.DataFrame({"sex": ["M", None], "age": [30, 99]})).tolist()
[[1, 1], [-1, 3]]
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
import warnings
from dataclasses import dataclass, field, asdict
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

MISSING = -1
DEFAULT_BINS = 16  # PrivBayes / the seed paper bin continuous columns into 2^4 = 16 equal-width bins


class DataDerivedSchemaWarning(UserWarning):
    """The schema was read from the private data: its domains are not differentially private."""


@dataclass(frozen=True)
class Column:
    """One column of a :class:`Schema`.

    ``type`` is ``"categorical"`` (``categories`` lists the public levels, missing is not a
    level) or ``"numeric"`` (``lower``/``upper`` public bounds; ``bins`` an int for equal-width
    bins or a list of edges; ``integer`` marks integer-valued columns). ``source`` says where
    the bounds or categories come from (public documentation), so a reviewer can check it.
    ``missing``: public knowledge that the column *may* have missing values (e.g. a survey item
    respondents may skip). It is a declaration, never read from the rows; generators that model
    missingness (NAPSU-MQ's default ``missing="auto"``) use it to decide, without looking,
    which columns get a response indicator.
    """

    name: str
    type: str
    categories: tuple | None = None
    ordered: bool = False
    lower: float | None = None
    upper: float | None = None
    bins: int | tuple | None = None
    integer: bool = False
    source: str | None = None
    missing: bool = False

    @property
    def is_categorical(self) -> bool:
        return self.type == "categorical"

    @property
    def has_bounds(self) -> bool:
        return self.lower is not None and self.upper is not None

    def edges(self) -> np.ndarray:
        """Bin edges of a numeric column (len = n_bins + 1). Integer columns use
        [lower, upper + 1) so that whole numbers never straddle a bin edge."""
        if self.is_categorical:
            raise ValueError(f"column {self.name!r} is categorical and has no bin edges")
        if isinstance(self.bins, tuple):
            return np.asarray(self.bins, dtype=float)
        if not self.has_bounds:
            raise ValueError(
                f"numeric column {self.name!r} has no public bounds; add 'lower' and 'upper' "
                "to the schema (from public documentation), or use a method that needs none (pmse)")
        nb = int(self.bins or DEFAULT_BINS)
        hi = self.upper + 1 if self.integer else self.upper
        return np.linspace(float(self.lower), float(hi), nb + 1)

    @property
    def size(self) -> int:
        """Number of levels of the encoded column (categories or bins), missing excluded."""
        if self.is_categorical:
            return len(self.categories)
        return len(self.edges()) - 1

    def to_dict(self) -> dict:
        d = {"type": self.type}
        if self.is_categorical:
            d["categories"] = list(self.categories)
            if self.ordered:
                d["ordered"] = True
        else:
            for k in ("lower", "upper"):
                if getattr(self, k) is not None:
                    d[k] = getattr(self, k)
            if self.bins is not None:
                d["bins"] = list(self.bins) if isinstance(self.bins, tuple) else self.bins
            if self.integer:
                d["integer"] = True
        if self.source:
            d["source"] = self.source
        if self.missing:
            d["missing"] = True
        return d


_CAT_ALIASES = {"categorical", "category", "factor", "discrete"}
_NUM_ALIASES = {"numeric", "continuous", "number", "integer", "float"}


def _column_from_dict(name: str, spec: Mapping[str, Any]) -> Column:
    if not isinstance(spec, Mapping):
        raise TypeError(f"schema entry for {name!r} must be a dict like "
                        "{'type': 'categorical', 'categories': [...]}; got {type(spec).__name__}")
    known = {"type", "categories", "ordered", "lower", "upper", "bins", "integer", "source", "missing"}
    unknown = set(spec) - known
    if unknown:
        raise ValueError(f"schema entry for {name!r} has unknown keys {sorted(unknown)}; "
                         f"allowed keys are {sorted(known)}")
    kind = str(spec.get("type", "")).lower()
    may_miss = spec.get("missing", False)
    if not isinstance(may_miss, bool):
        raise TypeError(f"schema entry for {name!r}: 'missing' must be true or false (may the column have "
                        f"missing values? public knowledge), got {may_miss!r}")
    if kind in _CAT_ALIASES:
        cats = spec.get("categories")
        if cats is None or len(cats) == 0:
            raise ValueError(f"categorical column {name!r} needs a non-empty public 'categories' list")
        cats = tuple(cats)
        if any(c is None or (isinstance(c, float) and math.isnan(c)) for c in cats):
            raise ValueError(f"column {name!r}: missing (None/NaN) is not a category; "
                             "remove it from 'categories' (missing cells are handled separately)")
        if len(set(cats)) != len(cats):
            raise ValueError(f"column {name!r} lists a category twice; categories must be unique")
        return Column(name, "categorical", categories=cats, ordered=bool(spec.get("ordered", False)),
                      source=spec.get("source"), missing=may_miss)
    if kind in _NUM_ALIASES:
        lower, upper = spec.get("lower"), spec.get("upper")
        for k, v in (("lower", lower), ("upper", upper)):
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v)):
                raise ValueError(f"column {name!r}: {k} must be a finite number, got {v!r}")
        if (lower is None) != (upper is None):
            raise ValueError(f"column {name!r}: give both 'lower' and 'upper' or neither")
        if lower is not None and not lower < upper:
            raise ValueError(f"column {name!r}: lower ({lower}) must be below upper ({upper})")
        bins = spec.get("bins")
        if isinstance(bins, (list, tuple)):
            edges = tuple(float(b) for b in bins)
            if len(edges) < 2 or any(e2 <= e1 for e1, e2 in zip(edges[:-1], edges[1:])):
                raise ValueError(f"column {name!r}: bin edges must be strictly increasing")
            bins = edges
        elif bins is not None:
            if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
                raise ValueError(f"column {name!r}: bins must be a positive integer or a list of edges")
        integer = bool(spec.get("integer", kind == "integer"))
        return Column(name, "numeric", lower=lower, upper=upper, bins=bins, integer=integer,
                      source=spec.get("source"), missing=may_miss)
    raise ValueError(f"column {name!r}: type must be 'categorical' or 'numeric', got {spec.get('type')!r}")


@dataclass
class Schema:
    """Ordered public description of a table (see module docstring)."""

    columns: dict = field(default_factory=dict)
    name: str | None = None
    description: str | None = None
    data_derived: bool = False
    privacy: dict | None = None  # domains learned under DP: {"epsilon", "delta", "relation", "spends"}

    # ---------------------------------------------------------------- constructors
    @classmethod
    def from_dict(cls, spec: Mapping[str, Any]) -> "Schema":
        """Build from ``{"col": {...}, ...}`` or ``{"name":..., "columns": {...}}``."""
        if not isinstance(spec, Mapping):
            raise TypeError(f"Schema.from_dict needs a dict, got {type(spec).__name__}")
        meta = {}
        if "columns" in spec and isinstance(spec["columns"], Mapping):
            meta = {k: v for k, v in spec.items() if k != "columns"}
            spec = spec["columns"]
        if len(spec) == 0:
            raise ValueError("a schema needs at least one column")
        cols = {str(n): _column_from_dict(str(n), s) for n, s in spec.items()}
        privacy = meta.get("privacy")
        if privacy is not None:
            if not isinstance(privacy, Mapping) or "epsilon" not in privacy or "spends" not in privacy:
                raise ValueError("schema 'privacy' must be the record written by Schema.from_dataframe(epsilon=): "
                                 "a dict with 'epsilon', 'delta' and 'spends'")
            privacy = {"epsilon": float(privacy["epsilon"]), "delta": float(privacy.get("delta") or 0.0),
                       "relation": privacy.get("relation", "replace-one"),
                       "spends": [dict(x) for x in privacy["spends"]]}
        return cls(cols, name=meta.get("name"), description=meta.get("description"),
                   data_derived=bool(meta.get("data_derived", False)), privacy=privacy)

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> "Schema":
        with open(path, encoding="utf-8") as fh:
            return cls.from_dict(json.load(fh))

    @classmethod
    def from_dataframe(cls, df: pd.DataFrame, bounds: Mapping[str, Sequence[float]] | None = None,
                       levels: Mapping[str, Sequence] | None = None, bins: int | Mapping[str, Any] = DEFAULT_BINS,
                       epsilon: float | None = None, delta: float | None = None, *, seed: int | None = None,
                       candidates=None, quantiles: tuple[float, float] = (0.01, 0.99),
                       missing: Sequence[str] | bool | None = None,
                       read_private_domains: bool = False, syntax: str = "python") -> "Schema":
        """The public schema of ``df`` from its *declared* metadata (``df`` is never modified).

        * column kinds from the dtypes: a pandas ``category`` is categorical, its categories are
          the public levels (metadata the caller declares public, recorded in ``source``); bool is
          categorical [False, True]; numbers are numeric (integer dtypes marked ``integer``);
          strings/objects are categorical and need ``levels`` (or ``epsilon``, see below);
        * ``bounds``: ``{"col": (lower, upper)}`` for the numeric columns (public bounds);
        * ``levels``: ``{"col": [...]}`` categories for a string column (or to override a
          category's levels);
        * ``bins``: equal-width bins for every numeric column, or ``{"col": bins}`` per column;
        * ``missing``: the columns that may have missing values (``True``: every column), a public
          declaration (:class:`Column`); never read from the rows.

        A numeric column without bounds (or a string column without levels) is an error naming every
        such column, unless ``epsilon`` is given: then the missing bounds are learned with OpenDP's
        private quantiles (the ``quantiles``, over the public grid ``candidates``, default
        :func:`dpsynth.privacy.domains.default_candidates`) and the missing categories with OpenDP's
        thresholded histogram (needs ``delta``), the budget split evenly over the mechanisms; see
        :mod:`dpsynth.privacy.domains`. The spends are kept in ``schema.privacy`` and charged to the
        ledger of every release made with this schema (on top of the generator's own budget).
        ``seed`` makes that learning repeatable (tests only; not private).
        ``read_private_domains=True`` is the old exploration path: min/max and distinct values read
        from the data without noise; it warns, and the ledger's total becomes infinite.
        ``syntax="r"``: the errors for undeclared domains and for ``bounds``/``levels`` that are not
        keyed by column show dpsynthr's ``dp_schema()`` calls (R names: numeric, character, named list)
        instead of Python's.

        Example
        -------
        >>> import pandas as pd
        >>> df = pd.DataFrame({"sex": pd.Categorical(["F", "M", None]), "age": [31, 45, 60]})
        >>> s = Schema.from_dataframe(df, bounds={"age": (0, 120)})
        >>> s["sex"].categories, (s["age"].lower, s["age"].upper, s["age"].integer)
        (('F', 'M'), (0, 120, True))
        >>> Schema.from_dataframe(df)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: numeric columns ['age'] have no bounds...
        >>> s = Schema.from_dataframe(df, epsilon=0.5, seed=1)
        >>> s.privacy["epsilon"], s["age"].source.startswith("learned")
        (0.5, True)
        """
        _check_frame(df)
        if read_private_domains:
            return cls._from_dataframe_unprotected(df, bins if isinstance(bins, int) else DEFAULT_BINS)
        names = [str(c) for c in df.columns]
        bounds = _name_map(bounds, "bounds", names, syntax)
        levels = _name_map(levels, "levels", names, syntax)
        bins_map = _name_map(bins, "bins", names) if isinstance(bins, Mapping) else None
        for name, b in bounds.items():
            if isinstance(b, (str, bytes)) or not hasattr(b, "__len__") or len(b) != 2:
                raise ValueError(f"bounds[{name!r}] must be two numbers (lower, upper), e.g. bounds={{{name!r}: (0, 100)}}")
        cols, need_bounds, need_levels = {}, [], []
        declared = "declared public by the caller"
        for c in df.columns:
            name, s = str(c), df[c]
            if name in levels:
                cols[name] = ("categorical", {"type": "categorical", "categories": list(levels[name]),
                                              "source": f"levels= {declared}"})
            elif isinstance(s.dtype, pd.CategoricalDtype):
                cols[name] = ("categorical", {"type": "categorical", "categories": list(s.cat.categories),
                                              "ordered": bool(s.cat.ordered),
                                              "source": f"factor levels {declared} (metadata, not read from the rows)"})
            elif pd.api.types.is_bool_dtype(s.dtype):
                cols[name] = ("categorical", {"type": "categorical", "categories": [False, True],
                                              "source": "the logical type's values"})
            elif pd.api.types.is_numeric_dtype(s.dtype):
                spec = {"type": "numeric", "integer": bool(pd.api.types.is_integer_dtype(s.dtype))}
                nb = bins_map.get(name, DEFAULT_BINS) if bins_map is not None else bins
                if nb is not None:
                    spec["bins"] = nb
                if name in bounds:
                    spec.update(lower=_number(bounds[name][0], name), upper=_number(bounds[name][1], name),
                                source=f"bounds= {declared}")
                else:
                    need_bounds.append(name)
                cols[name] = ("numeric", spec)
            elif pd.api.types.is_object_dtype(s.dtype) or pd.api.types.is_string_dtype(s.dtype):
                need_levels.append(name)
                cols[name] = ("categorical", {"type": "categorical"})
            else:
                raise TypeError(f"column {name!r} has dtype {s.dtype}, which has no schema kind; convert it to "
                                "a category, a number or a bool first")
        extra = sorted((set(bounds) - {n for n, (k, _) in cols.items() if k == "numeric"}))
        if extra:
            raise ValueError(f"bounds were given for {extra}, which are not numeric columns; drop them from bounds")
        privacy = None
        if need_bounds or need_levels:
            if epsilon is None:
                raise ValueError(_missing_domains_message(need_bounds, need_levels, syntax))
            privacy = _learn_domains(df, cols, need_bounds, need_levels, epsilon, delta, seed, candidates, quantiles)
        elif epsilon is not None:
            warnings.warn("epsilon was given but every domain is declared: nothing is learned and nothing spent",
                          UserWarning, stacklevel=2)
        may_miss = set(names) if missing is True else set(_name_map(
            {str(c): True for c in ([missing] if isinstance(missing, str) else (missing or []))}, "missing", names))
        schema = cls.from_dict({n: {**spec, **({"missing": True} if n in may_miss else {})}
                                for n, (_, spec) in cols.items()})
        schema.privacy = privacy
        return schema

    @classmethod
    def _from_dataframe_unprotected(cls, df: pd.DataFrame, bins: int) -> "Schema":
        warnings.warn("Schema.from_dataframe(read_private_domains=True) reads categories and bounds from the "
                      "private data; the result is not differentially private. Declare bounds= and levels= "
                      "(public documentation) or pay for them with epsilon= instead.",
                      DataDerivedSchemaWarning, stacklevel=3)
        cols = {}
        for c in df.columns:
            s = df[c]
            if isinstance(s.dtype, pd.CategoricalDtype):
                cols[c] = Column(c, "categorical", categories=tuple(s.cat.categories), ordered=s.cat.ordered)
            elif pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s):
                lo, hi = float(s.min()), float(s.max())
                if lo == hi:
                    hi = lo + 1
                integer = bool(np.all(np.mod(s.dropna(), 1) == 0))
                cols[c] = Column(c, "numeric", lower=lo, upper=hi, bins=bins, integer=integer)
            else:
                cats = tuple(sorted(pd.unique(s.dropna()), key=str))
                cols[c] = Column(c, "categorical", categories=cats)
        return cls(cols, data_derived=True)

    # ---------------------------------------------------------------- serialisation
    def to_dict(self) -> dict:
        out = {}
        if self.name:
            out["name"] = self.name
        if self.description:
            out["description"] = self.description
        if self.data_derived:
            out["data_derived"] = True
        if self.privacy:
            out["privacy"] = self.privacy
        out["columns"] = {n: c.to_dict() for n, c in self.columns.items()}
        return out

    def describe(self) -> pd.DataFrame:
        """One row per column: ``column``, ``type``, ``domain`` (the categories, or the bounds and
        bins; "(may be missing)" where declared) and ``source`` (where the domain comes from).

        >>> Schema.from_dict({"g": {"type": "categorical", "categories": ["a", "b"], "missing": True},
        ...                   "x": {"type": "numeric", "lower": 0, "upper": 1.5, "bins": 4}}).describe()["domain"].tolist()
        ['a, b (may be missing)', '[0, 1.5], 4 bins']
        """
        rows = []
        for name, c in self.columns.items():
            if c.is_categorical:
                domain = ", ".join(str(v) for v in c.categories)
            else:
                bounds = f"[{c.lower:g}, {c.upper:g}]" if c.has_bounds else "no bounds"
                bins = len(c.bins) - 1 if isinstance(c.bins, tuple) else (c.bins or DEFAULT_BINS)
                domain = f"{bounds}, {bins} bins" + (", integer" if c.integer else "")
            rows.append((name, c.type, domain + (" (may be missing)" if c.missing else ""), c.source or ""))
        return pd.DataFrame(rows, columns=["column", "type", "domain", "source"])

    def to_json(self, path: str | os.PathLike) -> None:
        """Write atomically (temporary file + rename)."""
        atomic_write_text(path, json.dumps(self.to_dict(), indent=2, default=_json_default) + "\n")

    # ---------------------------------------------------------------- accessors
    @property
    def names(self) -> list[str]:
        return list(self.columns)

    def __getitem__(self, name: str) -> Column:
        return self.columns[name]

    def __len__(self) -> int:
        return len(self.columns)

    @property
    def domain_sizes(self) -> list[int]:
        return [c.size for c in self.columns.values()]

    def subset(self, names: Iterable[str]) -> "Schema":
        names = list(names)
        unknown = [n for n in names if n not in self.columns]
        if unknown:
            raise ValueError(f"columns {unknown} are not in the schema")
        return Schema({n: self.columns[n] for n in names}, name=self.name, data_derived=self.data_derived,
                      privacy=self.privacy)

    @property
    def incomplete(self) -> list[str]:
        """The columns declared as possibly missing (``"missing": true``; public)."""
        return [c.name for c in self.columns.values() if c.missing]

    def declare_missing(self, names: Iterable[str]) -> "Schema":
        """A copy in which exactly ``names`` are declared as possibly missing (``[]``: none, e.g.
        for a table already restricted to its complete rows).

        >>> s = Schema.from_dict({"a": {"type": "categorical", "categories": [0, 1], "missing": True},
        ...                       "b": {"type": "categorical", "categories": [0, 1]}})
        >>> s.incomplete, s.declare_missing(["b"]).incomplete, s.declare_missing([]).incomplete
        (['a'], ['b'], [])
        """
        names = [str(n) for n in ([names] if isinstance(names, str) else names)]
        unknown = [n for n in names if n not in self.columns]
        if unknown:
            raise ValueError(f"columns {unknown} are not in the schema")
        return Schema({n: dataclasses.replace(c, missing=n in names) for n, c in self.columns.items()},
                      name=self.name, description=self.description, data_derived=self.data_derived,
                      privacy=self.privacy)

    def require_bounds(self) -> None:
        missing = [c.name for c in self.columns.values() if not c.is_categorical and not c.has_bounds
                   and not isinstance(c.bins, tuple)]
        if missing:
            raise ValueError(f"numeric columns {missing} have no public bounds; this method bins numerics, "
                             "so add 'lower' and 'upper' from public documentation to the schema")

    # ---------------------------------------------------------------- validation
    def validate(self, df, allow_empty: bool = False) -> None:
        """Raise ValueError/TypeError (saying what to fix) if ``df`` does not fit the schema: its
        columns, and each value inside the public domain (a category of the schema, a number for a
        numeric column). Nothing else about the rows is checked: a column with no observed value is
        valid data (a neighbour of data with one observed value), and refusing it would release that
        fact. ``allow_empty``: accept a table without rows (a strategy's subset of the rows).
        ``df`` may also be a Parquet/CSV path, a DuckDB relation or a Spark DataFrame: the same
        checks then run as queries where the data live (:mod:`dpsynth.marginals.backends`)."""
        if not isinstance(df, pd.DataFrame):
            from .marginals.backends import open_table

            open_table(df, self).validate(self, allow_empty=allow_empty)
            return
        _check_frame(df, allow_empty)
        self.check_columns([str(c) for c in df.columns])
        for name, col in self.columns.items():
            s = df[name]
            if col.is_categorical:
                if (_category_codes(s, col) == -2).any():  # a domain check: the message names no value
                    raise ValueError(unknown_categories_message(
                        name, f"df.loc[df[{name!r}].notna() & ~df[{name!r}].isin(schema[{name!r}].categories), "
                              f"{name!r}].unique()"))
            else:
                if not (pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)):
                    if s.dropna().map(lambda v: isinstance(v, (int, float, np.number)) and not isinstance(v, bool)).all():
                        continue
                    raise TypeError(f"column {name!r} is numeric in the schema but has dtype {s.dtype}; "
                                    "convert it with pd.to_numeric or declare it categorical")

    def check_columns(self, cols: Sequence[str]) -> None:
        """ValueError unless the data's column names ``cols`` are exactly the schema's (any order)."""
        cols = [str(c) for c in cols]
        dup = sorted({c for c in cols if cols.count(c) > 1})
        if dup:
            raise ValueError(f"duplicate column names {dup}; rename them so that each column name is unique")
        unknown = [c for c in cols if c not in self.columns]
        if unknown:
            raise ValueError(f"columns {unknown} are not in the schema; add them to the schema or drop them "
                             "from the data")
        absent = [c for c in self.columns if c not in cols]
        if absent:
            raise ValueError(f"schema columns {absent} are missing from the data; add them or use "
                             "schema.subset([...])")

    # ---------------------------------------------------------------- encoding
    def encode(self, df: pd.DataFrame) -> np.ndarray:
        """Integer codes (n × d, int64), MISSING (-1) for missing cells. Numerics are clipped to
        the public bounds before binning (a per-row, data-independent transformation)."""
        self.validate(df, allow_empty=True)
        out = np.empty((len(df), len(self.columns)), dtype=np.int64)
        for j, (name, col) in enumerate(self.columns.items()):
            out[:, j] = _encode_column(df[name], col)
        return out

    def decode(self, codes: np.ndarray, rng: np.random.Generator,
               numeric_values: Mapping[str, np.ndarray] | None = None) -> pd.DataFrame:
        """Codes → DataFrame. Numeric bins are de-binned uniformly within the bin (integers for
        integer columns); ``numeric_values`` lets a generator hand over numeric columns it produced
        directly. Generators cast the result with :func:`cast_to_schema`."""
        codes = np.asarray(codes)
        if codes.ndim != 2 or codes.shape[1] != len(self.columns):
            raise ValueError(f"codes must be n × {len(self.columns)}, got shape {codes.shape}")
        data = {}
        for j, (name, col) in enumerate(self.columns.items()):
            if numeric_values is not None and name in numeric_values:
                values = np.asarray(numeric_values[name], dtype=float)
            else:
                values = None
            data[name] = _decode_column(codes[:, j], col, rng, values)
        return pd.DataFrame(data)

    def coerce(self, df: pd.DataFrame) -> pd.DataFrame:
        """Return a copy with categorical columns as pandas ``category`` dtype with the schema's
        levels (unused levels kept) and numeric columns as floats/ints."""
        self.validate(df, allow_empty=True)
        out = df.copy()
        for name, col in self.columns.items():
            if col.is_categorical:
                codes = _category_codes(out[name], col)
                out[name] = pd.Categorical.from_codes(codes, categories=list(col.categories), ordered=col.ordered)
            else:
                out[name] = pd.to_numeric(out[name])
        return out


# -------------------------------------------------------------------- helpers
def _name_map(x, what: str, names, syntax: str = "python") -> dict:
    if x is None:
        return {}
    if not isinstance(x, Mapping):
        if syntax == "r":  # dpsynthr's dp_schema()
            example = 'c("a", "b")' if what == "levels" else "c(0, 100)"
            raise TypeError(f"`{what}` must be a named list, e.g. {what} = list(age = {example})")
        raise TypeError(f"{what} must be a dict keyed by column name, e.g. {what}={{'age': ...}}; "
                        f"got {type(x).__name__}")
    unknown = [str(k) for k in x if str(k) not in names]
    if unknown:
        raise ValueError(f"{what} names columns {unknown} that are not in the data; the columns are {names}")
    return {str(k): v for k, v in x.items()}


def _number(v, name):
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
        raise ValueError(f"bounds for {name!r} must be finite numbers; got {v!r}")
    return v.item() if isinstance(v, np.generic) else v


def _missing_domains_message(need_bounds, need_levels, syntax: str = "python") -> str:
    if syntax == "r":  # dpsynthr's dp_schema()
        return "\n".join(
            ([f"numeric columns without bounds: {', '.join(need_bounds)}; declare public bounds:",
              "  dp_schema(data, bounds = list(" + ", ".join(f"{n} = c(lo, hi)" for n in need_bounds) + "))"]
             if need_bounds else [])
            + ([f"character columns without categories: {', '.join(need_levels)}; declare them with "
                "levels = list(...) or make them factors"] if need_levels else [])
            + ["or learn them under differential privacy (charged to every release's ledger): dp_schema(data, "
               "epsilon = 0.1" + (", delta = 1e-6" if need_levels else "") + ")"])
    parts = []
    if need_bounds:
        example = ", ".join(f"{n!r}: (lo, hi)" for n in need_bounds)
        parts.append(f"numeric columns {need_bounds} have no bounds: declare public ones with "
                     f"bounds={{{example}}}")
    if need_levels:
        example = ", ".join(f"{n!r}: [...]" for n in need_levels)
        parts.append(f"text columns {need_levels} have no categories: declare them with levels={{{example}}} "
                     "(or make them pandas categoricals)")
    return ("; ".join(parts) + "; or learn them under differential privacy with epsilon= (e.g. epsilon=0.1"
            + (", delta=1e-6" if need_levels else "") + "), which is charged to every release's ledger. "
            "dpsynth never reads domains from the private rows for free.")


def _learn_domains(df, cols, need_bounds, need_levels, epsilon, delta, seed, candidates, quantiles) -> dict:
    """Learn the missing bounds/categories under DP; fills ``cols`` in place; returns the privacy record."""
    from .privacy import NoiseSource, PrivacyLedger, check_epsilon
    from .privacy.domains import RELATION, private_bounds, private_categories

    epsilon = check_epsilon(epsilon)
    if need_levels and delta is None:
        raise ValueError(f"learning the categories of {need_levels} needs delta= too (the thresholded "
                         "histogram is (epsilon, delta)-DP), e.g. delta=1e-6; or declare them with levels=")
    if not need_levels and delta:
        warnings.warn("delta is only spent on learning categories; none is needed here", UserWarning, stacklevel=3)
        delta = None
    k = len(need_bounds) + len(need_levels)
    share = epsilon / k
    led = PrivacyLedger(epsilon, delta or 0.0)
    source = NoiseSource(seed)
    lo_q, hi_q = quantiles
    for name in need_bounds:
        lo, hi = private_bounds(df[name], epsilon=share, ledger=led, source=source, step=f"bounds of {name!r}",
                                candidates=candidates, lower_q=lo_q, upper_q=hi_q)
        spec = cols[name][1]
        if spec.get("integer"):
            lo, hi = math.floor(lo), math.ceil(hi)
            hi = hi if hi > lo else lo + 1
        spec.update(lower=lo, upper=hi, source=f"learned under DP (OpenDP private quantiles {lo_q:g}/{hi_q:g}, "
                                                f"epsilon={share:.6g}); values outside are clipped")
    for name in need_levels:
        cats = private_categories(df[name], epsilon=share, delta=delta / len(need_levels), ledger=led,
                                  source=source, step=f"categories of {name!r}")
        if not cats:
            raise ValueError(f"no value of column {name!r} was frequent enough to be released at epsilon={share:.3g}: "
                             f"declare its categories with levels={{{name!r}: [...]}} or give more epsilon")
        cols[name][1].update(categories=cats, source=f"learned under DP (OpenDP thresholded histogram, "
                                                     f"epsilon={share:.6g}, delta={delta / len(need_levels):.3g})")
    spends = [{"step": s.step, "mechanism": s.mechanism, "epsilon": s.epsilon, "delta": s.delta,
               "sensitivity": s.sensitivity, "norm": s.norm, "relation": s.relation, "note": s.note}
              for s in led.spends]
    return {"epsilon": led.total_epsilon(), "delta": led.total_delta(), "relation": RELATION, "spends": spends}


def _json_default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    raise TypeError(f"cannot write {type(o).__name__} to JSON")


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically: a temporary file in the same folder, then rename."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file in the same folder, then rename,
    so a reader never sees a half-written file and a failure leaves the old file in place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a report or a CSV gets the usual permissions
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def unknown_categories_message(name: str, listing: str) -> str:
    """The error for values outside a categorical column's public categories; ``listing`` says how
    to list them where the data live. It names no value (the check is about the domain)."""
    return (f"column {name!r} has values outside the schema's categories; list them with {listing} and add them "
            "to the schema's category list (from public documentation) or recode them")


def _check_frame(df, allow_empty: bool = False) -> None:
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"expected a pandas DataFrame, got {type(df).__name__}; "
                        "wrap your data with pd.DataFrame(...) (generators also take a Parquet/CSV path, a DuckDB "
                        "relation or a Spark DataFrame)")
    if df.shape[0] == 0 and not allow_empty:
        raise ValueError("the data frame has no rows; pass the private table with at least one row")
    if df.shape[1] == 0:
        raise ValueError("the data frame has no columns")
    names = [str(c) for c in df.columns]
    dup = sorted({c for c in names if names.count(c) > 1})
    if dup:
        raise ValueError(f"duplicate column names {dup}; rename them so that each column name is unique")


def _lookup(col: Column) -> dict:
    table = {c: i for i, c in enumerate(col.categories)}
    # strings from CSV files and numbers from JSON should meet: '1' matches 1
    for i, c in enumerate(col.categories):
        table.setdefault(str(c), i)
    return table


def _category_codes(s: pd.Series, col: Column) -> np.ndarray:
    table = _lookup(col)
    if isinstance(s.dtype, pd.CategoricalDtype):
        cat_codes = np.array([table.get(c, table.get(str(c), -2)) for c in s.cat.categories], dtype=np.int64)
        raw = s.cat.codes.to_numpy()
        codes = np.where(raw < 0, MISSING, cat_codes[np.maximum(raw, 0)] if len(cat_codes) else MISSING)
        return codes.astype(np.int64)
    na = s.isna().to_numpy()
    vals = s.to_numpy(dtype=object)
    if pd.api.types.infer_dtype(vals, skipna=True) == "string":  # text (CSV, SQL): one hash lookup per cell
        text = {k: v for k, v in table.items() if isinstance(k, str)}
        mapped = pd.Series(vals).map(text).to_numpy(dtype=float, na_value=np.nan)
        return np.where(na, MISSING, np.where(np.isnan(mapped), -2, mapped)).astype(np.int64)
    codes = np.full(len(s), MISSING, dtype=np.int64)
    for i in np.flatnonzero(~na):
        v = vals[i]
        if isinstance(v, (float, np.floating)) and float(v).is_integer():
            v = int(v)
        codes[i] = table.get(v, table.get(str(v), -2))
    return codes


def _encode_column(s: pd.Series, col: Column) -> np.ndarray:
    if col.is_categorical:
        return _category_codes(s, col)
    x = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    edges = col.edges()
    out = np.full(len(x), MISSING, dtype=np.int64)
    ok = ~np.isnan(x)
    xc = np.clip(x[ok], edges[0], edges[-1])
    out[ok] = np.clip(np.searchsorted(edges, xc, side="right") - 1, 0, len(edges) - 2)
    return out


def _decode_column(codes: np.ndarray, col: Column, rng: np.random.Generator, values=None) -> pd.Series:
    miss = codes < 0
    if col.is_categorical:
        return pd.Series(pd.Categorical.from_codes(np.where(miss, -1, codes), categories=list(col.categories),
                                                   ordered=col.ordered))
    if values is not None:
        x = values.astype(float).copy()
    else:
        edges = col.edges()
        c = np.clip(codes, 0, len(edges) - 2)
        lo, hi = edges[c], edges[c + 1]
        u = rng.random(len(codes))
        if col.integer:  # uniform over the whole numbers inside [lo, hi)
            a = np.ceil(lo)
            b = np.maximum(np.ceil(hi) - 1, a)
            x = a + np.floor(u * (b - a + 1))
        else:
            x = lo + u * (hi - lo)
    if col.integer:
        x = np.floor(x)
    if col.has_bounds:
        x = np.clip(x, col.lower, col.upper)
    x[miss] = np.nan
    return pd.Series(x)


def output_dtype(col: Column):
    """The dtype of a synthetic column, from the public schema only (never from the private data):
    ``category`` with the schema's categories in schema order for a categorical column, except
    nullable ``Int64`` when every category is a whole number (codes such as 0/1 stay numbers, as
    analysts' formulas expect); nullable ``Int64`` for an integer numeric column, ``float64`` (NaN
    for missing) for a real one.

    >>> output_dtype(Column("age", "numeric", lower=0, upper=99, integer=True))
    Int64Dtype()
    >>> str(output_dtype(Column("sex", "categorical", categories=("F", "M"))))
    'category'
    """
    if col.is_categorical:
        if _integer_categories(col):
            return pd.Int64Dtype()
        return pd.CategoricalDtype(list(col.categories), ordered=col.ordered)
    return pd.Int64Dtype() if col.integer else np.dtype("float64")


def _integer_categories(col: Column) -> bool:
    return all(isinstance(c, (int, np.integer)) and not isinstance(c, (bool, np.bool_)) for c in col.categories)


def cast_to_schema(df: pd.DataFrame, schema: Schema) -> pd.DataFrame:
    """A copy of ``df`` whose schema columns have :func:`output_dtype`: the same dtypes whatever the
    private data were (whether any cell was missing, how the caller stored the column), so neither
    the synthetic data nor a saved generator reveal them. Other columns are left as they are.

    >>> s = Schema.from_dict({"g": {"type": "categorical", "categories": ["b", "a"]},
    ...                       "x": {"type": "numeric", "lower": 0, "upper": 9, "integer": True}})
    >>> cast_to_schema(pd.DataFrame({"g": ["a", None], "x": [1.0, 2.0]}), s).dtypes.astype(str).tolist()
    ['category', 'Int64']
    """
    out = {}
    for name in df.columns:
        s = df[name]
        if name not in schema.columns:
            out[name] = s
            continue
        col = schema[name]
        if col.is_categorical:
            codes = _category_codes(s, col)
            if _integer_categories(col):
                values = np.asarray(col.categories, dtype=np.int64)[np.maximum(codes, 0)]
                out[name] = pd.Series(pd.arrays.IntegerArray(values, codes < 0), index=s.index)
            else:
                out[name] = pd.Series(pd.Categorical.from_codes(codes, dtype=output_dtype(col)), index=s.index)
        else:
            x = pd.to_numeric(s).to_numpy(dtype=float, na_value=np.nan)
            if col.integer:
                x = np.floor(x)  # decoded integer columns are whole already; this keeps the cast exact
            out[name] = pd.Series(x, index=s.index).astype(output_dtype(col))
    return pd.DataFrame(out, index=df.index)
