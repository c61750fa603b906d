"""The :class:`Schema`: the ordered public description of a table (see :mod:`dpsynth.schema`), its
constructors (from a dict, JSON, or a data frame's declared metadata), serialisation, validation and
encoding."""
from __future__ import annotations

import dataclasses
import json
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..files import atomic_write_text
from .checks import (bound_number, check_frame, missing_domains_message, name_map,
                     unknown_categories_message)
from .codes import category_codes, decode_column, encode_column
from .column import DEFAULT_BINS, Column, DataDerivedSchemaWarning, column_from_dict
from .derived import check_derivations
from .learn import learn_domains
from .sources import open_source


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
        cols = {str(n): column_from_dict(str(n), s) for n, s in spec.items()}
        check_derivations(cols)
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
        check_frame(df)
        if read_private_domains:
            return cls._from_dataframe_unprotected(df, bins if isinstance(bins, int) else DEFAULT_BINS)
        names = [str(c) for c in df.columns]
        bounds = name_map(bounds, "bounds", names, syntax)
        levels = name_map(levels, "levels", names, syntax)
        bins_map = name_map(bins, "bins", names) if isinstance(bins, Mapping) else None
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
                    spec.update(lower=bound_number(bounds[name][0], name), upper=bound_number(bounds[name][1], name),
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
                raise ValueError(missing_domains_message(need_bounds, need_levels, syntax))
            privacy = learn_domains(df, cols, need_bounds, need_levels, epsilon, delta, seed, candidates, quantiles)
        elif epsilon is not None:
            warnings.warn("epsilon was given but every domain is declared: nothing is learned and nothing spent",
                          UserWarning, stacklevel=2)
        may_miss = set(names) if missing is True else set(name_map(
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
            if c.derived_from is not None:
                domain += f" (derived from {c.derived_from})"
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
        """The schema of ``names`` only; a column derived from a column left out becomes an ordinary
        column (its values are then read and modelled like any other)."""
        names = list(names)
        unknown = [n for n in names if n not in self.columns]
        if unknown:
            raise ValueError(f"columns {unknown} are not in the schema")
        cols = {n: self.columns[n] for n in names}
        cols = {n: c if c.derived_from in (None, *cols) else dataclasses.replace(c, derived_from=None, derived_map=None)
                for n, c in cols.items()}
        return Schema(cols, name=self.name, data_derived=self.data_derived, privacy=self.privacy)

    @property
    def derived(self) -> list[str]:
        """The columns declared ``derived_from`` another (:mod:`dpsynth.schema.derived`): never read,
        written after sampling."""
        return [c.name for c in self.columns.values() if c.derived_from is not None]

    def modelled(self) -> "Schema":
        """The schema of the columns a generator models: all but the :attr:`derived` ones."""
        derived = set(self.derived)
        return self.subset([n for n in self.columns if n not in derived]) if derived else self

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
        checks then run as queries where the data live, by the source its reader provides
        (:mod:`dpsynth.schema.sources`; :mod:`dpsynth.marginals.backends`)."""
        if not isinstance(df, pd.DataFrame):
            open_source(df, self).validate(self, allow_empty=allow_empty)
            return
        check_frame(df, allow_empty)
        self.check_columns([str(c) for c in df.columns])
        for name, col in self.columns.items():
            if col.derived_from is not None:
                continue  # never read (dpsynth.schema.derived)
            s = df[name]
            if col.is_categorical:
                if (category_codes(s, col) == -2).any():  # a domain check: the message names no value
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
            out[:, j] = encode_column(df[name], col)
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
            data[name] = decode_column(codes[:, j], col, rng, values)
        return pd.DataFrame(data)

    def coerce(self, df: pd.DataFrame) -> pd.DataFrame:
        """Return a copy with categorical columns as pandas ``category`` dtype with the schema's
        levels (unused levels kept) and numeric columns as floats/ints."""
        self.validate(df, allow_empty=True)
        out = df.copy()
        for name, col in self.columns.items():
            if col.is_categorical:
                codes = category_codes(out[name], col)
                out[name] = pd.Categorical.from_codes(codes, categories=list(col.categories), ordered=col.ordered)
            else:
                out[name] = pd.to_numeric(out[name])
        return out


def _json_default(o):
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    raise TypeError(f"cannot write {type(o).__name__} to JSON")
