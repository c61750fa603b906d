"""The generator contract shared by every synthesiser (scikit-learn style).

``Gen(epsilon, delta=None, **options)`` keeps parameters only; ``fit(df, schema, seed=None)``
validates the data against the public schema, opens a fresh :class:`PrivacyLedger` with the budget,
encodes the rows and calls the subclass's ``_fit``; ``sample(n=None, m=1, seed=None)`` returns a
:class:`SynthResult` of m DataFrames with the input's columns, each in the dtype the public schema
gives it (:func:`dpsynth.schema.output_dtype`), whatever the private data. A fitted generator holds
only released (noisy) quantities, so it can be saved and used later without the private data.

Subclasses set ``method``, ``relation`` (the neighbouring relation their guarantee uses) and
implement ``_fit(codes, data, source)`` and ``_sample_codes(n, rng, index)`` (or ``_sample_frame``).

The private data may be a DataFrame, a Parquet/CSV path, a DuckDB relation or a Spark DataFrame
(:func:`dpsynth.marginals.open_table`). A generator with ``counts_only = True`` only counts
marginals: its ``_fit`` gets a :class:`dpsynth.marginals.Rows` in place of ``codes`` and
``data=None``, and the rows stay where they live. Every other generator trains on rows and gets
them as a DataFrame; from a path or a relation that is refused when the table is too large
(``max_cells_in_memory``).
"""
from __future__ import annotations

import inspect
import os

import numpy as np
import pandas as pd

from ..marginals import open_table
from ..progress import progress
from ..privacy.domains import charge_spends
from ..privacy import NoiseSource, PrivacyLedger
from ..result import SynthResult
from ..persist import load_object, to_bytes
from ..schema import Schema, atomic_write_bytes, cast_to_schema
from ..schema.derived import derive
from ..validation import check_count, check_delta, check_epsilon, check_seed


def derived_dropped(table, schema: Schema):
    """The private ``table`` without the schema's derived columns, which are never read
    (:mod:`dpsynth.schema.derived`); its column names are checked against the whole schema first (a
    derived column may be absent: the synthetic data then have the table's columns only)."""
    schema.check_columns([*table.columns, *(d for d in schema.derived if d not in table.columns)])
    return table.without(schema.derived)


