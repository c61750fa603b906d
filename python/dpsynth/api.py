"""The front door: ``synthesize(df, schema, method, epsilon, ...)``."""
from __future__ import annotations

from .generators import generator_class, make_generator
from .marginals import open_table
from .generators.base import check_count
from .privacy import check_delta, check_epsilon, check_seed
from .result import SynthResult
from .schema import Schema


def synthesize(df, schema: Schema, method: str, epsilon: float, delta: float | None = None,
               m: int = 1, seed: int | None = None, n: int | None = None, **options) -> SynthResult:
    """Fit ``method`` on ``df`` under the public ``schema`` with budget (ε, δ) and draw ``m`` datasets.

    ``df``: a DataFrame, a path to a Parquet or CSV file, a DuckDB relation or a Spark DataFrame
    (:func:`dpsynth.marginals.open_table`); the marginal-based methods (independent, privbayes,
    privbayes-e, napsu-mq) count where the data live, the others need the rows in memory.
    Everything is validated before any private row is read; ``df`` is never modified.
    ``seed`` makes the run repeatable (for tests; default: OS entropy).
    ``options`` go to the generator, e.g. ``analyses=["income ~ age + race + sex"]`` for
    ``"napsu-mq"``: the marginal tables those models need are measured (see
    :func:`dpsynth.analyses.congenial_queries`), so that ``fit_pooled`` on the result is congenial.

    >>> import dpsynth
    >>> df, schema = dpsynth.load_dataset("adult")
    >>> res = dpsynth.synthesize(df, schema, "independent", epsilon=1.0, m=2, seed=1)
    >>> res.m, res.ledger.total_epsilon() <= 1.0
    (2, True)
    """
    epsilon = check_epsilon(epsilon)
    cls, _ = generator_class(method)  # unknown method → ValueError before any work
    delta = check_delta(delta, allow_zero=not cls.needs_delta, allow_none=not cls.needs_delta)
    m = check_count(m, "m")
    if n is not None:
        n = check_count(n, "n")
    seed = check_seed(seed)
    if not isinstance(schema, Schema):
        raise TypeError(f"schema must be a dpsynth.Schema (e.g. Schema.from_json(path)), got {type(schema).__name__}")
    table = open_table(df, schema)
    table.validate(schema)
    if cls.needs_bounds:
        schema.require_bounds()
    gen = make_generator(method, epsilon, delta, **options)
    gen.fit(table, schema, seed=seed)
    return gen.sample(n=n, m=m, seed=None if seed is None else seed + 1)
