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
        cliques = [_sorted(domain, c) for c in cliques] + [(a,) for a in domain.attrs]
        self.cliques = maximal_cliques(cliques)
        self.jt = JunctionTree(domain, self.cliques)
        self.potentials = [torch.zeros(domain.project(c).shape, dtype=DTYPE) for c in self.cliques]
        self.beliefs = None
        self._plan = _Plan(domain, self.jt, self.cliques)

    @staticmethod
    def size_of(domain: Domain, cliques: Sequence[Sequence[Hashable]]) -> int:
        """Cells of the junction tree a model on ``cliques`` would have (AIM's model-size filter)."""
        cliques = maximal_cliques([tuple(c) for c in cliques] + [(a,) for a in domain.attrs])
        return sum(domain.project(c).size() for c in _triangulated_cliques(domain, cliques))

    # ------------------------------------------------------------------ inference
    def _factors(self, potentials):
        """One log-potential factor per model clique (the junction tree's scopes)."""
        return [Factor(self.domain.project(c), p) for c, p in zip(self.cliques, potentials)]

    def _owner(self, attrs) -> int:
        """The first model clique that contains ``attrs``."""
        for k, c in enumerate(self.cliques):
            if set(attrs) <= set(c):
                return k
        raise ValueError(f"{tuple(attrs)} is not inside a clique of the model; extend() it first")

    def _calibrate(self, potentials):
        return self._plan.calibrate(potentials)[0]

    def _holder(self, attrs) -> int:
        """The first junction-tree clique that contains ``attrs``."""
        for i, c in enumerate(self.jt.cliques):
            if set(attrs) <= set(c):
                return i
        raise ValueError(f"{tuple(attrs)} is not inside one clique of the model")

    def marginal(self, attrs: Sequence[Hashable]) -> np.ndarray:
        """p(attrs) as an array in the order of ``attrs`` (attrs inside one clique)."""
        if self.beliefs is None:
            self.beliefs = self._calibrate(self.potentials)
        attrs = tuple(attrs)
        key = _sorted(self.domain, attrs)
        out = self._plan.project(self.beliefs, key).exp()
        if key != attrs:
            out = out.permute(*[key.index(a) for a in attrs])
        return out.numpy()

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
            ia = self._owner((a,))
            ev = torch.full((k, k), CLAMP, dtype=DTYPE)
            ev.fill_diagonal_(0.0)  # batch v: evidence a = v
            pots = []
            for i, p in enumerate(self.potentials):
                p = p.expand((k,) + p.shape)
                if i == ia:
                    axis = 1 + self.cliques[i].index(a)
                    view = [k] + [1] * (p.dim() - 1)
                    view[axis] = k
                    p = p + ev.reshape(view)
                pots.append(p)
            beliefs, log_z = self._plan.calibrate(pots)
            p_a = torch.softmax(log_z, dim=0)  # p(a = v)
            for b in bs:
                cond = self._plan.project(beliefs, (b,)).exp()  # (k, |b|): p(b | a = v)
                out[(a, b)] = (p_a[:, None] * cond).numpy()
        return out

    # ------------------------------------------------------------------ estimation
    def fit(self, tables: Sequence[NoisyTable], iters: int = 1000, tol: float = 1e-7) -> "GraphicalModel":
        """Mirror descent from the current potentials (warm start) on the tables' loss."""
        merged = {}
        for t in tables:  # tables on the same attributes with the same total: inverse-variance mean
            attrs = tuple(t.attrs)
            y = torch.as_tensor(np.asarray(t.noisy, dtype=float), dtype=DTYPE).reshape(self.domain.project(attrs).shape)
            key = _sorted(self.domain, attrs)
            if key != attrs:
                y = y.permute(*[attrs.index(a) for a in key])
            tot = float(max(t.total, 1.0))
            w = 1.0 / float(t.sigma) ** 2
            if (key, tot) in merged:
                w0, y0 = merged[(key, tot)]
                merged[(key, tot)] = (w0 + w, (w0 * y0 + w * y) / (w0 + w))
            else:
                merged[(key, tot)] = (w, y)
        plan = []
        for (key, tot), (w, y) in merged.items():
            k = self._owner(key)
            view = tuple(self.domain.size(a) if a in key else 1 for a in self.cliques[k])
            plan.append((key, k, view, y, 1.0 / w, tot))
        proj = self._plan.project

        def evaluate(beliefs):
            """L, ∂L/∂p per table, p per table, and the gradient on each clique potential."""
            loss, g_tab, p_tab = 0.0, [], []
            grads = [None] * len(self.cliques)
            for attrs, k, view, y, s2, tot in plan:
                p = proj(beliefs, attrs).exp()
                r = tot * p - y
                loss += float((r * r).sum()) / (2 * s2)
                g = r * (tot / s2)
                g_tab.append(g)
                p_tab.append(p)
                g = g.reshape(view)
                grads[k] = g if grads[k] is None else grads[k] + g
            return loss, g_tab, p_tab, grads

        pots = [p.clone() for p in self.potentials]
        beliefs = self._calibrate(pots)
        loss, g_tab, p_tab, grads = evaluate(beliefs)
        # step size on the scale of the loss's curvature: α ≈ 1 / Σ_i t_i²/σ_i²
        alpha = getattr(self, "_alpha", None) or 1.0 / sum(tot * tot / s2 for *_, s2, tot in plan)
        it = 0
        for it in range(1, iters + 1):
            alpha *= 2.0
            while True:
                new = [p if g is None else p - alpha * g for p, g in zip(pots, grads)]  # g broadcasts
                nb = self._calibrate(new)
                nloss, ng_tab, np_tab, ngrads = evaluate(nb)
                dec = sum(float((g * (p - q)).sum()) for g, p, q in zip(g_tab, p_tab, np_tab))
                if nloss <= loss - 0.5 * dec or alpha < 1e-300:
                    break
                alpha *= 0.5
            done = loss - nloss <= tol * max(abs(loss), 1.0)
            pots, beliefs, loss, g_tab, p_tab, grads = new, nb, nloss, ng_tab, np_tab, ngrads
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
        for c, p in zip(self.cliques, self.potentials):
            j = out._owner(c)
            f = Factor(self.domain.project(c), p).expand(self.domain.project(out.cliques[j])).values
            out.potentials[j] = out.potentials[j] + f
        out._alpha = getattr(self, "_alpha", None)
        return out

    # ------------------------------------------------------------------ sampling
    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """n rows of codes (n, d), columns in domain order, by forward sampling on the junction tree."""
        if self.beliefs is None:
            self.beliefs = self._calibrate(self.potentials)
        beliefs = [Factor(self.jt.clique_domain(i), b.detach()) for i, b in enumerate(self.beliefs)]
        return self.jt.sample(beliefs, n, rng)

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


