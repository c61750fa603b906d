"""The analyses the synthetic data are meant to serve, and the marginal queries that make them congenial.

A marginal-query generator (NAPSU-MQ) releases a maximum-entropy model fitted to a set of noisy
marginal tables (cliques). An analysis is *congenial* to it when every dependency the analysis
estimates is carried by a measured clique; a dependency no clique holds is filled in by the
max-ent model as (conditional) independence, and the pooled intervals are then valid for the wrong
value. This module turns an analyst's formula into the columns and interactions it uses
(:func:`parse_analysis`), plans the cliques a generator should measure for it
(:func:`congenial_queries`), and checks a released query set against it
(:func:`missing_dependencies`, used by ``fit_pooled`` and by R's ``dp_glm``).

Everything here reads formulas, column names and the public query set only: no data.

Example
-------
>>> from dpsynth.analyses import parse_analysis, congenial_queries, missing_dependencies
>>> a = parse_analysis("income ~ age + C(race) + sex", ["age", "race", "sex", "income", "hours"])
>>> a.response, a.predictors
('income', ('age', 'race', 'sex'))
>>> plan = congenial_queries([a], {"age": 5, "race": 5, "sex": 2, "income": 2, "hours": 5})
>>> plan.fixed[:3]
[('income', 'age'), ('income', 'race'), ('income', 'sex')]
>>> missing_dependencies(a, [("income", "age"), ("income", "race"), ("age", "race", "sex")])
['sex–income: no measured table holds both; the model links them only through other columns']
"""
from __future__ import annotations

import ast
import itertools
import math
import re
import warnings
from dataclasses import dataclass, field

from .schema import Schema

__all__ = ["Analysis", "CongenialPlan", "PredictorStar", "UncongenialAnalysisWarning", "parse_analysis",
           "parse_analyses", "congenial_queries", "association", "star_cliques", "missing_dependencies",
           "congeniality_messages", "quote_columns"]

MAX_JOINT_CELLS = 256  # predictors' joint table measured as one clique up to this many cells
MAX_PAIR_CELLS = 1000  # otherwise predictor pairs up to this many cells, a private tree among them


class UncongenialAnalysisWarning(UserWarning):
    """The synthetic data were generated from marginal queries that do not carry a dependency the
    analysis estimates: its coefficients are biased towards (conditional) independence, whatever
    the interval says. Generate with ``analyses=["<formula>"]`` to measure what it needs.
    ``.missing`` lists the missing dependencies (`congeniality_messages`)."""

    missing: list = []


@dataclass(frozen=True)
class Analysis:
    """One analysis model, reduced to what the generator has to preserve for it.

    ``formula``: the formula as given (or built from a pair); ``response``: the outcome column;
    ``predictors``: the columns on the right-hand side, in formula order, each once;
    ``interactions``: the column tuples of terms that involve two or more columns (``a:b``, the
    ``a:b`` inside ``a*b``, ``I(a*b)``), each in formula order.
    """
    formula: str
    response: str
    predictors: tuple[str, ...]
    interactions: tuple[tuple[str, ...], ...] = ()


@dataclass
class CongenialPlan:
    """Cliques for a set of analyses (see :func:`congenial_queries`).

    ``fixed``: cliques to measure as they are; ``select_among``: candidate predictor pairs from which
    a private maximum spanning tree should pick (empty when every pair is fixed); ``covered``: the
    columns that appear in ``fixed`` or ``select_among`` (the rest attach as the generator decides);
    ``notes``: what was left out and why (e.g. a pair table above ``max_joint_cells``);
    ``stars``: the analyses whose predictors' joint is too large to measure, for which a generator
    that can release the (response, predictor) tables first builds a star of predictor cliques
    around a hub (:func:`star_cliques`) instead of the tree of ``select_among``.
    """
    fixed: list[tuple[str, ...]] = field(default_factory=list)
    select_among: list[tuple[str, ...]] = field(default_factory=list)
    covered: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    stars: list["PredictorStar"] = field(default_factory=list)