class Generator:
    method: str = ""
    relation: str = "add-remove"
    needs_delta: bool = False
    needs_bounds: bool = True
    noise_aware: bool = False  # True: each of the m datasets comes from its own posterior draw (NAPSU-MQ)
    encodes_rows: bool = True  # False: _fit gets codes=None (methods that read raw values, e.g. pmse)
    counts_only: bool = False  # True: _fit gets a marginals.Rows (counts only) and data=None

    def __init__(self, epsilon: float, delta: float | None = None):
        check_epsilon(epsilon)
        check_delta(delta, allow_zero=not self.needs_delta, allow_none=not self.needs_delta)
        self.epsilon, self.delta = epsilon, delta  # as passed (get_params, clone)
        self.ledger = PrivacyLedger(self.epsilon, self.delta or 0.0)
        self.fitted_ = False

    def _set_params(self, values: dict, checks: dict) -> None:
        """Store the constructor's options (``values``: its ``locals()``) after checking them, so that a
        bad value fails at construction: ``checks`` maps a name to ``check(value, name)``
        (:mod:`dpsynth.validation`). A check returns the object it was given when that is already of
        the right kind, so what is stored is what the user passed (the one conversion: a whole float
        for an integer, e.g. R's 100, is stored as that int); values derived from the options are
        computed in ``fit``, and `get_params` returns the options."""
        for name in self._param_names():
            if name in values and name not in ("epsilon", "delta"):
                check = checks.get(name)
                setattr(self, name, values[name] if check is None else check(values[name], name))

    @classmethod
    def _param_names(cls) -> list[str]:
        """The constructor's parameter names, in order (scikit-learn's ``_get_param_names``)."""
        sig = inspect.signature(cls.__init__)
        return [p.name for p in sig.parameters.values()
                if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    def get_params(self, deep: bool = False) -> dict:
        """The constructor's arguments as stored, by name (scikit-learn's ``get_params``):
        ``type(gen)(**gen.get_params())`` builds an unfitted copy with the same options.

        >>> import dpsynth
        >>> dpsynth.PrivBayes(1.0, missing="partial", k=2).get_params()
        {'epsilon': 1.0, 'delta': None, 'missing': 'partial', 'k': 2, 'beta': 0.5, 'theta': 4.0, 'score': 'R'}
        """
        return {name: getattr(self, name) for name in self._param_names()}

    # ------------------------------------------------------------------ fitting
    def fit(self, df, schema: Schema, seed: int | None = None) -> "Generator":
        """Learn the generator's released parameters from ``df`` (never modified) under ``schema``.
        ``df``: a DataFrame, a Parquet/CSV path, a DuckDB relation or a Spark DataFrame."""
        return self._fit_frame(df, schema, seed, allow_empty=False)

    def _fit_frame(self, df, schema, seed, allow_empty: bool, charge_schema: bool = True) -> "Generator":
        """``fit``; a missing-data strategy passes ``allow_empty=True`` for its subset of the rows,
        which may be empty (the strategy must not reveal that by an error), and
        ``charge_schema=False`` (the wrapper's ledger already holds the schema's spends).

        A schema whose domains were learned under DP (``schema.privacy``, from
        ``Schema.from_dataframe(..., epsilon=)``) carries its spends into this ledger first, under
        this generator's relation; the ledger's budget is the generator's (ε, δ) plus the schema's,
        so the release's total shows both."""
        if not isinstance(schema, Schema):
            raise TypeError(f"schema must be a dpsynth.Schema (e.g. Schema.from_json(path)), got {type(schema).__name__}")
        seed = check_seed(seed)
        table = open_table(df, schema)
        self.columns_ = list(table.columns)
        self.output_schema_ = schema
        if schema.derived:  # modelled columns only; the derived ones are written after sampling
            table = derived_dropped(table, schema)
            schema = schema.modelled()
        table.validate(schema, allow_empty=allow_empty)
        if self.needs_bounds:
            schema.require_bounds()
        self.schema_ = schema
        paid = schema.privacy if charge_schema else None
        if paid:
            self.ledger = PrivacyLedger(self.epsilon + paid["epsilon"], (self.delta or 0.0) + paid.get("delta", 0.0))
            charge_spends(self.ledger, paid["spends"], self.relation)
        else:
            self.ledger = PrivacyLedger(self.epsilon, self.delta or 0.0)
        if schema.data_derived:
            self.ledger.flag("schema read from the private data (Schema.from_dataframe): domains are not private")
        source = NoiseSource(seed)
        if self.counts_only:
            self._fit(table.rows(schema), None, source)
        else:
            data = table.to_pandas(schema, self.method or type(self).__name__)[schema.names]
            codes = schema.encode(data) if self.encodes_rows else None
            self._fit(codes, data, source)
        self.fitted_ = True
        return self

    def _fit(self, codes: np.ndarray, data: pd.DataFrame, source: NoiseSource) -> None:  # pragma: no cover
        raise NotImplementedError

    # ------------------------------------------------------------------ sampling
    def sample(self, n: int | None = None, m: int = 1, seed: int | None = None) -> SynthResult:
        """Draw ``m`` synthetic datasets of ``n`` rows (default: the generator's released n)."""
        if not getattr(self, "fitted_", False):
            raise ValueError(f"{type(self).__name__} is not fitted; call .fit(df, schema) first")
        m = check_count(m, "m")
        if n is None:
            n = self.default_n()
        n = check_count(n, "n")
        rng = NoiseSource(check_seed(seed)).spawn()
        frames = [self._finish(self._sample_frame(n, rng, i)) for i in progress(range(m), f"sampling {m} datasets")]
        return SynthResult(datasets=frames, ledger=self.ledger, method=self.method or type(self).__name__,
                           schema=getattr(self, "output_schema_", self.schema_), generator=self)

    def default_n(self) -> int:
        """Rows per synthetic dataset when ``n`` is not given: ``self.n_``, set by ``_fit`` from a
        public or released (noisy) count; each generator documents which."""
        return max(1, int(round(self.n_)))

    def _sample_frame(self, n: int, rng: np.random.Generator, index: int) -> pd.DataFrame:
        codes = self._sample_codes(n, rng, index)
        return self.schema_.decode(codes, rng)

    def _sample_codes(self, n: int, rng: np.random.Generator, index: int) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def _finish(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The caller's column order, each column in the schema's output dtype (never the private one),
        with the schema's derived columns written from their sources (:mod:`dpsynth.schema.derived`)."""
        schema = getattr(self, "output_schema_", self.schema_)  # files saved before derived columns: schema_
        if schema.derived:
            frame = derive(frame, schema)
        return cast_to_schema(frame[self.columns_], schema)

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike) -> None:
        """Write the fitted generator atomically as data only (:mod:`dpsynth.persist`: JSON structure
        plus numeric arrays in one ``.npz``, no pickle). It holds only released quantities.

        >>> import dpsynth, tempfile, os
        >>> df, schema = dpsynth.load_dataset("adult")
        >>> gen = dpsynth.IndependentMarginals(1.0).fit(df, schema, seed=1)
        >>> path = os.path.join(tempfile.mkdtemp(), "gen.npz")
        >>> gen.save(path)
        >>> Generator.load(path).sample(n=5, seed=2).datasets[0].equals(gen.sample(n=5, seed=2).datasets[0])
        True
        """
        if not getattr(self, "fitted_", False):
            raise ValueError("only a fitted generator can be saved")
        atomic_write_bytes(path, to_bytes(self))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Generator":
        """Load a generator written by :meth:`save`. Nothing in the file is executed: only whitelisted
        classes (dpsynth's, torch nn modules) are rebuilt from their saved attributes; anything else
        raises ValueError."""
        gen = load_object(path)
        if not isinstance(gen, Generator):
            raise ValueError(f"{path} does not hold a dpsynth generator")
        if not isinstance(gen, cls):
            raise ValueError(f"{path} holds a {type(gen).__name__}, not a {cls.__name__}")
        return gen

    def __repr__(self) -> str:
        state = "fitted" if getattr(self, "fitted_", False) else "not fitted"
        d = f", delta={self.delta:g}" if self.delta else ""
        return f"{type(self).__name__}(epsilon={self.epsilon:g}{d}) [{state}]"

