"""Privacy for the ground-truth data under MCAR missingness, computed exactly.

The seed paper (Mohapatra et al., PVLDB 2024, Section 5) observes that a mechanism run on the
*incomplete* data D = M_Φ(D̄) also protects the *ground-truth* data D̄, and that MCAR masking acts
like Poisson subsampling: a row reaches a mechanism that reads only the rows observed on its
attributes A_j with probability p_j = ∏_{a ∈ A_j} (1 − φ_a) (Proposition 5.4, with Theorem 5.3:
ε' = log(1 + p(e^ε − 1))). For several mechanisms the paper groups them into a "valid partition" of
attributes and adds p·ε linearly (Theorem 5.6, Algorithm 4). :func:`mcar_amplification` replaces
that by the exact bound below: tighter in the paper's own example (0.7925 vs 0.8125 in Example 5.11),
and valid at large ε, where the linear form is not.

Setting
-------
MCAR with independent per-attribute rates: each cell of attribute a is missing with probability
φ_a, independently across cells, rows and attributes. The mechanisms M_1, …, M_J are pure DP on the
incomplete data (ε_j under ``relation``), composed adaptively, and M_j *ignores every row that is not
observed on all of A_j* (PrivBayesE's count table over A_j; an empty A_j means "reads every row").
For the row that differs, let O be its random set of observed attributes and

    L(O) = Σ_j ε_j · 1{A_j ⊆ O}.

Add/remove (D̄' = D̄ + x):   ε̄ = log E_O[exp L(O)].
    Proof sketch. Fix the masks of the other rows (the bound holds for each, hence for the
    mixture). Without x the output density is P(ω); with x it is P'(ω) = E_O[P_O(ω)], and by the
    adaptive composition of pure DP, P_O(ω) ≤ exp(L(O))·P(ω) for every output ω (mechanisms with
    A_j ⊄ O receive the same input). Hence P' ≤ E[e^L]·P. Conversely P_O ≥ e^{−L(O)}P gives
    P ≤ P'/E[e^{−L}] and 1/E[e^{−L}] ≤ E[e^{L}] (Cauchy–Schwarz: E[e^L]E[e^{−L}] ≥ 1). ∎
    For J = 1 this is log(1 + p(e^ε − 1)) (Theorem 5.3); it is attained (mechanisms that count the
    visible rows and output "≥ 1" with randomised response), so it cannot be improved in general.

Replace-one (row x replaced by y; masks are value-independent, so both carry the same O):
    compare both worlds with the world where the row is the all-missing row z, which no mechanism
    reads (z and x_O are replace-one neighbours of the incomplete data, n unchanged). Per output ω,
    α(O) = P_{x,O}(ω)/P_z(ω) and β(O) = P_{y,O}(ω)/P_z(ω) satisfy α, β ∈ [e^{−L(O)}, e^{L(O)}] and
    α/β ≤ e^{L(O)}. The ratio E[α]/E[β] is linear-fractional in (α, β); its maximum puts
    (α, β) = (e^{L}, 1) on the patterns with L(O) > τ and (1, e^{−L}) on the others, so

    ε̄ = log max_τ (E[e^{L}; L > τ] + P(L ≤ τ)) / (P(L > τ) + E[e^{−L}; L ≤ τ]),

    with ε_j the replace-one ε of M_j. For J = 1 this is again log(1 + p(e^ε − 1)); with several
    mechanisms it lies between log E[e^L] and log E[e^L] − log E[e^{−L}]. (It uses only the
    per-pattern constraints; small linear-programming checks that add the constraints between
    patterns never exceeded log E[e^L], but that is not proved here, so it is not the default.)
    ``projection=True``: if every M_j depends on a row observed on A_j only through its values on
    A_j (a count table over A_j, as PrivBayesE's conditional tables), then α(O) = ∏_{j: A_j⊆O} a_j
    and β(O) = ∏_{j: A_j⊆O} b_j with constants a_j ≤ e^{ε_j}b_j, b_j ≥ e^{−ε_j}; the worst case has
    b_j ≤ 1 and a_j = e^{ε_j}b_j, so E[α]/E[β] = E[e^{L}w]/E[w] with w(O) = ∏_{j: A_j⊆O} b_j. As
    e^{L(O)} increases and w decreases in O under a product measure, the Harris (FKG) inequality
    gives E[e^{L}w] ≤ E[e^{L}]E[w]: the add/remove value log E[e^L] holds.

Both are computed exactly: attributes with φ = 0 are always observed and dropped from the sets, a
set containing an attribute with φ = 1 never reads a row, and L splits over the connected
components of the attribute sets; within a component every observation pattern is enumerated
(2^k patterns for k attributes, at most ``max_attributes``).

The paper's Algorithm 4 figure (minimum over partitions of the attributes of Σ_i ε_i·c_{G(i)},
c_G = ∏_{a∈G}(1 − φ_a), G(i) the best block inside S_i) is returned in ``details`` for comparison.
It is *not* a valid bound for large ε: one mechanism with ε = 3 at 50 % MCAR has Algorithm 4 figure
1.5 while its actual privacy loss is log(1 + 0.5(e³ − 1)) = 2.3554.

Before the data are seen (:func:`mcar_amplification_ex_ante`)
------------------------------------------------------------
When A_j is *selected* on the private data (PrivBayes's network, MST's edges), the value of
:func:`mcar_amplification` for the sets one run selected is ex post, not a guarantee: another
selection, on neighbouring data, may read better-observed attributes. Fix an output ω of the whole
run; the sets A_j(ω) are then fixed, and the proofs above hold with L_ω(O) in place of L(O). So the
largest value over every sequence of sets the mechanisms could select is a guarantee. If the only
public fact is |A_j| ≥ k_j, that maximum is attained by *nested* sets S_{k_j} of the k_j
best-observed attributes: expanding exp L = ∏_j (1 + (e^{ε_j} − 1)·1{A_j ⊆ O}) gives
E[e^L] = Σ_T ∏_{j∈T}(e^{ε_j} − 1)·∏_{a ∈ ∪_{j∈T} A_j}(1 − φ_a), and each product over a union of
at least max_{j∈T} k_j attributes is at most the product over S_{max k_j} = ∪_{j∈T} S_{k_j}.
Under replace-one two bounds hold and the smaller is reported: (i) the replace-one bound is at
most log E[e^L] − log E[e^{−L}], with E[e^{−L}] ≥ ∏_j (1 − (1 − e^{−ε_j})·p_j) (Harris: the factors
decrease in O) and p_j ≤ ∏_{a ∈ S_{k_j}}(1 − φ_a); (ii) the replace-one bound increases with L
pointwise (for each threshold set the ratio does), and L(O) ≤ Σ_j ε_j·1{|O| ≥ k_j} for every
selection, a function of the number of observed attributes only.

Example
-------
>>> eps, det = mcar_amplification([["a"]], [3.0], {"a": 0.5})
>>> round(eps, 4), det["algorithm4"]
(2.3554, 1.5)
>>> sets = [["state"], ["occupation"], ["gender"], ["gender", "income"]]
>>> rates = {"state": 0.25, "occupation": 0.0, "gender": 0.25, "income": 0.25}
>>> eps, det = mcar_amplification(sets, [0.25] * 4, rates)   # the paper's Example 5.11
>>> round(eps, 4), det["algorithm4"]
(0.7925, 0.8125)
"""
from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Mapping

