"""The page template of the reports: the style sheet, a data frame as an HTML table, and the page with
its banner (releasable or private) and sections."""
from __future__ import annotations

import datetime as _dt
import html

import numpy as np
import pandas as pd

_CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;color:#222;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em} h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:.85em;margin:.6em 0} td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}
.banner{padding:.8em 1em;border-radius:4px;margin:1em 0;font-weight:600}
.private{background:#fde2e1;border:2px solid #c0392b;color:#7b1d14}
.release{background:#e3f2e6;border:1px solid #3c8d50;color:#1d4d28}
.warn{background:#fff4d6;border:2px solid #c98a00;color:#5c3d00;font-weight:400}
.muted{color:#666;font-size:.9em} img{max-width:100%} .tw{overflow-x:auto}
"""


def html_table(df: pd.DataFrame, digits: int = 4) -> str:
    """``df`` as an HTML table (floats to ``digits`` significant digits, NaN empty, text escaped)."""
    def fmt(v):
        if isinstance(v, (float, np.floating)):
            if np.isnan(v):
                return ""
            return f"{v:.{digits}g}"
        return html.escape(str(v))

    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = "".join("<tr>" + "".join(f"<td>{fmt(v)}</td>" for v in row) + "</tr>" for row in df.itertuples(index=False))
    return f"<div class='tw'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def html_page(title: str, banner: str, banner_class: str, sections: list[tuple[str, str]]) -> str:
    """The whole page: title, the banner (``banner_class`` "release" or "private"), the time made, and
    ``sections`` as (heading, HTML) pairs."""
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = "".join(f"<h2>{html.escape(h)}</h2>\n{c}\n" for h, c in sections)
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<div class='banner {banner_class}'>{banner}</div><p class='muted'>made by dpsynth on {when}</p>"
            f"{body}</body></html>\n")
