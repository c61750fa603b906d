"""The reports' plots (matplotlib, Agg backend), each returned as an embedded ``<img>``: coefficients with
their intervals, within vs between variance, the missingness of the real data and real vs synthetic
marginals."""
from __future__ import annotations

import base64
import html
import io

import numpy as np
import pandas as pd


def fig_to_img(fig, alt: str) -> str:
    """A matplotlib figure as an embedded PNG ``<img>`` (the figure is closed)."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _matplotlib():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def coefficient_plot(table: pd.DataFrame, real: pd.DataFrame | None = None, title: str = "") -> str:
    """Estimates with their confidence intervals (and the real-data ones beside, if given)."""
    plt = _matplotlib()
    terms = list(table["term"])
    y = np.arange(len(terms))[::-1]
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(terms) + 1.2))
    off = 0.15 if real is not None else 0.0
    ax.errorbar(table["estimate"], y + off, xerr=[table["estimate"] - table["conf.low"],
                                                   table["conf.high"] - table["estimate"]],
                fmt="o", color="#1f5fa8", capsize=3, label="pooled synthetic")
    if real is not None:
        r = real.set_index("term").reindex(terms)
        ax.errorbar(r["estimate"], y - off, xerr=[r["estimate"] - r["conf.low"], r["conf.high"] - r["estimate"]],
                    fmt="s", color="#c0392b", capsize=3, label="real data")
        ax.legend(loc="best", fontsize=8)
    ax.axvline(0, color="#999", lw=0.8, ls="--")
    # an interval far wider than the others (few df) would flatten the plot: clip the axis, say so
    width = (table["conf.high"] - table["conf.low"]).to_numpy(dtype=float)
    ref = np.nanmedian(width) if np.isfinite(width).any() else np.nan
    if np.isfinite(ref) and np.nanmax(width) > 20 * ref:
        est = table["estimate"].to_numpy(dtype=float)
        pad = 2 * ref + 0.1 * (np.nanmax(est) - np.nanmin(est))
        ax.set_xlim(np.nanmin(est) - pad, np.nanmax(est) + pad)
        ax.text(0.99, 0.01, "axis clipped: some intervals run off the plot", transform=ax.transAxes,
                ha="right", va="bottom", fontsize=7, color="#666")
    ax.set_yticks(y)
    ax.set_yticklabels(terms, fontsize=8)
    ax.set_xlabel("estimate with 95% interval")
    ax.set_title(title, fontsize=10)
    return fig_to_img(fig, "coefficient plot")


def variance_plot(table: pd.DataFrame) -> str:
    """Within-dataset variance ū and between-dataset variance b per term (log scale)."""
    plt = _matplotlib()
    terms = list(table["term"])
    x = np.arange(len(terms))
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.bar(x - 0.2, table["ubar"], width=0.4, label="within (ū)", color="#7fa7d6")
    ax.bar(x + 0.2, table["b"], width=0.4, label="between (b)", color="#e8a33d")
    ax.set_yscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels(terms, rotation=45, ha="right", fontsize=8)
    ax.legend(fontsize=8)
    ax.set_title("within vs between variance of the estimates", fontsize=10)
    return fig_to_img(fig, "variance plot")


def missingness_plot(real: pd.DataFrame) -> str:
    """Missing share per column and the most frequent missingness patterns."""
    plt = _matplotlib()
    rate = real.isna().mean()
    pats = real.isna().value_counts().head(8)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    axes[0].barh(rate.index[::-1], rate.values[::-1], color="#c0392b")
    axes[0].set_xlabel("share missing")
    axes[0].tick_params(labelsize=7)
    mat = np.array([list(p) for p in pats.index], dtype=float)
    axes[1].imshow(mat, aspect="auto", cmap="Reds", vmin=0, vmax=1)
    axes[1].set_yticks(range(len(pats)))
    axes[1].set_yticklabels([f"{c} rows" for c in pats.values], fontsize=7)
    axes[1].set_xticks(range(real.shape[1]))
    axes[1].set_xticklabels(real.columns, rotation=90, fontsize=7)
    axes[1].set_title("most frequent patterns (red = missing)", fontsize=9)
    return fig_to_img(fig, "missingness pattern")


def marginal_plots(real: pd.DataFrame, synth: pd.DataFrame, schema, columns=None) -> str:
    """Real vs synthetic distribution of each column over the schema's levels or bins."""
    plt = _matplotlib()
    columns = list(columns or schema.names)[:12]
    ncol = 3
    nrow = int(np.ceil(len(columns) / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(11, 2.6 * nrow))
    axes = np.atleast_1d(axes).ravel()
    codes_r = schema.encode(real[schema.names])
    codes_s = schema.encode(synth[schema.names])
    for ax, c in zip(axes, columns):
        j = schema.names.index(c)
        k = schema[c].size
        pr = np.bincount(codes_r[:, j][codes_r[:, j] >= 0], minlength=k) / max(1, (codes_r[:, j] >= 0).sum())
        ps = np.bincount(codes_s[:, j][codes_s[:, j] >= 0], minlength=k) / max(1, (codes_s[:, j] >= 0).sum())
        x = np.arange(k)
        ax.bar(x - 0.2, pr, width=0.4, color="#c0392b", label="real")
        ax.bar(x + 0.2, ps, width=0.4, color="#1f5fa8", label="synthetic")
        ax.set_title(c, fontsize=9)
        ax.tick_params(labelsize=6)
    for ax in axes[len(columns):]:
        ax.axis("off")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig_to_img(fig, "marginal comparison")