import numpy as np

from .validation import check_relation

__all__ = ["mcar_amplification", "mcar_amplification_ex_ante", "EX_ANTE", "EX_POST"]

EX_ANTE = "ex-ante bound over all selections"
EX_POST = "ex post, this run's selection (not a guarantee)"


def mcar_amplification(marginals, epsilons, missing_rates, relation: str = "add-remove", *,
                       projection: bool = False, max_attributes: int = 22) -> tuple[float, dict]:
    """Exact ε for the ground-truth data of pure-DP mechanisms run on MCAR-masked data.

    ``marginals[j]``: the attributes A_j whose rows mechanism j reads (it ignores rows with a
    missing cell in A_j); ``[]`` means it reads every row. ``epsilons[j]``: its pure ε under
    ``relation`` on the incomplete data. ``missing_rates``: mapping attribute → MCAR rate φ in
    [0, 1] (or a sequence indexed by integer attributes). Returns ``(epsilon_bar, details)``;
    ``details`` holds the unamplified sum, each mechanism's p_j and Theorem 5.3 value, and the
    paper's Algorithm 4 figure (``algorithm4``; ``algorithm4_exact`` is False if its search was cut
    short, in which case the figure is the best partition found). ``projection=True`` declares that
    each mechanism depends on a row only through its values on A_j, which makes the replace-one
    bound equal to the add/remove one. See the module docstring for the bounds and their proofs.
    """
    check_relation(relation)
    sets = _check_sets(marginals)
    eps = _check_epsilons(epsilons, len(sets))
    rates = _check_rates(missing_rates, sets)
    q = {a: 1.0 - rates[a] for a in rates}  # probability that a cell of a is observed

    # effective sets: always-observed attributes drop out; a never-observed attribute silences M_j
    const, active = 0.0, []
    for s, e in zip(sets, eps):
        if any(rates[a] == 1.0 for a in s):
            continue
        eff = frozenset(a for a in s if rates[a] > 0.0)
        if eff:
            active.append((eff, e))
        else:
            const += e

    components = _components(active)
    for attrs, _ in components:
        if len(attrs) > max_attributes:
            raise ValueError(f"{len(attrs)} attributes with 0 < φ < 1 interact through the marginals; exact "
                             f"enumeration is limited to max_attributes={max_attributes} (2^k patterns). Raise "
                             "max_attributes if you can afford it, or group attributes")
    dists = [_loss_distribution(attrs, mechs, rates) for attrs, mechs in components]
    if relation == "add-remove" or projection:
        log_mgf = const + sum(float(_logsumexp(np.log(p) + v)) for v, p in dists)
        eps_bar = log_mgf
    else:
        values, probs = _convolve([(np.array([const]), np.array([1.0]))] + dists)
        eps_bar = _replace_one_bound(values, probs)
    eps_sum = float(math.fsum(eps))
    eps_bar = float(min(max(eps_bar, 0.0), eps_sum))

    alg4, blocks, exact = _algorithm4(sets, eps, q)
    per = []
    for s, e in zip(sets, eps):
        p = float(np.prod([q[a] for a in s])) if s else 1.0
        per.append({"attributes": sorted(s, key=str), "epsilon": e, "p_observed": p,
                    "theorem_5_3": float(np.log1p(p * np.expm1(e)))})
    details = {"relation": relation, "projection": bool(projection), "epsilon_sum": eps_sum, "epsilon_bar": eps_bar,
               "per_mechanism": per, "components": [sorted(a, key=str) for a, _ in components],
               "algorithm4": alg4, "algorithm4_blocks": [sorted(b, key=str) for b in blocks],
               "algorithm4_exact": exact}
    return eps_bar, details