@dataclass(frozen=True)
class PredictorStar:
    """An analysis' response and predictors whose joint table is too large to measure (see
    :func:`star_cliques`)."""
    response: str
    predictors: tuple[str, ...]


# ------------------------------------------------------------------------------------------ parsing
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_QUOTED = re.compile(r"""("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')""")
_BACKTICK = re.compile(r"`([^`]+)`")


def _column_names(columns) -> list[str]:
    """The (string) column names of a list, a pandas Index or a Schema."""
    names = columns.names if isinstance(columns, Schema) else columns
    if isinstance(names, str) or not hasattr(names, "__iter__"):
        raise TypeError(f"columns must be a list of column names (or a Schema), got {type(columns).__name__}")
    return [c for c in names if isinstance(c, str)]  # other labels cannot be named in a formula


def _q(name: str) -> str:
    return name if _IDENT.match(name) else f"Q({name!r})"


def quote_columns(formula: str, columns) -> str:
    """The formula with R-style backtick names and plain column names that are not Python
    identifiers (``hours-per-week``) written as ``Q("...")``, so that patsy reads them as one column.

    A plain name is replaced only where it stands as a whole token outside quotes; write
    subtraction with spaces (``a - b``) when a column called ``a-b`` also exists.

    >>> quote_columns("income ~ hours-per-week + `capital-gain` + age", ["hours-per-week", "capital-gain", "age"])
    "income ~ Q('hours-per-week') + Q('capital-gain') + age"
    """
    if not isinstance(formula, str):
        raise TypeError(f"formula must be a string such as 'y ~ x1 + x2', got {type(formula).__name__}")
    odd = sorted((c for c in _column_names(columns) if not _IDENT.match(c)), key=len, reverse=True)
    pattern = _BACKTICK.pattern  # `name` (R), or a plain odd name standing as a whole token
    if odd:
        pattern += r"|(?<![A-Za-z0-9_.])(" + "|".join(map(re.escape, odd)) + r")(?![A-Za-z0-9_.])"
    names = re.compile(pattern)
    parts = _QUOTED.split(formula)  # odd indices are quoted strings: left alone
    return "".join(p if i % 2 else names.sub(lambda m: f"Q({(m.group(1) or m.group(2))!r})", p)
                   for i, p in enumerate(parts))


def _factor_columns(code: str, columns: set[str], unknown: list[str]) -> list[str]:
    """The column names a patsy factor's Python code reads, in order; other free names → unknown."""
    if code.strip() == ".":
        raise ValueError("'.' (all other columns) is not supported in an analysis formula; name the predictors")
    try:
        tree = ast.parse(code.strip(), mode="eval")
    except SyntaxError as err:
        raise ValueError(f"cannot read the term {code!r} of the formula: {err.msg}") from None
    callees = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    found: list[str] = []

    def visit(node):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Q":
            if len(node.args) != 1 or not isinstance(node.args[0], ast.Constant) \
                    or not isinstance(node.args[0].value, str):
                raise ValueError(f"Q() takes one quoted column name, as Q('hours-per-week'); got {code!r}")
            found.append(node.args[0].value)
            return
        if isinstance(node, ast.Attribute):  # np.log, x.values: only the base can be a column
            base = node
            while isinstance(base, ast.Attribute):
                base = base.value
            if id(node) not in callees:
                visit(base)
            return
        if isinstance(node, ast.Name):
            if id(node) not in callees:
                found.append(node.id)
            return
        if isinstance(node, ast.Call):
            for child in [*node.args, *(k.value for k in node.keywords)]:
                visit(child)
            if not isinstance(node.func, (ast.Name, ast.Attribute)):
                visit(node.func)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    out = []
    for name in found:
        if name in columns:
            if name not in out:
                out.append(name)
        elif name not in unknown:
            unknown.append(name)
    return out


