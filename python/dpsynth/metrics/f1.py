"""Machine-learning utility: mean F1 of 9 classifiers trained on synthetic data, tested on real data.

The seed paper's protocol (Mohapatra et al. 2024, §6.1; artifact ``evaluation.validate_accuracy``):
sample min(5000, n) rows of the real and of the synthetic table (rows with missing cells dropped);
for each target column make a binary label (the paper's positive classes, below); split each sample
90/10; scale the other numeric columns to [0, 1] with a min–max scaler fitted on the training and test
rows together and one-hot code the categorical ones; train each classifier on the synthetic 90 % and score F1
on the real 10 % (≈ 500 rows); average over classifiers and targets. A training set with one class
predicts that class. Pass ``real_test=`` to score on a held-out real table instead (then the whole
synthetic sample trains). Note: with ``synth`` equal to ``real`` both samples are the same rows, so
the test rows were also trained on; a real-data reference needs ``real_test`` (on Adult's complete
rows, 500 held-out rows: mean F1 0.68 over the 14 targets; the artifact's log reports 0.513 with
its own label quirks, e.g. capital-gain F1 0.00).

The 9 classifiers are scikit-learn defaults: LogisticRegression, AdaBoost, GradientBoosting,
**HistGradientBoosting as a substitute for XGBoost** (xgboost is not a dependency), RandomForest,
BernoulliNB, DecisionTree, Bagging, MLP. LogisticRegression gets ``max_iter=1000`` (the default 100
stops before convergence on one-hot data); other settings are the library defaults of scikit-learn 1.9
(the artifact ran 0.24), so figures are comparable, not identical.

Targets (artifact §4): Adult's 14 (income ">50K", sex "Female", ...; numeric targets as intervals
[left, right)); Bank: ``y = "yes"`` (the artifact's other Bank targets differ between its two copies
and are not used); National: none is defined by the artifact (F1 was skipped there).

Example
-------
>>> import dpsynth
>>> df, schema = dpsynth.load_dataset("adult")
>>> res = f1_average(df, df, targets=["income"], classifiers=["DecisionTree"], n_sample=1000)
>>> 0 < res.f1 <= 1
True
"""
from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

#: positive class per target: a set of labels (matched case-insensitively) or an interval [left, right)
ADULT_TARGETS = {
    "income": {">50K"},
    "sex": {"Female"},
    "marital-status": {"Never-married"},
    "education": {"Some-college", "Assoc-voc", "Assoc-acdm", "Masters", "Doctorate", "Bachelors", "Prof-school"},
    "age": (50, 100),
    "workclass": {"State-gov", "Federal-gov", "Local-gov"},
    "education-num": (10, 17),
    "occupation": {"Prof-specialty"},
    "relationship": {"Unmarried"},
    "race": {"Black"},
    "capital-gain": (0, 1000),
    "capital-loss": (0, 1000),
    "hours-per-week": (40, 100),
    "native-country": {"United-States"},
}
BANK_TARGETS = {"y": {"yes"}}
PAPER_TARGETS = {"adult": ADULT_TARGETS, "bank": BANK_TARGETS, "national": {}}

XGBOOST_SUBSTITUTE = "HistGradientBoosting"
CLASSIFIERS = ("LogisticRegression", "AdaBoost", "GradientBoosting", XGBOOST_SUBSTITUTE, "RandomForest",
               "BernoulliNB", "DecisionTree", "Bagging", "MLP")


