"""Rows as inputs of the neural generators (public metadata only; post-processing of nothing private).

- :class:`MixedEncoder` and its :class:`Block` s — rows as model inputs: categoricals one-hot over the
  schema's categories, numerics clipped to the schema's public bounds and scaled to [0, 1] (or one-hot
  over the schema's bins plus the position inside the bin); missing cells encode to 0 with a separate
  per-column observation mask.
- :func:`block_log_likelihood` — the reconstruction loss of one encoded row over its blocks.
- :func:`draw_rows`, :func:`values_in_bins`, :func:`numeric_range`, :func:`numeric_values` — decoding
  helpers (a category per row from probabilities; a value inside a schema bin; a column's public range).
- :func:`complete_rows` — the complete-row filter of the seed paper's baselines.

Used by DP-MisGAN, Kamino/KaminoI, DPautoGAN and DP-CTGAN (:mod:`dpsynth.generators.dpsgd` re-exports
these names).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..schema import MISSING, Schema


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


def draw_encoded(decoder_out: np.ndarray, enc: "MixedEncoder", schema, rng: np.random.Generator):
    """(codes (rows, columns), numeric values by column) drawn from decoded rows (softmax parts,
    positions): each category or bin from its softmax (:func:`draw_rows`), a numeric placed at its
    decoded position inside its bin (whole numbers for integer columns). Post-processing shared by
    the GANs' samplers."""
    codes = np.zeros((len(decoder_out), len(enc.blocks)), dtype=np.int64)
    values = {}
    for j, b in enumerate(enc.blocks):
        codes[:, j] = draw_rows(decoder_out[:, b.start:b.start + b.levels], rng)
        if not b.categorical:
            v = enc.unbin(j, codes[:, j], decoder_out[:, b.start + b.levels])
            values[b.name] = np.floor(v) if schema[b.name].integer else v
    return codes, values


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


__all__ = ["Block", "MixedEncoder", "block_log_likelihood", "complete_rows", "draw_rows", "numeric_range",
           "numeric_values", "values_in_bins"]
