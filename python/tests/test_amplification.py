"""MCAR privacy amplification for the ground-truth data (dpsynth.privacy.amplification).

The brute-force checks build small pure-DP mechanisms (randomised response on "does at least one
visible row match"), enumerate every MCAR mask of every row exactly, and compare the true privacy
loss between ground-truth neighbours with the bound."""
import itertools
import math

import numpy as np
import pytest

from dpsynth.privacy import PrivacyLedger, mcar_amplification, mcar_amplification_ex_ante
from dpsynth.privacy.amplification import EX_ANTE, EX_POST


# --------------------------------------------------------------------------- brute force
def _output_law(rows, k, phis, mechs):
    """Exact output distribution over {0,1}^J. ``mechs``: (kind, A, eps, test); 'proj' reads rows
    observed on A and tests their values on A; 'any' reads every row (test sees mask and values)."""
    masks = list(itertools.product([0, 1], repeat=k))
    pm = {m: math.prod((1 - phis[a]) if m[a] else phis[a] for a in range(k)) for m in masks}
    law = 0.0
    for ms in itertools.product(masks, repeat=len(rows)):
        w = math.prod(pm[m] for m in ms)
        out = np.ones(1)
        for kind, attrs, eps, test in mechs:
            if kind == "proj":
                hit = any(all(m[a] for a in attrs) and test(tuple(r[a] for a in attrs)) for r, m in zip(rows, ms))
            else:
                hit = any(test(m, tuple(r[a] if m[a] else None for a in range(k))) for r, m in zip(rows, ms))
            q = math.exp(eps) / (1 + math.exp(eps))  # randomised response: ε-DP (one row flips `hit`)
            p1 = q if hit else 1 - q
            out = np.kron(out, [1 - p1, p1])
        law = law + w * out
    return law


def _loss(p, q):
    return float(np.max(np.abs(np.log(p) - np.log(q))))


def _random_case(rng, with_any):
    k = int(rng.integers(1, 4))
    phis = list(rng.uniform(0.05, 0.9, k).round(2))
    mechs, sets = [], []
    for _ in range(int(rng.integers(1, 4))):
        eps = float(rng.uniform(0.2, 3.0))
        if with_any and rng.random() < 0.3:
            pattern = tuple(int(b) for b in rng.integers(0, 2, k))
            mechs.append(("any", (), eps, lambda m, v, pattern=pattern: tuple(m) == pattern and any(m)))
            sets.append([])
        else:
            attrs = tuple(sorted(int(a) for a in rng.choice(k, int(rng.integers(1, k + 1)), replace=False)))
            vals = tuple(int(v) for v in rng.integers(0, 2, len(attrs)))
            mechs.append(("proj", attrs, eps, lambda v, vals=vals: v == vals))
            sets.append(list(attrs))
    return k, phis, mechs, sets


# --------------------------------------------------------------------------- headline values
def test_one_marginal_is_theorem_5_3():
    for relation in ("add-remove", "replace-one"):
        eps, det = mcar_amplification([["a"]], [3.0], {"a": 0.5}, relation=relation)
        assert eps == pytest.approx(2.3554, abs=1e-4)
        assert eps == pytest.approx(math.log(1 + 0.5 * (math.e**3 - 1)), abs=1e-12)
    assert det["algorithm4"] == pytest.approx(1.5)  # the linear p·ε figure


def test_paper_example_5_11():
    sets = [["state"], ["occupation"], ["gender"], ["gender", "income"]]
    rates = {"state": 0.25, "occupation": 0.0, "gender": 0.25, "income": 0.25}
    eps, det = mcar_amplification(sets, [0.25] * 4, rates)
    assert eps == pytest.approx(0.7925, abs=1e-4)
    assert det["algorithm4"] == pytest.approx(0.8125)  # the paper's best valid partition
    assert det["algorithm4_exact"] and det["epsilon_sum"] == pytest.approx(1.0)
    # replace-one (no projection assumption) is larger, still below the unamplified sum
    eps_ro, _ = mcar_amplification(sets, [0.25] * 4, rates, relation="replace-one")
    assert eps < eps_ro < 1.0
    assert mcar_amplification(sets, [0.25] * 4, rates, relation="replace-one", projection=True)[0] == \
        pytest.approx(eps, abs=1e-12)


