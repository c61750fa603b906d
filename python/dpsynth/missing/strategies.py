"""The vanilla strategies for missing data (Mohapatra et al., PVLDB 2024, §4.1), as generator wrappers.

- :class:`CompleteRows` fits any generator on the rows without a missing cell ("complete row only").
- :class:`ImputeFirst` fills the missing cells, then fits the generator on the completed table:
  ``imputation="random"`` draws each missing cell uniformly from the column's *public* domain (schema
  categories, or the numeric bounds), which reads no private value and costs no budget;
  ``imputation="dp-mean"`` spends a declared share of ε on a DP mean (numeric) or a DP histogram
  (categorical) per column and fills numeric cells with the mean and categorical cells with
  independent draws from the noisy distribution (the paper's "mean imputation").

Both wrap a generator named as in the registry (``"independent"``, ``"privbayes"``, …) or given as a
class, and charge everything to ONE ledger: the wrapper's ``.ledger`` holds the imputation spends
first, then the wrapped generator's, and the wrapped generator's ``.ledger`` is the same object.

Privacy. Dropping incomplete rows, and filling a row's cells from its own pattern plus released
(DP) parameters and fresh randomness, are row-wise maps: neighbouring inputs stay neighbours (under
add/remove), so the wrapped generator's guarantee carries over and the imputation spends compose
sequentially with it (ε_total = ε_impute + ε_generator). This is why imputation parameters must be
released with DP *before* the generator runs: an imputation computed from the raw data is not
row-wise, and its stability is m_A + 1 (the paper's Lemma 4.2; the artifact's non-private
``random``/``ml`` imputations and its mean imputation with sensitivity max|x| are not reproduced).
A generator whose guarantee is for replace-one neighbours does not carry over through
:class:`CompleteRows` (a replaced row can enter or leave the complete rows): the wrapper warns.

DP mean of a numeric column with public bounds [L, U] and midpoint μ₀ (add/remove): the observed-cell
count n_j gets discrete Laplace noise (sensitivity 1) and the centred clipped sum
Σ(clip(x, L, U) − μ₀) gets Laplace noise (sensitivity (U − L)/2), each with half the column's share;
mean = clip(μ₀ + S̃/max(ñ_j, 1), L, U). Under replace-one the sum's sensitivity is U − L. A categorical
column's observed-level counts get discrete Laplace noise (L1 sensitivity 1, replace-one 2), clipped at
0 and normalised. The imputation share is split equally over the imputed columns, by default every
column of the schema (which columns have missing cells is itself private); pass a public
``impute_columns=[...]`` to restrict it.

Example
-------
>>> import dpsynth
>>> df, schema = dpsynth.load_dataset("adult")
>>> gen = ImputeFirst(1.0, generator="independent", imputation="dp-mean", impute_share=0.25)
>>> res = gen.fit(df, schema, seed=1).sample(n=100, seed=2)
>>> round(res.ledger.total_epsilon(), 6), bool(res.datasets[0].notna().all().all())
(1.0, True)
"""
from __future__ import annotations

import numbers
import warnings

import numpy as np
import pandas as pd

from ..generators.base import Generator
from ..privacy import laplace_counts, laplace_values

IMPUTATIONS = ("random", "dp-mean")


def _resolve(generator):
    """(class, fixed options, display name) for a registry name or a Generator subclass."""
    from ..generators import generator_class

    if isinstance(generator, str):
        cls, fixed = generator_class(generator)
        return cls, fixed, generator.lower()
    if isinstance(generator, type) and issubclass(generator, Generator):
        if issubclass(generator, _GeneratorWrapper):
            raise ValueError("wrap a generator, not another missing-data strategy")
        return generator, {}, getattr(generator, "method", "") or generator.__name__
    if isinstance(generator, Generator):
        raise TypeError("pass the generator's class or registry name (e.g. generator='privbayes'), not a "
                        "constructed instance: the wrapper constructs it with its share of the budget")
    raise TypeError(f"generator must be a registry name such as 'independent' or a Generator subclass, "
                    f"got {type(generator).__name__}")