def make_classifier(name: str, seed: int = 42):
    """A fresh scikit-learn classifier for one of :data:`CLASSIFIERS`."""
    from sklearn import ensemble, linear_model, naive_bayes, neural_network, tree

    factories = {
        "LogisticRegression": lambda: linear_model.LogisticRegression(max_iter=1000),
        "AdaBoost": lambda: ensemble.AdaBoostClassifier(random_state=seed),
        "GradientBoosting": lambda: ensemble.GradientBoostingClassifier(random_state=seed),
        XGBOOST_SUBSTITUTE: lambda: ensemble.HistGradientBoostingClassifier(random_state=seed),
        "RandomForest": lambda: ensemble.RandomForestClassifier(random_state=seed),
        "BernoulliNB": lambda: naive_bayes.BernoulliNB(),
        "DecisionTree": lambda: tree.DecisionTreeClassifier(random_state=seed),
        "Bagging": lambda: ensemble.BaggingClassifier(random_state=seed),
        "MLP": lambda: neural_network.MLPClassifier(random_state=seed),
    }
    if name not in factories:
        raise ValueError(f"unknown classifier {name!r}; choose from {list(CLASSIFIERS)}")
    return factories[name]()


@dataclass
class F1Result:
    """Mean F1 over targets × classifiers, and the table behind it (one row per pair)."""

    f1: float
    table: pd.DataFrame

    def by_target(self) -> pd.Series:
        return self.table.groupby("target", sort=False)["f1"].mean()

    def by_classifier(self) -> pd.Series:
        return self.table.groupby("classifier", sort=False)["f1"].mean()


def f1_average(real: pd.DataFrame, synth: pd.DataFrame, targets="adult", classifiers=None, *,
               schema=None, n_sample: int = 5000, test_size: float = 0.1, seed: int = 42,
               real_test: pd.DataFrame | None = None, threads: int | None = 1) -> F1Result:
    """Train-synthetic / test-real mean F1 (see the module docstring).

    ``targets``: a dataset name in :data:`PAPER_TARGETS`, a dict {column: positive labels or
    (left, right)}, or a list of column names of Adult's/Bank's targets. ``classifiers``: names from
    :data:`CLASSIFIERS` (default all 9) or a dict {name: unfitted scikit-learn estimator}.
    ``schema`` (optional) says which columns are categorical (default: by dtype). ``threads`` caps the
    BLAS/OpenMP threads while fitting (1 by default: on a shared machine oversubscribed threads made
    MLP and HistGradientBoosting 10× slower; results do not depend on it; None = library default).
    """
    from sklearn.base import clone
    from threadpoolctl import threadpool_limits
    from sklearn.metrics import accuracy_score, f1_score

    targets = _resolve_targets(targets)
    models = _resolve_classifiers(classifiers, seed)
    for name, frame in (("real", real), ("synth", synth), ("real_test", real_test)):
        if frame is None:
            continue
        if not isinstance(frame, pd.DataFrame):
            raise TypeError(f"{name} must be a pandas DataFrame, got {type(frame).__name__}")
        absent = [c for c in list(real.columns) + list(targets) if c not in frame.columns]
        if absent:
            raise ValueError(f"{name} lacks the columns {sorted(set(absent))}")
    if isinstance(n_sample, bool) or not isinstance(n_sample, numbers.Integral) or n_sample < 10:
        raise ValueError(f"n_sample must be an integer >= 10, got {n_sample!r}")
    if not 0 < test_size < 1:
        raise ValueError(f"test_size must be in (0, 1), got {test_size}")
    columns = list(real.columns)
    r = _sample(real[columns], n_sample, seed, "real")
    s = _sample(synth[columns], n_sample, seed, "synthetic")
    categorical = _categorical(r, schema)
    rng = np.random.default_rng(seed)
    if real_test is None:
        test_idx = rng.permutation(len(r))[: max(1, int(round(test_size * len(r))))]
        train_idx = rng.permutation(len(s))[max(1, int(round(test_size * len(s)))):]
        test, train = r.iloc[test_idx], s.iloc[train_idx]
    else:
        test, train = _sample(real_test[columns], len(real_test), seed, "real_test"), s
    rows = []
    for target, positive in targets.items():
        y_train, y_test = _label(train[target], positive), _label(test[target], positive)
        X_train, X_test = _features(train.drop(columns=[target]), test.drop(columns=[target]),
                                    {c: v for c, v in categorical.items() if c != target})
        for name, model in models.items():
            if len(np.unique(y_train)) < 2:
                pred = np.full(len(y_test), y_train[0])
            else:
                est = clone(model)
                with warnings.catch_warnings(), threadpool_limits(limits=threads):
                    warnings.simplefilter("ignore")
                    est.fit(X_train, y_train)
                    pred = est.predict(X_test)
            rows.append({"target": target, "classifier": name,
                         "f1": float(f1_score(y_test, pred, zero_division=0)),
                         "accuracy": float(accuracy_score(y_test, pred))})
    table = pd.DataFrame(rows, columns=["target", "classifier", "f1", "accuracy"])
    return F1Result(float(table["f1"].mean()), table)