# --------------------------------------------------------------------------- brute force
def test_add_remove_bound_holds_and_is_attained():
    rng = np.random.default_rng(0)
    for _ in range(60):
        k, phis, mechs, sets = _random_case(rng, with_any=True)
        eps_bar, _ = mcar_amplification(sets, [m[2] for m in mechs], dict(enumerate(phis)))
        others = [tuple(int(v) for v in rng.integers(0, 2, k)) for _ in range(int(rng.integers(0, 2)))]
        x = tuple(int(v) for v in rng.integers(0, 2, k))
        loss = _loss(_output_law(others, k, phis, mechs), _output_law(others + [x], k, phis, mechs))
        assert loss <= eps_bar + 1e-9
    # worst case: no other rows and every test true -> the output "all ones" attains the bound
    k, phis = 3, [0.3, 0.5, 0.2]
    sets = [[0], [0, 1], [1, 2], []]
    eps = [0.7, 1.3, 2.0, 0.4]
    mechs = [("proj", tuple(s), e, lambda v: True) for s, e in zip(sets[:3], eps[:3])]
    mechs.append(("any", (), eps[3], lambda m, v: True))  # reads every present row, even all-missing
    loss = _loss(_output_law([], k, phis, mechs), _output_law([(1, 1, 1)], k, phis, mechs))
    assert loss == pytest.approx(mcar_amplification(sets, eps, dict(enumerate(phis)))[0], abs=1e-9)


def test_replace_one_bound_holds():
    rng = np.random.default_rng(1)
    for _ in range(60):
        k, phis, mechs, sets = _random_case(rng, with_any=True)
        rates = dict(enumerate(phis))
        eps = [m[2] for m in mechs]
        x, y = (tuple(int(v) for v in rng.integers(0, 2, k)) for _ in range(2))
        others = [tuple(int(v) for v in rng.integers(0, 2, k)) for _ in range(int(rng.integers(0, 2)))]
        loss = _loss(_output_law(others + [x], k, phis, mechs), _output_law(others + [y], k, phis, mechs))
        assert loss <= mcar_amplification(sets, eps, rates, relation="replace-one")[0] + 1e-9
        if all(m[0] == "proj" for m in mechs):
            assert loss <= mcar_amplification(sets, eps, rates, relation="replace-one", projection=True)[0] + 1e-9
    # one mechanism, x passes its test and y does not: Theorem 5.3 is attained
    mechs = [("proj", (0, 1), 2.0, lambda v: v == (1, 1))]
    loss = _loss(_output_law([(1, 1)], 2, [0.3, 0.6], mechs), _output_law([(0, 0)], 2, [0.3, 0.6], mechs))
    assert loss == pytest.approx(mcar_amplification([[0, 1]], [2.0], [0.3, 0.6], relation="replace-one")[0])


def test_algorithm4_figure_is_not_a_bound_for_large_epsilon():
    # one mechanism, ε = 3, 50 % MCAR: the true loss between {} and {x} is 2.3554 > 1.5
    mechs = [("proj", (0,), 3.0, lambda v: True)]
    loss = _loss(_output_law([], 1, [0.5], mechs), _output_law([(1,)], 1, [0.5], mechs))
    eps, det = mcar_amplification([[0]], [3.0], [0.5])
    assert loss == pytest.approx(eps, abs=1e-9)
    assert loss > det["algorithm4"] + 0.8


# --------------------------------------------------------------------------- structure
def test_reductions():
    rates = {"a": 0.2, "b": 0.4, "c": 0.0, "d": 1.0}
    f = lambda p, e: math.log1p(p * math.expm1(e))  # noqa: E731
    # disjoint sets compose: sum of Theorem 5.3 values
    eps, _ = mcar_amplification([["a"], ["b"]], [1.0, 2.0], rates)
    assert eps == pytest.approx(f(0.8, 1.0) + f(0.6, 2.0))
    # identical sets: one mechanism with the summed ε
    eps, _ = mcar_amplification([["a", "b"], ["a", "b"]], [1.0, 0.5], rates)
    assert eps == pytest.approx(f(0.48, 1.5))
    # always-observed attributes: no amplification; never-observed: never read
    assert mcar_amplification([["c"], []], [1.0, 0.3], rates)[0] == pytest.approx(1.3)
    assert mcar_amplification([["a", "d"], ["c"]], [5.0, 0.3], rates)[0] == pytest.approx(0.3)
    # overlapping sets are positively correlated: exact value ≥ the (invalid) sum of singles
    eps, _ = mcar_amplification([["a"], ["a", "b"]], [1.0, 1.0], rates)
    assert eps > f(0.8, 1.0) + f(0.48, 1.0)