class _GeneratorWrapper(Generator):
    """Shared plumbing: construct, fit and sample the wrapped generator on one ledger."""

    relation = "add-remove"
    needs_delta = False
    needs_bounds = False
    strategy = ""

    def __init__(self, epsilon: float, delta: float | None = None, generator="independent", **options):
        cls, fixed, name = _resolve(generator)
        clash = set(fixed) & set(options)
        if clash:
            raise ValueError(f"generator {name!r} fixes {sorted(clash)}; do not pass them as options")
        self.generator = generator
        self.generator_options = {**fixed, **options}
        self._inner_cls = cls
        # instance-level requirements follow the wrapped generator (checked by Generator.__init__/fit)
        self.needs_delta = bool(cls.needs_delta)
        self.needs_bounds = bool(cls.needs_bounds) or type(self).needs_bounds
        self.relation = cls.relation
        self.method = f"{self.strategy}:{name}"
        super().__init__(epsilon, delta)

    def _fit_inner(self, frame: pd.DataFrame, epsilon: float, source) -> None:
        """Fit the wrapped generator on ``frame`` with budget ``epsilon`` (and the full δ), then move
        its spends into this wrapper's ledger and make both share that ledger."""
        inner = self._inner_cls(epsilon, self.delta, **self.generator_options)
        seed = None if source.exact_os_entropy else int(source.numpy.integers(0, 2**31 - 1))
        inner.fit(frame, self.schema_, seed=seed)
        for s in inner.ledger.spends:
            self.ledger.spend(s.step, s.mechanism, epsilon=s.epsilon if s.rho is None else None, delta=s.delta,
                              rho=s.rho, sensitivity=s.sensitivity, relation=s.relation, norm=s.norm, note=s.note)
        for f in inner.ledger.flags:
            self.ledger.flag(f)
        inner.ledger = self.ledger
        self.generator_ = inner
        self.n_ = inner.default_n()

    def _sample_frame(self, n, rng, index):
        return self.generator_._sample_frame(n, rng, index)


class CompleteRows(_GeneratorWrapper):
    """Fit ``generator`` on the complete rows only (the paper's "complete row only" baseline).

    The wrapped generator gets the whole budget; the synthetic size is its released n (about the
    number of complete rows). ``options`` go to the wrapped generator.

    >>> import dpsynth
    >>> df, schema = dpsynth.load_dataset("adult")
    >>> gen = CompleteRows(1.0, generator="independent").fit(df, schema, seed=1)
    >>> 29000 < gen.default_n() < 31500   # about the 30,162 complete rows
    True
    """

    strategy = "complete-rows"

    def __init__(self, epsilon: float, delta: float | None = None, generator="independent", **options):
        super().__init__(epsilon, delta, generator, **options)
        if self.relation != "add-remove":
            warnings.warn(f"{self.method}: the wrapped generator's guarantee is for replace-one neighbours, which "
                          "does not carry over to the complete rows (a replaced row can enter or leave them); "
                          "prefer an add/remove generator", UserWarning, stacklevel=2)
        self.relation = "add-remove"

    def _fit(self, codes, data, source):
        complete = data[(codes >= 0).all(axis=1)]
        if len(complete) == 0:
            raise ValueError("no row is complete; the complete-rows strategy has nothing to learn from "
                             "(use ImputeFirst or a generator that handles missing cells)")
        self._fit_inner(complete, self.epsilon, source)


