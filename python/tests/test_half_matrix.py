"""The half-precision matrix of the large models' sampler products
(:mod:`dpsynth.graphical.half_matrix`) and the velocity metric that uses it
(:func:`dpsynth.graphical.metric.velocity_metric`)."""
import pickle

import numpy as np
import pytest
import torch

from dpsynth.graphical import half_matrix, metric
from dpsynth.graphical.half_matrix import HalfMatrix


def _spd(dim: int, seed: int = 0) -> torch.Tensor:
    a = torch.as_tensor(np.random.default_rng(seed).standard_normal((dim, dim)))
    return a @ a.T / dim + 0.1 * torch.eye(dim, dtype=torch.float64)


@pytest.mark.parametrize("fbgemm", [True, False])
def test_products_are_those_of_the_rounded_matrix(monkeypatch, fbgemm):
    """x @ M̃ with M̃ the float16 rounding of M (after an exact power-of-two scale): within float16's
    half-unit of M entry by entry, symmetric where M is, and the products (fbgemm's, or float32
    without it) agree with x @ M̃ in float64 to float32 accumulation, for batches of any shape."""
    monkeypatch.setattr(half_matrix, "fbgemm_available", lambda: fbgemm)
    m = 1e-3 * _spd(40)  # scale far from 1: the power of two must bring it into float16's range
    half = HalfMatrix(m)
    assert (half.packed is not None) == fbgemm
    assert torch.equal(half.rounded, half.rounded.T)
    rel = ((half.rounded - m).abs() / m.abs()).max()
    assert 0 < float(rel) <= 2.0 ** -11
    x = torch.as_tensor(np.random.default_rng(1).standard_normal((3, 5, 40)))
    torch.testing.assert_close(half(x), x @ half.rounded, rtol=1e-5, atol=1e-6 * float((x @ half.rounded).abs().max()))
    assert half(x).dtype == torch.float64 and half(x).shape == (3, 5, 40)


def test_rounding_is_idempotent_and_pickles():
    """Rounding M̃ again gives M̃ (an extension keeps the metric it was given); a pickled matrix
    multiplies as before (its fbgemm packing rebuilt)."""
    half = HalfMatrix(_spd(30, 2) * 7.3)
    again = HalfMatrix(half.rounded)
    assert torch.equal(again.rounded, half.rounded)
    x = torch.as_tensor(np.random.default_rng(3).standard_normal((8, 30)))
    assert torch.equal(pickle.loads(pickle.dumps(half))(x), half(x))


def test_autograd_rows_use_the_same_rounded_matrix():
    """Rows that autograd records get the product of the same M̃ (fbgemm's has no derivative): the
    gradient of a·(x M̃) in x is M̃ a."""
    half = HalfMatrix(_spd(12, 4))
    x = torch.as_tensor(np.random.default_rng(5).standard_normal((2, 12)), dtype=torch.float64).requires_grad_(True)
    a = torch.as_tensor(np.random.default_rng(6).standard_normal(12))
    (g,) = torch.autograd.grad((half(x) * a).sum(), x)
    torch.testing.assert_close(g, (half.rounded @ a).expand(2, 12), rtol=1e-6, atol=1e-6)


def test_not_finite_is_refused():
    with pytest.raises(ValueError, match="not finite"):
        HalfMatrix(torch.tensor([[1.0, float("nan")], [0.0, 1.0]], dtype=torch.float64))


def test_velocity_metric_in_half_precision_from_its_size(monkeypatch):
    """From HALF_MIN_DIM dimensions the velocity product is the float16 metric and the kinetic
    energy's Cholesky factor is that of the same rounded metric (one fixed metric for the leapfrog);
    a metric whose float16 rounding is not positive definite keeps float32; smaller metrics keep
    float32 as before."""
    cov = _spd(20, 7)
    monkeypatch.setattr(metric, "HALF_MIN_DIM", 20)
    m64, low, chol = metric.velocity_metric(cov)
    assert isinstance(low, HalfMatrix) and torch.equal(m64, low.rounded)
    torch.testing.assert_close(chol @ chol.T, m64, rtol=1e-12, atol=1e-12)
    p = torch.as_tensor(np.random.default_rng(8).standard_normal((4, 20)))
    torch.testing.assert_close(metric.velocity(p, low), p @ m64, rtol=1e-5, atol=1e-6)
    near = torch.full((20, 20), 1.0 - 1e-5, dtype=torch.float64) + 1e-5 * torch.eye(20, dtype=torch.float64)
    assert metric.velocity_metric(near)[1].dtype == torch.float32  # rounds to all ones in float16: singular
    monkeypatch.setattr(metric, "HALF_MIN_DIM", 21)
    m64, low, _ = metric.velocity_metric(cov)
    assert low.dtype == torch.float32 and torch.equal(m64, cov.to(torch.float32).to(torch.float64))