def mcar_amplification_ex_ante(min_attributes, epsilons, missing_rates, relation: str = "add-remove", *,
                               projection: bool = False, max_attributes: int = 22) -> tuple[float, dict]:
    """ε for the ground-truth data that holds before the data are seen, whatever attribute sets
    the mechanisms select: mechanism j (pure ε_j under ``relation``) reads the rows observed on a
    set A_j, possibly chosen from earlier outputs, of which only |A_j| ≥ ``min_attributes[j]`` is
    known (0: it may read every row). ``missing_rates`` must list every attribute a mechanism could
    read (0.0 for fully observed ones). The bound is that of :func:`mcar_amplification` for nested
    sets of the best-observed attributes (add/remove, or ``projection=True``); for replace-one the
    smaller of log E[e^L] − Σ_j log(1 − (1 − e^{−ε_j})p_j) on those sets and the replace-one bound
    of Σ_j ε_j·1{|O| ≥ k_j}; the module docstring proves both.
    Returns ``(epsilon_bar, details)`` with ``details["bound"] == EX_ANTE``."""
    check_relation(relation)
    sizes = list(min_attributes) if hasattr(min_attributes, "__iter__") else None
    if sizes is None or isinstance(min_attributes, (str, bytes)):
        raise TypeError("min_attributes must list one non-negative integer per mechanism, e.g. [0, 1, 2]")
    for k in sizes:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0:
            raise ValueError(f"each entry of min_attributes must be a non-negative integer, got {k!r}")
    if not sizes:
        raise ValueError("min_attributes is empty: give one size per mechanism")
    eps = _check_epsilons(epsilons, len(sizes))
    if isinstance(missing_rates, Mapping):
        universe = list(missing_rates)
    elif hasattr(missing_rates, "__iter__") and not isinstance(missing_rates, (str, bytes)):
        universe = list(range(len(list(missing_rates))))
    else:
        raise TypeError("missing_rates must map each attribute to its MCAR rate, e.g. {'age': 0.2}")
    rates = _check_rates(missing_rates, [frozenset(universe)])
    if max(sizes) > len(universe):
        raise ValueError(f"a mechanism reads rows observed on at least {max(sizes)} attributes but missing_rates "
                         f"lists only {len(universe)}; give the rate of every attribute")
    best = sorted(universe, key=lambda a: (rates[a], str(a)))  # best-observed first
    nested = [best[:k] for k in sizes]
    eps_bar, det = mcar_amplification(nested, eps, rates, "add-remove", max_attributes=max_attributes)
    if relation == "replace-one" and not projection:
        p = [d["p_observed"] for d in det["per_mechanism"]]
        harris = eps_bar - math.fsum(math.log1p(-pj * -math.expm1(-e)) for pj, e in zip(p, eps))
        # L(O) ≤ Σ_j ε_j·1{|O| ≥ k_j} for every selection, and the replace-one bound grows with L
        counts = np.array([1.0])  # distribution of the number of observed attributes |O|
        for a in universe:
            counts = np.convolve(counts, [rates[a], 1.0 - rates[a]])
        by_count = np.array([math.fsum(e for k, e in zip(sizes, eps) if m >= k) for m in range(counts.size)])
        values, inverse = np.unique(np.round(by_count, 12), return_inverse=True)
        counting = _replace_one_bound(values, np.bincount(inverse, weights=counts, minlength=values.size))
        eps_bar = float(min(harris, counting, math.fsum(eps)))
    for key in ("algorithm4", "algorithm4_blocks", "algorithm4_exact"):  # a figure for given sets, not for this bound
        det.pop(key)
    det.update({"bound": EX_ANTE, "relation": relation, "projection": bool(projection), "epsilon_bar": eps_bar,
                "min_attributes": [int(k) for k in sizes], "nested_sets": nested})
    return eps_bar, det


