"""SynthResult: the m synthetic datasets, the ledger and what produced them."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .schema import atomic_write_text


@dataclass
class SynthResult:
    datasets: list
    ledger: object
    method: str
    schema: object = None
    generator: object = field(default=None, repr=False)

    @property
    def m(self) -> int:
        return len(self.datasets)

    @property
    def diagnostics(self) -> dict:
        """The generator's fit diagnostics (plain numbers and strings; empty when it reports none).
        NAPSU-MQ: posterior dimension, Laplace restarts, split R̂ and bulk ESS over θ and over the
        released cells' probabilities (``rhat_max_cells``, ``ess_bulk_min_cells``), seconds. They
        are computed from the posterior, i.e. from released values only: post-processing."""
        raw = getattr(self.generator, "diagnostics_", None) or {}
        out = {}
        for k, v in raw.items():
            if isinstance(v, (bool, str)):
                out[k] = v
            elif isinstance(v, (int, float)) or hasattr(v, "item"):
                v = v.item() if hasattr(v, "item") else v
                out[k] = int(v) if isinstance(v, int) else float(v)
        return out

    def to_csv(self, directory: str | os.PathLike) -> list[Path]:
        """Write ``synthetic_1.csv`` … ``synthetic_m.csv`` and ``ledger.csv`` atomically."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        paths = []
        for i, frame in enumerate(self.datasets, start=1):
            p = d / f"synthetic_{i}.csv"
            atomic_write_text(p, frame.to_csv(index=False))
            paths.append(p)
        p = d / "ledger.csv"
        atomic_write_text(p, self.ledger.to_frame().to_csv(index=False))
        paths.append(p)
        return paths

    def __iter__(self):
        return iter(self.datasets)

    def __len__(self) -> int:
        return len(self.datasets)

    def __repr__(self) -> str:
        shape = self.datasets[0].shape if self.datasets else (0, 0)
        return (f"<SynthResult method={self.method!r} m={self.m} rows×cols={shape} "
                f"ε={self.ledger.total_epsilon():.4g} δ={self.ledger.total_delta():.3g}>")
