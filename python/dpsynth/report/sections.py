"""The sections the reports share: the privacy ledger, the generator's settings, the posterior
diagnostics (with :data:`RHAT_OK`) and the missing-data assumption, the uncongenial-analysis box, and the
pooled fit they show."""
from __future__ import annotations

import dataclasses
import html

import pandas as pd

from ..graphical.mixing import format_rhat
from .html import html_table


def settings_table(result) -> pd.DataFrame:
    """The release's settings: method, m, rows, ε and δ spent, the relation, and the generator's
    public parameters."""
    gen = getattr(result, "generator", None)
    rows = [("method", result.method), ("m (datasets)", result.m),
            ("rows per dataset", len(result.datasets[0]) if result.datasets else 0),
            ("epsilon spent", f"{result.ledger.total_epsilon():.4g}"),
            ("delta spent", f"{result.ledger.total_delta():.3g}"),
            ("neighbouring relation", result.ledger.relation or "")]
    if gen is not None:
        derived = getattr(gen, "derived_options", ())  # options fit resolves (a default left at None): the value used
        for k, v in sorted(vars(gen).items()):
            if k.startswith("_") or k.endswith("_") or k in ("ledger",):
                continue
            v = getattr(gen, k + "_", v) if k in derived else v
            if isinstance(v, (int, float, str, bool, tuple, list)) or v is None:
                rows.append((k, str(v)))
    return pd.DataFrame(rows, columns=["setting", "value"])


RHAT_OK = 1.01  # split-R̂ target for final results (Vehtari et al. 2021)


def diagnostics_section(result) -> str | None:
    """The generator's posterior diagnostics, with a plain-language reading of R̂ and ESS; None if none."""
    diag = result.diagnostics
    if not diag:
        return None
    frame = pd.DataFrame({"diagnostic": list(diag), "value": [diag[k] for k in diag]})
    rhat, ess = diag.get("rhat_max_cells"), diag.get("ess_bulk_min_cells")
    note = ""
    if rhat is not None and rhat == rhat:  # not NaN
        ess_text = f", smallest bulk ESS {ess:.0f}" if ess is not None and ess == ess else ""
        if diag.get("mixed") is False or rhat > RHAT_OK:
            k_hat = diag.get("pareto_k")
            k_text = "" if k_hat is None or k_hat != k_hat else f", Pareto k̂ of the importance weights {k_hat:.2f}"
            note = (f"<div class='banner warn'><b>The posterior sampler did not mix</b> (largest split R̂ of the "
                    f"released cells' probabilities {format_rhat(rhat, RHAT_OK)}, target ≤ {RHAT_OK}{ess_text}{k_text}). "
                    "The spread between "
                    "the synthetic datasets may misstate the posterior, so the pooled intervals may be too "
                    "narrow or too wide. No claim of validity is made for this release; ask the data holder "
                    "for a longer run.</div>")
        else:
            note = f"<p>The sampler's chains mixed (largest split R̂ of the cells' probabilities {format_rhat(rhat, RHAT_OK)}{ess_text}).</p>"
    return note + _missing_note(result) + html_table(frame)


def _missing_note(result) -> str:
    """The identifying assumption of completed datasets and the released share missing per column."""
    assumption = getattr(result, "missing_assumption", None)
    if not assumption:
        return ""
    shares = ", ".join(f"{c}: {v:.1%}" for c, v in (getattr(result, "missing_share", None) or {}).items())
    return (f"<div class='banner'><b>Missing values were filled in.</b> Assumption: {html.escape(assumption)}."
            + (f" Released share missing per column (noisy): {html.escape(shares)}." if shares else "") + "</div>")


def ledger_section(result) -> str:
    """The privacy ledger: the totals spent against the budget, then one row per spend."""
    led = result.ledger
    frame = led.to_frame()
    cols = [c for c in ("step", "mechanism", "epsilon", "delta", "rho", "sensitivity", "relation") if c in frame]
    return (f"<p><b>Total privacy spent: ε = {led.total_epsilon():.4g}, δ = {led.total_delta():.3g}</b> "
            f"(budget ε = {led.epsilon:g}, δ = {led.delta:g}).</p>" + html_table(frame[cols]))


def pooled_fit(result, formula, family, rule, transform):
    """`fit_pooled` of ``formula`` on the release, after ``transform`` of each dataset (if given)."""
    from ..inference import fit_pooled

    if transform is not None:  # analysis columns derived from the released data (post-processing)
        result = dataclasses.replace(result, datasets=[transform(f) for f in result.datasets])
    return fit_pooled(result, formula, family=family, rule=rule)


def congeniality_box(pooled) -> str:
    """A warning box listing what the formula needs that the released queries do not carry ('' if none)."""
    if not getattr(pooled, "congeniality", None):
        return ""
    items = "".join(f"<li>{html.escape(m)}</li>" for m in pooled.congeniality)
    return ("<div class='banner warn'><b>Uncongenial analysis:</b> the generator's released tables do not carry "
            "these dependencies of the model, so its coefficients are biased towards independence and the "
            f"intervals do not show it.<ul>{items}</ul>Ask the data holder to generate with "
            f"<code>analyses=[{html.escape(repr(pooled.formula))}]</code>.</div>")