def _partitions(items):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        for i in range(len(part)):
            yield part[:i] + [part[i] | {first}] + part[i + 1:]
        yield part + [{first}]


def test_algorithm4_matches_enumeration_of_partitions():
    rng = np.random.default_rng(2)
    for _ in range(25):
        attrs = list("abcde")
        rates = {a: float(rng.choice([0.0, 0.1, 0.25, 0.5])) for a in attrs}
        sets = [list(rng.choice(attrs, int(rng.integers(1, 4)), replace=False)) for _ in range(int(rng.integers(1, 6)))]
        eps = [float(e) for e in rng.uniform(0.1, 1.0, len(sets))]
        best = math.inf
        for part in _partitions(attrs):
            cost = 0.0
            for s, e in zip(sets, eps):
                inside = [g for g in part if g <= set(s)]
                if not inside:
                    cost = math.inf
                    break
                cost += e * min(math.prod(1 - rates[a] for a in g) for g in inside)
            best = min(best, cost)
        _, det = mcar_amplification(sets, eps, rates)
        assert det["algorithm4_exact"]
        assert det["algorithm4"] == pytest.approx(best, abs=1e-12)


def test_bad_input():
    with pytest.raises(ValueError, match="relation"):
        mcar_amplification([["a"]], [1.0], {"a": 0.1}, relation="swap")
    with pytest.raises(ValueError, match="no rate"):
        mcar_amplification([["a", "b"]], [1.0], {"a": 0.1})
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        mcar_amplification([["a"]], [1.0], {"a": 1.5})
    with pytest.raises(ValueError, match="one ε per marginal"):
        mcar_amplification([["a"]], [1.0, 2.0], {"a": 0.1})
    with pytest.raises(TypeError, match="list of attributes"):
        mcar_amplification(["a"], [1.0], {"a": 0.1})
    with pytest.raises(ValueError, match="max_attributes"):
        mcar_amplification([list(range(30))], [1.0], [0.1] * 30)


def test_ledger_ground_truth_epsilon():
    led = PrivacyLedger(epsilon=1.0)
    led.spend("s", "exponential mechanism", epsilon=0.25, sensitivity=3, relation="add-remove", attributes=[])
    led.spend("t1", "discrete Laplace", epsilon=0.25, sensitivity=1, relation="add-remove", attributes=["a"],
              min_attributes=1)
    led.spend("t2", "discrete Laplace", epsilon=0.5, sensitivity=1, relation="add-remove", attributes=["a", "b"],
              min_attributes=2)
    rates = {"a": 0.2, "b": 0.3}
    eps, det = led.ground_truth_epsilon(rates, return_details=True)
    # "a" is the best-observed attribute, so the worst selection is this run's: ex ante = ex post here
    assert eps == pytest.approx(mcar_amplification([[], ["a"], ["a", "b"]], [0.25, 0.25, 0.5], rates)[0])
    assert det["bound"] == EX_ANTE and det["ex_post"]["bound"] == EX_POST
    assert det["ex_post"]["epsilon_bar"] == pytest.approx(eps)
    assert 0.25 < eps < led.total_epsilon() and det["ex_post"]["algorithm4"] < 1.0
    assert led.ground_truth_epsilon({"a": 0.0, "b": 0.0}) == pytest.approx(1.0)
    assert led.to_dict()["spends"][2]["attributes"] == ("a", "b")
    assert led.to_dict()["spends"][2]["min_attributes"] == 2
    assert PrivacyLedger.from_dict(led.to_dict()).ground_truth_epsilon(rates) == pytest.approx(eps)
    z = PrivacyLedger(epsilon=1.0, delta=1e-6)
    z.spend("g", "Gaussian", rho=0.01, sensitivity=1, relation="add-remove", norm="L2")
    with pytest.raises(ValueError, match="pure"):
        z.ground_truth_epsilon({})


