"""SynthResult: the m synthetic datasets, the ledger and what produced them."""
from __future__ import annotations

import numbers
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .schema import atomic_write_text


# Where a fitted generator keeps the marginal queries it released (column tuples; a DP output):
# ``measured_queries_`` is the common name; NAPSU-MQ's ``selected_queries_`` is read too.
QUERY_ATTRIBUTES = ("measured_queries_", "selected_queries_")


def generator_queries(generator) -> list[tuple[str, ...]] | None:
    """The public query set a fitted generator measured, or None when it does not say."""
    for name in QUERY_ATTRIBUTES:
        queries = getattr(generator, name, None)
        if queries is not None:
            return as_cliques(queries)
    return None


def as_cliques(queries) -> list[tuple[str, ...]]:
    """Queries as a list of column tuples (a bare column name is a 1-way table)."""
    return [(q,) if isinstance(q, str) else tuple(q) for q in queries]


def generator_analyses(generator) -> list[str]:
    """The analysis formulas a generator was asked to serve (``analyses=``), as strings."""
    specs = getattr(generator, "analyses_", None)
    if specs is None:
        specs = getattr(generator, "analyses", None)
    if not specs or not isinstance(specs, (list, tuple)):
        return []
    return [getattr(a, "formula", a) for a in specs if isinstance(getattr(a, "formula", a), str)]


@dataclass
class SynthResult:
    """m synthetic datasets with their ledger.

    ``queries``: the public marginal queries (column tuples) the generator measured, None when
    unknown (then no congeniality check is made); ``analyses``: the analysis formulas the generator
    was asked to serve (``analyses=``). Both default to what the fitted generator records, so a
    result rebuilt from a saved generator keeps them; ``fit_pooled`` warns
    (``UncongenialAnalysisWarning``) when a formula needs a dependency no query carries.
    ``missing_assumption`` and ``missing_share``: for datasets completed from incomplete private
    data (NAPSU-MQ ``missing="mar"``), the identifying assumption and the released (noisy) share of
    missing values per column. ``n_private``: the generator's released (or public) number of
    private rows, which the synthetic rules' fallback variance (n_syn/n_orig)·ū needs when the
    datasets are larger than the private table (NAPSU-MQ's ``size_ratio``).
    """
    datasets: list
    ledger: object
    method: str
    schema: object = None
    generator: object = field(default=None, repr=False)
    queries: list | None = None
    analyses: list = field(default_factory=list)
    missing_assumption: str | None = None  # what completed datasets assume about missing values (e.g. MAR)
    missing_share: dict | None = None      # released share of missing values per incomplete column
    n_private: float | None = None         # released (noisy) or public number of private rows

    def __post_init__(self):
        if self.queries is None and self.generator is not None:
            self.queries = generator_queries(self.generator)
        elif self.queries is not None:
            self.queries = as_cliques(self.queries)
        if not self.analyses and self.generator is not None:
            self.analyses = generator_analyses(self.generator)
        self.analyses = list(self.analyses or [])
        if self.n_private is None and self.generator is not None:
            n = getattr(self.generator, "n_", None)
            self.n_private = float(n) if isinstance(n, numbers.Real) and n > 0 else None

    @property
    def m(self) -> int:
        return len(self.datasets)

    @property
    def diagnostics(self) -> dict:
        """The generator's fit diagnostics (plain numbers and strings; empty when it reports none).
        NAPSU-MQ: posterior dimension, Laplace restarts, split R̂ and bulk ESS over θ and over the
        released cells' probabilities (``rhat_max_cells``, ``ess_bulk_min_cells``), seconds. They
        are computed from the posterior, i.e. from released values only: post-processing."""
        raw = getattr(self.generator, "diagnostics_", None) or {}
        out = {}
        for k, v in raw.items():
            if isinstance(v, (bool, str)):
                out[k] = v
            elif isinstance(v, (int, float)) or hasattr(v, "item"):
                v = v.item() if hasattr(v, "item") else v
                out[k] = int(v) if isinstance(v, int) else float(v)
        return out

    def to_csv(self, directory: str | os.PathLike) -> list[Path]:
        """Write ``synthetic_1.csv`` … ``synthetic_m.csv`` and ``ledger.csv`` atomically."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        paths = []
        for i, frame in enumerate(self.datasets, start=1):
            p = d / f"synthetic_{i}.csv"
            atomic_write_text(p, frame.to_csv(index=False))
            paths.append(p)
        p = d / "ledger.csv"
        atomic_write_text(p, self.ledger.to_frame().to_csv(index=False))
        paths.append(p)
        return paths

    def __iter__(self):
        return iter(self.datasets)

    def __len__(self) -> int:
        return len(self.datasets)

    def __repr__(self) -> str:
        shape = self.datasets[0].shape if self.datasets else (0, 0)
        return (f"<SynthResult method={self.method!r} m={self.m} rows×cols={shape} "
                f"ε={self.ledger.total_epsilon():.4g} δ={self.ledger.total_delta():.3g}>")
