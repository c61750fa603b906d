"""Log-space factors: a table ψ(x_S) over a sub-domain S, stored as log-values in a torch tensor.

Factors multiply by adding log-tables (``f + g`` lives on the union of the two domains) and are
marginalised by log-sum-exp (``f.project(attrs)`` = log Σ_{x outside attrs} exp ψ). Tables may
carry leading *batch* dimensions (``values.shape = batch_shape + domain.shape``), so one pass of
message passing handles many parameter vectors or many pieces of evidence at once; batch shapes
broadcast as in torch. Everything is differentiable with torch autograd.

Example
-------
>>> import torch
>>> f = Factor(Domain(["a"], [2]), torch.log(torch.tensor([1.0, 3.0], dtype=torch.float64)))
>>> g = Factor(Domain(["b"], [2]), torch.zeros(2, dtype=torch.float64))
>>> round(float((f + g).logsumexp().exp()), 6)
8.0
>>> (f + g).project(["a"]).values.exp().tolist()
[2.0, 6.0]
"""
from __future__ import annotations

from typing import Hashable, Sequence

import torch

from .domain import Domain

DTYPE = torch.float64


class Factor:
    """A log-table on ``domain`` with optional leading batch dimensions."""

    __slots__ = ("domain", "values")

    def __init__(self, domain: Domain, values: torch.Tensor):
        values = torch.as_tensor(values, dtype=DTYPE)
        if tuple(values.shape[values.dim() - len(domain):]) != domain.shape or values.dim() < len(domain):
            raise ValueError(f"values of shape {tuple(values.shape)} do not end with the domain shape {domain.shape}")
        self.domain, self.values = domain, values

    @classmethod
    def zeros(cls, domain: Domain, batch_shape: Sequence[int] = ()) -> "Factor":
        """The constant factor ψ ≡ 1 (log ψ ≡ 0)."""
        return cls(domain, torch.zeros(tuple(batch_shape) + domain.shape, dtype=DTYPE))

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape[: self.values.dim() - len(self.domain)])

    # ------------------------------------------------------------------ alignment
    def aligned(self, domain: Domain) -> torch.Tensor:
        """The log-table as a tensor broadcastable to ``batch_shape + domain.shape``: own axes
        permuted into ``domain``'s order, size-1 axes for the attributes it does not depend on."""
        if not domain.contains(self.domain):
            raise ValueError(f"{self.domain} is not inside {domain}")
        nb = len(self.batch_shape)
        own = [a for a in domain.attrs if a in self.domain]
        perm = list(range(nb)) + [nb + self.domain.attrs.index(a) for a in own]
        v = self.values.permute(*perm) if perm != list(range(len(perm))) else self.values
        view = self.batch_shape + tuple(domain.size(a) if a in self.domain else 1 for a in domain.attrs)
        return v.reshape(view)

    def expand(self, domain: Domain) -> "Factor":
        """The same function viewed on a larger domain (constant in the new attributes)."""
        v = self.aligned(domain)
        return Factor(domain, v.expand(self.batch_shape + domain.shape))

    # ------------------------------------------------------------------ algebra (log space)
    def __add__(self, other: "Factor | float") -> "Factor":
        """Product of factors (sum of log-tables) on the union of their domains."""
        if not isinstance(other, Factor):
            return Factor(self.domain, self.values + other)
        dom = self.domain.merge(other.domain)
        a, b = self.aligned(dom), other.aligned(dom)
        batch = _broadcast(self.batch_shape, other.batch_shape)
        a = a.reshape((1,) * (len(batch) - len(self.batch_shape)) + tuple(a.shape))
        b = b.reshape((1,) * (len(batch) - len(other.batch_shape)) + tuple(b.shape))
        return Factor(dom, a + b)  # every attribute of dom belongs to one of the two: full shape

    def __sub__(self, other: "Factor | float") -> "Factor":
        """Division of factors (difference of log-tables)."""
        if not isinstance(other, Factor):
            return Factor(self.domain, self.values - other)
        return self + Factor(other.domain, -other.values)

    def logsumexp(self, attrs: Sequence[Hashable] | None = None) -> "Factor | torch.Tensor":
        """Sum out ``attrs`` (all attributes if None; then a tensor of the batch shape)."""
        nb = len(self.batch_shape)
        if attrs is None:
            if len(self.domain) == 0:
                return self.values
            return torch.logsumexp(self.values, dim=tuple(range(nb, self.values.dim())))
        attrs = [a for a in attrs if a in self.domain]
        if not attrs:
            return self
        dims = tuple(nb + self.domain.attrs.index(a) for a in attrs)
        return Factor(self.domain.marginalize(attrs), torch.logsumexp(self.values, dim=dims))

    def project(self, attrs: Sequence[Hashable]) -> "Factor":
        """The marginal log-table on ``attrs`` (in that order)."""
        attrs = tuple(attrs)
        out = self.logsumexp([a for a in self.domain.attrs if a not in attrs])
        if out.domain.attrs == attrs:
            return out
        return Factor(self.domain.project(attrs), out.aligned(self.domain.project(attrs)))

    def normalize(self) -> "Factor":
        """Subtract the log-normaliser so that the table sums to one (per batch element)."""
        z = self.logsumexp()
        return Factor(self.domain, self.values - z.reshape(z.shape + (1,) * len(self.domain)))

    def exp(self) -> torch.Tensor:
        return self.values.exp()

    def __repr__(self) -> str:
        b = f", batch {self.batch_shape}" if self.batch_shape else ""
        return f"Factor({self.domain}{b})"


def _broadcast(a: tuple, b: tuple) -> tuple:
    """numpy/torch broadcasting of two shapes (a plain-Python version: this runs per message)."""
    if len(a) < len(b):
        a, b = b, a
    b = (1,) * (len(a) - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise ValueError(f"batch shapes {a} and {b} do not broadcast")
        out.append(max(x, y) if 1 in (x, y) else x)
    return tuple(out)