def _term_columns(termlist, columns: set[str], unknown: list[str]) -> list[list[str]]:
    terms = []
    for term in termlist:
        cols: list[str] = []
        for factor in term.factors:
            for c in _factor_columns(factor.code, columns, unknown):
                if c not in cols:
                    cols.append(c)
        if cols:
            terms.append(cols)
    return terms


def _from_formula(formula: str, names: list[str], strict: bool) -> Analysis:
    from patsy import ModelDesc, PatsyError

    if "~" not in formula:
        raise ValueError(f"an analysis formula needs a response: 'y ~ x1 + x2'; got {formula!r}")
    try:
        desc = ModelDesc.from_formula(quote_columns(formula, names))
    except PatsyError as err:
        raise ValueError(f"cannot parse the formula {formula!r}: {err}") from None
    columns, unknown = set(names), []
    lhs = [c for t in _term_columns(desc.lhs_termlist, columns, unknown) for c in t]
    rhs = _term_columns(desc.rhs_termlist, columns, unknown)
    if unknown and strict:
        raise ValueError(f"the formula {formula!r} uses {unknown}, which are not columns of the data; "
                         f"available columns: {names}")
    response = list(dict.fromkeys(lhs))
    if len(response) != 1:
        raise ValueError(f"the response of {formula!r} must be exactly one column; it reads {response or 'none'}")
    response = response[0]
    predictors = list(dict.fromkeys(c for t in rhs for c in t))
    if response in predictors:
        raise ValueError(f"the response {response!r} also appears on the right-hand side of {formula!r}")
    order = {c: i for i, c in enumerate(predictors)}
    interactions = dict.fromkeys(tuple(sorted(t, key=order.get)) for t in rhs if len(t) > 1)
    return Analysis(formula, response, tuple(predictors), tuple(interactions))


def _from_pair(spec, names: list[str]) -> Analysis:
    response, predictors = spec
    if isinstance(predictors, str):
        predictors = [predictors]
    if not isinstance(response, str) or not all(isinstance(p, str) for p in predictors):
        raise TypeError(f"a (response, [predictors]) pair needs column names as strings; got {spec!r}")
    predictors = list(dict.fromkeys(predictors))
    if not predictors:
        raise ValueError(f"the analysis {spec!r} names no predictors")
    unknown = [c for c in [response, *predictors] if c not in names]
    if unknown:
        raise ValueError(f"the analysis {spec!r} uses {unknown}, which are not columns of the data; "
                         f"available columns: {names}")
    if response in predictors:
        raise ValueError(f"the response {response!r} is also listed as a predictor in {spec!r}")
    formula = f"{_q(response)} ~ " + " + ".join(map(_q, predictors))
    return Analysis(formula, response, tuple(predictors), ())


def _parse(spec, columns, strict: bool = True) -> Analysis:
    names = _column_names(columns)
    if isinstance(spec, Analysis):
        return spec
    if isinstance(spec, str):
        return _from_formula(spec, names, strict)
    if isinstance(spec, (tuple, list)) and len(spec) == 2 and isinstance(spec[0], str) \
            and not isinstance(spec[1], (int, float)):
        return _from_pair(spec, names)
    raise TypeError("an analysis is a formula string such as 'income ~ age + sex' or a pair "
                    f"('income', ['age', 'sex']); got {spec!r}")


def parse_analysis(spec, columns) -> Analysis:
    """Read one analysis: a formula (patsy / R syntax) or a pair ``(response, [predictors])``.

    ``columns``: the schema's column names (or the Schema). Factor code is read for the columns it
    uses: ``C(race, Treatment('White'))`` → race, ``np.log(x)`` and ``I(x**2)`` → x,
    ``Q("hours-per-week")``, R's backticks and plain names with '-' → that column. A name that is
    neither a column nor a function → ValueError naming it and the available columns.

    >>> a = parse_analysis("income ~ age * sex + C(race, Treatment('White')) + hours-per-week",
    ...                    ["age", "sex", "race", "income", "hours-per-week"])
    >>> a.predictors, a.interactions
    (('age', 'sex', 'race', 'hours-per-week'), (('age', 'sex'),))
    >>> parse_analysis(("income", ["age", "sex"]), ["age", "sex", "income"]).formula
    'income ~ age + sex'
    """
    return _parse(spec, columns, strict=True)