# ----------------------------------------------------------------------------- ex ante (issue #16)
def test_ground_truth_epsilon_is_ex_ante_not_this_runs_selection():
    """The sets a run selects depend on the private data: the reported ε must cover every
    selection. Here the mechanism reads rows observed on one attribute it selects; this run picked
    the 90 %-missing "a", another run (on neighbouring data) may pick the never-missing "b", whose
    ε is the full 1.0. The old code reported this run's 0.159."""
    rates = {"a": 0.9, "b": 0.0}
    led = PrivacyLedger(epsilon=1.0)
    led.spend("table", "discrete Laplace", epsilon=1.0, sensitivity=1, relation="add-remove", attributes=["a"],
              min_attributes=1)
    eps, det = led.ground_truth_epsilon(rates, return_details=True)
    other_run = mcar_amplification([["b"]], [1.0], rates)[0]
    assert other_run == pytest.approx(1.0)
    assert eps >= other_run - 1e-12
    assert det["bound"] == EX_ANTE
    assert det["ex_post"]["bound"] == EX_POST
    assert det["ex_post"]["epsilon_bar"] == pytest.approx(math.log1p(0.1 * math.expm1(1.0)))


def test_undeclared_min_attributes_are_not_amplified():
    led = PrivacyLedger(epsilon=1.0)
    led.spend("t", "discrete Laplace", epsilon=1.0, sensitivity=1, relation="replace-one", attributes=["a"])
    assert led.ground_truth_epsilon({"a": 0.5}) == pytest.approx(1.0)  # reads every row, as far as we know
    with pytest.raises(ValueError, match="lower bound"):
        led.spend("u", "discrete Laplace", epsilon=0.1, sensitivity=1, relation="replace-one", attributes=["a"],
                  min_attributes=2)


def _families(universe, sizes):
    """Every sequence of attribute sets with |A_j| = sizes[j] (larger sets only lower the loss)."""
    options = [list(itertools.combinations(universe, k)) for k in sizes]
    return itertools.product(*options)


@pytest.mark.parametrize("relation", ["add-remove", "replace-one"])
def test_ex_ante_bound_covers_every_selection(relation):
    """Brute force over all selections of sets of the declared sizes from 4 attributes: the ex-ante
    bound is at least the exact bound of each (and equals the best one under add/remove)."""
    rates = {"a": 0.1, "b": 0.3, "c": 0.0, "d": 0.6}
    for sizes, eps in (([1, 2, 2], [0.5, 1.0, 2.0]), ([0, 1, 3], [0.3, 3.0, 1.0]), ([2, 2], [1.5, 1.5])):
        bound, det = mcar_amplification_ex_ante(sizes, eps, rates, relation)
        worst = max(mcar_amplification([list(f) for f in fam], eps, rates, relation)[0]
                    for fam in _families(sorted(rates), sizes))
        assert bound >= worst - 1e-12
        assert bound <= sum(eps) + 1e-12
        assert det["bound"] == EX_ANTE and det["nested_sets"][0] == sorted(rates, key=rates.get)[:sizes[0]]
        if relation == "add-remove":
            assert bound == pytest.approx(worst, abs=1e-12)


def test_ex_ante_bad_input():
    with pytest.raises(ValueError, match="non-negative integer"):
        mcar_amplification_ex_ante([1.5], [1.0], {"a": 0.1})
    with pytest.raises(ValueError, match="rate of every attribute"):
        mcar_amplification_ex_ante([2], [1.0], {"a": 0.1})
    with pytest.raises(TypeError, match="min_attributes"):
        mcar_amplification_ex_ante(3, [1.0], {"a": 0.1})


def test_amplification_does_not_import_the_ledger():
    """The import cycle ledger ↔ amplification is broken: amplification needs only validation."""
    import ast
    import inspect

    from dpsynth.privacy import amplification

    tree = ast.parse(inspect.getsource(amplification))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert all("ledger" not in (m or "") for m in imported)
