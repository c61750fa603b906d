"""Privacy audits a user can run: grey-box neighbour checks and a distinguishing audit.

Grey-box (Re:cord-play pattern, dp-privacy.md §4.3 B): every value handed to a noise primitive is
recorded with its declared sensitivity (:func:`dpsynth.privacy.record_noise_inputs`). We fit the
generator on D and on neighbours D' with the same seed and check (1) the same sequence of noise
calls with the same shapes (no data-dependent control flow or domains) and (2) that each recorded
value moves by at most its declared sensitivity, in its norm.

Black-box (§4.3 C): :func:`distinguishing_audit` runs a generator many times on D (40 identical
rows) and on D' (one row replaced by, or added as, a unique row), counts the unique row in each output, picks a
threshold on one half of the runs and bounds the false-positive and false-negative rates on the
other half with Clopper–Pearson. ε_lo = max(log((1−δ−FNR⁺)/FPR⁺), log((1−δ−FPR⁺)/FNR⁺)) is a
statistically valid lower bound on the true ε (Jagielski et al. 2020; Nasr et al. 2021): if it
exceeds the ledger's claim for that pair (ε for a replaced row under replace-one, 2ε under
add/remove: group privacy), the generator leaks more than it says. Passing proves nothing.

Leaks that bypass the noise (:func:`leak_audit`): with D's noise transcript replayed on D', every
released value is D's, so everything the generator outputs (row counts, dtypes, categories, the saved
file, diagnostics, the ledger, the synthetic rows for the same sampling seed) must be identical;
any difference is information about D' that no ledgered mechanism released.

Example
-------
>>> import dpsynth
>>> from dpsynth.audit import distinguishing_audit
>>> res = distinguishing_audit("independent", epsilon=1.0, runs=50)
>>> res["eps_lo"] <= res["claim_epsilon"]
True

Modules: :mod:`~dpsynth.audit.neighbours` (grey-box neighbour checks), :mod:`~dpsynth.audit.distinguishing`
(the black-box audit), :mod:`~dpsynth.audit.selection` (exact audit of selection steps) and
:mod:`~dpsynth.audit.leaks` (channels without noise).
"""
from __future__ import annotations

from .distinguishing import (audit_datasets, audit_report, clopper_pearson_upper, distinguishing_audit,
                             epsilon_lower_bound)
from .leaks import (COMPLETE_ONLY, SMALL_OPTIONS, leak_audit, leak_audit_all, leak_audit_data, leak_configurations,
                    released)
from .neighbours import (assert_neighbour_safe, fit_recorded, group_claim, neighbour_check, neighbour_steps,
                         neighbours, same_noise_calls, unique_row)
from .selection import selection_audit, selection_distribution

__all__ = ["neighbour_steps", "group_claim", "unique_row", "neighbours", "fit_recorded", "same_noise_calls",
           "neighbour_check", "assert_neighbour_safe", "audit_datasets", "clopper_pearson_upper",
           "epsilon_lower_bound", "distinguishing_audit", "audit_report", "selection_distribution",
           "selection_audit", "SMALL_OPTIONS", "COMPLETE_ONLY", "leak_configurations", "leak_audit_data",
           "released", "leak_audit", "leak_audit_all"]
