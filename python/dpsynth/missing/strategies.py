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
A replace-one generator's guarantee does not carry over through :class:`CompleteRows` as such (a
replaced row can enter or leave the complete rows, so their number is private): the wrapper first
fixes a public or noisy table size and runs the generator on exactly that many rows (see the class).

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

from collections.abc import Collection

import numpy as np
import pandas as pd

from ..generators.base import Generator
from ..privacy import laplace_counts, laplace_values
from ..validation import check_choice, check_count, check_number, check_share

IMPUTATIONS = ("random", "dp-mean")
COUNT_SHARE = 0.02  # CompleteRows around a replace-one generator: share of ε for the noisy complete-row count


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
    """Shared plumbing: construct, fit and sample the wrapped generator on one ledger.

    The constructor stores what the user passed (``generator`` and the wrapped generator's
    ``options`` as given), so ``get_params`` returns the named arguments and those options together
    and ``sklearn.base.clone`` copies a wrapper; the wrapped generator is built in ``fit``."""

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
        self.generator_options = options  # the wrapped generator's options, as passed
        self._inner_cls = cls
        # instance-level requirements follow the wrapped generator (checked by Generator.__init__/fit)
        self.needs_delta = bool(cls.needs_delta)
        self.needs_bounds = bool(cls.needs_bounds) or type(self).needs_bounds
        self.relation = cls.relation
        self.method = f"{self.strategy}:{name}"
        super().__init__(epsilon, delta)

    def get_params(self, deep: bool = False) -> dict:
        """The named arguments and the wrapped generator's options, as passed: ``type(w)(**w.get_params())``
        builds the same wrapper."""
        return {**super().get_params(deep), **self.generator_options}

    def _fit_inner(self, frame: pd.DataFrame, epsilon: float, source, n_public: int | None = None) -> None:
        """Fit the wrapped generator on ``frame`` with budget ``epsilon`` (and the full δ), then move
        its spends into this wrapper's ledger and make both share that ledger.

        The composition is checked: a replace-one generator under an add/remove wrapper must get a
        table whose size ``n_public`` is public or released (see :class:`CompleteRows`); its spends
        are then recorded under the wrapper's relation, the one relation of the whole release."""
        cls, fixed, _ = _resolve(self.generator)
        inner = cls(epsilon, self.delta, **{**fixed, **self.generator_options})
        composed = inner.relation != self.relation
        if composed and not (inner.relation == "replace-one" and self.relation == "add-remove"
                             and n_public is not None and len(frame) == n_public):
            raise RuntimeError(f"{self.method}: a {inner.relation} generator cannot run under a {self.relation} "
                               "wrapper unless its table has a public or released size")
        seed = None if source.exact_os_entropy else int(source.numpy.integers(0, 2**31 - 1))
        inner._fit_frame(frame, self.schema_, seed, allow_empty=True, charge_schema=False)
        note = (f" [{inner.relation} spend on a table of exactly {n_public} rows (public/released size); "
                f"{self.relation} neighbours of the input give {inner.relation} neighbours of that table]"
                if composed else "")
        for s in inner.ledger.spends:
            self.ledger.spend(s.step, s.mechanism, epsilon=s.epsilon if s.rho is None else None, delta=s.delta,
                              rho=s.rho, sensitivity=s.sensitivity, relation=self.relation, norm=s.norm,
                              note=s.note + note, attributes=s.attributes)
        for f in inner.ledger.flags:
            self.ledger.flag(f)
        inner.ledger = self.ledger
        self.generator_ = inner
        self.n_ = inner.default_n()

    def _sample_frame(self, n, rng, index):
        return self.generator_._sample_frame(n, rng, index)


class CompleteRows(_GeneratorWrapper):
    """Fit ``generator`` on the complete rows only (the paper's "complete row only" baseline).

    The wrapper's guarantee is for **add/remove** neighbours: a replaced row can enter or leave the
    complete rows, so their number n_cc is private. An add/remove generator (``independent``,
    ``napsu-mq``, ``dp-misgan``, ``kamino``) gets the whole budget and releases its own noisy n.
    A replace-one generator (``privbayes``, ``privbayes-e``, ``pmse``) needs a public table size,
    so the wrapper fixes it first:

    * ``n_complete=K`` (public: the caller vouches that K was not computed from the private data,
      e.g. the documented size of a release) costs nothing; or by default
    * ``count_share`` of ε (default 0.02, as PrivBayes's own count) releases
      K = max(n_cc + discrete Laplace(1/ε_n), 1), charged to the ledger (add/remove, sensitivity 1).

    The wrapped generator then runs on exactly K rows: a uniformly random K-subset of the complete
    rows if there are more, else all of them plus K − n_cc rows drawn uniformly from the public
    domain (no private value). Adding or removing one input row changes that table in at most one
    row (subsampling and padding are couplings), so each replace-one spend holds under add/remove
    of the input; the ledger records every spend with the one relation ``add-remove``. The default
    synthetic size is K. ``options`` go to the wrapped generator.

    >>> import dpsynth
    >>> df, schema = dpsynth.load_dataset("adult")
    >>> gen = CompleteRows(1.0, generator="independent").fit(df, schema, seed=1)
    >>> 29000 < gen.default_n() < 31500   # about the 30,162 complete rows
    True
    >>> gen = CompleteRows(1.0, generator="privbayes", n_complete=30000).fit(df, schema, seed=1)
    >>> gen.default_n(), gen.ledger.relation
    (30000, 'add-remove')
    """

    strategy = "complete-rows"
    derived_options = ("count_share",)  # in use: count_share_, set in fit (the 2% default for None)

    def __init__(self, epsilon: float, delta: float | None = None, generator="independent",
                 n_complete: int | None = None, count_share: float | None = None, **options):
        super().__init__(epsilon, delta, generator, **options)
        if self.relation == "add-remove":
            if n_complete is not None or count_share is not None:
                raise ValueError(f"{self.method}: the wrapped generator releases its own noisy n under add/remove; "
                                 "n_complete and count_share are for replace-one generators (privbayes, pmse)")
        else:
            self.relation = "add-remove"
            self.needs_bounds = True  # padding rows are drawn from the public domain
            if n_complete is not None and count_share is not None:
                raise ValueError("give n_complete (public) or count_share (share of ε for a noisy count), not both")
        # stored as passed (a whole float for n_complete as that int); the share in use is count_share_
        self.n_complete = None if n_complete is None else check_count(n_complete, "n_complete")
        self.count_share = None if count_share is None else check_share(count_share, "count_share")

    def _fit(self, codes, data, source):
        complete = data[(codes >= 0).all(axis=1)]
        replace_one = self._inner_cls.relation != "add-remove"
        self.count_share_ = None  # the share of ε in use for the noisy count (replace-one, no public size)
        if replace_one and self.n_complete is None:
            self.count_share_ = COUNT_SHARE if self.count_share is None else self.count_share
        if not replace_one:
            self._fit_inner(complete, self.epsilon, source)
            return
        eps = self.epsilon
        size = self.n_complete
        if size is None:
            eps_n = self.count_share_ * eps
            noisy = laplace_counts(np.array([len(complete)], dtype=np.int64), epsilon=eps_n, sensitivity=1,
                                   ledger=self.ledger, source=source, step="number of complete rows",
                                   relation=self.relation, attributes=self.schema_.names,
                                   note="sizes the wrapped replace-one generator's table and the synthetic data")
            eps -= eps_n
            size = max(int(noisy[0]), 1)  # post-processing of the released count; never an error
        self.table_size_ = size
        table = _fixed_size(complete, size, self.schema_, source.spawn())
        self._fit_inner(table, eps, source, n_public=size)


