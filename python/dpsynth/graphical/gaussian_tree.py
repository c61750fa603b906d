"""NAPSU-MQ's noise-aware likelihood (Räisä et al. 2023, eq. 6) by message passing on the junction
tree: the cost grows with the cliques, not with the number of released cells.

**The Gaussian is a tree.** Let N_C be the counts of junction-tree clique C's cells over the n rows.
Rooted at clique r, a multinomial sample of a model that is Markov on the tree has
N_r ~ Mult(n, p_r) and, for a child C with separator S, N_C | (the counts above) ~ ∏_s Mult(N_S(s),
p(· | s)): the rows in separator cell s spread over C's cells independently of the rest. Its first
two moments are those of the linear-Gaussian tree

    N_r = n p_r + ε_r,    N_C = A_C N_S + ε_C,    A_C[c, s] = p(c | s) [c ↦ s],
    ε_C ~ N(0, Q_C),      Q_C = n Σ_s p(s) (diag p(· | s) − p(· | s) p(· | s)ᵀ),

(E[N_C | ·] = A_C N_S exactly, and Var = Var(E[·|·]) + E[Var(·|·)] gives the multinomial
covariance), so eq. 6 — ŷ_t = T_t N_C(t) + e_t, e_t ~ N(0, σ_t² I), T_t summing clique cells into
table cells — is the marginal likelihood of a Gaussian graphical model on the tree. No dense
covariance over all P released cells (or the D canonical statistics) is ever formed.

**Messages** (information form, leaves first). Clique C gathers λ_C(N_C) = exp(−½ N_CᵀJN_C +
hᵀN_C + c) from its own tables (J += T_tᵀT_t/σ_t², h += T_tᵀŷ_t/σ_t²) and its children's
messages lifted from their separators. With Q_C = L Lᵀ, L = √n (I − G) diag(√p_C) (G[c, c'] =
p(c | s) when c, c' share separator cell s; a matrix-free operator), K = I + LᵀJL (n_C × n_C,
positive definite) and N_C = A N_S + L z, z ~ N(0, I), integrating z out leaves

    λ(N_S) = exp(c − ½ log|K| + ½ uᵀu − ½ N_SᵀAᵀ(J − JLK⁻¹LᵀJ)A N_S + (h − JLK⁻¹Lᵀh)ᵀA N_S),

u = R⁻¹Lᵀh with K = RRᵀ: one Cholesky factor of K per clique (Σ_C n_C³/3 flops per evaluation)
and a triangular solve with the separator's n_S columns. The root is the child of a one-cell
separator holding N = n. Exact (to rounding) against the dense form over all cells
(:class:`dpsynth.graphical.noise_aware.NoiseAwareLikelihood`, ``form="dense"``).

Example
-------
>>> import numpy as np, torch
>>> from dpsynth.graphical import Domain, MaxEntModel
>>> dom = Domain(["a", "b", "c"], [2, 3, 2])
>>> model = MaxEntModel(dom, [("a", "b"), ("b", "c")])
>>> tables = [np.array([[40., 10, 50], [30, 20, 50]]), np.array([[60., 40], [20, 10], [50, 50]])]
>>> tree = GaussianTree(model, tables, [2.0, 2.0])
>>> lp = tree.log_likelihood(torch.zeros(2, model.D, dtype=torch.float64), torch.tensor([200.0, 230.0]))
>>> lp.shape, bool(lp[1] > lp[0])
(torch.Size([2]), True)
"""
from __future__ import annotations

import math

import numpy as np
import torch

from .factor import DTYPE
from .maxent import MaxEntModel

#: floor of a separator cell's probability in p(c | s) = p(c) / p(s) (a cell of probability 0)
TINY = 1e-300