class ImputeFirst(_GeneratorWrapper):
    """Impute the missing cells, then fit ``generator`` on the completed table.

    ``imputation="random"``: uniform draws from the public domain, no budget.
    ``imputation="dp-mean"``: ``impute_share`` (default 0.25; the paper used 0.25, 0.5, 0.75) of ε
    goes to DP means/histograms of ``impute_columns`` (default: all columns), the rest to the
    generator. See the module docstring for the sensitivities.
    """

    strategy = "impute-first"
    needs_bounds = True

    def __init__(self, epsilon: float, delta: float | None = None, generator="independent",
                 imputation: str = "random", impute_share: float | None = None, impute_columns=None, **options):
        if imputation not in IMPUTATIONS:
            raise ValueError(f"imputation must be one of {list(IMPUTATIONS)}, got {imputation!r}")
        if impute_share is None:
            impute_share = 0.25 if imputation == "dp-mean" else 0.0
        if isinstance(impute_share, bool) or not isinstance(impute_share, numbers.Real):
            raise TypeError(f"impute_share must be a number, got {impute_share!r}")
        impute_share = float(impute_share)
        if imputation == "random" and impute_share != 0:
            raise ValueError("random imputation reads no private value and spends no budget; leave impute_share "
                             "unset (or 0)")
        if imputation == "dp-mean" and not 0 < impute_share < 1:
            raise ValueError(f"impute_share must be in (0, 1) for dp-mean imputation, got {impute_share}")
        self.imputation = imputation
        self.impute_share = impute_share
        self.impute_columns = None if impute_columns is None else [str(c) for c in impute_columns]
        self.strategy = f"impute-{imputation}"
        super().__init__(epsilon, delta, generator, **options)

    def _fit(self, codes, data, source):
        schema = self.schema_
        if self.impute_columns is not None:
            unknown = [c for c in self.impute_columns if c not in schema.columns]
            if unknown:
                raise ValueError(f"impute_columns {unknown} are not in the schema")
        rng = source.spawn()
        if self.imputation == "random":
            self.imputation_values_ = None
            filled = _fill(data, schema, rng, lambda col, k: _uniform_draws(col, k, rng), self.impute_columns)
            self._fit_inner(filled, self.epsilon, source)
            return
        columns = self.impute_columns if self.impute_columns is not None else schema.names
        eps_impute = self.impute_share * self.epsilon
        eps_col = eps_impute / len(columns)
        self.imputation_values_ = {}
        for name in columns:
            self.imputation_values_[name] = self._dp_column_summary(name, data[name], codes[:, schema.names.index(name)],
                                                                    eps_col, source)
        summaries = self.imputation_values_

        def draw(col, k):
            value = summaries[col.name]
            if col.is_categorical:
                return np.asarray(col.categories, dtype=object)[rng.choice(len(col.categories), size=k, p=value)]
            return np.full(k, value)

        filled = _fill(data, schema, rng, draw, columns)
        self._fit_inner(filled, self.epsilon - eps_impute, source)

    def _dp_column_summary(self, name, values, codes_j, eps_col, source):
        """DP mean (numeric, in [lower, upper]) or DP level distribution (categorical) of one column."""
        col = self.schema_[name]
        replace = self.relation == "replace-one"
        if col.is_categorical:
            observed = codes_j[codes_j >= 0]
            counts = np.bincount(observed, minlength=col.size).astype(np.int64)
            noisy = laplace_counts(counts, epsilon=eps_col, sensitivity=2 if replace else 1, ledger=self.ledger,
                                   source=source, step=f"impute {name}: level counts", relation=self.relation)
            noisy = np.clip(noisy, 0, None).astype(float)
            if noisy.sum() <= 0:
                noisy[:] = 1.0
            return noisy / noisy.sum()
        lower, upper = float(col.lower), float(col.upper)
        mid = 0.5 * (lower + upper)
        x = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        x = x[~np.isnan(x)]
        count = laplace_counts(np.array([x.size], dtype=np.int64), epsilon=eps_col / 2, sensitivity=1,
                               ledger=self.ledger, source=source, step=f"impute {name}: observed count",
                               relation=self.relation)
        total = laplace_values(np.array([np.sum(np.clip(x, lower, upper) - mid)]), epsilon=eps_col / 2,
                               sensitivity=(upper - lower) if replace else (upper - lower) / 2, ledger=self.ledger,
                               source=source, step=f"impute {name}: centred clipped sum", relation=self.relation)
        mean = float(np.clip(mid + total[0] / max(float(count[0]), 1.0), lower, upper))
        return float(np.round(mean)) if col.integer else mean


def _uniform_draws(col, k, rng):
    """k draws from the column's public domain: a uniform category, or uniform on [lower, upper]."""
    if col.is_categorical:
        return np.asarray(col.categories, dtype=object)[rng.integers(0, len(col.categories), size=k)]
    if col.integer:
        return rng.integers(int(np.ceil(col.lower)), int(np.floor(col.upper)) + 1, size=k).astype(float)
    return rng.uniform(col.lower, col.upper, size=k)


def _fill(data: pd.DataFrame, schema, rng, draw, columns=None) -> pd.DataFrame:
    """A copy of ``data`` whose missing cells in ``columns`` (default: all) are replaced by ``draw(col, k)``."""
    out = data.copy()
    for name in (columns if columns is not None else schema.names):
        miss = out[name].isna().to_numpy()
        k = int(miss.sum())
        if k == 0:
            continue
        values = draw(schema[name], k)
        s = out[name]
        if isinstance(s.dtype, pd.CategoricalDtype):
            filled = s.astype(object).to_numpy()
            filled[miss] = values
            out[name] = pd.Categorical(filled, categories=s.cat.categories, ordered=s.cat.ordered)
        else:
            filled = s.to_numpy(dtype=object if s.dtype == object else float, na_value=np.nan).copy()
            filled[miss] = values
            filled = pd.Series(filled, index=s.index)
            try:
                out[name] = filled.astype(s.dtype)
            except (TypeError, ValueError):  # e.g. a non-integer mean in an integer column
                out[name] = filled.astype(float)
    return out
