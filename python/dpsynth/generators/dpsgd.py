"""DP-SGD machinery shared by the neural generators (DP-MisGAN, Kamino/KaminoI).

What lives here, and why it is in one place:

- The privacy plan of a run lives in the privacy layer, :mod:`dpsynth.privacy.dpsgd_accounting`
  (re-exported here): :class:`SGMPlan` (σ, q, T, C calibrated by opacus's RDP accountant, charged
  once before training, one :meth:`SGMPlan.release` per noisy step, :meth:`SGMPlan.finish` checks
  that exactly T steps ran) and :func:`poisson_indices` (Poisson subsampling at rate q).
  Gradients are normalised by the expected batch size q·ñ, a public (released) number, never by
  the realised batch size.
- :class:`DPSGD` — one DP-SGD optimiser: per-sample gradients by ``torch.func`` (``vmap(grad(ℓ))``
  with ``functional_call``; this also works when the per-sample loss contains a gradient penalty,
  where opacus's ``GradSampleModule`` fails on the double backward) or, for plain MLPs, by the exact
  outer-product identity (:func:`mlp_clipped_gradient_sum`, ~100× faster on CPU); per-sample
  clipping of the joint L2 norm to C, one :meth:`SGMPlan.release` per step, then an Adam step
  (post-processing).
- :class:`MixedEncoder` — rows as model inputs: categoricals one-hot over the schema's categories,
  numerics clipped to the schema's public bounds and scaled to [0, 1] (or one-hot over the schema's
  bins plus the position inside the bin); missing cells encode to 0 with a separate per-column
  observation mask.
- :func:`step_rng` — per-step numpy generators (``SeedSequence([seed, *keys])``) for sampling and
  fake draws, so that runs on neighbouring data sets with the same seed stay coupled (a row added at
  the end changes only its own inclusion and its own fakes), which the grey-box neighbour tests use.

Privacy unit: one row; neighbouring relation: add/remove one row (Poisson subsampling's analysis).
The Gaussian noise is float noise from torch (not floating-point safe; documented in PRIVACY.md).

Example
-------
>>> import torch
>>> from dpsynth.privacy import PrivacyLedger, NoiseSource
>>> plan = SGMPlan.calibrate(epsilon=1.0, delta=1e-5, sample_rate=0.01, steps=500, clip=1.0)
>>> led = PrivacyLedger(1.0, 1e-5)
>>> plan.charge(led, "demo model (DP-SGD)")
>>> model = torch.nn.Linear(3, 2)
>>> def loss(params, x, y):  # one row
...     out = torch.func.functional_call(model, params, (x.unsqueeze(0),))
...     return torch.nn.functional.cross_entropy(out, y.unsqueeze(0))
>>> opt = DPSGD({"m": model}, plan, NoiseSource(1).torch_generator(), expected_batch_size=5.0,
...             step="demo model (DP-SGD)", loss_fn=lambda p, x, y: loss(split_params(p, "m"), x, y))
>>> opt.step(torch.randn(4, 3), torch.tensor([0, 1, 1, 0]))
>>> plan.steps_taken, round(led.total_epsilon(), 3) <= 1.0
(1, True)
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..privacy.dpsgd_accounting import DPSGD_MECHANISM, SGMPlan, poisson_indices
from ..privacy.validation import check_positive_float, check_positive_int
from ..schema import MISSING, Schema


# ====================================================================== threads
@contextlib.contextmanager
def torch_threads(n: int):
    """Run a block with ``torch.set_num_threads(n)`` and restore the previous setting afterwards
    (small MLPs gain little from more threads, and the machines running this are shared)."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(max(1, int(n)))
    try:
        yield
    finally:
        torch.set_num_threads(old)


@contextlib.contextmanager
def torch_seeded(seed: int):
    """Run a block with torch's global generator seeded (model initialisation), leaving the
    caller's global torch random state as it was."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        yield


class TorchFit:
    """Mixin for the torch generators: ``fit`` runs :meth:`_fit_torch` with ``self.num_threads``
    torch threads and torch's global random state seeded from the noise source (restored after)."""

    def _fit(self, codes, data, source):
        with torch_threads(self.num_threads), torch_seeded(source.numpy.integers(0, 2**62)):
            self._fit_torch(codes, data, source)

    def _fit_torch(self, codes, data, source):
        raise NotImplementedError


