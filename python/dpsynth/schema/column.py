"""One column of the public schema: its kind and domain (:class:`Column`), and the
checked reading of one column's entry of a schema dict (:func:`column_from_dict`)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

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
    ``derived_from``: public knowledge that this (categorical) column is a function of another
    column of the schema (Adult's ``education`` is a recoding of ``education-num``);
    ``derived_map`` gives this column's category for each level of that column, in its order
    (``None``: level i is category i). Generators never read a derived column's values: they
    model the source column and derive this one from it after sampling (:mod:`dpsynth.schema.derived`).
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
    derived_from: str | None = None
    derived_map: tuple | None = None

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
        if self.derived_from is not None:
            d["derived_from"] = (self.derived_from if self.derived_map is None
                                 else {"column": self.derived_from, "map": list(self.derived_map)})
        return d


_CAT_ALIASES = {"categorical", "category", "factor", "discrete"}
_NUM_ALIASES = {"numeric", "continuous", "number", "integer", "float"}


def column_from_dict(name: str, spec: Mapping[str, Any]) -> Column:
    if not isinstance(spec, Mapping):
        raise TypeError(f"schema entry for {name!r} must be a dict like "
                        "{'type': 'categorical', 'categories': [...]}; got {type(spec).__name__}")
    known = {"type", "categories", "ordered", "lower", "upper", "bins", "integer", "source", "missing", "derived_from"}
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
        source, mapping = _derivation(name, spec.get("derived_from"))
        return Column(name, "categorical", categories=cats, ordered=bool(spec.get("ordered", False)),
                      source=spec.get("source"), missing=may_miss, derived_from=source, derived_map=mapping)
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
        if spec.get("derived_from") is not None:
            raise ValueError(f"column {name!r}: only a categorical column can be 'derived_from' another column")
        integer = bool(spec.get("integer", kind == "integer"))
        return Column(name, "numeric", lower=lower, upper=upper, bins=bins, integer=integer,
                      source=spec.get("source"), missing=may_miss)
    raise ValueError(f"column {name!r}: type must be 'categorical' or 'numeric', got {spec.get('type')!r}")


def _derivation(name: str, spec) -> tuple[str | None, tuple | None]:
    """``derived_from`` of a schema entry: a column name (level i is category i), or
    ``{"column": name, "map": [this column's category for each level of that column]}``."""
    if spec is None:
        return None, None
    if isinstance(spec, str):
        return spec, None
    if isinstance(spec, Mapping) and set(spec) <= {"column", "map"} and isinstance(spec.get("column"), str):
        mapping = spec.get("map")
        if mapping is None:
            return spec["column"], None
        if isinstance(mapping, (str, bytes)) or not hasattr(mapping, "__len__"):
            raise TypeError(f"column {name!r}: derived_from's 'map' must be a list (one category per level "
                            f"of {spec['column']!r}), got {type(mapping).__name__}")
        return spec["column"], tuple(mapping)
    raise ValueError(f"column {name!r}: 'derived_from' must be a column name or {{'column': name, 'map': "
                     f"[category for each level of that column]}}, got {spec!r}")