def _project(x: torch.Tensor, index: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    """Sum the entries of ``x`` along ``dim`` into ``width`` bins given by ``index``."""
    shape = list(x.shape)
    shape[dim] = width
    return x.new_zeros(shape).index_add(dim, index, x)


class GaussianTree:
    """Eq. 6 of the released ``noisy`` tables (sd ``sigmas``) of ``model`` by junction-tree
    messages (module docstring). :meth:`log_likelihood` (θ (…, D), n (…)) → (…)."""

    def __init__(self, model: MaxEntModel, noisy, sigmas):
        self.model = model
        jt = model.jt
        k = len(jt.cliques)
        sizes = [jt.clique_domain(i).size() for i in range(k)]
        self.sep = [model.separator_cells(i) for i in range(k)]
        self.j_obs = [torch.zeros((m, m), dtype=DTYPE) for m in sizes]
        self.h_obs = [torch.zeros(m, dtype=DTYPE) for m in sizes]
        self.const = 0.0
        for t, (y, sigma) in enumerate(zip(noisy, sigmas)):
            y = torch.as_tensor(np.asarray(y, dtype=float).ravel(), dtype=DTYPE)
            i, index = model.table_cells(t)
            w = 1.0 / float(sigma) ** 2
            same = (index[:, None] == index[None, :]).to(DTYPE)
            self.j_obs[i] += w * same
            self.h_obs[i] += w * y[index]
            self.const += -0.5 * w * float(y @ y) - 0.5 * y.numel() * math.log(2 * math.pi * float(sigma) ** 2)

    def log_likelihood(self, theta: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        """log N(ŷ; n μ(θ), V(θ, n)) of all released tables, batched over θ's leading axes."""
        theta = torch.as_tensor(theta, dtype=DTYPE)
        batch = tuple(theta.shape[:-1])
        theta = theta.reshape(-1, theta.shape[-1])
        n = torch.as_tensor(n, dtype=DTYPE).expand(batch).reshape(-1)
        probs = self.model.clique_marginals(theta)                       # (B, n_i) each
        jt = self.model.jt
        root_n = torch.sqrt(n)[:, None, None]
        j_in = [j.expand(theta.shape[0], -1, -1) for j in self.j_obs]
        h_in = [h.expand(theta.shape[0], -1) for h in self.h_obs]
        c_in = [torch.zeros_like(n) for _ in jt.cliques]
        for i in reversed(jt.bfs):
            j_s, h_s, c_s = self._message(probs[i], j_in[i], h_in[i], c_in[i], root_n, *self.sep[i][:2])
            parent = jt.parent[i]
            if parent < 0:
                total = c_s - 0.5 * n ** 2 * j_s[:, 0, 0] + n * h_s[:, 0] + self.const
                return total.reshape(batch)
            lift = self.sep[i][2]
            j_in[parent] = j_in[parent] + j_s[:, lift][:, :, lift]
            h_in[parent] = h_in[parent] + h_s[:, lift]
            c_in[parent] = c_in[parent] + c_s
        raise RuntimeError("the junction tree has no root")

    @staticmethod
    def _message(p, j, h, c, root_n, index, width):
        """(J_S, h_S, c_S): clique C's evidence (J, h, c) integrated over N_C given its separator
        counts N_S (module docstring); p (B, n_C) the clique's cell probabilities."""
        q = p / _project(p, index, width, -1).clamp_min(TINY)[:, index]      # p(c | s)
        sp = torch.sqrt(p)

        def spread(x, dim):  # x ↦ E x along dim: sum over the cells of each separator cell
            return _project(x, index, width, dim).index_select(dim, index)

        jl = root_n * (j * sp[:, None, :] - spread(j * q[:, None, :], -1) * sp[:, None, :])     # J L
        ltjl = root_n * (sp[:, :, None] * (jl - spread(q[:, :, None] * jl, -2)))                # Lᵀ J L
        eye = torch.eye(p.shape[-1], dtype=DTYPE)
        chol = torch.linalg.cholesky(eye + 0.5 * (ltjl + ltjl.transpose(-1, -2)))
        atjl = _project(q[:, :, None] * jl, index, width, -2)                                  # Aᵀ J L
        z = torch.linalg.solve_triangular(chol, atjl.transpose(-1, -2), upper=False)
        atja = _project(q[:, :, None] * _project(j * q[:, None, :], index, width, -1), index, width, -2)
        lth = root_n[:, :, 0] * sp * (h - spread(q * h, -1))                                   # Lᵀ h
        u = torch.linalg.solve_triangular(chol, lth[:, :, None], upper=False)
        j_s = atja - z.transpose(-1, -2) @ z
        h_s = _project(q * h, index, width, -1) - (z.transpose(-1, -2) @ u)[:, :, 0]
        c_s = c - torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1) + 0.5 * (u[:, :, 0] ** 2).sum(-1)
        return 0.5 * (j_s + j_s.transpose(-1, -2)), h_s, c_s