def parse_analyses(specs, columns) -> list[Analysis]:
    """One analysis or a list of them (formulas, pairs or `Analysis` objects) → list of `Analysis`.

    >>> [a.response for a in parse_analyses(["y ~ x", ("x", ["z"])], ["x", "y", "z"])]
    ['y', 'x']
    """
    if isinstance(specs, (str, Analysis)):
        specs = [specs]
    elif isinstance(specs, tuple) and len(specs) == 2 and isinstance(specs[0], str) \
            and not isinstance(specs[1], str):
        specs = [specs]  # one (response, [predictors]) pair
    if not isinstance(specs, (list, tuple)):
        raise TypeError(f"analyses must be a formula string or a list of them; got {type(specs).__name__}")
    return [parse_analysis(s, columns) for s in specs]


# ------------------------------------------------------------------------------------------ planning
def _dedupe(cliques) -> list[tuple[str, ...]]:
    """Drop repeats and cliques contained in another clique of the list; keep first-seen order."""
    unique = list(dict.fromkeys(cliques))
    sets = [frozenset(c) for c in unique]
    keep = []
    for i, c in enumerate(unique):
        if any(sets[i] < s or (sets[i] == s and j < i) for j, s in enumerate(sets) if j != i):
            continue
        keep.append(c)
    return keep