def _resolve_targets(targets) -> dict:
    if isinstance(targets, str):
        if targets not in PAPER_TARGETS:
            raise ValueError(f"no paper targets for {targets!r}; known: {sorted(PAPER_TARGETS)}, or pass a dict "
                             "{column: positive labels or (left, right)}")
        out = PAPER_TARGETS[targets]
        if not out:
            raise ValueError(f"the paper defines no F1 targets for {targets!r}; pass targets={{column: positive}}")
        return dict(out)
    if isinstance(targets, dict):
        if not targets:
            raise ValueError("targets is empty")
        return dict(targets)
    if isinstance(targets, (list, tuple)):
        known = {**BANK_TARGETS, **ADULT_TARGETS}
        unknown = [t for t in targets if t not in known]
        if unknown or not targets:
            raise ValueError(f"targets {unknown or '[]'} have no paper positive class; pass a dict {{column: positive}}")
        return {t: known[t] for t in targets}
    raise TypeError(f"targets must be a dataset name, a dict or a list of column names, got {type(targets).__name__}")


def _resolve_classifiers(classifiers, seed) -> dict:
    if classifiers is None:
        classifiers = CLASSIFIERS
    if isinstance(classifiers, dict):
        if not classifiers:
            raise ValueError("classifiers is empty")
        return dict(classifiers)
    if isinstance(classifiers, str):
        classifiers = [classifiers]
    names = list(classifiers)
    if not names:
        raise ValueError("classifiers is empty")
    return {n: make_classifier(n, seed) for n in names}


def _sample(frame: pd.DataFrame, n: int, seed: int, who: str) -> pd.DataFrame:
    complete = frame.dropna()
    if len(complete) < 2:
        raise ValueError(f"the {who} data have fewer than 2 complete rows; F1 needs complete rows")
    if len(complete) > n:
        complete = complete.sample(n, random_state=seed)
    return complete.reset_index(drop=True)


def _categorical(frame: pd.DataFrame, schema) -> dict:
    if schema is not None:
        return {c: schema[c].is_categorical for c in frame.columns}
    return {c: not (pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c]))
            for c in frame.columns}


def _label(s: pd.Series, positive) -> np.ndarray:
    if isinstance(positive, tuple):
        left, right = positive
        x = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        return ((x >= left) & (x < right)).astype(int)
    wanted = {str(p).lower() for p in positive}
    return s.astype(object).astype(str).str.lower().isin(wanted).to_numpy().astype(int)


def _features(train: pd.DataFrame, test: pd.DataFrame, categorical: dict):
    """Min–max scaled numerics (fitted on both frames) and aligned one-hot categoricals."""
    both = pd.concat([train, test], keys=["train", "test"])
    parts = []
    for c, is_cat in categorical.items():
        if is_cat:
            parts.append(pd.get_dummies(both[c].astype(object).astype(str), prefix=c, dtype=float))
        else:
            x = pd.to_numeric(both[c]).astype(float)
            lo, hi = x.min(), x.max()
            parts.append(((x - lo) / (hi - lo) if hi > lo else x * 0.0).rename(c).to_frame())
    X = pd.concat(parts, axis=1)
    return X.loc["train"].to_numpy(), X.loc["test"].to_numpy()
