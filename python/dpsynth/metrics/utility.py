"""General utility of m synthetic datasets against the real data in one table (dpsynthr's
``dp_utility``): k-way TVD (`tvd`) and pMSE / S_pMSE (`pmse`) per dataset, with their mean, spread
and range over the datasets. Computed from the real data: not differentially private.

>>> import dpsynth
>>> df, schema = dpsynth.load_dataset("adult")
>>> out = utility(df.head(300), [df.head(300)], schema, pmse=False)
>>> out["summary"]["measure"].tolist(), out["summary"]["value"].tolist()
(['tvd_1way', 'tvd_2way'], [0.0, 0.0])
"""
from __future__ import annotations

import pandas as pd

from .pmse import pmse as _pmse
from .tvd import tvd


def utility(real: pd.DataFrame, synths, schema, k=(1, 2), pmse: bool = True, pmse_method: str = "logit",
            tvd_mode: str = "paper") -> dict:
    """For each synthetic dataset in ``synths``: the mean TVD over all k-way marginals for each k in
    ``k`` (``tvd_1way``, ...; ``tvd_mode`` "paper" or "schema", see `tvd`) and, with ``pmse``,
    pMSE and S_pMSE of a ``pmse_method`` ("logit" or "cart") propensity model.

    Returns ``summary`` (columns measure, value = the mean over datasets, sd, min, max),
    ``per_dataset`` (column measure, then one column per dataset: syn1, syn2, ...), and for a
    printout a ``title`` and ``notes`` (what the measures mean).
    """
    k = [int(kk) for kk in ([k] if isinstance(k, int) else k)]
    synths = list(getattr(synths, "datasets", synths))
    if not synths:
        raise ValueError("give at least one synthetic dataset")
    per = {}
    for i, syn in enumerate(synths, 1):
        values = {f"tvd_{kk}way": float(tvd(real, syn, schema, k=kk, mode=tvd_mode)) for kk in k}
        if pmse:
            res = _pmse(real, syn, method=pmse_method, schema=schema)
            values.update(pmse=float(res.pmse), s_pmse=float(res.s_pmse))
        per[f"syn{i}"] = values
    per = pd.DataFrame(per)
    summary = pd.DataFrame({"measure": list(per.index), "value": per.mean(axis=1).to_numpy(),
                            "sd": per.std(axis=1, ddof=1).to_numpy(), "min": per.min(axis=1).to_numpy(),
                            "max": per.max(axis=1).to_numpy()})
    notes = [f"TVD: mean total variation distance over all k-way marginals (mode '{tvd_mode}'; 0 = identical)."]
    if pmse:
        notes.append(f"pMSE: {pmse_method} propensity model; S_pMSE = pMSE / its null expectation (about 1 is "
                     "ideal; < 3 is usually called good).")
    notes.append("Computed from the real data: not differentially private.")
    title = f"Utility of {len(synths)} synthetic data set(s) against the real data (mean over data sets)"
    return {"summary": summary, "per_dataset": per.rename_axis("measure").reset_index(), "title": title,
            "notes": notes}