def _fixed_size(rows: pd.DataFrame, size: int, schema, rng) -> pd.DataFrame:
    """Exactly ``size`` rows: a uniformly random subset of ``rows`` if there are more, else all of
    them followed by rows drawn uniformly from the public domain (see :class:`CompleteRows`)."""
    if len(rows) >= size:
        keep = np.sort(rng.choice(len(rows), size=size, replace=False))
        return rows.iloc[keep].reset_index(drop=True)
    # draw ``size`` candidate rows whatever the number needed, so that one row more or less among
    # ``rows`` changes the padding by one row (the coupling of the privacy argument, also under a seed)
    pad = pd.DataFrame({name: _uniform_draws(schema[name], size, rng) for name in schema.names})
    pad = schema.coerce(pad.iloc[:size - len(rows)])
    out = pd.concat([schema.coerce(rows.reset_index(drop=True)), pad], ignore_index=True)
    return out[list(rows.columns)]


class ImputeFirst(_GeneratorWrapper):
    """Impute the missing cells, then fit ``generator`` on the completed table.

    ``imputation="random"``: uniform draws from the public domain, no budget.
    ``imputation="dp-mean"``: ``impute_share`` (default 0.25; the paper used 0.25, 0.5, 0.75) of ε
    goes to DP means/histograms of ``impute_columns`` (default: all columns; a list of names or one
    name), the rest to the generator. See the module docstring for the sensitivities. ``options`` go
    to the wrapped generator.
    """

    strategy = "impute-first"
    needs_bounds = True
    derived_options = ("impute_share", "impute_columns")  # in use: <name>_, set in fit

    def __init__(self, epsilon: float, delta: float | None = None, generator="independent",
                 imputation: str = "random", impute_share: float | None = None, impute_columns=None, **options):
        check_choice(imputation, "imputation", IMPUTATIONS)
        if impute_share is not None:
            check_number(impute_share, "impute_share")
            if imputation == "random" and impute_share != 0:
                raise ValueError("random imputation reads no private value and spends no budget; leave impute_share "
                                 "unset (or 0)")
            if imputation == "dp-mean":
                check_share(impute_share, "impute_share")
        if impute_columns is not None and not isinstance(impute_columns, (str, Collection)):
            raise TypeError(f"impute_columns must be None, a column name or a list of them, got {impute_columns!r}")
        self.imputation = imputation  # all three stored as passed; fit derives impute_share_, impute_columns_
        self.impute_share = impute_share
        self.impute_columns = impute_columns
        self.strategy = f"impute-{imputation}"
        super().__init__(epsilon, delta, generator, **options)

    def _resolve_options(self) -> None:
        """The share of ε for the imputation (0.25 for dp-mean, 0 for random when None) and the
        imputed columns as a list of names (None: every column)."""
        default = 0.25 if self.imputation == "dp-mean" else 0.0
        self.impute_share_ = float(default if self.impute_share is None else self.impute_share)
        columns = [self.impute_columns] if isinstance(self.impute_columns, str) else self.impute_columns
        self.impute_columns_ = None if columns is None else [str(c) for c in columns]

    def _fit(self, codes, data, source):
        schema = self.schema_
        self._resolve_options()
        if self.impute_columns_ is not None:
            unknown = [c for c in self.impute_columns_ if c not in schema.columns]
            if unknown:
                raise ValueError(f"impute_columns {unknown} are not in the schema")
        rng = source.spawn()
        if self.imputation == "random":
            self.imputation_values_ = None
            filled = _fill(data, schema, rng, lambda col, k: _uniform_draws(col, k, rng), self.impute_columns_)
            self._fit_inner(filled, self.epsilon, source)
            return
        columns = self.impute_columns_ if self.impute_columns_ is not None else schema.names
        eps_impute = self.impute_share_ * self.epsilon
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