# ----------------------------------------------------------------------------- validation
def _check_sets(marginals) -> list[frozenset]:
    if isinstance(marginals, (str, bytes)) or not hasattr(marginals, "__iter__"):
        raise TypeError("marginals must be a list of attribute lists, e.g. [['age'], ['age', 'sex']]")
    out = []
    for m in marginals:
        if isinstance(m, (str, bytes)) or not hasattr(m, "__iter__"):
            raise TypeError(f"each marginal must be a list of attributes (use ['{m}'] for one attribute), got {m!r}")
        out.append(frozenset(m))
    if not out:
        raise ValueError("marginals is empty: give one attribute list per mechanism")
    return out


def _check_epsilons(epsilons, n: int) -> list[float]:
    eps = list(epsilons) if hasattr(epsilons, "__iter__") else None
    if eps is None or len(eps) != n:
        raise ValueError(f"epsilons must list one ε per marginal ({n}), got {epsilons!r}")
    out = []
    for e in eps:
        if isinstance(e, bool) or not isinstance(e, numbers.Real) or not math.isfinite(e) or e <= 0:
            raise ValueError(f"each ε must be a finite number > 0, got {e!r}")
        out.append(float(e))
    return out


def _check_rates(missing_rates, sets) -> dict:
    if isinstance(missing_rates, Mapping):
        rates = dict(missing_rates)
    elif hasattr(missing_rates, "__iter__") and not isinstance(missing_rates, (str, bytes)):
        rates = dict(enumerate(missing_rates))
    else:
        raise TypeError("missing_rates must map each attribute to its MCAR rate, e.g. {'age': 0.2}")
    needed = set().union(*sets)
    absent = sorted(needed - set(rates), key=str)
    if absent:
        raise ValueError(f"missing_rates has no rate for {absent}; give every attribute a marginal reads "
                         "(0.0 for fully observed attributes)")
    out = {}
    for a in needed:
        r = rates[a]
        if isinstance(r, bool) or not isinstance(r, numbers.Real) or not 0.0 <= r <= 1.0:
            raise ValueError(f"missing rate of {a!r} must be a number in [0, 1], got {r!r}")
        out[a] = float(r)
    return out


# ----------------------------------------------------------------------------- exact bound
def _components(active):
    """Group mechanisms into connected components of the attribute sets (union-find)."""
    parent: dict = {}

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for s, _ in active:
        for a in s:
            parent.setdefault(a, a)
        first = next(iter(s))
        for a in s:
            parent[find(a)] = find(first)
    groups: dict = {}
    for s, e in active:
        root = find(next(iter(s)))
        attrs, mechs = groups.setdefault(root, (set(), []))
        attrs.update(s)
        mechs.append((s, e))
    return [(sorted(attrs, key=str), mechs) for attrs, mechs in groups.values()]


def _loss_distribution(attrs, mechs, rates):
    """Distribution of L(O) restricted to one component: (distinct values, probabilities)."""
    k = len(attrs)
    patterns = np.arange(2**k, dtype=np.int64)
    logp = np.zeros(patterns.size)
    for i, a in enumerate(attrs):
        bit = (patterns >> i) & 1
        logp += np.where(bit == 1, math.log(1.0 - rates[a]), math.log(rates[a]))
    loss = np.zeros(patterns.size)
    index = {a: i for i, a in enumerate(attrs)}
    merged: dict = {}
    for s, e in mechs:
        merged[s] = merged.get(s, 0.0) + e
    for s, e in merged.items():
        mask = sum(1 << index[a] for a in s)
        loss += e * ((patterns & mask) == mask)
    values, inverse = np.unique(np.round(loss, 12), return_inverse=True)
    probs = np.bincount(inverse, weights=np.exp(logp), minlength=values.size)
    return values, probs


