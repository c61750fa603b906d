"""A fixed dense matrix kept in IEEE half precision for the sampler's products with a few rows:
V₀⁻¹ of the expanded-V surrogate (:class:`dpsynth.graphical.expanded_v.ExpandedV`) and the
leapfrog's velocity metric (:func:`dpsynth.graphical.metric.velocity_metric`), in models of at least
:data:`HALF_MIN_DIM` parameters.

Why: at that size a leapfrog step's four products with fixed D × D matrices read the matrices from
memory each time (the rest of the step evicts them from cache), so their cost is bytes, not
arithmetic. fbgemm's half-precision GEMM (``torch.ops.quantized.linear_dynamic_fp16``, in every x86
build of torch: AVX2 and F16C) reads M in float16, converts it to float32 in registers and
accumulates in float32 with the rows x in float32: half the bytes of a float32 product, and only M
is rounded. Before rounding, M is scaled by a power of two (exact) so that its largest entry lies in
(2¹³, 2¹⁴], far inside float16's range.

The rounding is part of the model the sampler targets, not an error in it: M̃, the matrix as
rounded (:attr:`HalfMatrix.rounded`), is symmetric where M is, the surrogate's value and its
gradient both use M̃ (so the gradient is exact for the function the chains follow, and the
importance weights of :mod:`dpsynth.generators.napsu_sampling` correct to the exact posterior), and
the kinetic energy uses M̃ and its own Cholesky factor (a metric whose rounding is not positive
definite keeps float32).

Measured (the bundled Adult at 15 columns, D + 1 = 1,027, AMD EPYC Zen 4, one thread, 8 rows):
a product 0.356 ms in float32, 0.188 ms so; a sampler's gradient with 16 chains split over two
processes at a fixed step, four runs of 40 draws each, float32 then half, the same starts:
7.82 / 7.68 / 7.76 / 8.00 ms → 4.39 / 4.45 / 4.42 / 5.25 ms, and in a second round run right
after, alternated, 4.96–6.90 → 3.94–4.56 ms. The surrogate's log density at 512 points around the draws moved
by 0.026 nats (sd; at most 0.11), its gradient by 1.4e-3 (relative norm).

>>> m = torch.tensor([[2.0, 0.1], [0.1, 1.0]], dtype=torch.float64)
>>> half = HalfMatrix(m)
>>> x = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
>>> bool(torch.allclose(half(x), x @ m, rtol=1e-3)), half(x).dtype, half.shape
(True, torch.float64, (2, 2))
>>> bool(torch.equal(HalfMatrix(half.rounded).rounded, half.rounded))  # rounding twice changes nothing
True
"""
from __future__ import annotations

import math

import torch

from .factor import DTYPE

#: models of at least this many parameters (the dimension of the sampler's space) take their
#: products with V₀⁻¹ and with the velocity metric in half precision (:class:`HalfMatrix`); smaller
#: ones (Adult-10: 300–550 parameters, one process, products cheap beside the level passes) keep
#: float32 and the paths of their studies. The same size as the split over two processes
#: (:data:`dpsynth.generators.napsu_sampling.SPLIT_MIN_DIM`)
HALF_MIN_DIM = 800

#: the largest entry of M, scaled by a power of two, lies in (TOP / 2, TOP]
TOP = 2.0 ** 14


def fbgemm_available() -> bool:
    """Whether this torch can multiply by a half-precision matrix packed for fbgemm."""
    return "fbgemm" in torch.backends.quantized.supported_engines


class HalfMatrix:
    """x @ M (x (…, rows of M), float64 out) for a fixed M stored as float16 (module docstring);
    ``rounded`` is M as its products use it (float64). Without fbgemm, or for rows that autograd
    records (fbgemm's product has no derivative), the same rounded matrix is applied in float32."""

    def __init__(self, matrix: torch.Tensor):
        matrix = torch.as_tensor(matrix, dtype=DTYPE)
        big = float(matrix.abs().max()) if matrix.numel() else 0.0
        if not math.isfinite(big):
            raise ValueError("HalfMatrix: the matrix has entries that are not finite")
        self.exponent = math.floor(math.log2(TOP / big)) if big > 0 else 0
        self.half_t = (matrix.T * 2.0 ** self.exponent).to(torch.float16).contiguous()  # Mᵀ, scaled
        self._pack()

    @property
    def rounded(self) -> torch.Tensor:
        """M̃, the matrix as the products use it, in float64."""
        return self.half_t.T.to(DTYPE) * 2.0 ** -self.exponent

    @property
    def shape(self) -> tuple:
        return tuple(self.half_t.T.shape)

    def _pack(self):
        self.packed = None
        if fbgemm_available():
            try:
                self.packed = torch.ops.quantized.linear_prepack_fp16(self.half_t.to(torch.float32), None)
            except RuntimeError:  # a build or processor fbgemm does not serve
                self.packed = None
        self.float_t = self.half_t.T.to(torch.float32).contiguous()  # M̃ for autograd, or without fbgemm

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1]).to(torch.float32)
        if self.packed is not None and not (torch.is_grad_enabled() and x.requires_grad):
            out = torch.ops.quantized.linear_dynamic_fp16(flat, self.packed)
        else:
            out = flat @ self.float_t
        return (out.to(DTYPE) * 2.0 ** -self.exponent).reshape(x.shape[:-1] + (self.shape[1],))

    def __getstate__(self):  # the packed matrix is rebuilt where it is unpickled
        return {"exponent": self.exponent, "half_t": self.half_t}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._pack()
