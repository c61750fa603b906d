"""A graphical model fitted to noisy marginals (Private-PGM; McKenna, Sheldon & Miklau, ICML 2019).

Given released tables y_i on attribute sets S_i (each Gaussian with scale σ_i around t_i·μ_{S_i},
where μ is the data distribution and t_i the number of rows table i counts), the estimate is

    p̂ = argmin_{p in the marginal polytope}  L(p) = Σ_i ‖t_i·p_{S_i} − y_i‖² / (2σ_i²),

represented as a Markov random field whose cliques are the measured sets (the max-entropy member
of the minimisers). It is found by **entropic mirror descent** on the clique log-potentials θ
(Private-PGM's ``mirror_descent``): p = marginals(θ) by junction-tree calibration
(:class:`dpsynth.graphical.JunctionTree`), then θ_C ← θ_C − α·∂L/∂p_C with Armijo backtracking
on α (the step is doubled before each iteration and halved until the sufficient-decrease test
L(p_new) ≤ L(p) − ½·⟨∇L, p − p_new⟩ holds). Warm starts (``potentials=``) make AIM's
per-round refits cheap.

This is post-processing of released tables only: nothing here reads private rows.

Pairwise marginals outside the cliques (AIM's candidate scores) come from *clamped* calibration:
one batched pass per attribute a with evidence a = v for every level v gives p(b | a = v) for
every other b, and the partition functions give p(a = v) (:meth:`GraphicalModel.pair_marginals`).

Example
-------
>>> import numpy as np
>>> dom = Domain(["a", "b"], [2, 2])
>>> y = [("a", "b"), np.array([[40.0, 10.0], [10.0, 40.0]]), 1.0, 100.0]
>>> model = GraphicalModel(dom, [("a", "b")]).fit([NoisyTable(*y)], iters=200)
>>> np.round(model.marginal(("a", "b")), 2).tolist()
[[0.4, 0.1], [0.1, 0.4]]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Sequence

import numpy as np
import torch

from .domain import Domain
from .factor import DTYPE, Factor
from .junction_tree import JunctionTree
from .maxent import CLAMP, maximal_cliques


@dataclass
class NoisyTable:
    """A released table: ``noisy`` ≈ ``total``·p(``attrs``) + N(0, ``sigma``²) per cell."""

    attrs: tuple
    noisy: np.ndarray
    sigma: float
    total: float


class GraphicalModel:
    """A Markov random field on ``domain`` with clique potentials on ``cliques`` (see module docstring).

    Attributes after :meth:`fit`: ``potentials`` (log-potentials per junction-tree clique),
    ``beliefs`` (calibrated log-marginals), ``loss_`` (final L), ``iterations_``.
    """

    def __init__(self, domain: Domain, cliques: Sequence[Sequence[Hashable]]):
        self.domain = domain
        cliques = [tuple(c) for c in cliques] + [(a,) for a in domain.attrs]
        self.cliques = maximal_cliques(cliques)
        # rebuilt on its own cliques: one scope per junction-tree clique, so potentials live on them
        self.jt = JunctionTree(domain, JunctionTree(domain, self.cliques).cliques)
        self.potentials = [torch.zeros(self.jt.clique_domain(i).shape, dtype=DTYPE)
                           for i in range(len(self.jt.cliques))]
        self.beliefs = None

    @staticmethod
    def size_of(domain: Domain, cliques: Sequence[Sequence[Hashable]]) -> int:
        """Cells of the junction tree a model on ``cliques`` would have (AIM's model-size filter)."""
        cliques = maximal_cliques([tuple(c) for c in cliques] + [(a,) for a in domain.attrs])
        return sum(domain.project(c).size() for c in _triangulated_cliques(domain, cliques))

    # ------------------------------------------------------------------ inference
    def _factors(self, potentials):
        """One factor per scope of the junction tree (its scopes are its cliques, in some order)."""
        return [Factor(self.jt.clique_domain(i), potentials[i]) for i in self.jt.assignment]

    def _calibrate(self, potentials):
        beliefs, _ = self.jt.calibrate(self._factors(potentials))
        return beliefs

    def _holder(self, attrs) -> int:
        for i, c in enumerate(self.jt.cliques):
            if set(attrs) <= set(c):
                return i
        raise ValueError(f"{tuple(attrs)} is not inside one clique of the model")

    def marginal(self, attrs: Sequence[Hashable]) -> np.ndarray:
        """p(attrs) as an array in the order of ``attrs`` (attrs inside one clique)."""
        if self.beliefs is None:
            self.beliefs = self._calibrate(self.potentials)
        i = self._holder(attrs)
        return self.beliefs[i].project(tuple(attrs)).values.exp().numpy()

    def pair_marginals(self, pairs: Sequence[tuple]) -> dict:
        """{(a, b): p(a, b)} for attribute pairs, inside a clique or not (clamped calibration)."""
        if self.beliefs is None:
            self.beliefs = self._calibrate(self.potentials)
        out, need = {}, {}
        for a, b in pairs:
            try:
                out[(a, b)] = self.marginal((a, b))
            except ValueError:
                need.setdefault(a, []).append(b)
        for a, bs in need.items():
            k = self.domain.size(a)
            ia = self._holder((a,))
            ev = torch.full((k, k), CLAMP, dtype=DTYPE)
            ev.fill_diagonal_(0.0)  # batch v: evidence a = v
            pots = []
            for i, p in enumerate(self.potentials):
                p = p.expand((k,) + p.shape)
                if i == ia:
                    axis = 1 + self.jt.cliques[i].index(a)
                    view = [k] + [1] * (p.dim() - 1)
                    view[axis] = k
                    p = p + ev.reshape(view)
                pots.append(p)
            beliefs, log_z = self.jt.calibrate(self._factors(pots))
            p_a = torch.softmax(log_z, dim=0)  # p(a = v)
            for b in bs:
                cond = beliefs[self._holder((b,))].project((b,)).values.exp()  # (k, |b|): p(b | a = v)
                out[(a, b)] = (p_a[:, None] * cond).numpy()
        return out

    # ------------------------------------------------------------------ estimation
    def fit(self, tables: Sequence[NoisyTable], iters: int = 1000, tol: float = 1e-7) -> "GraphicalModel":
        """Mirror descent from the current potentials (warm start) on the tables' loss."""
        plan = []
        for t in tables:
            attrs = tuple(t.attrs)
            i = self._holder(attrs)
            y = torch.as_tensor(np.asarray(t.noisy, dtype=float), dtype=DTYPE).reshape(self.domain.project(attrs).shape)
            plan.append((i, attrs, y, float(t.sigma) ** 2, float(max(t.total, 1.0))))

        def loss_grad(beliefs):
            loss = 0.0
            grads = [None] * len(beliefs)
            for i, attrs, y, s2, tot in plan:
                p = beliefs[i].project(attrs).values.exp()
                r = tot * p - y
                loss += float((r * r).sum()) / (2 * s2)
                g = Factor(self.domain.project(attrs), r * (tot / s2)).expand(self.jt.clique_domain(i)).values
                grads[i] = g if grads[i] is None else grads[i] + g
            return loss, grads

        pots = [p.clone() for p in self.potentials]
        beliefs = self._calibrate(pots)
        loss, grads = loss_grad(beliefs)
        # step size on the scale of the loss's curvature: α ≈ 1 / Σ_i t_i²/σ_i²
        alpha = getattr(self, "_alpha", None) or 1.0 / sum(tot * tot / s2 for _, _, _, s2, tot in plan)
        it = 0
        for it in range(1, iters + 1):
            alpha *= 2.0
            mu = [b.values.exp() for b in beliefs]
            while True:
                new = [p if g is None else p - alpha * g for p, g in zip(pots, grads)]
                nb = self._calibrate(new)
                nloss, ngrads = loss_grad(nb)
                dec = sum(float((g * (m - b.values.exp())).sum()) for g, m, b in zip(grads, mu, nb) if g is not None)
                if nloss <= loss - 0.5 * dec or alpha < 1e-300:
                    break
                alpha *= 0.5
            done = loss - nloss <= tol * max(abs(loss), 1.0)
            pots, beliefs, loss, grads = new, nb, nloss, ngrads
            if done:
                break
        self._alpha = alpha
        self.potentials, self.beliefs = [p.detach() for p in pots], beliefs
        self.loss_, self.iterations_ = loss, it
        return self

    def extend(self, cliques: Sequence[Sequence[Hashable]]) -> "GraphicalModel":
        """A model on ``self.cliques + cliques`` started from this model's distribution (warm start:
        each old potential is added to the new junction-tree clique that contains it)."""
        out = GraphicalModel(self.domain, list(self.cliques) + [tuple(c) for c in cliques])
        for i, p in enumerate(self.potentials):
            j = out._holder(self.jt.cliques[i])
            f = Factor(self.jt.clique_domain(i), p).expand(out.jt.clique_domain(j)).values
            out.potentials[j] = out.potentials[j] + f
        out._alpha = getattr(self, "_alpha", None)
        return out

    # ------------------------------------------------------------------ sampling
    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n rows of codes (n, d), columns in domain order, by forward sampling on the junction tree."""
        if self.beliefs is None:
            self.beliefs = self._calibrate(self.potentials)
        return self.jt.sample([Factor(b.domain, b.values.detach()) for b in self.beliefs], n, rng)

    def __repr__(self) -> str:
        return f"GraphicalModel({len(self.cliques)} cliques, {self.jt})"


def _triangulated_cliques(domain: Domain, cliques) -> list:
    """The maximal cliques of the greedy triangulation (the junction tree's cliques), without
    building the tree."""
    from .junction_tree import greedy_elimination_order

    _, elim = greedy_elimination_order(domain, cliques)
    out = []
    for c in sorted(elim, key=len, reverse=True):
        if not any(c <= m for m in out):
            out.append(c)
    return [tuple(c) for c in out]