def _convolve(dists, max_support: int = 2_000_000):
    values, probs = np.array([0.0]), np.array([1.0])
    for v, p in dists:
        vv = (values[:, None] + v[None, :]).ravel()
        pp = (probs[:, None] * p[None, :]).ravel()
        if vv.size > max_support:
            raise ValueError("the replace-one bound needs the distribution of the privacy loss and its support "
                             "is too large here; use relation='add-remove' or fewer distinct ε values")
        values, inverse = np.unique(np.round(vv, 12), return_inverse=True)
        probs = np.bincount(inverse, weights=pp, minlength=values.size)
    return values, probs


def _logsumexp(x):
    x = np.asarray(x, dtype=float)
    m = np.max(x)
    return m + np.log(np.sum(np.exp(x - m)))


def _replace_one_bound(values, probs) -> float:
    """log max over thresholds of (E[e^L; L>τ] + P(L≤τ)) / (P(L>τ) + E[e^{−L}; L≤τ])."""
    order = np.argsort(values)
    v, p = values[order], probs[order]
    keep = p > 0
    v, lp = v[keep], np.log(p[keep])
    # suffix (L > τ) and prefix (L ≤ τ) sums in log space; threshold s splits [0, s) | [s, m)
    m = v.size
    neg = -np.inf
    suf_up = np.append(np.logaddexp.accumulate((lp + v)[::-1])[::-1], neg)  # log E[e^L; i ≥ s]
    suf_p = np.append(np.logaddexp.accumulate(lp[::-1])[::-1], neg)        # log P(i ≥ s)
    pre_p = np.insert(np.logaddexp.accumulate(lp), 0, neg)                  # log P(i < s)
    pre_dn = np.insert(np.logaddexp.accumulate(lp - v), 0, neg)            # log E[e^{-L}; i < s]
    num = np.logaddexp(suf_up, pre_p)
    den = np.logaddexp(suf_p, pre_dn)
    assert num.size == den.size == m + 1
    return float(np.max(num - den))


# ----------------------------------------------------------------------------- Algorithm 4
def _algorithm4(sets, eps, q, max_nodes: int = 200_000):
    """The paper's Algorithm 4: min over attribute partitions of Σ_i ε_i·min_{G ⊆ S_i} c_G
    (partitions leaving some S_i without a block inside are invalid, Lemma 5.10). Solved by
    branch and bound over the block each marginal uses (equivalent to enumerating partitions:
    attributes outside every chosen block become singletons, which no marginal needs)."""
    costs: dict = {}

    def cost_of(g):
        if g not in costs:
            costs[g] = math.prod(q[a] for a in g)
        return costs[g]

    const = math.fsum(e for s, e in zip(sets, eps) if not s)
    merged: dict = {}
    for s, e in zip(sets, eps):
        if s:
            merged[s] = merged.get(s, 0.0) + e
    items = sorted(merged.items(), key=lambda it: -it[1] * (1.0 - cost_of(it[0])))
    lower = [0.0] * (len(items) + 1)  # best conceivable cost of items i.. (whole set as block)
    for i in range(len(items) - 1, -1, -1):
        s, e = items[i]
        lower[i] = lower[i + 1] + e * cost_of(s)

    # start from the all-singletons partition (always valid)
    singletons = [frozenset([a]) for a in sorted({a for s in merged for a in s}, key=str)]
    best = [math.fsum(e * min(q[a] for a in s) for s, e in items), singletons]
    nodes = [0]
    exact = [True]

    def dfs(i, blocks, used, cost):
        nodes[0] += 1
        if nodes[0] > max_nodes:
            exact[0] = False
            return
        if cost + lower[i] >= best[0] - 1e-15:
            return
        if i == len(items):
            best[0], best[1] = cost, list(blocks)
            return
        s, e = items[i]
        options = [(e * cost_of(g), g, False) for g in blocks if g <= s]
        free = sorted(s - used, key=str)
        for r in range(1, len(free) + 1):
            for g in itertools.combinations(free, r):
                g = frozenset(g)
                options.append((e * cost_of(g), g, True))
        options.sort(key=lambda o: o[0])
        for c, g, new in options:
            if new:
                dfs(i + 1, blocks + [g], used | g, cost + c)
            else:
                dfs(i + 1, blocks, used, cost + c)

    dfs(0, [], frozenset(), 0.0)
    return float(const + best[0]), best[1], exact[0]
