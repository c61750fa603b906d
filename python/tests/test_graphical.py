"""Graphical models: junction tree, max-ent family, canonical queries, posterior tools — checked
against brute-force enumeration on tiny domains."""
import itertools
import math

import numpy as np
import pytest
import torch

from dpsynth.graphical import Domain, Factor, JunctionTree, MaxEntModel, canonical_cells, maximal_cliques
from dpsynth.graphical.posterior import elliptical_slice, ess_bulk, hmc, laplace_approximation, split_rhat

STRUCTURES = {
    "chain": (["a", "b", "c", "d"], [2, 3, 2, 4], [("a", "b"), ("b", "c"), ("c", "d")]),
    "cycle": (["a", "b", "c", "d"], [2, 3, 2, 3], [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]),
    "triangle+3way": (["a", "b", "c", "d", "e"], [2, 3, 2, 2, 3],
                      [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d", "e")]),
    "disconnected": (["a", "b", "c"], [3, 2, 2], [("a", "b"), ("c",)]),
}


def brute_force(model, theta):
    """Joint over the whole domain, the canonical statistics matrix and the table indicators."""
    dom = model.domain
    grid = np.array(list(itertools.product(*[range(s) for s in dom.shape])))
    stats = []
    for c, cells in zip(model.cliques, model.canonical):
        idx = np.ravel_multi_index(tuple(grid[:, dom.attrs.index(a)] for a in c), dom.project(c).shape)
        stats.append(idx[:, None] == cells[None, :])
    a = np.concatenate(stats, axis=1).astype(float)
    logits = a @ np.asarray(theta)
    log_z = np.log(np.exp(logits - logits.max()).sum()) + logits.max()
    p = np.exp(logits - log_z)
    ind = []
    for t in model.tables:
        idx = np.ravel_multi_index(tuple(grid[:, dom.attrs.index(x)] for x in t), dom.project(t).shape)
        ind.append(idx[:, None] == np.arange(dom.project(t).size())[None, :])
    ind = np.concatenate(ind, axis=1).astype(float)
    return grid, a, p, log_z, ind


@pytest.mark.parametrize("name", list(STRUCTURES))
def test_log_partition_marginals_moments_match_enumeration(name):
    attrs, sizes, cliques = STRUCTURES[name]
    dom = Domain(attrs, sizes)
    tables = cliques + [(a,) for a in attrs]
    model = MaxEntModel(dom, cliques, tables)
    theta = torch.as_tensor(np.random.default_rng(1).normal(0, 1.5, model.D))
    _, a, p, log_z, ind = brute_force(model, theta.numpy())
    assert float(model.log_partition(theta)) == pytest.approx(log_z, abs=1e-10)
    mu, second = model.moments(theta)
    np.testing.assert_allclose(mu.numpy(), p @ ind, atol=1e-12)
    np.testing.assert_allclose(model.table_marginals(theta).numpy(), p @ ind, atol=1e-12)
    np.testing.assert_allclose(second.numpy(), (ind * p[:, None]).T @ ind, atol=1e-12)
    # ∇A = E[a] and ∇²A = Cov[a] by autograd through the message passing
    th = theta.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(model.log_partition(th), th)
    np.testing.assert_allclose(g.numpy(), p @ a, atol=1e-12)
    hess = torch.autograd.functional.hessian(model.log_partition, theta)
    cov = (a * p[:, None]).T @ a - np.outer(p @ a, p @ a)
    np.testing.assert_allclose(hess.numpy(), cov, atol=1e-10)


def test_batched_parameters_match_one_at_a_time():
    attrs, sizes, cliques = STRUCTURES["cycle"]
    model = MaxEntModel(Domain(attrs, sizes), cliques)
    thetas = torch.as_tensor(np.random.default_rng(2).normal(size=(3, model.D)))
    mu, second = model.moments(thetas)
    assert mu.shape == (3, model.P) and second.shape == (3, model.P, model.P)
    for k in range(3):
        m1, s1 = model.moments(thetas[k])
        torch.testing.assert_close(mu[k], m1)
        torch.testing.assert_close(second[k], s1)
        torch.testing.assert_close(model.log_partition(thetas)[k], model.log_partition(thetas[k]))


def test_junction_tree_running_intersection_and_width():
    attrs, sizes, cliques = STRUCTURES["cycle"]
    jt = JunctionTree(Domain(attrs, sizes), cliques)
    assert jt.width == 3  # a 4-cycle triangulates into two triangles
    for v in attrs:  # the cliques holding v form a connected subtree
        holding = {i for i, c in enumerate(jt.cliques) if v in c}
        tops = [i for i in holding if jt.parent[i] not in holding]
        assert len(tops) == 1, v
    for i, s in enumerate(jt.separators):
        if jt.parent[i] >= 0:
            assert set(s) == set(jt.cliques[i]) & set(jt.cliques[jt.parent[i]])
    for scope, k in zip(jt.scopes, jt.assignment):
        assert set(scope) <= set(jt.cliques[k])


def test_canonical_queries_rank_and_counts():
    # toy: one binary 3-way marginal → all cells but the all-zero one (paper: D = 7)
    dom = Domain(["x1", "x2", "y"], [2, 2, 2])
    assert MaxEntModel(dom, [("x1", "x2", "y")]).D == 7
    # paper's Adult cliques (Supp. E): D = 130 from 159 cells
    names = ["age", "workclass", "education", "marital-status", "race", "sex", "capital-gain", "capital-loss",
             "hours-per-week", "income"]
    adult = Domain(names, [5, 8, 16, 7, 5, 2, 2, 2, 5, 2])
    cl = [("age", "income"), ("age", "marital-status"), ("age", "workclass"), ("education", "income"),
          ("race", "income"), ("race", "sex"), ("sex", "income"), ("capital-gain", "income"),
          ("capital-loss", "income"), ("hours-per-week", "income")]
    model = MaxEntModel(adult, cl)
    assert model.D == 130 and model.P == 159
    # D = Σ over distinct subsets S of ∏(k−1), and the statistics plus a constant have full rank
    for name, (attrs, sizes, cliques) in STRUCTURES.items():
        dom = Domain(attrs, sizes)
        m = MaxEntModel(dom, cliques)
        subsets = {frozenset(s) for c in m.cliques for r in range(1, len(c) + 1) for s in itertools.combinations(c, r)}
        assert m.D == sum(np.prod([dom.size(a) - 1 for a in s]) for s in subsets), name
        _, a, _, _, ind = brute_force(m, np.zeros(m.D))
        assert np.linalg.matrix_rank(np.c_[a, np.ones(len(a))]) == m.D + 1, name
        # ... and they span the same space as all the full-marginal indicators
        assert np.linalg.matrix_rank(np.c_[a, np.ones(len(a)), ind]) == m.D + 1, name


def test_canonical_cells_and_maximal_cliques_helpers():
    dom = Domain(["a", "b"], [3, 2])
    (cells,) = canonical_cells(dom, [("a", "b")])
    assert cells.tolist() == [1, 2, 3, 4, 5]  # all but (0, 0)
    assert maximal_cliques([("a",), ("a", "b"), ("b", "a"), ("c",)]) == [("a", "b"), ("c",)]
    with pytest.raises(ValueError, match="no query"):
        MaxEntModel(Domain(["a", "b"], [2, 2]), [("a",)])


@pytest.mark.parametrize("name", list(STRUCTURES))
def test_reference_levels_change_the_coordinates_not_the_family(name):
    attrs, sizes, cliques = STRUCTURES[name]
    dom = Domain(attrs, sizes)
    rng = np.random.default_rng(3)
    first = MaxEntModel(dom, cliques)
    other = MaxEntModel(dom, cliques, reference={a: int(rng.integers(k)) for a, k in zip(attrs, sizes)})
    assert other.D == first.D and other.reference != first.reference
    _, a_first, p, log_z, ind = brute_force(first, rng.normal(0, 0.8, first.D))
    _, a_other, _, _, _ = brute_force(other, np.zeros(other.D))
    # the same span (with a constant): every distribution of one coding is one of the other ...
    assert np.linalg.matrix_rank(np.c_[a_first, a_other, np.ones(len(p))]) == first.D + 1
    # ... found by least squares on its log-probabilities, with the same table marginals
    coef, *_ = np.linalg.lstsq(np.c_[a_other, np.ones(len(p))], np.log(p), rcond=None)
    np.testing.assert_allclose(np.c_[a_other, np.ones(len(p))] @ coef, np.log(p), atol=1e-10)
    np.testing.assert_allclose(other.table_marginals(torch.as_tensor(coef[:-1])).numpy(), p @ ind, atol=1e-12)
    # a cell is θ's coordinate only off its columns' references
    for c, cells in zip(other.cliques, other.canonical):
        levels = np.array(np.unravel_index(cells, dom.project(c).shape))
        ref = np.array([other.reference[x] for x in c])[:, None]
        assert (levels != ref).any(axis=0).all()


def test_reference_levels_are_checked_and_picked_from_counts():
    from dpsynth.graphical.icin import IcinModel
    from dpsynth.graphical.reference import largest_levels

    dom = Domain(["a", "b"], [3, 2])
    with pytest.raises(ValueError, match="not in the domain"):
        MaxEntModel(dom, [("a", "b")], reference={"z": 1})
    with pytest.raises(ValueError, match="0..2"):
        MaxEntModel(dom, [("a", "b")], reference={"a": 3})
    with pytest.raises(ValueError, match="integer level"):
        MaxEntModel(dom, [("a", "b")], reference={"a": 1.0})
    with pytest.raises(ValueError, match="'missing' level"):  # a's last level is "missing"
        IcinModel(dom, [("a", "b")], incomplete=["a"], reference={"a": 2})
    counts = [np.array([5.0, 1, 2, 2, 30, 40]), np.array([3.0, 9])]  # (a, b) and (b,)
    assert largest_levels(dom, [("a", "b"), ("b",)], counts) == {"a": 2, "b": 1}
    assert largest_levels(dom, [("a", "b"), ("b",)], counts, last_excluded=["a"]) == {"a": 0, "b": 1}


def test_factor_algebra():
    f = Factor(Domain(["a", "b"], [2, 3]), torch.log(torch.arange(1.0, 7.0, dtype=torch.float64)).reshape(2, 3))
    g = Factor(Domain(["b"], [3]), torch.log(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)))
    h = f + g
    assert h.domain.attrs == ("a", "b")
    np.testing.assert_allclose(h.values.exp().numpy(), np.arange(1, 7).reshape(2, 3) * [1, 2, 3])
    np.testing.assert_allclose(f.project(["b", "a"]).values.exp().numpy(), np.arange(1, 7).reshape(2, 3).T)
    assert float((f - f).logsumexp()) == pytest.approx(np.log(6))
    batched = Factor(Domain(["b"], [3]), torch.zeros(4, 3, dtype=torch.float64))
    assert (f + batched).values.shape == (4, 2, 3)
    with pytest.raises(ValueError):
        Factor(Domain(["a"], [2]), torch.zeros(3))


@pytest.mark.parametrize("name", ["chain", "triangle+3way", "disconnected"])
def test_sampling_matches_the_joint(name):
    attrs, sizes, cliques = STRUCTURES[name]
    dom = Domain(attrs, sizes)
    model = MaxEntModel(dom, cliques)
    thetas = torch.as_tensor(np.random.default_rng(3).normal(0, 1, (2, model.D)))
    n = 40000
    codes = model.sample(thetas, n, np.random.default_rng(4))
    assert codes.shape == (2, n, len(attrs)) and codes.dtype == np.int64
    assert (codes >= 0).all() and (codes < np.array(sizes)).all()
    for k in range(2):
        _, _, p, _, _ = brute_force(model, thetas[k].numpy())
        emp = np.bincount(np.ravel_multi_index(tuple(codes[k].T), dom.shape), minlength=p.size) / n
        # expected TVD of a multinomial sample is about Σ√(p/n)/2·0.8; allow a wide margin
        assert 0.5 * np.abs(emp - p).sum() < 1.5 * 0.5 * 0.8 * np.sqrt(p / n).sum(), k
    one = model.sample(thetas[0], 10, np.random.default_rng(5))
    assert one.shape == (10, len(attrs))


# ---------------------------------------------------------------------- posterior tools
def test_laplace_approximation_of_a_gaussian():
    prec = torch.tensor([[2.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
    m = torch.tensor([1.0, -2.0], dtype=torch.float64)
    lp = lambda x: -0.5 * ((x - m) @ prec * (x - m)).sum(-1)
    la = laplace_approximation(lp, torch.zeros(2, dtype=torch.float64))
    torch.testing.assert_close(la.mode, m, atol=1e-5, rtol=0)
    torch.testing.assert_close(la.cov, torch.linalg.inv(prec), atol=1e-8, rtol=0)
    draws = la.sample(20000, np.random.default_rng(0))
    assert np.allclose(np.cov(draws.numpy().T), torch.linalg.inv(prec).numpy(), atol=0.05)


def _skewed(x):
    # a Gamma(3, 1) in log-space (skewed) and an independent N(0, 2²)
    return 3 * x[..., 0] - torch.exp(x[..., 0]) - 0.5 * (x[..., 1] / 2) ** 2


def _check_skewed(res, rhat=1.05, ess=200):
    from scipy.special import digamma, polygamma

    x = res.flat().numpy()
    assert x[:, 0].mean() == pytest.approx(digamma(3), abs=0.08)  # E log Gamma(3) = ψ(3)
    assert x[:, 0].var() == pytest.approx(polygamma(1, 3), rel=0.2)
    assert x[:, 1].std() == pytest.approx(2.0, rel=0.15)
    assert res.max_rhat < rhat and res.min_ess > ess


def test_hmc_adapts_a_dense_metric_and_recovers_a_skewed_target():
    init = torch.as_tensor(np.random.default_rng(0).normal(size=(8, 2)), dtype=torch.float64)
    res = hmc(_skewed, init, cov=torch.diag(torch.tensor([0.1, 0.1], dtype=torch.float64)), warmup=200, draws=300,
              rng=np.random.default_rng(1))
    assert res.draws.shape == (8, 300, 2)
    _check_skewed(res)
    # the adapted metric found the scales (var of log Gamma(3) ≈ 0.39, 4) from a start 10× and 40× off
    assert res.metric[0, 0] == pytest.approx(0.39, rel=0.4) and res.metric[1, 1] == pytest.approx(4.0, rel=0.4)


def test_hmc_can_adapt_its_step_size_alone():
    """adapt_metric=False: the warm-up tunes the step (from one far too small to one that meets the
    acceptance target) and leaves the metric as given; the kept draws follow the warm-up."""
    cov = torch.eye(3, dtype=torch.float64)
    init = torch.as_tensor(np.random.default_rng(0).normal(size=(8, 3)), dtype=torch.float64)

    def normal(x):
        return -0.5 * (x ** 2).sum(-1)

    res = hmc(normal, init, cov=cov, warmup=40, draws=60, step_size=0.01, rng=np.random.default_rng(1),
              adapt_metric=False)
    assert torch.equal(res.metric, cov) and res.draws.shape == (8, 60, 3)
    assert res.step_size > 0.3 and 0.6 < res.accept_rate < 0.97
    fixed = hmc(normal, init, cov=cov, warmup=0, draws=20, step_size=0.01, rng=np.random.default_rng(1))
    assert fixed.step_size == 0.01 and fixed.accept_rate > 0.99


def test_hmc_sampling_path_length_lengthens_the_draws_paths_and_leaves_the_warmup_alone():
    """sampling_path_length: the draws' paths are that long (π against π/2: twice the leapfrog steps
    at a fixed step), while the warm-up (its step-size adaptation) is the run without it."""
    cov = torch.eye(3, dtype=torch.float64)
    init = torch.as_tensor(np.random.default_rng(0).normal(size=(8, 3)), dtype=torch.float64)

    def normal(x):
        return -0.5 * (x ** 2).sum(-1)

    runs = [hmc(normal, init, cov=cov, warmup=0, draws=200, step_size=0.1, rng=np.random.default_rng(1),
                sampling_path_length=length) for length in (None, math.pi)]
    assert runs[1].n_leapfrog == pytest.approx(2 * runs[0].n_leapfrog, rel=0.1)
    assert runs[0].n_leapfrog == pytest.approx(0.5 * math.pi / 0.1, rel=0.1)
    adapted = [hmc(normal, init, cov=cov, warmup=30, draws=5, step_size=0.01, rng=np.random.default_rng(2),
                   adapt_metric=False, sampling_path_length=length) for length in (None, math.pi)]
    assert adapted[0].step_size == adapted[1].step_size  # the same warm-up, draw for draw
    assert adapted[1].gradient_evaluations > adapted[0].gradient_evaluations


def test_shrinkage_towards_a_target_keeps_the_dependence_the_identity_washes_out():
    from dpsynth.graphical.metric import shrinkage_towards, shrunk_covariance

    rng = np.random.default_rng(3)
    dim = 40
    # a posterior with near-deterministic linear ties: coordinates in pairs with correlation 0.999
    a = np.linalg.cholesky(np.kron(np.eye(dim // 2), np.array([[1.0, 0.999], [0.999, 1.0]])))
    truth = a @ a.T
    x = rng.standard_normal((200, dim)) @ a.T
    z = (x - x.mean(0)) / x.std(0, ddof=1)
    guess = truth + 0.05 * np.eye(dim)                      # a target with weaker ties: 0 < λ < 1
    c, lam = shrinkage_towards(z, guess)
    # λ is Σ_{i≠j} Var̂(s_ij) / Σ_{i≠j} (s_ij − t_ij)², computed here from the n × dim × dim products
    s = z.T @ z / len(z)
    var = ((z[:, :, None] * z[:, None, :] - s) ** 2).sum(0) / len(z) ** 2
    t = guess / np.sqrt(np.outer(np.diag(guess), np.diag(guess)))
    off = ~np.eye(dim, dtype=bool)
    assert 0 < lam < 1 and lam == pytest.approx(var[off].sum() / ((s - t)[off] ** 2).sum(), rel=1e-10)
    np.testing.assert_allclose(c, (1 - lam) * s + lam * t, rtol=1e-12)

    def whitened_condition(metric):  # the spread HMC's step size must cover, in the metric's units
        inv_chol = np.linalg.inv(np.linalg.cholesky(metric))
        ev = np.linalg.eigvalsh(inv_chol @ truth @ inv_chol.T)
        return ev.max() / ev.min()
    # a target with the ties but scales off by up to 25× (as F⁻¹ is for skewed coordinates): only
    # its correlations are used, the scales come from the draws
    scales = np.diag(rng.uniform(0.2, 5.0, dim))
    laplace = scales @ (truth + 5e-4 * np.eye(dim)) @ scales
    assert whitened_condition(shrunk_covariance(x, laplace)) < 5 < 100 < whitened_condition(shrunk_covariance(x))
    # positive definite with fewer draws than dimensions, towards an ill-conditioned target
    assert np.linalg.eigvalsh(shrunk_covariance(x[:10], truth)).min() > 0


def test_marginal_map_round_trips_and_its_jacobian_is_the_derivative():
    from dpsynth.graphical.transport import MarginalMap

    m = MarginalMap(torch.tensor([0.5, -1.0, 0.0], dtype=torch.float64), torch.tensor([2.0, 0.3, 1.0], dtype=torch.float64),
                    torch.tensor([-0.8, 0.4, 0.0], dtype=torch.float64), torch.tensor([0.6, 1.7, 1.0], dtype=torch.float64))
    z = torch.as_tensor(np.random.default_rng(0).normal(size=(50, 3)) * 3, dtype=torch.float64)
    torch.testing.assert_close(m.inverse(m.forward(z)), z, rtol=0, atol=1e-10)
    jac = torch.stack([torch.autograd.functional.jacobian(lambda v: m.forward_and_log_jacobian(v)[0], row).diagonal()
                       for row in z])
    torch.testing.assert_close(m.log_jacobian(z), torch.log(jac).sum(-1), rtol=0, atol=1e-10)
    ident = MarginalMap.identity(3)
    assert torch.equal(ident.forward(z), z) and torch.equal(ident.inverse(z), z)
    assert float(ident.log_jacobian(z).abs().max()) == 0.0
    # a coordinate of Gaussian shape is left as it is, whatever its location and scale
    part = MarginalMap(torch.tensor([0.5, 3.0], dtype=torch.float64), torch.tensor([2.0, 5.0], dtype=torch.float64),
                       torch.tensor([-0.8, 0.0], dtype=torch.float64), torch.tensor([0.6, 1.0], dtype=torch.float64))
    assert part.active.tolist() == [0] and torch.equal(part.forward(z[:, :2])[:, 1], z[:, 1])


def test_fit_marginal_map_finds_the_skew_and_leaves_gaussian_coordinates_alone():
    from scipy.stats import skew

    from dpsynth.graphical.transport import fit_marginal_map

    rng = np.random.default_rng(1)
    x = np.column_stack([-rng.gumbel(size=4000), np.log(rng.gamma(1.0, size=4000)), rng.normal(3.0, 0.2, 4000)])
    m = fit_marginal_map(torch.as_tensor(x))
    # the two skewed coordinates are mapped (both left-skewed), the Gaussian one is left alone
    assert m.active.tolist() == [0, 1] and (m.skew < -0.2).all()
    z = m.inverse(torch.as_tensor(x)).numpy()
    assert np.array_equal(z[:, 2], x[:, 2])
    # from skewness −1.05 / −1.22 to within ±0.3 (the fit uses 1,000 of the draws, shrunk towards no skew)
    assert np.abs(skew(x[:, :2])).min() > 1.0 and np.abs(skew(z)).max() < 0.3


def test_the_map_fits_asinh_is_torchs_to_rounding_and_its_derivative_exact():
    """The sinh–arcsinh fit's asinh (log1p form, log 2|y| far out) is torch.asinh to a few ulps from
    1e-300 to 1e300 (no overflow of y²), and its backward is 1/√(1 + y²)."""
    from dpsynth.graphical.transport import _Asinh

    mags = torch.logspace(-300, 300, 6001, dtype=torch.float64)
    y = torch.cat([mags, -mags, torch.zeros(1, dtype=torch.float64),
                   torch.as_tensor(np.random.default_rng(0).normal(0, 10, 2000))]).requires_grad_(True)
    value = _Asinh.apply(y)
    exact = torch.asinh(y.detach())
    assert float(((value.detach() - exact).abs() / exact.abs().clamp(min=1e-300)).max()) < 1e-15
    (grad,) = torch.autograd.grad(value.sum(), y)
    expected = 1.0 / torch.sqrt(1.0 + y.detach() ** 2)
    assert bool(torch.isfinite(grad).all())
    np.testing.assert_allclose(grad.numpy(), expected.numpy(), rtol=1e-15, atol=0)


def test_fit_marginal_map_runs_on_the_callers_torch_threads(monkeypatch):
    """The map's fit leaves torch's thread count alone: inside a NAPSU-MQ fit that is one thread.
    Two intra-op threads made it several times slower whenever the other core was busy (beside a
    second fit: 10.96 s against 1.40 s on one thread, module docstring of transport.fit_marginal_map)."""
    from dpsynth.graphical.transport import fit_marginal_map

    calls = []
    monkeypatch.setattr(torch, "set_num_threads", lambda n: calls.append(n))
    x = -np.random.default_rng(2).gumbel(size=(500, 3))
    assert fit_marginal_map(torch.as_tensor(x)).active.numel() == 3 and calls == []


def test_fit_marginal_map_over_blocks_of_coordinates_is_the_one_block_fit():
    """The map's loss is evaluated over blocks of coordinates on two threads (blocks split at
    multiples of transport.BLOCK_COLUMNS): the fitted map equals the fit as one block (one thread,
    chunks.one_core) bit for bit, so a NAPSU-MQ fit's draws do not depend on the number of cores."""
    from dpsynth.graphical import chunks, transport

    rng = np.random.default_rng(3)
    x = torch.as_tensor(np.column_stack([-rng.gumbel(size=(700, 150)) * rng.uniform(0.5, 2, 150),
                                         np.log(rng.gamma(rng.uniform(0.5, 3, 90), size=(700, 90))),
                                         rng.normal(size=(700, 30))]))
    calls = []
    real = transport._shash_terms

    def counted(params, xb):
        calls.append(xb.shape[1])
        return real(params, xb)

    transport._shash_terms = counted
    try:
        blocks = transport.fit_marginal_map(x)
        split = sorted(set(calls))
        calls.clear()
        with chunks.one_core():
            whole = transport.fit_marginal_map(x)
    finally:
        transport._shash_terms = real
    assert whole.active.numel() > 200 and transport.BLOCK_COLUMNS == 64
    assert split == [whole.active.numel() - 128, 128] and calls and set(calls) == {whole.active.numel()}
    for name in ("active", "loc", "scale", "skew", "tail"):
        assert torch.equal(getattr(blocks, name), getattr(whole, name)), name


def test_hmc_in_fitted_marginal_coordinates_recovers_a_skewed_target():
    """The chains move in z with x = map(z), the map refitted at each slow warm-up window: the
    draws (returned in x) still have the target's moments, and the map found the left skew of
    log Gamma(3)."""
    from dpsynth.graphical.transport import fit_marginal_map

    init = torch.as_tensor(np.random.default_rng(0).normal(size=(8, 2)), dtype=torch.float64)
    res = hmc(_skewed, init, warmup=200, draws=300, rng=np.random.default_rng(1), fit_transform=fit_marginal_map)
    _check_skewed(res)
    assert res.transform.active.tolist() == [0] and float(res.transform.skew[0]) < 0
    # a fixed map passed on (as an extension does) keeps the draws in x as well
    more = hmc(_skewed, res.draws[:, -1], cov=res.metric, warmup=0, draws=300, step_size=res.step_size,
               rng=np.random.default_rng(2), transform=res.transform)
    _check_skewed(more)


def test_delayed_acceptance_hmc_is_exact_with_a_poor_surrogate():
    """The surrogate (a Gaussian in the wrong place, with the wrong scales) only guides the
    trajectories: the second stage corrects to the exact skewed target."""
    def surrogate(_centre, _draws=None):
        return lambda x: -0.5 * ((x[..., 0] - 0.3) / 0.8) ** 2 - 0.5 * (x[..., 1] / 1.5) ** 2

    init = torch.as_tensor(np.random.default_rng(2).normal(size=(8, 2)), dtype=torch.float64)
    res = hmc(_skewed, init, warmup=200, draws=400, rng=np.random.default_rng(3), surrogate=surrogate)
    _check_skewed(res, rhat=1.1, ess=100)  # a poor guide costs efficiency, never exactness
    assert 0.2 < res.second_stage_accept < 1.0


def test_hmc_on_a_surrogate_reweighted_by_psis_recovers_the_target():
    """Without the second stage the chains target the surrogate (here a Gaussian close to the
    skewed target); Pareto-smoothed importance weights carry the draws to the exact target, and
    the unweighted draws do not get there (the test can fail both ways)."""
    from scipy.special import digamma

    from dpsynth.graphical.posterior import psis_weights

    def surrogate(_centre, _draws=None):
        return lambda x: -0.5 * ((x[..., 0] - 1.4) / 1.1) ** 2 - 0.5 * (x[..., 1] / 2.2) ** 2

    init = torch.as_tensor(np.random.default_rng(2).normal(size=(16, 2)), dtype=torch.float64)
    res = hmc(_skewed, init, warmup=150, draws=300, rng=np.random.default_rng(4), surrogate=surrogate,
              delayed_acceptance=False)
    assert res.target is not None and np.isnan(res.second_stage_accept)
    x = res.flat()
    w, khat, eff = psis_weights((_skewed(x) - res.target(x)).numpy())
    assert khat < 0.7 and 0.2 < eff < 1.0 and w.sum() == pytest.approx(1.0)
    raw, weighted = float(x[:, 0].mean()), float((w * x[:, 0].numpy()).sum())
    assert abs(raw - digamma(3)) > 0.2 and weighted == pytest.approx(digamma(3), abs=0.08)
    assert float(np.sqrt((w * x[:, 1].numpy() ** 2).sum())) == pytest.approx(2.0, rel=0.1)


def test_elliptical_slice_sampling_handles_a_wall():
    """Target: N(0, 1) cut at x₀ < 0.5 (a wall, like a cell that cannot exceed its noisy count)
    times N(0, 1); reference Gaussian twice too wide (like a prior-dominated Laplace sd)."""
    from scipy.stats import truncnorm

    def lp(x):
        out = -0.5 * (x ** 2).sum(-1)
        return torch.where(x[..., 0] < 0.5, out, torch.full_like(out, -np.inf))

    res = elliptical_slice(lp, torch.zeros(2, dtype=torch.float64), 2.0 * torch.eye(2, dtype=torch.float64),
                           chains=40, warmup=30, draws=100, thin=1, rng=np.random.default_rng(2))
    x = res.flat().numpy()
    assert res.draws.shape == (40, 100, 2) and (x[:, 0] < 0.5).all()
    ref = truncnorm(-np.inf, 0.5)
    assert x[:, 0].mean() == pytest.approx(ref.mean(), abs=0.06)
    assert x[:, 0].std() == pytest.approx(ref.std(), rel=0.1)
    assert x[:, 1].std() == pytest.approx(1.0, rel=0.1)
    assert res.max_rhat < 1.05 and res.min_ess > 400


def test_rhat_and_ess_diagnostics():
    rng = np.random.default_rng(0)
    iid = rng.normal(size=(4, 500))
    assert split_rhat(iid) < 1.01
    assert 1500 < ess_bulk(iid) < 2600
    stuck = iid + np.arange(4)[:, None]  # chains in different places
    assert split_rhat(stuck) > 1.5
    ar = np.zeros((4, 500))
    for t in range(1, 500):
        ar[:, t] = 0.9 * ar[:, t - 1] + rng.normal(size=4)
    assert ess_bulk(ar) < 0.2 * ar.size


def test_mixing_diagnostics_match_arviz():
    """dpsynth.graphical.mixing computes all quantities at once and gives arviz-stats' rank-normalised
    split-R̂ and bulk ESS: ties, skew, an odd number of draws, a constant quantity, too few chains
    or draws, a chain stuck apart and an anticorrelated chain."""
    from arviz_stats.base import array_stats
    from dpsynth.graphical.mixing import rhat_and_ess

    rng = np.random.default_rng(1)
    cases = []
    for c, n, k in [(4, 500, 4), (16, 401, 4), (2, 4, 3), (3, 5, 3), (1, 50, 3), (16, 9, 3), (8, 101, 3)]:
        x = rng.standard_normal((c, n, k)).cumsum(1) * 0.3 + rng.standard_normal((c, n, k))
        x[..., 0] = np.round(x[..., 0], 1)       # ties
        x[..., 1] = np.exp(2 * x[..., 1])        # skew
        x[..., 2] = 3.0                          # constant
        cases.append(x)
    stuck = rng.standard_normal((6, 30, 1)) + np.arange(6)[:, None, None]
    flip = np.where(np.arange(200) % 2 == 0, 1.0, -1.0)[None, :, None] + 0.01 * rng.standard_normal((4, 200, 1))
    for x in cases + [stuck, flip]:
        want_r = np.asarray(array_stats.rhat(x, chain_axis=0, draw_axis=1, method="rank"), dtype=float)
        want_e = np.asarray(array_stats.ess(x, chain_axis=0, draw_axis=1, method="bulk"), dtype=float)
        got_r, got_e = rhat_and_ess(x)
        np.testing.assert_allclose(got_r, want_r, rtol=1e-10, equal_nan=True)
        np.testing.assert_allclose(got_e, want_e, rtol=1e-10, equal_nan=True)
        np.testing.assert_allclose(split_rhat(x), got_r, rtol=0, equal_nan=True)
        np.testing.assert_allclose(ess_bulk(x), got_e, rtol=0, equal_nan=True)
    assert np.isnan(rhat_and_ess(np.where(np.arange(40) == 3, np.nan, 1.0).reshape(2, 20, 1) * cases[0][:2, :20, :1])[0]).all()
    assert isinstance(split_rhat(cases[0][..., 0]), float) and isinstance(ess_bulk(cases[0][..., 0]), float)


def test_mixing_diagnostics_on_two_threads_equal_one():
    """Above THREAD_QUANTITIES quantities rhat_and_ess works on two column blocks in threads: the
    values (ties, a constant and a non-finite quantity included) equal one block's bitwise, and those
    of both blocks in the calling thread (chunks.one_core); average_ranks' no-ties shortcut gives
    scipy's ranks."""
    from scipy.stats import rankdata

    from dpsynth.graphical import chunks, mixing

    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 101, 150)).cumsum(1) * 0.2 + rng.standard_normal((8, 101, 150))
    x[..., 5] = np.round(x[..., 5], 1)
    x[..., 80] = 2.0
    x[0, 7, 120] = np.nan
    assert 150 >= mixing.THREAD_QUANTITIES and chunks.cores() == 2
    two = mixing.rhat_and_ess(x)
    old = mixing.THREAD_QUANTITIES
    try:
        mixing.THREAD_QUANTITIES = 10 ** 9
        one = mixing.rhat_and_ess(x)
    finally:
        mixing.THREAD_QUANTITIES = old
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    assert np.isnan(two[0][120]) and np.isnan(two[1][120]) and np.isfinite(two[0][:80]).all()
    # blocks bounded by BLOCK_DRAWS (long chains): 150 quantities in 12 blocks of ≤ 13; R̂ bitwise,
    # the ESS to rounding (the FFT's and sums' order over a block's columns can move its last bit)
    calls, inner = [], mixing._rhat_and_ess
    old_block = mixing.BLOCK_DRAWS
    try:
        mixing.BLOCK_DRAWS = 8 * 101 * 13
        mixing._rhat_and_ess = lambda block, *a: calls.append(block.shape[-1]) or inner(block, *a)
        many = mixing.rhat_and_ess(x)
    finally:
        mixing.BLOCK_DRAWS, mixing._rhat_and_ess = old_block, inner
    assert len(calls) == 12 and max(calls) <= 13 and sum(calls) == 150
    np.testing.assert_array_equal(one[0], many[0])
    np.testing.assert_allclose(one[1], many[1], rtol=1e-14)

    def no_pool(*args, **kwargs):
        raise AssertionError("one_core: map_chunks must not start threads")
    pool, chunks.ThreadPoolExecutor = chunks.ThreadPoolExecutor, no_pool
    try:
        with chunks.one_core():  # the calling thread alone (a map fits beside it in a NAPSU-MQ check)
            alone = mixing.rhat_and_ess(x)
    finally:
        chunks.ThreadPoolExecutor = pool
    for a, b in zip(alone, two):
        np.testing.assert_array_equal(a, b)
    assert chunks.cores() == 2  # the block's limit ends with it
    flat = x.reshape(-1, 150)[:, :20]
    np.testing.assert_array_equal(mixing.average_ranks(flat), rankdata(flat, axis=0))
    np.testing.assert_array_equal(mixing.average_ranks(np.round(flat)), rankdata(np.round(flat), axis=0))
    mixed = np.column_stack([np.round(flat[:, :3]), flat[:, 3:6], np.full(len(flat), 2.0), np.abs(flat[:, 6:9] -
                             np.median(flat[:, 6:9], axis=0))])  # tie groups beside tie-free columns
    np.testing.assert_array_equal(mixing.average_ranks(mixed), rankdata(mixed, axis=0))


def test_folded_draws_sorted_from_the_bulk_sort_rank_as_a_fresh_sort():
    """The tail R̂'s folded draws |x − median| are sorted by merging the two runs they form in the
    draws' own sorted order (mixing._folded_sorted): the same sorted values as a fresh sort, an order
    that is a permutation of each row's positions, and the same normal scores, ties (the two middle
    draws of an even count, rounded draws) included."""
    from dpsynth.graphical import mixing

    rng = np.random.default_rng(8)
    rows = rng.standard_normal((6, 400))
    rows[1] = np.round(rows[1], 1)
    rows[2] = 1.5
    rows[3, :7] = 0.25
    order, ordered = mixing._sorted(rows)
    np.testing.assert_array_equal(ordered, np.sort(rows, axis=1))
    median = np.median(rows, axis=1)
    folded = np.abs(rows - median[:, None])
    f_order, f_ordered = mixing._folded_sorted(order, ordered, median)
    np.testing.assert_array_equal(f_ordered, np.sort(folded, axis=1))
    np.testing.assert_array_equal(np.sort(f_order, axis=1), np.arange(rows.size).reshape(rows.shape))
    np.testing.assert_array_equal(folded.ravel()[f_order], f_ordered)
    table = mixing._score_table(rows.shape[1])
    np.testing.assert_array_equal(mixing._scores(f_order, f_ordered, table),
                                  mixing._scores(*mixing._sorted(folded), table))


def test_canonical_moments_match_the_clamped_moments_of_the_canonical_cells():
    """The linear-space pass over D clamped cells gives the same μ and E[aaᵀ] as the log-space
    clamping of all P cells restricted to the canonical ones, batched and under autograd."""
    dom = Domain(["a", "b", "c", "d"], [3, 2, 4, 2])
    model = MaxEntModel(dom, [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d")],
                        [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d"), ("a",)])
    theta = torch.as_tensor(np.random.default_rng(4).normal(scale=1.5, size=(3, model.D)), dtype=torch.float64)
    theta.requires_grad_(True)
    mu, second = model.moments(theta)
    can = model.canonical_index
    mu_c, second_c = model.canonical_moments(theta)
    torch.testing.assert_close(mu_c, mu[..., can], atol=1e-12, rtol=0)
    torch.testing.assert_close(second_c, second[..., can, :][..., :, can], atol=1e-12, rtol=0)
    (g,) = torch.autograd.grad(second_c.sum(), theta)
    (g_ref,) = torch.autograd.grad(second[..., can, :][..., :, can].sum(), theta)
    torch.testing.assert_close(g, g_ref, atol=1e-10, rtol=0)


# ---------------------------------------------------------------------- ICIN (incomplete data)
def _latent_joint(model, theta):
    """p(x, r) of an IcinModel by enumerating its latent domain: (states (S, d'), probabilities (S,))."""
    import itertools

    lat = model.latent
    states = np.array(list(itertools.product(*[range(k) for k in lat.shape])))
    logp = np.zeros(len(states))
    for i, f in enumerate(model.potentials(theta)):
        logp += f.values.detach().numpy()[tuple(states[:, lat.attrs.index(a)] for a in model.jt.cliques[i])]
    p = np.exp(logp - logp.max())
    return states, p / p.sum()


def _observed(model, states):
    """x̃ of each latent state: x, with the missing level where R_j = 1."""
    from dpsynth.graphical.icin import indicator

    lat, out = model.latent, []
    for a in model.domain.attrs:
        v = states[:, lat.attrs.index(a)].copy()
        if a in model.incomplete:
            v[states[:, lat.attrs.index(indicator(a))] == 1] = model.domain.size(a) - 1
        out.append(v)
    return np.stack(out, axis=1)


@pytest.mark.parametrize("reference", [None, {"a": 2, "b": 1, "c": 1}])
def test_icin_moments_match_enumeration_and_theta_is_identified(reference):
    from dpsynth.graphical.icin import IcinModel

    dom = Domain(["a", "b", "c"], [3, 4, 3])  # b and c incomplete: their last level is "missing"
    model = IcinModel(dom, [("a", "b"), ("b", "c")], incomplete=["b", "c"], shift={"b": 0.3}, reference=reference)
    theta = torch.as_tensor(np.random.default_rng(0).normal(0, 0.7, model.D))
    states, p = _latent_joint(model, theta)
    x = _observed(model, states)
    stats = []
    for c, cells in zip(model.cliques, model.canonical):
        flat = np.ravel_multi_index(tuple(x[:, dom.attrs.index(a)] for a in c), dom.project(c).shape)
        stats += [flat == cell for cell in cells]
    a = np.array(stats, dtype=float).T
    mu, second = model.canonical_moments(theta)
    np.testing.assert_allclose(mu.numpy(), p @ a, atol=1e-12)
    np.testing.assert_allclose(second.numpy(), (a * p[:, None]).T @ a, atol=1e-12)
    tables = [np.bincount(np.ravel_multi_index(tuple(x[:, dom.attrs.index(v)] for v in t), dom.project(t).shape),
                          weights=p, minlength=dom.project(t).size()) for t in model.tables]
    np.testing.assert_allclose(model.table_marginals(theta).numpy(), np.concatenate(tables), atol=1e-12)
    jac = torch.autograd.functional.jacobian(model.canonical_means, theta)
    np.testing.assert_allclose(model.mean_jacobian(theta).numpy(), jac.numpy(), atol=1e-10)
    assert int(torch.linalg.matrix_rank(jac)) == model.D  # just-identified: θ ↔ released moments
    clamped = model.clamped_calibration(theta)  # one calibration serves both: the same numbers
    assert torch.equal(model.mean_jacobian(theta, clamped=clamped), model.mean_jacobian(theta))
    assert all(torch.equal(u, v) for u, v in zip(model.canonical_moments(theta, clamped=clamped), (mu, second)))


def test_icin_recovers_complete_data_under_mcar_in_overlapping_cliques():
    """A chain a − b − c with every column MCAR: the released tables over (a, b) and (b, c) with
    "missing" levels are matched exactly by one ICIN θ, and its p(x) is the true complete-data
    distribution, including the (a, c) margin that no table measures."""
    from dpsynth.graphical.icin import IcinModel

    rng = np.random.default_rng(1)
    pab, pbc = rng.gamma(1.0, size=(3, 3)), rng.gamma(1.0, size=(3, 3))
    truth = pab[:, :, None] * pbc[None, :, :]
    truth /= truth.sum()
    miss = np.array([0.2, 0.3, 0.25])
    dom = Domain(["a", "b", "c"], [4, 4, 4])
    observed = np.zeros((4, 4, 4))
    for r in np.ndindex(2, 2, 2):  # R pattern: 1 = missing, independent of everything
        pr = np.prod(np.where(np.array(r) == 1, miss, 1 - miss))
        part = truth.copy()
        for j in range(3):
            if r[j]:
                part = part.sum(axis=j, keepdims=True)
        idx = tuple(slice(3, 4) if r[j] else slice(0, 3) for j in range(3))
        observed[idx] += pr * part
    model = IcinModel(dom, [("a", "b"), ("b", "c")], incomplete=["a", "b", "c"])
    q = np.concatenate([observed.sum(axis=2).ravel()[model.canonical[0]],
                        observed.sum(axis=0).ravel()[model.canonical[1]]])
    q = torch.as_tensor(q)
    theta = torch.zeros(model.D, dtype=torch.float64)
    for _ in range(200):  # damped Newton on μ(θ) = q
        step = torch.linalg.solve(model.mean_jacobian(theta), q - model.canonical_means(theta))
        theta = theta + step / max(1.0, float(step.abs().max()))
        if float(step.abs().max()) < 1e-12:
            break
    np.testing.assert_allclose(model.canonical_means(theta).numpy(), q.numpy(), atol=1e-10)
    states, p = _latent_joint(model, theta)
    fitted = np.zeros((3, 3, 3))
    np.add.at(fitted, tuple(states[:, j] for j in range(3)), p)
    np.testing.assert_allclose(fitted, truth, atol=1e-8)


def _noisy_tables(model, rng, scale=100.0):
    return [rng.poisson(scale, size=model.domain.project(t).shape).astype(float) for t in model.tables]


def test_gaussian_tree_equals_the_dense_likelihood_over_all_cells():
    """Eq. 6 by junction-tree messages is the dense Gaussian over every released cell, to rounding:
    a cycle (a–b–c) the tree triangulates, a 1-way sub-table and a clique joined by a separator."""
    from dpsynth.graphical.gaussian_tree import GaussianTree
    from dpsynth.graphical.noise_aware import NoiseAwareLikelihood

    rng = np.random.default_rng(0)
    dom = Domain(["a", "b", "c", "d"], [2, 3, 2, 4])
    cliques = [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d")]
    model = MaxEntModel(dom, cliques, cliques + [("b",), ("d",)])
    noisy, sigmas = _noisy_tables(model, rng), [3.0, 2.0, 3.0, 5.0, 1.0, 2.0]
    dense = NoiseAwareLikelihood(model, noisy, sigmas, [0] * 6, 2.5, form="dense", tree=False)
    tree = GaussianTree(model, noisy, sigmas)
    x = torch.as_tensor(rng.normal(0, 0.5, (3, dense.dim)))
    np.testing.assert_allclose(tree.log_likelihood(x[:, :dense.D], dense.counts(x)[:, 0]).numpy(),
                               dense.log_likelihood(x).numpy(), rtol=1e-10)
    # far from the data (rare cells, large residuals) it still agrees, and its gradient is the dense one's
    xr = (3 * x[0]).clone().requires_grad_(True)
    (g_tree,) = torch.autograd.grad(tree.log_likelihood(xr[:dense.D], dense.counts(xr)[0]), xr)
    (g_dense,) = torch.autograd.grad(dense.log_likelihood(xr), xr)
    np.testing.assert_allclose(g_tree.numpy(), g_dense.numpy(), rtol=1e-7, atol=1e-7)


def test_gaussian_tree_symmetric_messages_equal_the_lu_form():
    """Where every group of a clique's rows has a positive definite Ω (a table at its own rows), the
    message is computed from the Cholesky factor of K = Ω⁻¹ + G (:meth:`GaussianTree._symmetric_message`);
    it equals the LU form of M = I + ΩG in value and gradient, and a clique whose group holds only
    a child's message keeps the LU form."""
    from dpsynth.graphical.gaussian_tree import GaussianTree

    rng = np.random.default_rng(7)
    dom = Domain(["a", "b", "c", "d"], [2, 3, 2, 4])
    cliques = [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d")]
    model = MaxEntModel(dom, cliques, cliques + [("b",), ("d",)])
    noisy, sigmas = _noisy_tables(model, rng), [3.0, 2.0, 3.0, 5.0, 1.0, 2.0]
    tree = GaussianTree(model, noisy, sigmas)
    assert any(p["symmetric"] for p in tree.plans)
    theta = torch.as_tensor(rng.normal(0, 0.7, (4, model.D))).requires_grad_(True)
    n = torch.tensor([400.0, 380.0, 420.0, 395.0], dtype=torch.float64)
    lp = tree.log_likelihood(theta, n)
    (g,) = torch.autograd.grad(lp.sum(), theta)
    for plan in tree.plans:
        plan["symmetric"] = False
    lp_lu = tree.log_likelihood(theta, n)
    (g_lu,) = torch.autograd.grad(lp_lu.sum(), theta)
    np.testing.assert_allclose(lp.detach().numpy(), lp_lu.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(g.numpy(), g_lu.numpy(), rtol=1e-9, atol=1e-9)
    # the root (a, b, c) releases only (a, b) and (b, c): the rows of its separator with (a, c, d)
    # carry the child's message alone (Ω = J, not definite), so the root keeps the LU form; the
    # likelihood is the same whichever form each clique takes
    dom = Domain(["a", "b", "c", "d"], [2, 3, 2, 2])
    model = MaxEntModel(dom, [("a", "b", "c"), ("a", "c", "d")], [("a", "b"), ("b", "c"), ("a", "c", "d")])
    tree = GaussianTree(model, _noisy_tables(model, rng), [2.0, 2.0, 2.0])
    assert [p["symmetric"] for p in tree.plans] == [False, True]
    theta = torch.as_tensor(rng.normal(0, 0.7, (3, model.D)))
    lp = tree.log_likelihood(theta, n[:3])
    tree.plans[1]["symmetric"] = False
    np.testing.assert_allclose(lp.numpy(), tree.log_likelihood(theta, n[:3]).numpy(), rtol=1e-12)


def test_gaussian_tree_applies_a_fixed_omega_by_its_tables():
    """A group of rows holding a table and margins folded into it (no child's message) applies Ω
    as Σ w FᵀF x, the dense product's value; a diagonal group and one with a child keep theirs."""
    from dpsynth.graphical.gaussian_tree import GaussianTree

    rng = np.random.default_rng(4)
    kinds, rows = set(), []
    for dom, cliques, tables in ((Domain(["a", "b"], [3, 4]), [("a", "b")], [("a", "b"), ("a",), ("b",)]),
                                 (Domain(["a", "b", "c"], [3, 4, 2]), [("a", "b"), ("b", "c")],
                                  [("a", "b"), ("a",), ("b", "c"), ("c",)])):
        model = MaxEntModel(dom, cliques, tables)
        rows += GaussianTree(model, _noisy_tables(model, rng), [2.0, 1.0, 3.0, 2.0][:len(tables)]).rows
    for groups in rows:
        for g in groups:
            x = torch.as_tensor(rng.normal(size=(2, g.size, 5)))
            block = g.diagonal if g.diagonal is not None else g.omega.expand(2, -1, -1)
            kinds.add("diagonal" if g.diagonal is not None else "child" if g.children else "tables")
            np.testing.assert_allclose(g.omega_times(block, x).numpy(), (g.omega @ x).numpy(), rtol=1e-12, atol=1e-12)
    assert "tables" in kinds  # the folded margins take the structured product


def test_gaussian_tree_of_the_icin_model_matches_the_reduced_form_up_to_a_constant():
    """The ICIN model's released (observed-domain) tables are sums of latent clique cells; the tree
    gives the density of ŷ, the reduced form that of the sufficient ŝ: they differ by a constant."""
    from dpsynth.graphical.gaussian_tree import GaussianTree
    from dpsynth.graphical.icin import IcinModel
    from dpsynth.graphical.noise_aware import NoiseAwareLikelihood

    rng = np.random.default_rng(2)
    dom = Domain(["a", "b", "c"], [3, 4, 3])
    model = IcinModel(dom, [("a", "b"), ("b", "c")], [("a", "b"), ("b", "c"), ("a",)], incomplete=["a", "b"],
                      shift={"b": 0.4})
    noisy = _noisy_tables(model, rng)
    reduced = NoiseAwareLikelihood(model, noisy, [2.0] * 3, [0] * 3, 2.5, tree=False)
    assert reduced.form == "reduced"
    tree = GaussianTree(model, noisy, [2.0] * 3)
    x = torch.as_tensor(rng.normal(0, 0.5, (5, reduced.dim)))
    lt = tree.log_likelihood(x[:, :reduced.D], reduced.counts(x)[:, 0])
    lr = reduced.log_likelihood(x)
    np.testing.assert_allclose((lt - lt[0]).numpy(), (lr - lr[0]).numpy(), atol=1e-8)
    assert float((lt - lr).std()) < 1e-8 and abs(float(lt[1] - lt[0])) > 1.0  # not a trivially flat density


def test_table_log_density_is_each_tables_own_gaussian_and_the_surrogate_exact_for_one_table(monkeypatch):
    """:meth:`NoiseAwareLikelihood.table_log_density` is Σ_t log N(ŷ_t; nμ_t, n(diag μ_t − μ_tμ_tᵀ)
    + σ_t²I) up to a constant (Sherman–Morrison against scipy's dense density); with one released
    table that is all of eq. 6, so the surrogate whose table blocks follow θ equals the exact
    log-posterior up to a constant, however far from its reference point (frozen V alone does not)."""
    from scipy.stats import multivariate_normal

    from dpsynth.graphical import noise_aware
    from dpsynth.graphical.noise_aware import NoiseAwareLikelihood

    rng = np.random.default_rng(5)
    dom = Domain(["a", "b", "c"], [2, 3, 2])
    model = MaxEntModel(dom, [("a", "b"), ("b", "c")], [("a", "b"), ("b", "c"), ("b",)])
    noisy, sigmas = _noisy_tables(model, rng, scale=30.0), [2.0, 4.0, 1.5]
    lik = NoiseAwareLikelihood(model, noisy, sigmas, [0] * 3, 2.5)
    x = torch.as_tensor(rng.normal(0, 0.7, (4, lik.dim)))
    mu_p, n = model.table_marginals(x[:, :lik.D]), lik.counts(x)
    got = lik.table_log_density(mu_p, n, mu_p, n).numpy()
    want = np.zeros(4)
    for k in range(4):
        start = 0
        for t, s in zip(noisy, sigmas):
            m = mu_p[k, start:start + t.size].numpy()
            start += t.size
            cov = float(n[k, 0]) * (np.diag(m) - np.outer(m, m)) + s ** 2 * np.eye(m.size)
            want[k] += multivariate_normal(float(n[k, 0]) * m, cov).logpdf(t.ravel())
    np.testing.assert_allclose(got - got[0], want - want[0], rtol=1e-9, atol=1e-8)

    # the frozen-V surrogate (the expanded one is tested below)
    monkeypatch.setattr(noise_aware, "EXPAND_V", "never")
    one = MaxEntModel(dom, [("a", "b", "c")])
    single = NoiseAwareLikelihood(one, _noisy_tables(one, rng, scale=30.0), [3.0], [0], 2.5)
    x_ref = torch.zeros(single.dim, dtype=torch.float64)
    far = torch.as_tensor(rng.normal(0, 1.0, (6, single.dim)))
    capped = single.surrogate(x_ref)(far) - single.log_posterior(far)
    monkeypatch.setattr(noise_aware, "FOLLOW_CAP", 1e12)  # the soft caps lifted
    monkeypatch.setattr(noise_aware, "LINEAR_CAP", 1e12)
    rounded = single.surrogate(x_ref)(far) - single.log_posterior(far)  # dense products in PRODUCT_DTYPE
    monkeypatch.setattr(noise_aware, "PRODUCT_DTYPE", torch.float64)
    diff = single.surrogate(x_ref)(far) - single.log_posterior(far)
    assert float(diff.std()) < 1e-8 * float(single.log_posterior(far).abs().max())
    assert float((rounded - diff).abs().max()) < 1e-6 * float(single.log_posterior(far).abs().max())
    assert float(capped.std()) > 1e-3  # capped at ±5 nats, the term no longer matches this far out
    # the part of the surrogate that lets V follow θ is far from constant: V frozen alone would miss it
    mu_far, mu_ref = one.table_marginals(far[:, :single.D]), one.table_marginals(x_ref[:single.D])
    n_far, n_ref = single.counts(far), single.counts(x_ref)
    follow = single.table_log_density(mu_far, n_far, mu_far, n_far) - single.table_log_density(mu_far, n_far, mu_ref, n_ref)
    assert float(follow.std()) > 1.0
    # the surrogate computes that difference in one pass
    torch.testing.assert_close(single._follow(mu_far, n_far, single._frozen_tables(mu_ref, n_ref)), follow,
                               rtol=1e-10, atol=1e-9)


def test_psis_takes_bounded_ratios_as_they_are_and_flags_heavy_tails():
    """Ratios within PSIS_BOUNDED_RATIO of one another are used raw (k̂ = −∞: no tail to fit);
    a heavy-tailed ratio (log ratio exponential, so ratios Pareto with shape 1) is flagged."""
    from dpsynth.graphical.posterior import psis_weights

    rng = np.random.default_rng(0)
    lr = 0.1 * rng.standard_normal(2000)
    lr = 0.39 * (lr - lr.min()) / np.ptp(lr)             # every ratio within e^0.39 ≈ 1.48
    w, k, eff = psis_weights(lr)
    np.testing.assert_allclose(w, np.exp(lr) / np.exp(lr).sum())
    assert k == -np.inf and eff > 0.96
    _, k_heavy, _ = psis_weights(rng.exponential(1.0, 2000))
    assert k_heavy > 0.7


def _far_mode(x):
    """N(0, I) in 3 dimensions plus a second, far lower mode at 40 (log weight −300)."""
    near = -0.5 * (x ** 2).sum(-1)
    far = -0.5 * ((x - 40.0) ** 2).sum(-1) - 300.0
    return torch.logaddexp(near, far)


def test_hmc_restarts_a_stray_chain_in_warmup():
    # one chain starts in the far mode: HMC cannot cross 40 sds, so without pruning it stays there
    # (split R̂ huge); at the first window's end it is >5·√(3/2) nats below the others and restarts
    init = torch.zeros(8, 3, dtype=torch.float64)
    init[0] = 40.0
    pruned = hmc(_far_mode, init, warmup=100, draws=200, rng=np.random.default_rng(0))
    kept = hmc(_far_mode, init, warmup=100, draws=200, rng=np.random.default_rng(0), prune_strays=False)
    assert pruned.strays == 1 and kept.strays == 0
    assert float(pruned.draws.abs().max()) < 10 and pruned.max_rhat < 1.05
    assert float(kept.draws[0].mean()) > 30  # the stray chain never left the far mode


def _wall(x: torch.Tensor) -> torch.Tensor:
    """A standard normal with a wall beyond x₀ = 3: a gradient ~1e8 there, so that no step an
    adapted sampler takes leaves it (every trajectory from inside the wall diverges)."""
    return -0.5 * (x ** 2).sum(-1) - 1e8 * torch.relu(x[..., 0] - 3.0) ** 2


def test_hmc_restarts_a_stuck_chain_in_warmup():
    # one chain starts inside the wall, where its density is not far below the others' (so it is no
    # stray by log density: 1e8 · 0.0001² = 1 nat) but no proposal is ever accepted: without the
    # check it never moves; with it, it restarts where a moving chain is at the first slow window
    init = torch.zeros(8, 3, dtype=torch.float64)
    init[0, 0] = 3.0001
    pruned = hmc(_wall, init, warmup=100, draws=100, rng=np.random.default_rng(0))
    kept = hmc(_wall, init, warmup=100, draws=100, rng=np.random.default_rng(0), prune_strays=False)
    assert pruned.strays >= 1 and kept.strays == 0
    assert float(kept.draws[0].std(0).max()) == 0.0          # stuck for good
    assert float(pruned.draws[0].std(0).min()) > 0.1 and float(pruned.draws[:, :, 0].max()) < 3.001


def _narrow_left(x: torch.Tensor) -> torch.Tensor:
    """N(0, 1) right of 0 and N(0, 0.05²) left of it, in 1-D (log density and gradient continuous at
    0; P(x < 0) = 0.05 / 1.05): a step of 0.5 is well inside the leapfrog's stable range on the
    right (2 sd) and far beyond it on the left (0.1)."""
    v = x[..., 0]
    return -0.5 * v ** 2 / torch.where(v < 0, 0.05 ** 2, 1.0)


def test_hmc_short_steps_free_a_chain_where_the_step_is_out_of_reach():
    # chains started on the narrow side at the step the wide side allows: with every chain taking
    # the common step some never move (the sampling phase has no restarts); with SHORT_STEPS'
    # occasional shorter steps each chain moves and the narrow side's share falls towards 0.048
    from dpsynth.graphical.posterior import SHORT_STEPS

    init = torch.full((16, 1), -0.06, dtype=torch.float64)
    for seed in (0, 4):
        runs = {ss: hmc(_narrow_left, init, warmup=0, draws=200, step_size=0.5, rng=np.random.default_rng(seed),
                        short_steps=ss) for ss in (None, SHORT_STEPS)}
        moved = {ss: ((r.draws[:, 1:] - r.draws[:, :-1]).abs() > 0).double().mean((1, 2)) for ss, r in runs.items()}
        assert float(moved[None].min()) < 0.02 and float(moved[SHORT_STEPS].min()) > 0.1
        left = {ss: float((r.draws < 0).double().mean()) for ss, r in runs.items()}
        assert left[None] > 0.5 and left[SHORT_STEPS] < 0.3


def test_moving_chains_keeps_all_when_most_would_go():
    from dpsynth.graphical.mixing import STUCK_ACCEPT, moving_chains

    share = torch.tensor([0.8, 0.7, STUCK_ACCEPT / 2, 0.9], dtype=torch.float64)
    assert moving_chains(share).tolist() == [True, True, False, True]
    assert moving_chains(torch.tensor([0.8, 0.0, 0.0, 0.0], dtype=torch.float64)).all()


def test_settled_chains_keeps_all_when_most_would_go():
    from dpsynth.graphical.mixing import settled_chains

    lp = torch.tensor([0.0, -1.0, -2.0, -500.0], dtype=torch.float64)
    assert settled_chains(lp, 10).tolist() == [True, True, True, False]
    split = torch.tensor([0.0, 0.0, -500.0, -500.0, -500.0], dtype=torch.float64)
    assert settled_chains(split, 10).all()  # the median is itself a stray: no basis to prune


def test_surrogate_linear_term_is_soft_capped(monkeypatch):
    """Far along its slope the surrogate's linear term rises by at most LINEAR_CAP nats (a fitted
    slope must not open a region the chains can run off into); near x_ref it is the slope itself."""
    from dpsynth.graphical import noise_aware
    from dpsynth.graphical.noise_aware import LINEAR_CAP, NoiseAwareLikelihood

    rng = np.random.default_rng(8)
    dom = Domain(["a", "b"], [2, 3])
    model = MaxEntModel(dom, [("a", "b")])
    lik = NoiseAwareLikelihood(model, _noisy_tables(model, rng, scale=30.0), [3.0], [0], 2.5)
    x_ref = torch.zeros(lik.dim, dtype=torch.float64)
    fit_draws = torch.as_tensor(rng.normal(0, 0.3, (400, lik.dim)))
    # about the cap, not the fit: plain least squares, a steep slope (with cross-validation the
    # slope over these far-from-the-data draws is shrunk almost to 0)
    monkeypatch.setattr(noise_aware, "RIDGE_ALPHAS", (1e-6,))
    sur = lik.surrogate(x_ref, fit_draws)
    slope, cap = sur.slope, sur.cap
    reach = float(((fit_draws - x_ref) @ slope).abs().max())
    assert float(slope.norm()) > 0 and cap == max(LINEAR_CAP, 2 * reach)
    x = torch.cat([x_ref + torch.as_tensor(rng.normal(0, 50.0, (20, lik.dim))),
                   (x_ref + 200.0 * slope / slope.norm() ** 2)[None],  # the linear term at 200 nats
                   (x_ref + 1e-3 * slope / slope.norm())[None]])  # near x_ref
    capped = sur(x)
    monkeypatch.setattr(noise_aware, "LINEAR_CAP", 1e12)
    free = lik.surrogate(x_ref, fit_draws)(x)
    lin = (x - x_ref) @ slope
    np.testing.assert_allclose((capped - free).numpy(), (cap * torch.tanh(lin / cap) - lin).numpy(),
                               rtol=1e-9, atol=1e-6)
    assert float(capped[-2] - free[-2]) <= cap - 200.0 + 1e-6
    assert abs(float(capped[-1] - free[-1])) < 1e-9


def test_surrogate_slope_is_a_cross_validated_ridge_fit_even_with_few_draws():
    """The surrogate's linear term is fitted to log p − frozen over the draws it is given (whitened
    ridge, penalty by cross-validation over blocks of chains): an exactly linear difference is
    recovered, also from fewer draws than the old rule's 2 (dim + 1), which fell back to the
    gradient at x_ref (a 376-parameter MAR fit with 16 chains: importance efficiency 0.02)."""
    from dpsynth.graphical.noise_aware import MAX_FIT_DRAWS, SURROGATE_FIT_DRAWS, NoiseAwareLikelihood, fit_draws

    rng = np.random.default_rng(3)
    model = MaxEntModel(Domain(["a", "b"], [8, 10]), [("a", "b")])
    lik = NoiseAwareLikelihood(model, _noisy_tables(model, rng, scale=30.0), [3.0], [0], 2.5)
    x_ref = torch.zeros(lik.dim, dtype=torch.float64)
    truth = torch.as_tensor(rng.normal(0, 1, lik.dim))

    def frozen(x):
        return lik.log_posterior(x) - (x - x_ref) @ truth

    draws = torch.as_tensor(rng.normal(0, 0.3, (int(1.5 * (lik.dim + 1)), lik.dim)))
    slope = lik._fitted_slope(frozen, x_ref, draws)
    assert slope is not None
    assert float((slope - truth).norm() / truth.norm()) < 0.05
    assert lik._fitted_slope(frozen, x_ref, draws[:20]) is None  # too few to fit at all
    assert fit_draws(10) == SURROGATE_FIT_DRAWS and fit_draws(400) == 1604 and fit_draws(10_000) == MAX_FIT_DRAWS


@pytest.mark.parametrize("kind", ["maxent", "icin"])
def test_level_pass_matches_the_per_clique_pass(kind):
    """The unclamped pass a tree level at a time (log space) gives the per-clique linear-space
    pass's log Z and clique beliefs and their gradients, on a tree with branching, three levels,
    a batch of two dimensions, a clique with no statistic of its own and a disconnected column."""
    from dpsynth.graphical.icin import IcinModel
    from dpsynth.graphical.maxent import MaxEntModel

    dom = Domain(["a", "b", "c", "d", "e", "f", "g"], [3, 2, 4, 3, 2, 3, 2])
    cliques = [("a", "b"), ("b", "c"), ("b", "d"), ("d", "e"), ("c", "f"), ("g",)]
    model = (MaxEntModel(dom, cliques) if kind == "maxent"
             else IcinModel(dom, cliques, incomplete=["c", "e"], shift={"c": 0.4}))
    assert len(model._level_plan()["levels"]) >= 3
    theta = torch.as_tensor(np.random.default_rng(1).normal(0, 1.5, (2, 3, model.D))).requires_grad_(True)
    log_z, beliefs = model._calibrate_levels(theta)
    ref_z, ref_b = model._calibrate_flat(theta, clamp=True)  # row 0 of the evidence axis is free
    ref_b = [b[..., :1] for b in ref_b]
    torch.testing.assert_close(log_z, ref_z[..., :1], rtol=0, atol=1e-12)
    for b, r in zip(beliefs, ref_b):
        torch.testing.assert_close(b, r, rtol=0, atol=1e-12)
    weights = [torch.as_tensor(np.random.default_rng(k).normal(size=b.shape)) for k, b in enumerate(beliefs)]
    g, = torch.autograd.grad(log_z.sum() + sum((w * b).sum() for w, b in zip(weights, beliefs)), theta)
    g_ref, = torch.autograd.grad(ref_z[..., 0].sum() + sum((w * b).sum() for w, b in zip(weights, ref_b)), theta)
    torch.testing.assert_close(g, g_ref, rtol=0, atol=1e-10)
    # the released cells and canonical statistics collected from the level pass's beliefs at once
    with torch.no_grad():
        mu_d, mu_p = model.collect_means(theta, "collect", "tables")
        flat = theta.reshape(-1, model.D)
        can = model._flat_pass(flat)[1][:, 0, :]
        tables = torch.stack([torch.cat([model.marginal(t, tab) for tab in model.tables]) for t in flat]) \
            if kind == "maxent" else model._flat_pass(flat, collect="tables")[1][:, 0, :]
    torch.testing.assert_close(mu_d.reshape(-1, model.D), can, rtol=0, atol=1e-12)
    torch.testing.assert_close(mu_p.reshape(-1, model.P), tables, rtol=0, atol=1e-12)


def test_junction_tree_is_rooted_at_a_centre_and_the_level_pass_survives_underflow():
    """A chain of five cliques is rooted at its middle one (three levels, not five); with
    log-potentials that make whole separator cells underflow, the level pass's beliefs stay
    finite, sum to one per clique and keep finite gradients."""
    from dpsynth.graphical.maxent import MaxEntModel

    dom = Domain(list("abcdef"), [3, 2, 3, 2, 3, 2])
    cliques = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("e", "f")]
    jt = JunctionTree(dom, cliques)
    depth = {jt.bfs[0]: 0}
    for i in jt.bfs[1:]:
        depth[i] = depth[jt.parent[i]] + 1
    assert jt.cliques[jt.bfs[0]] == ("c", "d") and max(depth.values()) == 2
    model = MaxEntModel(dom, cliques)
    assert len(model._level_plan()["levels"]) == 3
    theta = torch.as_tensor(np.random.default_rng(2).normal(0, 1.0, (3, model.D)))
    theta[0, 0] = theta[1, 12] = 800.0  # every other cell's e^(−800) underflows: separator cells without mass
    theta.requires_grad_(True)
    log_z, beliefs = model._calibrate_levels(theta)
    assert bool(torch.isfinite(log_z).all())
    for b in beliefs:
        assert bool(torch.isfinite(b).all())
        torch.testing.assert_close(b.sum(0), torch.ones_like(b.sum(0)), rtol=0, atol=1e-9)
    g, = torch.autograd.grad(log_z.sum() + sum(b[0].sum() for b in beliefs), theta)
    assert bool(torch.isfinite(g).all())


def _three_level_icin():
    """An ICIN model whose junction tree has three levels, branching, a clique with no statistic
    of its own and a disconnected column: (model, its level plan's levels)."""
    from dpsynth.graphical.icin import IcinModel

    dom = Domain(["a", "b", "c", "d", "e", "f", "g"], [3, 2, 4, 3, 2, 3, 2])
    model = IcinModel(dom, [("a", "b"), ("b", "c"), ("b", "d"), ("d", "e"), ("c", "f"), ("g",)],
                      incomplete=["c", "e"], shift={"c": 0.4})
    levels = model._level_plan()["levels"]
    assert len(levels) >= 3
    return model, levels


@pytest.mark.parametrize("scale", [1.5, 300.0])
def test_level_pass_backward_by_hand_is_autograds_to_second_order(scale):
    """The level pass's hand-written backward (:func:`dpsynth.graphical.level_pass.level_backward`)
    gives autograd's gradient of the same forward, also where separator sums hit their floor
    (scale 300: most cells underflow), and a graph of it (create_graph) gives autograd's second
    derivatives."""
    from dpsynth.graphical.level_pass import level_forward, level_pass

    model, levels = _three_level_icin()
    rng = np.random.default_rng(4)
    theta = torch.as_tensor(rng.normal(0, scale, (5, model.D))).requires_grad_(True)
    weight = torch.as_tensor(rng.normal(size=(len(model._level_plan()["order"]), 5)))

    def loss(pass_, t):
        log_z, belief = pass_(model.lifted_potentials(t))
        return (log_z * torch.arange(1.0, 6.0, dtype=torch.float64)).sum() + (weight * belief).sum() \
            + torch.log(belief + 1e-3).sum()

    by_hand = lambda flat: level_pass(levels, flat)
    by_autograd = lambda flat: level_forward(levels, flat)[:2]  # recorded op by op
    g, = torch.autograd.grad(loss(by_hand, theta), theta)
    g_ref, = torch.autograd.grad(loss(by_autograd, theta), theta)
    assert bool(torch.isfinite(g).all())
    torch.testing.assert_close(g, g_ref, rtol=1e-12, atol=1e-12)
    if scale < 10:
        t0 = theta[0].detach()
        hess = torch.autograd.functional.hessian(lambda t: loss(by_hand, t.expand(5, -1)), t0)
        hess_ref = torch.autograd.functional.hessian(lambda t: loss(by_autograd, t.expand(5, -1)), t0)
        torch.testing.assert_close(hess, hess_ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("scale", [1.5, 300.0])
def test_compiled_level_pass_is_the_torch_pass(scale):
    """The compiled loops (:mod:`dpsynth.graphical.level_kernels`) give the torch pass's log Z,
    beliefs and hand-written backward, also where separator sums hit their floor (scale 300), on a
    tree with three levels; batches above :data:`KERNEL_MAX_ROWS` rows, and a forward that autograd
    records, take the torch pass; the compiled sparse product is the CSR product."""
    from dpsynth.graphical import level_kernels
    from dpsynth.graphical.level_pass import KERNEL_MAX_ROWS, level_backward, level_forward, torch_backward, torch_forward

    model, levels = _three_level_icin()
    rng = np.random.default_rng(6)
    for rows in (1, 8, KERNEL_MAX_ROWS + 1):
        flat = model.lifted_potentials(torch.as_tensor(rng.normal(0, scale, (rows, model.D))))
        log_z, belief, saved = level_forward(levels, flat)
        assert isinstance(saved, level_kernels.Saved) == (rows <= KERNEL_MAX_ROWS)
        ref_z, ref_b, ref_saved = torch_forward(levels, flat)
        torch.testing.assert_close(log_z, ref_z, rtol=1e-13, atol=1e-13)
        torch.testing.assert_close(belief, ref_b, rtol=1e-12, atol=1e-300)
        grad_b, grad_z = torch.as_tensor(rng.normal(size=belief.shape)), torch.as_tensor(rng.normal(size=rows))
        torch.testing.assert_close(level_backward(levels, saved, grad_z, grad_b),
                                   torch_backward(levels, ref_saved, grad_z, grad_b), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(level_backward(levels, saved, None, grad_b),
                                   torch_backward(levels, ref_saved, None, grad_b), rtol=1e-12, atol=1e-12)
    recorded = model.lifted_potentials(torch.zeros((2, model.D), dtype=torch.float64, requires_grad=True))
    assert not isinstance(level_forward(levels, recorded)[2], level_kernels.Saved)
    # the exact evaluations' chunks call these on threads (map_chunks): they must release the GIL
    assert all(k.targetoptions.get("nogil") for k in (level_kernels._forward, level_kernels._backward, level_kernels._csr_sum))
    lift = model._level_plan()["lift"]
    x = torch.as_tensor(rng.normal(size=(model.D, 5)))
    torch.testing.assert_close(lift.mm(x), lift.matrix @ x, rtol=0, atol=1e-13)


def test_sparse_map_with_one_entry_per_row_is_a_gather():
    """A map with exactly one 1 in every row (a lift onto clique cells) is applied as a gather,
    with the same values and gradients as the dense product; a map without it is not."""
    from dpsynth.graphical.sparse_map import SparseMap

    rng = np.random.default_rng(5)
    cols = torch.as_tensor(rng.integers(0, 4, 9))
    rows = torch.as_tensor(rng.permutation(9))
    m = SparseMap(rows, cols, (9, 4))
    assert m.gather is not None and m.T.gather is None
    dense = torch.zeros((9, 4), dtype=torch.float64).index_put_((rows, cols), torch.ones(9, dtype=torch.float64))
    x = torch.as_tensor(rng.normal(size=(4, 3))).requires_grad_(True)
    torch.testing.assert_close(m(x), dense @ x, rtol=0, atol=0)
    g, = torch.autograd.grad((m(x) ** 2).sum(), x)
    torch.testing.assert_close(g, 2 * dense.T @ (dense @ x), rtol=0, atol=1e-12)


def test_sparse_map_is_the_dense_product_and_differentiable_twice():
    """A @ x for a 0/1 matrix given by its ones (a pair listed twice counts twice), with gradients
    of first and second order equal to the dense product's."""
    from dpsynth.graphical.sparse_map import SparseMap

    rng = np.random.default_rng(3)
    rows, cols = rng.integers(0, 7, 30), rng.integers(0, 5, 30)
    dense = torch.zeros((7, 5), dtype=torch.float64)
    dense.index_put_((torch.as_tensor(rows), torch.as_tensor(cols)), torch.ones(30, dtype=torch.float64), accumulate=True)
    m = SparseMap(rows, cols, (7, 5))
    x = torch.as_tensor(rng.normal(size=(5, 3))).requires_grad_(True)
    torch.testing.assert_close(m(x), dense @ x, rtol=0, atol=1e-12)
    torch.testing.assert_close(m.T(m(x)), dense.T @ (dense @ x), rtol=0, atol=1e-12)
    assert torch.autograd.gradcheck(lambda v: torch.sin(m(v)), (x,))
    assert torch.autograd.gradgradcheck(lambda v: torch.sin(m(v)), (x,))
    with pytest.raises(ValueError, match="shape"):
        m(torch.zeros((4, 3), dtype=torch.float64))


@pytest.mark.parametrize("kind", ["maxent", "icin"])
def test_tilted_means_give_the_variance_of_a_linear_statistic(kind):
    """(μ_D(θ tilted by h u) − μ_D(θ)) · u / h is uᵀ Cov_θ(a_D) u, the clamped moments' value, for
    the statistics a_D (not the features θ multiplies, which differ in the ICIN model), batched
    and under autograd."""
    from dpsynth.graphical.icin import IcinModel

    dom = Domain(["a", "b", "c", "d"], [3, 2, 4, 3])
    cliques = [("a", "b"), ("b", "c"), ("c", "d")]
    model = MaxEntModel(dom, cliques) if kind == "maxent" else IcinModel(dom, cliques, incomplete=["b", "d"])
    rng = np.random.default_rng(6)
    theta = torch.as_tensor(rng.normal(0, 0.8, (3, model.D))).requires_grad_(True)
    u = torch.as_tensor(rng.normal(0, 1.0, (3, model.D)))
    mu, second = model.canonical_moments(theta)
    cov = second - mu.unsqueeze(-1) * mu.unsqueeze(-2)
    want = torch.einsum("bi,bij,bj->b", u, cov, u)
    h = 1e-6
    got = ((model.tilted_means(theta, h * u) - model.canonical_means(theta)) * u).sum(-1) / h
    torch.testing.assert_close(got, want, rtol=1e-5, atol=0)
    (g,) = torch.autograd.grad(got.sum(), theta)
    (g_ref,) = torch.autograd.grad(want.sum(), theta)
    torch.testing.assert_close(g, g_ref, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(model.tilted_means(theta, 0 * u), model.canonical_means(theta), rtol=0, atol=1e-14)
    # the two passes may share one lifting of θ (as the expanded surrogate does): same values, same gradient
    flat = model.lifted_potentials(theta)
    shared = ((model.tilted_means(theta, h * u, flat) - model.canonical_means(theta, flat)) * u).sum(-1) / h
    torch.testing.assert_close(shared, got, rtol=0, atol=1e-12)
    (g_shared,) = torch.autograd.grad(shared.sum(), theta)
    torch.testing.assert_close(g_shared, g, rtol=0, atol=1e-10)


def test_expanded_v_surrogate_is_closer_to_the_exact_posterior_than_frozen_v(monkeypatch):
    """The reduced form's surrogate with rᵀV⁻¹r expanded about V(x_ref) follows the exact
    log posterior around x_ref more closely than V frozen (but for each table's own block), each with
    the linear term that matches the exact gradient at x_ref; far from x_ref it stays finite and
    below the density at x_ref (the expanded quadratic form is bounded below)."""
    from dpsynth.graphical import noise_aware
    from dpsynth.graphical.icin import IcinModel
    from dpsynth.graphical.noise_aware import NoiseAwareLikelihood

    rng = np.random.default_rng(8)
    dom = Domain(["a", "b", "c"], [3, 4, 3])
    model = IcinModel(dom, [("a", "b"), ("b", "c")], [("a", "b"), ("b", "c"), ("a",)], incomplete=["a", "b"])
    lik = NoiseAwareLikelihood(model, _noisy_tables(model, rng, scale=60.0), [1.0] * 3, [0] * 3, 2.5)
    x_ref = torch.as_tensor(rng.normal(0, 0.3, lik.dim))
    near = x_ref + torch.as_tensor(rng.normal(0, 0.02, (200, lik.dim)))  # about the posterior's own spread
    exact = lik.log_posterior(near)
    monkeypatch.setattr(noise_aware, "EXPAND_V_WARMUP", False)
    warmup = lik.surrogate(x_ref)  # without EXPAND_V_WARMUP, warm-up windows (no draws) keep the cheaper frozen V
    monkeypatch.setattr(noise_aware, "EXPAND_V_WARMUP", True)
    first = lik.surrogate(x_ref)
    monkeypatch.setattr(noise_aware, "EXPAND_V", "never")
    frozen = lik.surrogate(x_ref)
    torch.testing.assert_close(warmup(near), frozen(near), rtol=0, atol=1e-9)
    sd_first, sd_frozen = float((exact - first(near)).std()), float((exact - frozen(near)).std())
    assert sd_first < 0.5 * sd_frozen, (sd_first, sd_frozen)
    assert sd_frozen > 0.5  # V does move over these points: the comparison is not between two zeros
    xr = x_ref.clone().requires_grad_(True)
    (g_exact,) = torch.autograd.grad(lik.log_posterior(xr), xr)
    (g_first,) = torch.autograd.grad(first(xr), xr)
    torch.testing.assert_close(g_first, g_exact, rtol=1e-6, atol=1e-6)
    far = x_ref + torch.as_tensor(rng.normal(0, 2.0, (50, lik.dim)))
    with torch.no_grad():  # −½ (quadratic form) − ½ log |V₀| ≤ −½ log |V₀|: the form is never negative
        quadratic = first(far) - lik.log_prior(far) - first.cap * torch.tanh(((far - x_ref) @ first.slope) / first.cap)
        half_log_det = float(torch.log(torch.diagonal(lik._terms(x_ref)[4])).sum())
    assert bool(torch.isfinite(quadratic).all()) and bool((quadratic <= -half_log_det + 1e-9).all())


def _icin_chain_likelihood(rng):
    """A 4-column ICIN model (two incomplete columns, a chain of cliques) with its noise-aware
    likelihood and a reference point near 0: the expanded-V surrogate's tests."""
    from dpsynth.graphical.icin import IcinModel
    from dpsynth.graphical.noise_aware import NoiseAwareLikelihood

    dom = Domain(["a", "b", "c", "d"], [3, 4, 3, 2])
    model = IcinModel(dom, [("a", "b"), ("b", "c"), ("c", "d")], [("a", "b"), ("b", "c"), ("c", "d"), ("a",)],
                      incomplete=["a", "c"])
    lik = NoiseAwareLikelihood(model, _noisy_tables(model, rng, scale=60.0), [1.0] * 4, [0] * 4, 2.5)
    return lik, torch.as_tensor(rng.normal(0, 0.3, lik.dim))


@pytest.mark.parametrize("by_pass", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, "half"])
def test_expanded_v_gradient_by_hand_is_autograds(monkeypatch, dtype, by_pass):
    """The expanded-V surrogate (:class:`dpsynth.graphical.expanded_v.ExpandedV`) has the values of
    its autograd reference and its gradient (by hand) agrees with autograd's: to rounding with its
    fixed products in float64, to the products' rounding in float32 (the default), and with V₀⁻¹ in
    float16 (``"half"``: large models, :class:`dpsynth.graphical.half_matrix.HalfMatrix`) to float32
    accumulation, as autograd's graph multiplies by the same rounded matrix in float32; a graph of the
    backward gives autograd's second derivatives; no-grad calls take batches of any shape. So with
    Σ₀u by products with C₀ and by the pass at θ₀ (``by_pass``: large models' way)."""
    from dpsynth.graphical import noise_aware
    from dpsynth.graphical.half_matrix import HalfMatrix

    half = dtype == "half"
    monkeypatch.setattr(noise_aware, "PRODUCT_DTYPE", torch.float32 if half else dtype)
    monkeypatch.setattr(noise_aware, "HALF_MIN_DIM", 0 if half else 10 ** 9)
    monkeypatch.setattr(noise_aware, "SIGMA0_BY_PASS_MIN_DIM", 0 if by_pass else 10 ** 9)
    rng = np.random.default_rng(9)
    lik, x_ref = _icin_chain_likelihood(rng)
    expanded = lik._expanded_v(x_ref)
    density = expanded.density
    assert (density.c0 is None) == by_pass and isinstance(density.v0_inv, HalfMatrix) == half
    x = (x_ref + torch.as_tensor(rng.normal(0, 0.3, (6, lik.dim)))).requires_grad_(True)
    f, f_ref = density(x), density.reference(x)
    torch.testing.assert_close(f, f_ref, rtol=1e-6 if half else 0, atol=0)
    weight = torch.as_tensor(rng.normal(size=6))
    (g,) = torch.autograd.grad((weight * f).sum(), x)
    (g_ref,) = torch.autograd.grad((weight * f_ref).sum(), x)
    # the forward difference along u divides rounding by its step (~1e-5): agreement relative to the largest entry
    tol = 1e-9 if dtype is torch.float64 else 1e-4
    torch.testing.assert_close(g, g_ref, rtol=0, atol=tol * float(g_ref.abs().max()))
    x0 = x[0].detach()
    hess = torch.autograd.functional.hessian(lambda v: density(v[None])[0], x0)
    hess_ref = torch.autograd.functional.hessian(lambda v: density.reference(v[None])[0], x0)
    torch.testing.assert_close(hess, hess_ref, rtol=1e-9, atol=1e-9)
    with torch.no_grad():
        torch.testing.assert_close(density(x.detach().reshape(2, 3, -1)), f_ref.detach().reshape(2, 3),
                                   rtol=1e-6 if half else None, atol=1e-7 if half else None)


def test_expanded_v_sigma0_by_pass_is_the_products_to_the_difference_step(monkeypatch):
    """Σ₀u by a forward difference at θ₀ (models of SIGMA0_BY_PASS_MIN_DIM parameters or more)
    gives the surrogate of Σ₀u = u_D·C₀ to the difference's truncation (relative 1e-6 here, where
    the rest of the log density is hundreds of nats), and at x_ref itself ΔVu vanishes: the
    density is −½rᵀV₀⁻¹r − log|V₀|^{1/2}, the exact Gaussian term at V₀."""
    from dpsynth.graphical import noise_aware

    monkeypatch.setattr(noise_aware, "PRODUCT_DTYPE", torch.float64)
    rng = np.random.default_rng(19)
    lik, x_ref = _icin_chain_likelihood(rng)
    x = torch.cat([x_ref[None], x_ref + torch.as_tensor(rng.normal(0, 0.3, (5, lik.dim)))])
    monkeypatch.setattr(noise_aware, "SIGMA0_BY_PASS_MIN_DIM", 10 ** 9)
    products = lik._expanded_v(x_ref).density
    monkeypatch.setattr(noise_aware, "SIGMA0_BY_PASS_MIN_DIM", 0)
    by_pass = lik._expanded_v(x_ref).density
    assert products.c0 is not None and by_pass.c0 is None
    with torch.no_grad():
        (f_p, g_p), (f_b, g_b) = products.value_and_grad(x), by_pass.value_and_grad(x)
        _, mu0, _, n0, chol0 = lik._terms(x_ref)
        z = torch.linalg.solve_triangular(chol0, (lik.y - n0 * mu0)[:, None], upper=False)[:, 0]
    torch.testing.assert_close(f_b, f_p, rtol=1e-6, atol=0)
    torch.testing.assert_close(g_b, g_p, rtol=0, atol=1e-5 * float(g_p.abs().max()))
    exact_at_ref = -0.5 * float(z @ z) - float(torch.log(torch.diagonal(chol0)).sum())
    assert abs(float(f_b[0]) - exact_at_ref) < 1e-9 * abs(exact_at_ref)


@pytest.mark.parametrize("linear_below", [0, 16])
@pytest.mark.parametrize("rows", [1, 3, 8, 15, 16, 40])
def test_fixed_matrix_is_x_times_m_in_either_layout(monkeypatch, rows, linear_below):
    """:class:`dpsynth.graphical.expanded_v.FixedMatrix` gives x @ M (M not symmetric here, so a
    layout that read Mᵀ for M would fail) to float32 rounding, whichever way round the batch is
    multiplied (``LINEAR_BELOW_ROWS``: 16 on AMD processors, 0 elsewhere), in any leading shape."""
    from dpsynth.graphical import expanded_v
    from dpsynth.graphical.expanded_v import FixedMatrix

    monkeypatch.setattr(expanded_v, "LINEAR_BELOW_ROWS", linear_below)
    gen = torch.Generator().manual_seed(rows)
    m = torch.randn(70, 50, dtype=torch.float64, generator=gen)
    x = torch.randn(rows, 70, dtype=torch.float64, generator=gen)
    fixed = FixedMatrix(m.float())
    exact = x.float().double() @ m.float().double()
    out = fixed(x)
    assert out.dtype == torch.float64 and out.shape == (rows, 50)
    torch.testing.assert_close(out, exact, rtol=0, atol=1e-4 * float(exact.abs().max()))
    torch.testing.assert_close(fixed(x.reshape(1, rows, 70))[0], out, rtol=0, atol=0)


def test_fixed_matrix_layout_follows_the_processor_vendor():
    """x @ M below 16 rows on AMD processors only (where it was measured faster); the vendor is
    read from /proc/cpuinfo where there is one."""
    from dpsynth.graphical import expanded_v

    vendor = expanded_v.cpu_vendor()
    assert isinstance(vendor, str)
    assert expanded_v.LINEAR_BELOW_ROWS == (16 if vendor == "AuthenticAMD" else 0)
    try:
        with open("/proc/cpuinfo") as f:
            listed = [line.split(":", 1)[1].strip() for line in f if line.startswith("vendor_id")]
    except OSError:
        listed = []
    assert vendor == (listed[0] if listed else "")


def test_sampler_gradient_by_hand_is_autograds(monkeypatch):
    """The sampling surrogate (expanded V, fitted linear term) in a sinh–arcsinh map's coordinates:
    the sampler's value and gradient without autograd (posterior._mapped_value_and_grad) equal
    autograd's through the same functions, and so do the frozen-V surrogate's (FrozenV, the reduced
    form's warm-up guides and complete-data fits), in the map's coordinates and in the identity's;
    a non-finite density gets a zero gradient."""
    from dpsynth.graphical import noise_aware, posterior
    from dpsynth.graphical.icin import IcinModel
    from dpsynth.graphical.noise_aware import NoiseAwareLikelihood
    from dpsynth.graphical.transport import MarginalMap

    rng = np.random.default_rng(12)
    dom = Domain(["a", "b", "c"], [3, 4, 3])
    model = IcinModel(dom, [("a", "b"), ("b", "c")], [("a", "b"), ("b", "c"), ("a",)], incomplete=["a", "b"])
    lik = NoiseAwareLikelihood(model, _noisy_tables(model, rng, scale=60.0), [1.0] * 3, [0] * 3, 2.5)
    x_ref = torch.as_tensor(rng.normal(0, 0.3, lik.dim))
    draws = x_ref + torch.as_tensor(rng.normal(0, 0.05, (120, lik.dim)))
    guide = lik.surrogate(x_ref, draws)
    monkeypatch.setattr(noise_aware, "EXPAND_V_WARMUP", False)  # warm-up windows' guides: frozen V
    frozen = lik.surrogate(x_ref)
    assert lik.form == "reduced" and hasattr(guide, "value_and_grad") and hasattr(frozen, "value_and_grad")
    k = lik.dim
    tmap = MarginalMap(x_ref, torch.full((k,), 0.1, dtype=torch.float64), torch.as_tensor(rng.normal(0, 0.5, k)),
                       torch.as_tensor(rng.uniform(0.6, 1.5, k)))
    z = torch.as_tensor(rng.normal(0, 1.0, (7, k)))
    for density, m in itertools.product((guide, frozen), (tmap, MarginalMap.identity(k))):
        lp, g = posterior._mapped_value_and_grad(density, m, z)
        lp_ref, g_ref = posterior.value_and_grad(lambda v: posterior._mapped(density, m, v), z)
        torch.testing.assert_close(lp, lp_ref, rtol=1e-12, atol=1e-9)
        torch.testing.assert_close(g, g_ref, rtol=0, atol=1e-6 * float(g_ref.abs().max()))
    bad = z.clone()
    bad[2, 0] = math.nan
    lp, g = posterior._mapped_value_and_grad(guide, tmap, bad)
    assert not math.isfinite(float(lp[2])) and float(g[2].abs().max()) == 0.0 and bool(torch.isfinite(g).all())


def test_tree_lu_factor_survives_set_num_threads():
    """After torch.set_num_threads(2) (users and the torch generators call it) this machine's torch /
    MKL factorises batches of matrices above ~128 × 128 wrongly, with invalid pivots or, silently,
    with valid ones (the second batch below); the tree's factorisation then goes one matrix at a time,
    at one thread it stays batched, and its solves are exact (fresh process: the setting is global)."""
    import subprocess
    import sys
    code = """
import torch
torch.set_num_threads(2)
from dpsynth.graphical.gaussian_tree import lu_factor
g = torch.Generator().manual_seed(0)
for a in (torch.randn(5, 200, 200, generator=g, dtype=torch.float64) + 15 * torch.eye(200, dtype=torch.float64),
          torch.eye(153, dtype=torch.float64) + 0.1 * torch.randn(16, 153, 153, generator=g, dtype=torch.float64)):
    b = torch.randn(a.shape[0], a.shape[1], 3, generator=g, dtype=torch.float64)
    lu, piv = lu_factor(a)
    x = torch.linalg.lu_solve(lu, piv, b)
    print(float((a @ x - b).abs().max()))
torch.set_num_threads(1)  # one thread again: the batched call, exact
lu, piv = lu_factor(a)
print(float((a @ torch.linalg.lu_solve(lu, piv, b) - b).abs().max()))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    errors = [float(v) for v in out.stdout.strip().splitlines()[-3:]]
    assert len(errors) == 3 and max(errors) < 1e-9, out.stdout


def test_mode_tolerance_stops_on_the_newton_decrement():
    """``mode(tol=)`` stops once ∇ᵀF⁻¹∇ < tol (HMC only needs a start near the mode): fewer Fisher
    steps than the tight search, and the log density within tol of the tight mode's."""
    from dpsynth.graphical.noise_aware import NoiseAwareLikelihood

    rng = np.random.default_rng(3)
    dom = Domain(["a", "b", "c"], [3, 4, 2])
    model = MaxEntModel(dom, [("a", "b"), ("b", "c")])
    lik = NoiseAwareLikelihood(model, _noisy_tables(model, rng, scale=400.0), [5.0, 5.0], [0, 0], 2.5)
    start = torch.zeros(lik.dim, dtype=torch.float64)
    calls = []
    fisher = lik.fisher
    lik.fisher = lambda x, prior: calls.append(1) or fisher(x, prior)
    tight, _ = lik.mode(start)
    n_tight = len(calls)
    loose, _ = lik.mode(start, tol=1.0)
    n_loose = len(calls) - n_tight
    lp_tight, lp_loose = float(lik.log_posterior(tight)), float(lik.log_posterior(loose))
    assert n_loose < n_tight and lp_tight - 1.0 <= lp_loose <= lp_tight + 1e-9


def test_exact_evaluations_spread_over_threads_give_the_serial_values(monkeypatch):
    """log_posterior_many splits its points into chunks that threads evaluate (chunks.THREADS): the
    values are bitwise those of one thread, in order, for both the junction-tree and the clamped
    form, and no graph is recorded in the worker threads (grad mode is per thread)."""
    from dpsynth.graphical import chunks, noise_aware
    from dpsynth.graphical.noise_aware import NoiseAwareLikelihood

    rng = np.random.default_rng(7)
    dom = Domain(["a", "b", "c"], [2, 3, 2])
    model = MaxEntModel(dom, [("a", "b"), ("b", "c")], [("a", "b"), ("b", "c"), ("b",)])
    noisy = _noisy_tables(model, rng, scale=30.0)
    for tree in (True, False):
        lik = NoiseAwareLikelihood(model, noisy, [2.0, 4.0, 1.5], [0] * 3, 2.5, tree=tree)
        x = torch.as_tensor(rng.normal(0, 0.7, (67, lik.dim))).requires_grad_(True)
        monkeypatch.setattr(noise_aware, "TREE_CHUNK", 4)
        monkeypatch.setattr(chunks, "THREADS", 1)
        serial = lik.log_posterior_many(x)
        monkeypatch.setattr(chunks, "THREADS", 2)
        threaded = lik.log_posterior_many(x)
        assert threaded.shape == (67,) and not threaded.requires_grad
        assert torch.equal(threaded, serial)
        one_by_one = torch.stack([lik.log_posterior(x[i:i + 1].detach())[0] for i in range(67)])
        np.testing.assert_allclose(threaded.numpy(), one_by_one.numpy(), rtol=1e-10)


def test_fisher_of_a_latent_model_calibrates_once_with_the_same_numbers(monkeypatch):
    """NoiseAwareLikelihood.fisher collects the moments and J = ∂μ_D/∂θ of an IcinModel from one
    clamped calibration: one call, and bitwise the F of two separate calibrations."""
    from dpsynth.graphical.icin import IcinModel
    from dpsynth.graphical.noise_aware import NoiseAwareLikelihood

    rng = np.random.default_rng(5)
    dom = Domain(["a", "b", "c"], [3, 4, 3])
    model = IcinModel(dom, [("a", "b"), ("b", "c")], [("a", "b"), ("b", "c"), ("a",)], incomplete=["a", "b"])
    lik = NoiseAwareLikelihood(model, _noisy_tables(model, rng, scale=60.0), [1.0] * 3, [0] * 3, 2.5)
    assert lik.form == "reduced"
    x = torch.as_tensor(rng.normal(0, 0.4, lik.dim))
    prior = torch.full((lik.dim,), 0.16, dtype=torch.float64)
    calibrate, calls = model._calibrate_flat, []
    monkeypatch.setattr(model, "_calibrate_flat", lambda th, clamp: calls.append(clamp) or calibrate(th, clamp))
    once = lik.fisher(x, prior)
    assert calls == [True]
    real, withheld = model.clamped_calibration, [None]  # fisher gets none: each collect calibrates itself
    monkeypatch.setattr(model, "clamped_calibration", lambda th: withheld.pop() if withheld else real(th))
    assert torch.equal(lik.fisher(x, prior), once) and calls == [True, True, True]


def test_beside_hands_back_its_value_and_its_error():
    from dpsynth.graphical.chunks import beside

    assert beside(lambda a, b: a + b, 2, 3).result() == 5
    failing = beside(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failing.result()


def test_hmc_short_early_windows_adapt_where_the_schedule_says():
    """With ``last_window`` the warm-up's slow windows are the short early ones of
    SHORT_EARLY_WINDOWS and a last one of that length: the map is refitted to each window's draws
    (25, 50 and ``last_window`` iterations of every chain), and a warm-up of another length is refused."""
    from dpsynth.graphical.posterior import SHORT_EARLY_WINDOWS, hmc, short_warmup
    from dpsynth.graphical.transport import MarginalMap

    def log_prob(x):
        return -0.5 * (x ** 2).sum(-1)

    sizes = []

    def fit_transform(draws):
        sizes.append(draws.shape[0])
        return MarginalMap.identity(draws.shape[1])

    chains = 3
    init = torch.zeros(chains, 2, dtype=torch.float64)
    res = hmc(log_prob, init, warmup=short_warmup(12), draws=4, last_window=12, fit_transform=fit_transform,
              prune_strays=False, rng=np.random.default_rng(0))
    first, slow1, slow2, final = SHORT_EARLY_WINDOWS
    assert sizes == [slow1 * chains, slow2 * chains, 12 * chains] and res.draws.shape == (chains, 4, 2)
    with pytest.raises(ValueError, match="warmup="):
        hmc(log_prob, init, warmup=100, draws=2, last_window=12)


def test_ridge_cv_is_scikit_learns_ridgecv_with_kfold():
    """The surrogate's slope fit (ridge_cv: each fold's Gram matrix once for every penalty) chooses
    the penalty scikit-learn's RidgeCV(cv=KFold(4)) chooses and returns its coefficients, to
    rounding, where rows outnumber columns (the slope fits: 2,048 draws) and where they do not."""
    from sklearn.linear_model import RidgeCV
    from sklearn.model_selection import KFold

    from dpsynth.graphical.noise_aware import RIDGE_ALPHAS, ridge_cv

    rng = np.random.default_rng(1)
    for n, p, noise in ((400, 60, 1.0), (401, 60, 0.01), (90, 120, 1.0)):
        x = rng.normal(size=(n, p)) * rng.uniform(0.2, 3.0, p)
        y = x @ rng.normal(0, 0.3, p) + rng.normal(0, noise, n) + 2.0
        expected = RidgeCV(alphas=np.array(RIDGE_ALPHAS), cv=KFold(4)).fit(x, y).coef_
        np.testing.assert_allclose(ridge_cv(x, y, RIDGE_ALPHAS), expected, rtol=1e-9, atol=1e-12)
    # bit for bit where rows outnumber columns, in either memory order (the whitened draws are a
    # transpose: Fortran order); a different rounding would move every later draw of a fit
    for order in "CF":
        x = np.asarray(rng.normal(size=(300, 40)), order=order)
        y = x @ rng.normal(0, 0.3, 40) + rng.normal(0, 1.0, 300)
        expected = RidgeCV(alphas=np.array(RIDGE_ALPHAS), cv=KFold(4)).fit(x, y).coef_
        assert np.array_equal(ridge_cv(x, y, RIDGE_ALPHAS), expected)
