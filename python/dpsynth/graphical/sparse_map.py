"""A fixed sparse 0/1 matrix applied along the first axis of a batch: the gathers and scatter-adds of
message passing on flattened clique tables (:meth:`dpsynth.graphical.maxent.MaxEntModel._level_pass`).

``SparseMap(rows, cols, shape)(x)`` is A @ x for x (n_in, B), with A[rows[k], cols[k]] = 1 (a pair
listed twice counts twice). The forward product and the backward product with Aᵀ are both compressed
sparse row (CSR) products, each with its matrix built once. Why not the gather + scatter-add
(``index_select`` / ``index_add``) that autograd differentiates by itself: at the sizes of Adult-10
with 20 % MCAR (2,592 tree cells, 16 chains; ``bench``-style timing, one thread) a CSR product took
110 µs where the gather + scatter-add took 450 µs, and autograd's backward of a gather then
gathers from a transposed (non-contiguous) gradient: 1,050 µs against 120 µs contiguous.
A map with exactly one 1 in every row (a lift from separator cells onto clique cells) is instead
a gather (:meth:`SparseMap.mm`), half the CSR product's time at those sizes.

Example
-------
>>> import torch
>>> m = SparseMap(torch.tensor([0, 0, 1]), torch.tensor([0, 2, 1]), (2, 3))
>>> x = torch.arange(3.0, dtype=torch.float64)[:, None].requires_grad_(True)
>>> m(x).ravel().tolist()
[2.0, 1.0]
>>> m(x).sum().backward(); x.grad.ravel().tolist()
[1.0, 1.0, 1.0]
"""
from __future__ import annotations

import warnings

import numpy as np
import torch

from .factor import DTYPE


def _csr(rows: torch.Tensor, cols: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    values = torch.ones(rows.numel(), dtype=DTYPE)
    coo = torch.sparse_coo_tensor(torch.stack([rows, cols]), values, shape, check_invariants=True)
    with warnings.catch_warnings():  # "sparse CSR support is in beta": products with a dense matrix are all we use
        warnings.simplefilter("ignore", UserWarning)
        csr = coo.coalesce().to_sparse_csr()
        # 32-bit indices: with 64-bit ones every product first converted them (2,592 → 971 cells,
        # 16 chains: 109 → 97 µs)
        return torch.sparse_csr_tensor(csr.crow_indices().int(), csr.col_indices().int(), csr.values(), shape)


class SparseMap:
    """A @ x for a fixed 0/1 matrix A given by the (row, column) pairs of its ones (module docstring);
    differentiable in x to any order (the backward is the transposed map)."""

    def __init__(self, rows, cols, shape: tuple[int, int], _transpose: "SparseMap | None" = None):
        rows = torch.as_tensor(rows, dtype=torch.long).ravel()
        cols = torch.as_tensor(cols, dtype=torch.long).ravel()
        if rows.shape != cols.shape:
            raise ValueError("rows and cols must list the same number of ones")
        self.shape = (int(shape[0]), int(shape[1]))
        self.matrix = _csr(rows, cols, self.shape)
        # one 1 in every row: A @ x is a gather (Adult-10 with 20 % MCAR, 16 chains: the lift from
        # 20 separator cells onto 1,740 clique cells 7.6 µs against 17.5 µs as a CSR product)
        one_each = rows.numel() == self.shape[0] and bool((torch.bincount(rows, minlength=self.shape[0]) == 1).all())
        self.gather = cols[torch.argsort(rows)] if one_each else None
        # the same matrix for the compiled product of small batches (:func:`level_kernels.csr_sum`)
        self.indptr = self.matrix.crow_indices().numpy().astype(np.int64)
        self.indices = self.matrix.col_indices().numpy().astype(np.int64)
        self.values = self.matrix.values().numpy()
        self.T = _transpose if _transpose is not None else SparseMap(cols, rows, self.shape[::-1], self)

    def mm(self, x: torch.Tensor) -> torch.Tensor:
        """A @ x (x: (n_in, batch)) outside autograd: a gather where A has one 1 per row, else the
        CSR product, compiled for float64 batches of at most
        :data:`dpsynth.graphical.level_pass.KERNEL_MAX_ROWS` rows (:func:`level_kernels.csr_sum`)."""
        if self.gather is not None:
            return x.index_select(0, self.gather)
        from . import level_kernels, level_pass

        if x.dtype == DTYPE and x.shape[1] <= level_pass.KERNEL_MAX_ROWS:
            return level_kernels.csr_sum(self.indptr, self.indices, self.values, x)
        return self.matrix @ x.contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2 or x.shape[0] != self.shape[1]:
            raise ValueError(f"expected x of shape ({self.shape[1]}, batch), got {tuple(x.shape)}")
        if not (torch.is_grad_enabled() and x.requires_grad):  # no gradient wanted: no autograd node
            return self.mm(x)
        return _Apply.apply(x, self)


class _Apply(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, sparse_map):
        ctx.sparse_map = sparse_map
        return sparse_map.mm(x)

    @staticmethod
    def backward(ctx, grad):
        if torch.is_grad_enabled():  # a graph of the backward (double backward): the transposed map as a Function
            return ctx.sparse_map.T(grad), None
        # a plain gradient: the product itself (an autograd Function's own overhead, ~20 µs, was
        # a tenth of a level pass's backward on Adult-10 with 20 % MCAR)
        return ctx.sparse_map.T.mm(grad), None