def check_nonnegative_number(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{name} must be a non-negative number, got {value!r}")
    return float(value)


def check_share(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) or not 0 < value < 1:
        raise ValueError(f"{name} must be a fraction of the budget strictly between 0 and 1, got {value!r}")
    return float(value)


# ====================================================================== randomness
def step_rng(seed: int, *keys: int) -> np.random.Generator:
    """A numpy generator for one step of one run, from ``SeedSequence([seed, *keys])``."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), *[int(k) for k in keys]]))


# ====================================================================== per-sample gradients
def clipped_gradient_sum(loss_fn, params: dict, batch: tuple, clip: float):
    """Σ_i clip_C(∇θ ℓ(θ; row_i)) as one flat vector, with ``vmap(grad(loss_fn))``.

    ``loss_fn(params, *row)`` is the loss of ONE row (tensors without the batch dimension);
    ``batch`` holds tensors whose first dimension indexes rows. Returns (flat sum, per-row norms)."""
    import torch
    from torch.func import grad, vmap

    names = list(params)
    total = sum(p.numel() for p in params.values())
    b = int(batch[0].shape[0]) if batch else 0
    if b == 0:
        ref = next(iter(params.values()))
        return torch.zeros(total, dtype=ref.dtype), torch.zeros(0, dtype=ref.dtype)
    grads = vmap(grad(loss_fn), in_dims=(None,) + (0,) * len(batch))(params, *batch)
    flat = torch.cat([grads[k].reshape(b, -1) for k in names], dim=1)
    norms = flat.norm(dim=1)
    factor = (clip / (norms + 1e-12)).clamp(max=1.0)
    return (flat * factor[:, None]).sum(dim=0), norms


_ELEMENTWISE = ("ReLU", "LeakyReLU", "Tanh", "Sigmoid", "Identity", "ELU", "GELU", "SiLU")


def mlp_clipped_gradient_sum(model, row_losses, inputs, targets: tuple, clip: float):
    """Σ_i clip_C(∇θ ℓ_i) for an ``nn.Sequential`` of ``nn.Linear`` layers and element-wise
    activations, without materialising per-row gradients (Goodfellow 2015; opacus's "ghost"
    clipping): the row-i gradient of a linear layer is δ_i a_iᵀ (weight) and δ_i (bias), with a_i
    the layer's input and δ_i = ∂ℓ_i/∂z_i its output's gradient, so its squared norm is
    ‖δ_i‖²(‖a_i‖² + 1) and the clipped sum is (c ⊙ δ)ᵀ a. Exactly equal to
    :func:`clipped_gradient_sum` (tested), about two orders of magnitude faster on CPU.

    ``row_losses(outputs, *targets)`` returns the vector of per-row losses (row i may depend on
    row i only). Returns (flat sum in ``named_parameters`` order, per-row norms)."""
    import torch
    from torch import nn

    layers = list(model)
    for m in layers:
        if not isinstance(m, nn.Linear) and type(m).__name__ not in _ELEMENTWISE:
            raise TypeError(f"mlp_clipped_gradient_sum supports Linear layers and element-wise activations, "
                            f"not {type(m).__name__}")
    ref = next(model.parameters())
    total = sum(p.numel() for p in model.parameters())
    if inputs.shape[0] == 0:
        return torch.zeros(total, dtype=ref.dtype), torch.zeros(0, dtype=ref.dtype)
    ins, outs, h = [], [], inputs
    for m in layers:
        if isinstance(m, nn.Linear):
            ins.append(h.detach())
            h = m(h)
            outs.append(h)
        else:
            h = m(h)
    deltas = torch.autograd.grad(row_losses(h, *targets).sum(), outs)
    sq = torch.zeros(inputs.shape[0], dtype=ref.dtype)
    for m, a, dlt in zip((m for m in layers if isinstance(m, nn.Linear)), ins, deltas):
        sq = sq + (dlt * dlt).sum(1) * ((a * a).sum(1) + (1.0 if m.bias is not None else 0.0))
    norms = sq.sqrt()
    factor = (clip / (norms + 1e-12)).clamp(max=1.0)
    pieces = []
    for m, a, dlt in zip((m for m in layers if isinstance(m, nn.Linear)), ins, deltas):
        scaled = dlt * factor[:, None]
        pieces.append((scaled.T @ a).reshape(-1))
        if m.bias is not None:
            pieces.append(scaled.sum(0))
    return torch.cat(pieces).detach(), norms.detach()


class DPSGD:
    """DP-SGD (Abadi et al. 2016, Alg. 1) with Adam as the post-processing update rule.

    ``modules`` maps a prefix to an ``nn.Module``. Per-row gradients come either from
    ``loss_fn(params, *row)`` — the loss of ONE row, parameters as one dict keyed
    ``"<prefix>.<name>"`` (use :func:`split_params` and ``functional_call``), differentiated by
    ``vmap(grad(...))`` (any per-row loss, gradient penalties included) — or, for a single
    ``nn.Sequential`` MLP, from ``row_losses(outputs, *targets)`` by :func:`mlp_clipped_gradient_sum`."""

    def __init__(self, modules: dict, plan: SGMPlan, generator, expected_batch_size: float, step: str,
                 loss_fn=None, row_losses=None, lr: float = 1e-3, betas=(0.9, 0.999)):
        import torch

        if (loss_fn is None) == (row_losses is None):
            raise ValueError("give exactly one of loss_fn (vmap path) or row_losses (MLP path)")
        if row_losses is not None and len(modules) != 1:
            raise ValueError("the MLP path (row_losses) takes a single nn.Sequential")
        self.modules = dict(modules)
        self.params = {f"{prefix}.{k}": p for prefix, mod in modules.items() for k, p in mod.named_parameters()}
        self.loss_fn = loss_fn
        self.row_losses = row_losses
        self.plan = plan
        self.generator = generator
        self.expected_batch_size = float(expected_batch_size)
        self.step_name = step
        self.optimizer = torch.optim.Adam(list(self.params.values()), lr=lr, betas=betas)

    def clipped_sum(self, *batch):
        """Σ_i clip_C(∇θ ℓ_i) over the batch, flat, and the per-row norms."""
        if self.row_losses is not None:
            (model,) = self.modules.values()
            return mlp_clipped_gradient_sum(model, self.row_losses, batch[0], batch[1:], self.plan.clip)
        detached = {k: p.detach() for k, p in self.params.items()}
        return clipped_gradient_sum(self.loss_fn, detached, batch, self.plan.clip)

    def step(self, *batch, public_grad=None) -> None:
        """One noisy step on a Poisson batch (possibly empty). ``public_grad`` (flat, optional): a
        gradient computed without private rows (e.g. a WGAN critic's fake-sample term over a public
        number of fakes), added after the release (post-processing)."""
        summed, _ = self.clipped_sum(*batch)  # per-row norms are private: not kept
        noisy = self.plan.release(summed, self.generator, self.step_name) / self.expected_batch_size
        if public_grad is not None:
            noisy = noisy + public_grad
        offset = 0
        for p in self.params.values():
            k = p.numel()
            p.grad = noisy[offset:offset + k].view_as(p).clone()
            offset += k
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def wgan_critic_step(opt: "DPSGD", critic, real, fake, weight_clip: float | None = None) -> None:
    """One step of a WGAN critic (loss E D(fake) − E D(real)) with DP-SGD on the real term only.

    The real term −D(x_i) is clipped per row and noised (``opt``: the MLP path, row loss −D); the
    fake term's gradient, mean over ``fake`` (whose number must be public, e.g. round(q·ñ), never the
    realised Poisson batch size), reads no private row and is added after the release. Weight
    clipping to [−c, c] (Arjovsky et al. 2017) is post-processing."""
    import torch

    params = list(critic.parameters())
    g = torch.autograd.grad(critic(fake).mean(), params)
    opt.step(real, public_grad=torch.cat([x.reshape(-1) for x in g]).detach())
    if weight_clip is not None:
        with torch.no_grad():
            for p in params:
                p.clamp_(-weight_clip, weight_clip)


def critic_real_row_loss(outputs):
    """Per-row loss of the real term of a WGAN critic: −D(x_i) (for :func:`wgan_critic_step`)."""
    return -outputs[:, 0]


def released_row_count(n_rows: int, epsilon: float, ledger, source, relation: str, step: str = "row count") -> float:
    """max(1, n + discrete Laplace(1/ε)): the number of rows a DP-SGD generator trains on (e.g. the
    complete rows), released with L1 sensitivity 1 (add/remove); it fixes q, T and the gradient
    normalisation publicly."""
    from ..privacy import laplace_counts

    noisy = laplace_counts(np.array([int(n_rows)], dtype=np.int64), epsilon=epsilon, sensitivity=1, ledger=ledger,
                           source=source, step=step, relation=relation)
    return float(max(1, int(noisy[0])))


def complete_rows(codes: np.ndarray, data: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """The rows observed on every column (the seed paper's complete-row baseline; a row-wise filter,
    so add/remove neighbours stay neighbours)."""
    keep = (codes != MISSING).all(axis=1)
    return codes[keep], data.iloc[np.flatnonzero(keep)]


def block_log_likelihood(blocks):
    """``loss(probs, x)`` for ONE encoded row: −Σ log p over its one-hot parts and squared error
    of the in-bin positions / scaled values (an autoencoder's reconstruction loss, CTGAN's
    conditional term restricted to the parts given)."""
    import torch

    parts = [(b.start, b.start + b.levels, b.start + b.width) for b in blocks]

    def loss(probs, x):
        out = probs.new_zeros(())
        for a, m, e in parts:
            if m > a:
                out = out - (x[a:m] * torch.log(probs[a:m] + 1e-8)).sum()
            if e > m:
                out = out + ((probs[m:e] - x[m:e]) ** 2).sum()
        return out

    return loss


def split_params(params: dict, prefix: str) -> dict:
    """The entries of a flat ``"<prefix>.<name>"`` parameter dict that belong to ``prefix``."""
    head = prefix + "."
    return {k[len(head):]: v for k, v in params.items() if k.startswith(head)}


# ====================================================================== row encoding
@dataclass(frozen=True)
class Block:
    """Where one schema column sits in the encoded row. ``kind``: "categorical" (one-hot),
    "scaled" (one numeric entry in [0, 1]) or "binned" (one-hot over the schema's bins, then the
    position inside the bin in [0, 1])."""

    name: str
    kind: str
    start: int
    width: int
    lower: float = 0.0
    upper: float = 1.0

    @property
    def categorical(self) -> bool:
        return self.kind == "categorical"

    @property
    def levels(self) -> int:
        """Number of one-hot entries (0 for a scaled numeric)."""
        return {"categorical": self.width, "binned": self.width - 1}.get(self.kind, 0)


class MixedEncoder:
    """Schema-driven encoding of rows for neural models (public metadata only).

    Categorical column with K categories → K one-hot entries. Numeric column, clipped to its public
    bounds: ``numeric="scaled"`` → one entry (x − lower)/(upper − lower); ``numeric="binned"`` → a
    one-hot over the schema's bins followed by the position of x inside its bin (the public-bounds
    analogue of CTGAN's mode-specific normalisation). A missing cell encodes to zeros and 0 in the
    per-column observation mask.

    >>> s = Schema.from_dict({"g": {"type": "categorical", "categories": ["a", "b"]},
    ...                       "x": {"type": "numeric", "lower": 0, "upper": 10, "bins": 2}})
    >>> df = pd.DataFrame({"g": ["b", None], "x": [5.0, 20.0]})
    >>> X, M = MixedEncoder(s).encode(df)
    >>> X.tolist(), M.tolist()
    ([[0.0, 1.0, 0.5], [0.0, 0.0, 1.0]], [[1.0, 1.0], [0.0, 1.0]])
    >>> MixedEncoder(s, numeric="binned").encode(df)[0].tolist()
    [[0.0, 1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0, 1.0]]
    """

    def __init__(self, schema: Schema, numeric: str = "scaled"):
        if numeric not in ("scaled", "binned"):
            raise ValueError(f"numeric must be 'scaled' or 'binned', got {numeric!r}")
        self.schema = schema
        self.blocks: list[Block] = []
        start = 0
        for name, col in schema.columns.items():
            if col.is_categorical:
                block = Block(name, "categorical", start, len(col.categories))
            else:
                lo, hi = numeric_range(col)
                width = col.size + 1 if numeric == "binned" else 1
                block = Block(name, numeric, start, width, lo, hi)
            self.blocks.append(block)
            start += block.width
        self.width = start
        # feature → column index, to expand a per-column mask to the encoded row
        self.column_of_feature = np.concatenate([np.full(b.width, j) for j, b in enumerate(self.blocks)])

    def block_values(self, j: int, codes: np.ndarray, values: np.ndarray | None = None) -> np.ndarray:
        """Encoded block (n × width) of column j from its codes, and its values if numeric."""
        b = self.blocks[j]
        codes = np.asarray(codes)
        out = np.zeros((len(codes), b.width), dtype=np.float32)
        obs = codes != MISSING
        rows = np.flatnonzero(obs)
        if b.kind == "categorical":
            out[rows, codes[obs]] = 1.0
        elif b.kind == "scaled":
            out[obs, 0] = self.scale(j, np.asarray(values, dtype=float)[obs])
        else:
            edges = self.schema[b.name].edges()
            c = codes[obs]
            x = np.clip(np.asarray(values, dtype=float)[obs], edges[0], edges[-1])
            out[rows, c] = 1.0
            out[rows, -1] = np.clip((x - edges[c]) / (edges[c + 1] - edges[c]), 0.0, 1.0)
        return out

    def scale(self, j: int, values: np.ndarray) -> np.ndarray:
        b = self.blocks[j]
        return ((np.clip(values, b.lower, b.upper) - b.lower) / (b.upper - b.lower)).astype(np.float32)

    def unscale(self, j: int, u: np.ndarray) -> np.ndarray:
        b = self.blocks[j]
        return b.lower + np.clip(u, 0.0, 1.0) * (b.upper - b.lower)

    def unbin(self, j: int, codes: np.ndarray, position: np.ndarray) -> np.ndarray:
        """Value at ``position`` ∈ [0, 1] inside each code's bin, clipped to the public range."""
        b = self.blocks[j]
        edges = self.schema[b.name].edges()
        x = edges[codes] + np.clip(position, 0.0, 1.0) * (edges[codes + 1] - edges[codes])
        return np.clip(x, b.lower, b.upper)

    def encode(self, data: pd.DataFrame, codes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(X, M): encoded rows (n × width, float32) and column observation mask (n × d, float32)."""
        if codes is None:
            codes = self.schema.encode(data)
        blocks = []
        for j, b in enumerate(self.blocks):
            values = None if b.categorical else numeric_values(data[b.name])
            blocks.append(self.block_values(j, codes[:, j], values))
        return np.concatenate(blocks, axis=1), (codes != MISSING).astype(np.float32)


def draw_rows(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One category per row from row-wise (unnormalised, non-negative) probabilities, by inverse CDF."""
    cdf = np.cumsum(probs, axis=1)
    u = rng.random(len(probs))[:, None] * cdf[:, -1:]
    return np.minimum((u > cdf).sum(axis=1), probs.shape[1] - 1).astype(np.int64)


def numeric_range(col) -> tuple[float, float]:
    """Public [lower, upper] of a numeric column (its bounds, else its outer bin edges)."""
    if col.has_bounds:
        return float(col.lower), float(col.upper)
    edges = col.edges()
    return float(edges[0]), float(edges[-1])


def numeric_values(series: pd.Series) -> np.ndarray:
    return pd.to_numeric(series, errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def values_in_bins(col, codes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A numeric value drawn uniformly inside each code's schema bin (NaN where missing)."""
    edges = col.edges()
    c = np.clip(codes, 0, len(edges) - 2)
    x = edges[c] + rng.random(len(codes)) * (edges[c + 1] - edges[c])
    lo, hi = numeric_range(col)
    x = np.clip(x, lo, hi)
    return np.where(codes == MISSING, np.nan, x)


__all__ = ["wgan_critic_step", "critic_real_row_loss", "released_row_count", "complete_rows",
           "block_log_likelihood", "SGMPlan", "DPSGD", "TorchFit", "DPSGD_MECHANISM", "MixedEncoder", "Block", "clipped_gradient_sum",
           "mlp_clipped_gradient_sum", "poisson_indices", "step_rng", "split_params", "torch_threads", "torch_seeded",
           "draw_rows", "numeric_range", "numeric_values", "values_in_bins"]
