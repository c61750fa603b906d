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
hᵀN_C + c) from its own tables and its children's messages on their separators. Both are
functions of a few *aggregates* of C's cells: J = FᵀΩF and h = Fᵀη, where the m rows of F sum
cells into table cells (Ω = I/σ_t², η = ŷ_t/σ_t²) or separator cells (Ω, η the child's message);
a table or separator that is a margin of another group of rows is folded into it, so m is the
number of cells of C's largest released tables (the latent cells of an ICIN clique, two per
incomplete column, are never a dimension). Writing N_C = A N_S + ε_C and integrating ε_C out
(Sylvester's and the push-through identities) leaves, with G = F Q_C Fᵀ (m × m), M = I + ΩG and
H = F A_C (m × n_S),

    λ(N_S) = exp(c − ½ log|M| + ½ ηᵀ G M⁻¹ η − ½ N_Sᵀ Hᵀ Ω M⁻ᵀ H N_S + (M⁻¹η)ᵀ H N_S):

one LU factorisation of M per clique (2m³/3 flops) and solves with the separator's n_S columns.
G, H and the blocks of Ω are gathers and scatter-adds over C's cells. The root is the child of a
one-cell separator holding N = n. Exact (to rounding) against the dense form over all cells
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


class _Rows:
    """One group of aggregate rows of a clique's cells (a released table or a child's separator):
    ``index`` (n_C) the row of each cell, ``size`` rows; ``omega``/``eta`` its fixed information
    (tables) and the children whose messages are added at run time, each with the gather ``fold``
    (size) from these rows to the child's separator cells."""

    def __init__(self, index: torch.Tensor, size: int):
        self.index, self.size = index, size
        self.omega = torch.zeros((size, size), dtype=DTYPE)
        self.eta = torch.zeros(size, dtype=DTYPE)
        self.children: list[tuple[int, torch.Tensor]] = []
        self.diagonal: torch.Tensor | None = None  # Ω's diagonal when it is diagonal and fixed
        self.folded: list[tuple[float, torch.Tensor, int]] = []  # (1/σ², fold, table cells) per table

    def add_table(self, w: float, fold: torch.Tensor, y: torch.Tensor):
        """A released table whose cells are unions of these rows (``fold``: each row's cell), noise
        precision ``w``: Ω += w FᵀF, η += w Fᵀŷ (F sums rows into the table's cells)."""
        self.omega += w * (fold[:, None] == fold[None, :]).to(DTYPE)
        self.eta += w * y[fold]
        identity = y.numel() == self.size and bool(torch.equal(fold, torch.arange(self.size)))
        self.folded.append((w, None if identity else fold, y.numel()))  # None: the rows themselves

    def finish(self):
        """Keep Ω as its diagonal when nothing off the diagonal was folded in and no child adds to it;
        note whether the tables' own Ω is positive definite (a table at these rows' own granularity
        makes it so: Ω ⪰ w I) and, where it is fixed, its inverse and log-determinant
        (:meth:`GaussianTree._message`'s symmetric form)."""
        if not self.children and bool((self.omega == torch.diag(torch.diagonal(self.omega))).all()):
            self.diagonal = torch.diagonal(self.omega).clone()
        chol, info = torch.linalg.cholesky_ex(self.omega)
        self.definite = int(info) == 0 and bool((torch.diagonal(chol) > 1e-12 * float(chol.abs().max())).all())
        self.omega_inv = self.log_det_omega = None
        if self.definite and not self.children:
            self.omega_inv = 1.0 / self.diagonal if self.diagonal is not None else torch.cholesky_inverse(chol)
            self.log_det_omega = 2.0 * float(torch.log(torch.diagonal(chol)).sum())

    def omega_times(self, block: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Ω x for x (B, size, k), Ω as :meth:`GaussianTree._message` assembled it (``block``):
        elementwise where Ω is diagonal; where it is fixed (tables only, no child's message) as
        Σ_t w_t F_tᵀ(F_t x), each table's cells summed and spread back (O(size·k) where the dense
        product is O(size²·k): the bundled Adult at 15 columns has two 256-row groups of a table
        and its margins, whose dense products were over a quarter of an exact evaluation); else
        (a child's message adds a dense block) the dense product."""
        if block.dim() == 1:
            return block[:, None] * x
        if self.children:
            return block @ x
        out = None
        for w, fold, cells in self.folded:
            part = w * (x if fold is None else
                        x.new_zeros((x.shape[0], cells, x.shape[2])).index_add(1, fold, x).index_select(1, fold))
            out = part if out is None else out + part
        return out

    def coarser(self, index: torch.Tensor) -> torch.Tensor | None:
        """For rows ``index`` that are unions of these rows: the row of ``index`` each of these
        rows falls in (a gather of length ``size``); None when they are not."""
        fold = torch.full((self.size,), -1, dtype=torch.long)
        fold[self.index] = index
        if bool((fold < 0).any()) or not bool((fold[self.index] == index).all()):
            return None
        return fold


class GaussianTree:
    """Eq. 6 of the released ``noisy`` tables (sd ``sigmas``) of ``model`` by junction-tree
    messages (module docstring). :meth:`log_likelihood` (θ (…, D), n (…)) → (…)."""

    def __init__(self, model: MaxEntModel, noisy, sigmas):
        self.model = model
        jt = model.jt
        k = len(jt.cliques)
        self.sep = [model.separator_cells(i) for i in range(k)]
        self.const = 0.0
        pending = [[] for _ in range(k)]   # (rows index, size, kind, payload) before folding
        for t, (y, sigma) in enumerate(zip(noisy, sigmas)):
            y = torch.as_tensor(np.asarray(y, dtype=float).ravel(), dtype=DTYPE)
            i, index = model.table_cells(t)
            w = 1.0 / float(sigma) ** 2
            pending[i].append((index, y.numel(), "table", (w, y)))
            self.const += -0.5 * w * float(y @ y) - 0.5 * y.numel() * math.log(2 * math.pi * float(sigma) ** 2)
        for c in range(k):
            if jt.parent[c] >= 0:
                pending[jt.parent[c]].append((self.sep[c][2], self.sep[c][1], "child", c))
        self.rows = []
        for i in range(k):
            groups: list[_Rows] = []
            for index, size, kind, payload in sorted(pending[i], key=lambda g: -g[1]):
                for g in groups:
                    fold = g.coarser(index)
                    if fold is not None:
                        break
                else:
                    g = _Rows(index, size)
                    groups.append(g)
                    fold = torch.arange(size)
                if kind == "table":
                    w, y = payload
                    g.add_table(w, fold, y)
                else:
                    g.children.append((payload, fold))
            for g in groups:
                g.finish()
            self.rows.append(groups)
        self.plans = [self._plan(i) for i in range(k)]
        #: the most aggregate rows m of any clique (its message factorises an m × m matrix)
        self.largest_block = max(p["m"] for p in self.plans)

    def _plan(self, i: int) -> dict:
        """Flat scatter positions of clique i's cells in F diag(p) Fᵀ (m × m) and in F Πᵀ
        (m × n_S), the groups' offsets, and m."""
        groups = self.rows[i]
        offsets = np.cumsum([0] + [g.size for g in groups])
        m, width = int(offsets[-1]), self.sep[i][1]
        rows = [offsets[j] + g.index for j, g in enumerate(groups)]
        pair = [r1 * m + r2 for r1 in rows for r2 in rows]
        cells = torch.arange(self.sep[i][0].numel())
        # the symmetric form (:meth:`_symmetric_message`) where every group's Ω is positive definite:
        # Ω⁻¹ of the fixed groups laid out block-diagonally once, the groups with a child's message apart
        symmetric = bool(groups) and all(g.definite for g in groups)
        inv_fixed, log_det_fixed, with_child = None, 0.0, []
        if symmetric:
            inv_fixed = torch.zeros((m, m), dtype=DTYPE)
            for j, g in enumerate(groups):
                lo, hi = int(offsets[j]), int(offsets[j + 1])
                if g.omega_inv is None:
                    with_child.append((j, lo, hi))
                else:
                    inv_fixed[lo:hi, lo:hi] = torch.diag(g.omega_inv) if g.omega_inv.dim() == 1 else g.omega_inv
                    log_det_fixed += g.log_det_omega
        return {"m": m, "offsets": offsets, "symmetric": symmetric, "omega_inv": inv_fixed,
                "log_det_omega": log_det_fixed, "with_child": with_child,
                "pair_pos": torch.cat(pair) if pair else torch.zeros(0, dtype=torch.long),
                "pair_cell": cells.repeat(len(pair)),
                "sep_pos": torch.cat([r * width + self.sep[i][0] for r in rows]) if rows else torch.zeros(0, dtype=torch.long),
                "sep_cell": cells.repeat(len(rows))}

    def log_likelihood(self, theta: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        """log N(ŷ; n μ(θ), V(θ, n)) of all released tables, batched over θ's leading axes."""
        theta = torch.as_tensor(theta, dtype=DTYPE)
        batch = tuple(theta.shape[:-1])
        theta = theta.reshape(-1, theta.shape[-1])
        n = torch.as_tensor(n, dtype=DTYPE).expand(batch).reshape(-1)
        probs = self.model.clique_marginals(theta)                       # (B, n_i) each
        jt = self.model.jt
        messages = [None] * len(jt.cliques)
        for i in reversed(jt.bfs):
            j_s, h_s, c_s = self._message(i, probs[i], n, messages)
            if jt.parent[i] < 0:
                total = c_s - 0.5 * n ** 2 * j_s[:, 0, 0] + n * h_s[:, 0] + self.const
                return total.reshape(batch)
            messages[i] = (j_s, h_s, c_s)
        raise RuntimeError("the junction tree has no root")

    def _message(self, i, p, n, messages):
        """(J_S, h_S, c_S) of clique i given its cell probabilities p (B, n_C) and its children's
        messages (module docstring)."""
        plan, groups = self.plans[i], self.rows[i]
        index, width = self.sep[i][0], self.sep[i][1]
        b, m = p.shape[0], plan["m"]
        c = sum((messages[k][2] for g in groups for k, _ in g.children), torch.zeros_like(n))
        if m == 0:
            return p.new_zeros((b, width, width)), p.new_zeros((b, width)), c
        blocks, eta = [], []   # Ω block by block: a table's own rows alone have a diagonal block
        for g in groups:
            block, vec = (g.diagonal if g.diagonal is not None else g.omega.expand(b, -1, -1)), g.eta.expand(b, -1)
            for k, fold in g.children:
                j_k, h_k, _ = messages[k]
                block = block + j_k[:, fold][:, :, fold]
                vec = vec + h_k[:, fold]
            blocks.append(block)
            eta.append(vec)
        eta = torch.cat(eta, dim=-1)

        def omega_times(x):  # Ω x, block by block
            parts = torch.split(x, [g.size for g in groups], dim=-2)
            return torch.cat([g.omega_times(blk, xp) for g, blk, xp in zip(groups, blocks, parts)], dim=-2)

        p_s = _project(p, index, width, -1)                                      # (B, n_S)
        q = p / p_s.clamp_min(TINY)[:, index]                                    # p(c | s)
        fdf = p.new_zeros((b, m * m)).index_add(1, plan["pair_pos"], p[:, plan["pair_cell"]]).reshape(b, m, m)
        fp = p.new_zeros((b, m * width)).index_add(1, plan["sep_pos"], p[:, plan["sep_cell"]]).reshape(b, m, width)
        h = p.new_zeros((b, m * width)).index_add(1, plan["sep_pos"], q[:, plan["sep_cell"]]).reshape(b, m, width)
        g_cov = n[:, None, None] * (fdf - (fp / p_s.clamp_min(TINY)[:, None, :]) @ fp.transpose(-1, -2))
        if plan.get("symmetric"):  # (a tree saved before the symmetric form has no such entry: LU)
            return self._symmetric_message(plan, blocks, eta, g_cov, h, c)
        lu, pivots = lu_factor(torch.eye(m, dtype=DTYPE) + omega_times(g_cov))
        log_det = torch.log(torch.diagonal(lu, dim1=-2, dim2=-1).abs()).sum(-1)
        m_eta = torch.linalg.lu_solve(lu, pivots, eta[:, :, None])                 # M⁻¹ η
        j_s = h.transpose(-1, -2) @ omega_times(torch.linalg.lu_solve(lu, pivots, h, adjoint=True))
        h_s = (h.transpose(-1, -2) @ m_eta)[:, :, 0]
        m_eta = m_eta[:, :, 0]
        c_s = c - 0.5 * log_det + 0.5 * (eta * (g_cov @ m_eta[:, :, None])[:, :, 0]).sum(-1)
        return 0.5 * (j_s + j_s.transpose(-1, -2)), h_s, c_s

    @staticmethod
    def _symmetric_message(plan, blocks, eta, g_cov, h, c):
        """:meth:`_message`'s (J_S, h_S, c_S) where every group's Ω is positive definite (each holds a
        table at its own rows' granularity). With K = Ω⁻¹ + G, symmetric positive definite,
        M = I + ΩG = ΩK, so M⁻¹η = K⁻¹Ω⁻¹η, ΩM⁻ᵀ = K⁻¹ and log|M| = log|Ω| + log|K|: one Cholesky
        factorisation of K (m³/3 flops, against 2m³/3 for M's LU) and no product with Ω. Ω⁻¹ is
        fixed but for the groups a child's message adds to (their blocks factorised per point)."""
        m = g_cov.shape[-1]
        k = g_cov + plan["omega_inv"]
        w = eta @ plan["omega_inv"]                                              # Ω⁻¹η of the fixed groups
        log_det = torch.full_like(c, plan["log_det_omega"])
        for j, lo, hi in plan["with_child"]:
            chol = torch.linalg.cholesky(blocks[j])
            inv = torch.cholesky_inverse(chol)
            log_det = log_det + 2.0 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
            k = k + torch.nn.functional.pad(inv, (lo, m - hi, lo, m - hi))
            w = w + torch.nn.functional.pad((inv @ eta[:, lo:hi, None])[:, :, 0], (lo, m - hi))
        chol_k = torch.linalg.cholesky(k)
        log_det = log_det + 2.0 * torch.log(torch.diagonal(chol_k, dim1=-2, dim2=-1)).sum(-1)
        sol = torch.cholesky_solve(torch.cat([w[:, :, None], h], dim=-1), chol_k)
        m_eta, k_h = sol[:, :, 0], sol[:, :, 1:]
        j_s = h.transpose(-1, -2) @ k_h
        h_s = (h.transpose(-1, -2) @ m_eta[:, :, None])[:, :, 0]
        c_s = c - 0.5 * log_det + 0.5 * (eta * (g_cov @ m_eta[:, :, None])[:, :, 0]).sum(-1)
        return 0.5 * (j_s + j_s.transpose(-1, -2)), h_s, c_s


#: batches of matrices larger than this are factorised one matrix at a time (:func:`lu_factor`)
LU_BATCH_MAX = 64


def lu_factor(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.linalg.lu_factor`` of a batch of matrices, one matrix at a time above
    :data:`LU_BATCH_MAX` rows when torch runs more than one thread. Once
    ``torch.set_num_threads(k > 1)`` has been called in a process (users do; the torch generators
    do, :func:`dpsynth.generators.dpsgd.torch_threads`), this machine's torch 2.13 / oneMKL build
    factorises batches of matrices above ~128 × 128 wrongly:
    sometimes with pivots of 0 (oneMKL: "Parameter 6 was incorrect on entry to DLASWP", and
    ``lu_solve`` raises), sometimes with valid pivots and wrong factors, silently (16 matrices
    I + 0.1·N(0, 1) of 153 × 153, two threads: ‖Ax − b‖∞ = 166 after the solve). Single matrices
    and batched Cholesky factorisations are exact, and so is batched LU while torch runs one thread
    (also after an earlier ``set_num_threads(2)``), which then keeps the batched call: 1,600 exact
    evaluations of Adult-10 with 20 % MCAR (largest clique block 167) take 3.5 s batched against
    3.85 s one matrix at a time."""
    if a.dim() > 2 and a.shape[-1] > LU_BATCH_MAX and torch.get_num_threads() > 1:
        flat = a.reshape((-1,) + tuple(a.shape[-2:]))
        lu, pivots = (torch.stack(t) for t in zip(*(torch.linalg.lu_factor(x) for x in flat)))
        return lu.reshape(a.shape), pivots.reshape(a.shape[:-1])
    return torch.linalg.lu_factor(a)