def congenial_queries(analyses, domain_sizes: dict, max_joint_cells: int = MAX_JOINT_CELLS,
                      max_pair_cells: int = MAX_PAIR_CELLS) -> CongenialPlan:
    """The cliques that make a marginal-query model congenial to the analyses.

    For an analysis y ~ X_1 + … + X_k:

    - (y, X_j) for every predictor: with these cliques and no clique holding y together with two
      predictors, the max-ent model's conditional p(y | X) is exactly a main-effects logistic
      (multinomial-logit) model in X: the analysis model's own family, so its coefficients are
      estimable from the synthetic data;
    - an interaction named in the formula (``a:b``, ``a*b``) becomes the clique (y, a, b): the only
      way the model can carry an a × b effect on y;
    - the predictors' own dependence: with the (y, X_j) cliques alone the predictors are
      independent given y (naive Bayes), and the implied logistic coefficients match the real
      ones only if that holds. So the predictors' joint table (X_1, …, X_k) is measured when it
      has at most ``max_joint_cells`` cells: the model then holds the whole design and the
      conditional, and the analysis estimates on synthetic data the same quantity as on the real
      data (measured on Bank, age ~ marital + education + housing: a tree of two predictor
      pairs missed the housing coefficient in 5 of 5 repeats). A larger joint is replaced by the
      predictor pairs that fit (at most ``max_pair_cells`` cells), in ``select_among``, from
      which the generator picks a private maximum spanning tree (junction-tree cliques stay at
      (y, X_i, X_j)). Predictor cliques never contain y, so the conditional stays main-effects
      logistic.

    Cliques contained in another are dropped (``y ~ a*b`` gives the single clique (y, a, b)).
    Columns outside every analysis are not planned here (``covered`` lists those that are).

    Parameters
    ----------
    analyses : `Analysis` objects (from :func:`parse_analyses`), a list or one.
    domain_sizes : cells per column (public, from the schema), for every column the analyses use.
    max_joint_cells : the largest predictors' joint table measured as one clique (default 256).
    max_pair_cells : with a larger joint, the largest predictor-pair table offered to the tree;
        larger pairs are left out (noted).

    >>> a = parse_analysis("y ~ a * b + c", ["y", "a", "b", "c"])
    >>> plan = congenial_queries([a], {"y": 2, "a": 3, "b": 4, "c": 5})
    >>> plan.fixed
    [('y', 'c'), ('y', 'a', 'b'), ('a', 'b', 'c')]
    >>> congenial_queries([a], {"y": 2, "a": 3, "b": 4, "c": 50}).select_among
    [('a', 'c'), ('b', 'c')]
    """
    if isinstance(analyses, Analysis):
        analyses = [analyses]
    if not isinstance(analyses, (list, tuple)) or not all(isinstance(a, Analysis) for a in analyses):
        raise TypeError("congenial_queries needs Analysis objects: parse them first with "
                        "parse_analyses(specs, schema.names)")
    for name, v in (("max_joint_cells", max_joint_cells), ("max_pair_cells", max_pair_cells)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer; got {v!r}")
    used = {c for a in analyses for c in (a.response, *a.predictors)}
    absent = sorted(used - set(domain_sizes))
    if absent:
        raise ValueError(f"domain_sizes has no size for {absent} (give every column the analyses use)")

    fixed, candidates, notes, stars = [], [], [], []
    for a in analyses:
        y = a.response
        fixed += [(y, x) for x in a.predictors]
        fixed += [(y, *inter) for inter in a.interactions]
        if len(a.predictors) >= 2 and math.prod(domain_sizes[x] for x in a.predictors) <= max_joint_cells:
            fixed.append(tuple(a.predictors))  # the predictors' joint table: their whole design
            continue
        if len(a.predictors) >= 3:
            stars.append(PredictorStar(y, tuple(a.predictors)))
        pairs = list(itertools.combinations(a.predictors, 2))
        fits = [p for p in pairs if domain_sizes[p[0]] * domain_sizes[p[1]] <= max_pair_cells]
        for p in pairs:
            if p not in fits:
                notes.append(f"{p[0]}–{p[1]}: {domain_sizes[p[0]] * domain_sizes[p[1]]} cells > "
                             f"max_pair_cells={max_pair_cells}; not measured as a pair")
        candidates += fits
    fixed = _dedupe(fixed)
    held = [frozenset(c) for c in fixed]
    select_among = [p for p in dict.fromkeys(candidates) if not any(frozenset(p) <= s for s in held)]
    covered = {c for clique in fixed + select_among for c in clique}
    return CongenialPlan(fixed, select_among, covered, list(dict.fromkeys(notes)), stars)


def association(table, numeric: bool) -> float:
    """How strongly a predictor goes with the response, in the analysis' coding, from a
    (response levels × predictor levels) table of counts (noisy counts are clipped at 0): for a
    numeric predictor (at its bin index) η², the share of the index's variance that the response
    explains; for a categorical one Cramér's V² (χ² / (n · (min(r, c) − 1))). With a binary
    response both are the squared correlation of the response with the predictor's coding (its
    index, or its indicator when binary), so predictors of either kind are ranked on one scale.

    >>> round(association([[30, 20, 10], [10, 20, 30]], numeric=True), 3)
    0.167
    >>> round(association([[30, 10], [10, 30]], numeric=False), 3)
    0.25
    """
    import numpy as np

    t = np.clip(np.asarray(table, dtype=float), 0.0, None)
    n = t.sum()
    if t.ndim != 2 or n <= 0 or min(t.shape) < 2:
        return 0.0
    if numeric:
        x = np.arange(t.shape[1], dtype=float)
        col = t.sum(0)
        mean = col @ x / n
        total = col @ (x - mean) ** 2
        rows = t.sum(1)
        means = np.divide(t @ x, rows, out=np.full(len(rows), mean), where=rows > 0)
        return float(rows @ (means - mean) ** 2 / total) if total > 0 else 0.0
    expected = np.outer(t.sum(1), t.sum(0)) / n
    chi2 = np.divide((t - expected) ** 2, expected, out=np.zeros_like(t), where=expected > 0).sum()
    return float(chi2 / (n * (min(t.shape) - 1)))


def star_cliques(star: PredictorStar, strength: dict, fits) -> tuple[list[str], list[tuple[str, ...]]]:
    """The predictors' structure for an analysis whose joint is too large: a *hub* H of predictors,
    every other predictor X_k linked to each member of H, so that the junction tree holds the
    clique H ∪ {X_k} (with the response: (y, H, X_k)) and X_k is independent of the other
    predictors given H.

    The hub is the predictor of largest ``strength`` (its :func:`association` with the response),
    then the others in that order, each kept when every clique H ∪ {X_k} still ``fits`` (a
    callable on that list of cliques, public: the generator's cell limit on its junction tree).
    Why the strongest first: a coefficient is biased by the dependence the model drops between its
    predictor and the others, weighted by *their* effects on the response (omitted-variable bias),
    so the dependence on the strongest predictor is the one to keep; small predictors (e.g. a
    binary one) then join H when the cliques allow. The tables measured are *pairs* (each member of
    H with each other predictor, and the pairs within H): the same junction tree as the cliques
    H ∪ {X_k} with a third fewer parameters on the bundled Adult (D 1,026 against 1,536), which
    the sampler's time follows. Measured there (income ~ age + education-num + hours-per-week + sex
    + race, exact tables, ``bench/napsu_structure.py``): H = {education-num, sex} moves the
    coefficients by at most about 2 real-data standard errors, against 4.5–5.0 for MST's tree of
    predictor pairs and 3.0 for the tree of largest mutual information.

    Returns (H, pairs to measure); ([], []) when the strongest predictor's cliques do not fit (the
    caller then keeps the tree of predictor pairs).

    >>> s = PredictorStar("y", ("a", "b", "c", "d"))
    >>> sizes = {"a": 16, "b": 16, "c": 16, "d": 2}
    >>> star_cliques(s, {"a": 0.05, "b": 0.1, "c": 0.04, "d": 0.04},
    ...              lambda cl: all(math.prod(sizes[x] for x in c) <= 512 for c in cl))
    (['b', 'd'], [('b', 'd'), ('b', 'a'), ('d', 'a'), ('b', 'c'), ('d', 'c')])
    """
    order = sorted(star.predictors, key=lambda x: -float(strength.get(x, 0.0)))  # stable: formula order on ties

    def cliques(hub):
        rest = [x for x in star.predictors if x not in hub]
        return [(*hub, x) for x in rest] if rest else [tuple(hub)]

    if not fits(cliques(order[:1])):
        return [], []  # a star around a weaker predictor would drop the dependence that matters most
    hub = order[:1]
    for x in order[1:]:
        if fits(cliques([*hub, x])):
            hub.append(x)
    rest = [x for x in star.predictors if x not in hub]
    return hub, [*itertools.combinations(hub, 2), *((h, x) for x in rest for h in hub)]


# ------------------------------------------------------------------------------------------ checking
def connected_components(nodes, cliques) -> list[list[str]]:
    """``nodes`` grouped by connected component of the graph whose edges join columns sharing a
    clique (paths may pass through columns outside ``nodes``), in the order of ``nodes``.

    >>> connected_components(["a", "b", "c", "d"], [("a", "b"), ("b", "c")])
    [['a', 'b', 'c'], ['d']]
    """
    parent = {v: v for v in [*nodes, *(c for clique in cliques for c in clique)]}

    def find(v):
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for clique in cliques:
        members = list(clique)
        for c in members[1:]:
            parent[find(c)] = find(members[0])
    groups: dict[str, list[str]] = {}
    for v in nodes:
        groups.setdefault(find(v), []).append(v)
    return list(groups.values())


def missing_dependencies(analysis: Analysis, measured) -> list[str]:
    """What the analysis estimates that no measured clique carries, as sentences (empty: congenial).

    - a response–predictor pair that no clique holds together: the model links them only through
      other columns, so the coefficient is pulled towards what those paths imply;
    - an interaction whose columns and the response are in no one clique: the synthetic data carry
      no such interaction effect;
    - predictors linked only through the response (no path between them in the cliques that avoids
      y): the model makes them independent given y (naive Bayes), which biases the coefficients
      where they are associated.

    ``measured``: the released cliques (column tuples, e.g. ``SynthResult.queries``).

    >>> a = parse_analysis("y ~ a + b + a:b", ["y", "a", "b"])
    >>> for line in missing_dependencies(a, [("y", "a"), ("y", "b"), ("a", "b")]): print(line)
    a:b on y: no measured table holds y, a and b together; the synthetic data carry no a × b interaction effect on y
    """
    if not isinstance(analysis, Analysis):
        raise TypeError(f"missing_dependencies needs an Analysis (see parse_analysis); got {type(analysis).__name__}")
    if isinstance(measured, (str, bytes)) or not hasattr(measured, "__iter__"):
        raise TypeError(f"measured must be a list of column tuples such as [('age', 'income')]; got {measured!r}")
    cliques = [frozenset((q,) if isinstance(q, str) else q) for q in measured]
    y = analysis.response

    def held(cols) -> bool:
        return any(set(cols) <= c for c in cliques)

    out = [f"{x}–{y}: no measured table holds both; the model links them only through other columns"
           for x in analysis.predictors if not held((y, x))]
    for inter in analysis.interactions:
        if not held((y, *inter)):
            cols = ", ".join(inter[:-1]) + f" and {inter[-1]}"
            out.append(f"{':'.join(inter)} on {y}: no measured table holds {y}, {cols} together; the synthetic "
                       f"data carry no {' × '.join(inter)} interaction effect on {y}")
    groups = connected_components(analysis.predictors, [c - {y} for c in cliques])
    if len(groups) > 1:
        shown = " | ".join(", ".join(g) for g in groups)
        out.append(f"predictors linked only through {y} ({shown}): the model makes these groups independent "
                   f"given {y} (naive Bayes), which biases their coefficients where they are associated")
    return out


def congeniality_messages(formula: str, columns, queries) -> list[str]:
    """The check ``fit_pooled`` and R's ``dp_glm`` run: the formula's missing dependencies given the
    released ``queries`` (empty when ``queries`` is None: nothing to check). Names in the formula
    that are not data columns (columns derived after synthesis) are not checked, nor is a formula
    whose response is not a data column.

    >>> congeniality_messages("y ~ x", ["x", "y"], [("x",), ("y",)])
    ['x–y: no measured table holds both; the model links them only through other columns']
    """
    if queries is None:
        return []
    try:
        analysis = _parse(formula, columns, strict=False)
    except ValueError:  # e.g. a response derived after synthesis: nothing released to check it against
        return []
    return missing_dependencies(analysis, queries)


def uncongenial_text(formula: str, messages: list[str], remedy: str | None = None) -> str:
    """The warning's text: what is missing, and how to generate data that carry it (``remedy``:
    the sentence's call, default the Python one; R passes its own)."""
    remedy = remedy or f"dpsynth.synthesize(..., method='napsu-mq', analyses=[{formula!r}])"
    return (f"the synthetic data were generated from marginal tables that do not carry what {formula!r} "
            "estimates, so its coefficients are biased towards independence (the intervals do not show it):\n  - "
            + "\n  - ".join(messages)
            + f"\nGenerate with analyses=[{formula!r}] (e.g. {remedy}) to measure what it needs.")


def warn_uncongenial(formula: str, columns, queries, remedy: str | None = None, stacklevel: int = 2) -> list[str]:
    """`congeniality_messages`, and when there are any an `UncongenialAnalysisWarning` (text:
    `uncongenial_text`; the messages in its ``.missing``). Returns the messages.

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as w:
    ...     warnings.simplefilter("always")
    ...     msgs = warn_uncongenial("y ~ x", ["x", "y"], [("x",), ("y",)])
    >>> w[0].message.missing == msgs, len(msgs)
    (True, 1)
    """
    messages = congeniality_messages(formula, columns, queries)
    if messages:
        warning = UncongenialAnalysisWarning(uncongenial_text(formula, messages, remedy))
        warning.missing = list(messages)
        warnings.warn(warning, stacklevel=stacklevel + 1)
    return messages