def _sorted(domain: Domain, attrs) -> tuple:
    pos = {a: i for i, a in enumerate(domain.attrs)}
    return tuple(sorted(attrs, key=pos.get))


class _Plan:
    """Sum-product on a fixed junction tree with raw tensors (the hot loop of mirror descent).

    Every clique, separator and model clique lists its attributes in domain order, so aligning a
    table to a larger one is a reshape with size-1 axes (no permutation), and a message is one
    ``logsumexp(keepdim=True)`` and a reshape. Same results as :meth:`JunctionTree.calibrate`
    (which serves any factor layout); tensors may carry leading batch axes (all the same)."""

    def __init__(self, domain: Domain, jt: JunctionTree, cliques):
        self.jt = jt
        self.shapes = [jt.clique_domain(i).shape for i in range(len(jt.cliques))]
        self.views = []  # model clique k → (junction-tree clique, its number of axes, view inside the clique)
        for k, c in enumerate(cliques):
            i = jt.assignment[k]
            self.views.append((i, len(c), tuple(domain.size(a) if a in c else 1 for a in jt.cliques[i])))
        self.out_of_sep, self.sep_view_parent, self.sep_view_child, self.out_of_sep_parent = [], [], [], []
        for i, c in enumerate(jt.cliques):
            sep = set(jt.separators[i])
            p = jt.parent[i]
            self.out_of_sep.append(tuple(j - len(c) for j, a in enumerate(c) if a not in sep))
            self.sep_view_child.append(tuple(domain.size(a) if a in sep else 1 for a in c))
            if p < 0:
                self.sep_view_parent.append(None)
                self.out_of_sep_parent.append(None)
            else:
                pc = jt.cliques[p]
                self.sep_view_parent.append(tuple(domain.size(a) if a in sep else 1 for a in pc))
                self.out_of_sep_parent.append(tuple(j - len(pc) for j, a in enumerate(pc) if a not in sep))
        self._proj = {}

    def calibrate(self, potentials):
        """(normalised log-beliefs per junction-tree clique, log Z) for model-clique log-potentials."""
        jt = self.jt
        _, nd0, _ = self.views[0]
        bshape = tuple(potentials[0].shape[:potentials[0].dim() - nd0])
        pots = [None] * len(self.shapes)
        for p, (i, _, view) in zip(potentials, self.views):
            v = p.reshape(bshape + view)
            pots[i] = v if pots[i] is None else pots[i] + v
        for i, shp in enumerate(self.shapes):
            if pots[i] is None:
                pots[i] = torch.zeros(bshape + shp, dtype=DTYPE)
            elif tuple(pots[i].shape) != bshape + shp:
                pots[i] = pots[i].expand(bshape + shp)
        up = [None] * len(self.shapes)
        for i in reversed(jt.bfs):
            b = pots[i]
            for c in jt.children[i]:
                b = b + up[c]
            if jt.parent[i] < 0:
                up[i] = b
            else:
                dims = self.out_of_sep[i]
                m = torch.logsumexp(b, dim=dims, keepdim=True) if dims else b
                up[i] = m.reshape(bshape + self.sep_view_parent[i])
        root = jt.bfs[0]
        nd = len(self.shapes[root])
        log_z = torch.logsumexp(up[root], dim=tuple(range(-nd, 0))) if nd else up[root]
        beliefs = [None] * len(self.shapes)
        down = [None] * len(self.shapes)
        for i in jt.bfs:
            b = pots[i] if down[i] is None else pots[i] + down[i]
            for c in jt.children[i]:
                b = b + up[c]
            beliefs[i] = b
            for c in jt.children[i]:
                dims = self.out_of_sep_parent[c]
                m = b - up[c]
                m = torch.logsumexp(m, dim=dims, keepdim=True) if dims else m
                down[c] = m.reshape(bshape + self.sep_view_child[c])
        beliefs = [b - log_z.reshape(bshape + (1,) * len(shp)) for b, shp in zip(beliefs, self.shapes)]
        return beliefs, log_z

    def project(self, beliefs, attrs: tuple) -> torch.Tensor:
        """log p(attrs) (attrs in domain order, inside one clique) from calibrated beliefs."""
        hit = self._proj.get(attrs)
        if hit is None:
            i = next((i for i, c in enumerate(self.jt.cliques) if set(attrs) <= set(c)), None)
            if i is None:
                raise ValueError(f"{attrs} is not inside one clique of the model")
            c = self.jt.cliques[i]
            hit = self._proj[attrs] = (i, tuple(j - len(c) for j, a in enumerate(c) if a not in attrs))
        i, dims = hit
        return torch.logsumexp(beliefs[i], dim=dims) if dims else beliefs[i]
