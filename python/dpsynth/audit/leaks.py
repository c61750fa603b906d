"""The leak audit: channels that bypass the noise. With D's noise transcript replayed on D', every
released value is D's, so everything the generator outputs (row counts, dtypes, categories, the saved
file, diagnostics, the ledger, the synthetic rows for the same sampling seed) must be identical; any
difference is information about D' that no ledgered mechanism released."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..schema import Schema
from .neighbours import fit_recorded, neighbour_steps, neighbours, same_noise_calls

# small settings that keep each fit well under a second while running every code path
SMALL_OPTIONS = {
    "napsu-mq": dict(delta=1e-6, queries="mst", inference="laplace"),
    "pmse": dict(n_releases=2, n_candidates=40, n_stages=2),
    "mst": dict(delta=1e-6, iters=50),
    "aim": dict(delta=1e-6, rounds=8, round_iters=5, final_iters=20),
    "aim-e": dict(delta=1e-6, rounds=8, round_iters=5, final_iters=20),
    "dp-misgan": dict(delta=1e-6, epochs=1, batch_size=64, hidden=8, critic_hidden=8, nz=4),
    "kamino": dict(delta=1e-6, epochs=1, batch_size=64, hidden=8),
    "dpautogan": dict(delta=1e-6, ae_epochs=1, gan_epochs=1, batch_size=64, hidden=8, latent=4, nz=4),
    "dpctgan": dict(delta=1e-6, epochs=1, batch_size=64, hidden=8, nz=4),
    "kamino-i": dict(delta=1e-6, epochs=1, batch_size=64, hidden=8),
    "complete-rows": dict(generator="independent"),
    "impute-random": dict(generator="privbayes-e"),
    "impute-dp-mean": dict(generator="independent"),
}
# the pMSE mechanism takes complete rows only (it refuses NA): its data and neighbours keep rows complete
COMPLETE_ONLY = {"pmse"}
# the missing-data wrappers are audited around a replace-one generator too, whose n is public inside them
_WRAPPED_REPLACE_ONE = {"complete-rows": "privbayes", "impute-dp-mean": "privbayes-e"}
# path components naming wall-clock times: timing is not protected (PRIVACY.md), so not compared
_TIMING = ("seconds",)
# items of :func:`released` that are values computed from the noisy releases (not structure)
_VALUE_ITEMS = {"synthetic values", "saved file values", "diagnostics values"}


def leak_configurations(methods=None) -> dict[str, tuple[str, float, dict]]:
    """{label: (method, epsilon, options)} the leak audit runs: every registered method (or
    ``methods``) at ε = 1 with :data:`SMALL_OPTIONS`, and each missing-data wrapper also around a
    replace-one generator (label ``"complete-rows[privbayes]"``), at ε = 100 so that a noisy count
    spent from a small share of ε stays positive on the 12-row table (what is compared does not
    depend on ε)."""
    from ..generators import available_methods

    out = {}
    for m in (available_methods() if methods is None else methods):
        out[m] = (m, 1.0, dict(SMALL_OPTIONS.get(m, {})))
        if m in _WRAPPED_REPLACE_ONE:
            inner = _WRAPPED_REPLACE_ONE[m]
            out[f"{m}[{inner}]"] = (m, 100.0, {**SMALL_OPTIONS.get(m, {}), "generator": inner})
    return out


def leak_audit_data(n: int = 12, complete: bool = False) -> tuple[pd.DataFrame, Schema]:
    """A tiny table for the leak audit: a categorical column with one missing cell (category dtype),
    one of plain strings (object dtype) and a complete integer column (int64): setting one of its
    cells to NA changes its dtype, as it does in data read from a file. ``complete``: drop rows with
    a missing cell (for generators that refuse them). Every column is declared as possibly missing
    (the neighbours add an all-NA row), which is what NAPSU-MQ's default reads, never the rows."""
    may_miss = {} if complete else {"missing": True}
    schema = Schema.from_dict({
        "sex": {"type": "categorical", "categories": ["F", "M"], **may_miss},
        "grp": {"type": "categorical", "categories": ["a", "b", "c"], **may_miss},
        "age": {"type": "numeric", "lower": 0, "upper": 100, "bins": 4, "integer": True, **may_miss},
    })
    rng = np.random.default_rng(0)
    sex = pd.Categorical(rng.choice(["F", "M"], n), categories=["F", "M"])
    sex[1] = np.nan
    df = pd.DataFrame({"sex": sex, "grp": rng.choice(["a", "b", "c"], n).astype(object),
                       "age": rng.integers(0, 100, n).astype(np.int64)})
    return (df.dropna().reset_index(drop=True) if complete else df), schema


def _digest(data: bytes) -> str:
    import hashlib

    return hashlib.sha1(data).hexdigest()[:16]


def _describe(obj, path: str, out: dict, seen: set, depth: int = 0) -> None:
    """Flatten ``obj`` into ``out[path] = (structure, value digest)``: the structure is the type,
    shape, dtype or column names of what is stored, the digest its value (None for timings)."""
    import re

    timing = any(t in path.rsplit(".", 1)[-1] for t in _TIMING)

    def put(structure, value):
        out[path] = (structure, None if timing else value)

    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes, np.generic)):
        return put(type(obj).__name__, repr(obj))
    if isinstance(obj, (np.dtype, pd.api.extensions.ExtensionDtype)):
        return put("dtype", str(obj))
    if hasattr(obj, "detach") and hasattr(obj, "cpu"):  # torch tensor
        obj = obj.detach().cpu().numpy()
    if isinstance(obj, np.ndarray):
        value = repr(obj.tolist()) if obj.dtype == object else np.ascontiguousarray(obj).tobytes()
        return put(f"ndarray{obj.shape} {obj.dtype}", _digest(value if isinstance(value, bytes) else value.encode()))
    if isinstance(obj, (pd.DataFrame, pd.Series)):
        frame = obj.to_frame() if isinstance(obj, pd.Series) else obj
        layout = [(str(c), str(t)) for c, t in frame.dtypes.items()]
        return put(f"{type(obj).__name__}{obj.shape} {layout}",
                   _digest(pd.util.hash_pandas_object(frame.astype(object), index=True).to_numpy().tobytes()))
    if isinstance(obj, np.random.Generator):
        return put("numpy Generator", _digest(repr(obj.bit_generator.state).encode()))
    if isinstance(obj, (set, frozenset)):
        return put(f"{type(obj).__name__} len {len(obj)}", repr(sorted(map(repr, obj))))
    if callable(obj) and not hasattr(obj, "state_dict"):  # functions, classes, methods
        return put(type(obj).__name__, getattr(obj, "__qualname__", type(obj).__qualname__))
    if id(obj) in seen or depth > 12:
        return put(f"{type(obj).__name__} (seen)", None)
    seen.add(id(obj))
    if hasattr(obj, "state_dict"):  # torch module: its parameters and buffers
        obj = dict(obj.state_dict())
    if isinstance(obj, list) and obj and all(isinstance(e, list) and len(e) == 2 and isinstance(e[0], str)
                                             for e in obj):
        obj = dict(obj)  # a dict saved as [key, value] pairs (JSON): the keys name the paths (and timings)
    if isinstance(obj, dict):
        put(f"dict keys {sorted(map(str, obj))}", None)
        for k, v in obj.items():
            _describe(v, f"{path}.{k}", out, seen, depth + 1)
    elif isinstance(obj, (list, tuple)):
        put(f"{type(obj).__name__} len {len(obj)}", None)
        for i, v in enumerate(obj):
            _describe(v, f"{path}[{i}]", out, seen, depth + 1)
    elif hasattr(obj, "__dict__"):
        put(f"{type(obj).__qualname__} fields {sorted(vars(obj))}", None)
        for k, v in vars(obj).items():
            _describe(v, f"{path}.{k}", out, seen, depth + 1)
    else:
        put(type(obj).__qualname__, re.sub(r" at 0x[0-9a-fA-F]+", "", repr(obj)))


def _saved_file(gen, folder) -> dict:
    """What a fitted generator holds and :meth:`Generator.save` stores, flattened by
    :func:`_describe`: its state (every attribute, as saving stores the whole object), the files
    written, and inside them the keys of JSON and the entries of (npz) archives. A refused save
    (a class the file format does not take) is recorded as such; the state is still described."""
    from pathlib import Path

    folder = Path(folder)
    out: dict = {}
    _describe(vars(gen), "state", out, set())
    try:
        gen.save(folder / "generator")
    except (TypeError, ValueError) as err:
        out["save"] = ("refused", f"{type(err).__name__}: {err}")
        return out
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    _describe([str(p.relative_to(folder)) for p in files], "files", out, set())
    for p in files:
        _describe(_file_content(p), f"file {p.relative_to(folder)}", out, set())
    return out


def _file_content(path):
    """A saved file as data: an npz archive's entries (UTF-8 JSON entries parsed), another zip's
    member names, a JSON file's content, or None for other binary files (pickle)."""
    import json
    import zipfile

    def parsed(raw: bytes):
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None

    if zipfile.is_zipfile(path):
        try:
            with np.load(path, allow_pickle=False) as arrays:
                entries = {k: arrays[k] for k in arrays.files}
        except ValueError:
            with zipfile.ZipFile(path) as z:
                return sorted(z.namelist())
        return {k: (parsed(a.tobytes()) if a.dtype == np.uint8 and parsed(a.tobytes()) is not None else a)
                for k, a in entries.items()}
    return parsed(path.read_bytes())


def _frame_values(frame: pd.DataFrame) -> str:
    """Digest of a frame's values with numbers as float64 and labels as text (dtypes are compared
    on their own)."""
    norm = pd.DataFrame({c: (pd.to_numeric(frame[c], errors="coerce").astype(float)
                             if pd.api.types.is_numeric_dtype(frame[c]) else frame[c].astype(object).astype(str))
                         for c in frame.columns})
    return _digest(pd.util.hash_pandas_object(norm, index=True).to_numpy().tobytes())


def released(gen, rec=None, m: int = 2, sample_seed: int = 1) -> dict:
    """Everything a fitted generator releases besides its noise primitives' outputs, by item: the
    noise calls made (``rec``), the ledger, the default n, the m synthetic datasets of default size
    drawn with ``sample_seed`` (rows, column order, dtypes, categories, values), the diagnostics
    (timings left out) and the saved file (:func:`_saved_file`)."""
    import tempfile

    res = gen.sample(m=m, seed=sample_seed)
    frames = res.datasets
    ledger = gen.ledger.to_frame()
    diag = {k: v for k, v in res.diagnostics.items() if not any(t in k for t in _TIMING)}
    with tempfile.TemporaryDirectory() as folder:
        saved = _saved_file(gen, folder)
    return {
        "noise calls": None if rec is None else [(c.step, c.mechanism, c.value.shape) for c in rec.calls],
        "ledger": repr(ledger.to_dict("records")),
        "relation": gen.relation,
        "default n": gen.default_n(),
        "rows": [len(f) for f in frames],
        "columns": [list(map(str, f.columns)) for f in frames],
        "dtypes": [{str(c): str(t) for c, t in f.dtypes.items()} for f in frames],
        "categories": [{str(c): list(f[c].cat.categories) for c in f.columns
                        if isinstance(f[c].dtype, pd.CategoricalDtype)} for f in frames],
        "synthetic values": [_frame_values(f) for f in frames],
        "diagnostics keys": sorted(res.diagnostics),
        "diagnostics values": diag,
        "saved file structure": {k: s for k, (s, _) in saved.items()},
        "saved file values": {k: v for k, (_, v) in saved.items()},
    }


def _difference(item: str, a, b) -> str:
    """A short text of what differs between two released items."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b), key=str)
        diff = [k for k in keys if a.get(k, "<absent>") != b.get(k, "<absent>")]
        shown = "; ".join(f"{k}: {_short(a.get(k, '<absent>'))} vs {_short(b.get(k, '<absent>'))}" for k in diff[:3])
        return shown + (f"; … ({len(diff)} entries differ)" if len(diff) > 3 else "")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b) and all(isinstance(x, dict) for x in a):
        return _difference(item, a[0], b[0]) if a[0] != b[0] else _difference(item, a[-1], b[-1])
    return f"{_short(a)} vs {_short(b)}"


def _short(v, width: int = 60) -> str:
    text = str(v)
    return text if len(text) <= width else text[:width - 1] + "…"


def leak_audit(method, epsilon: float = 1.0, delta: float | None = None, data=None, seed: int = 0,
               sample_seed: int = 1, m: int = 2, kinds=None, label: str | None = None, **options) -> pd.DataFrame:
    """Leaks that bypass the noise: fit ``method`` (a registry name, or a callable returning an
    unfitted generator) on D and on its neighbours D' (:func:`neighbours` of the last row: a value
    set to NA in ``age``, a row removed, an all-NA row added, a row replaced) with the same seed, the
    run on D' replaying D's noise transcript (:func:`~dpsynth.privacy.replay_noise_outputs`). Every
    released value is then D's, so everything :func:`released` lists must be identical: any
    difference is information about the private data that no ledgered mechanism released.

    ``data``: (df, schema), default :func:`leak_audit_data` (complete rows for the pMSE mechanism).
    Returns one row per neighbour and item: generator, neighbour, item, identical, leak, difference.
    ``leak`` is False for differences between datasets that are not neighbours under the
    generator's relation (a row added or removed under replace-one, where n is public), and for
    values (synthetic rows, stored numbers, diagnostics) when a noise call releases outside the
    replay hook (its output differs by noise; the structure must still be identical).

    >>> rep = leak_audit("independent", epsilon=1.0)
    >>> sorted(set(rep["neighbour"]))
    ['add all-NA', 'remove', 'replace', 'value to NA']
    >>> leaks = rep[rep["leak"]]  # empty when nothing is released outside the ledger
    """
    from ..generators import make_generator

    name = label or (method if isinstance(method, str) else getattr(method, "__name__", "custom"))
    opts = dict(options)
    delta = opts.pop("delta", delta)
    if callable(method):
        make = method
    else:
        make_generator(method, epsilon, delta, **opts)  # a bad name or option fails here, before any fit
        def make():
            return make_generator(method, epsilon, delta, **opts)
    if data is None:
        data = leak_audit_data(complete=isinstance(method, str) and method in COMPLETE_ONLY)
    df, schema = data
    if kinds is None and isinstance(method, str) and method in COMPLETE_ONLY:
        kinds = {"remove", "replace"}
    gen, base = fit_recorded(make, df, schema, seed)
    ref = released(gen, base, m, sample_seed)
    outputs = [c.output for c in base.calls]
    # a mechanism that draws its release without the replay hook (the pMSE mechanism's MCMC) releases
    # D''s own draw: values computed from it may differ by noise; their structure may not
    unreplayed = [c.step for c in base.calls if c.output is None]
    na_column = "age" if "age" in df.columns and df["age"].iloc[-1:].notna().all() else None
    rows = []
    for kind, d2 in neighbours(df, schema, row=-1, na_column=na_column).items():
        if kinds is not None and kind not in kinds:
            continue
        neighbour = neighbour_steps(gen.relation, kind) is not None
        try:
            gen2, rec = fit_recorded(make, d2, schema, seed, outputs)
            same_noise_calls(kind, base, rec)
        except AssertionError as err:  # the replay diverged: data-dependent control flow
            rows.append({"generator": name, "neighbour": kind, "item": "noise calls", "identical": False,
                         "leak": neighbour, "difference": str(err)})
            continue
        other = released(gen2, rec, m, sample_seed)
        for item, value in ref.items():
            same = value == other[item]
            diff = "" if same else _difference(item, value, other[item])
            comparable = not (unreplayed and item in _VALUE_ITEMS)
            if not same and not comparable:
                diff = (f"not comparable: {len(unreplayed)} noise call(s) release outside the replay hook "
                        f"({unreplayed[0]!r}); {diff}")
            elif not same and not neighbour:
                diff = f"not neighbours under {gen.relation} (n is public); {diff}"
            rows.append({"generator": name, "neighbour": kind, "item": item, "identical": same,
                         "leak": neighbour and comparable and not same, "difference": diff})
    return pd.DataFrame(rows, columns=["generator", "neighbour", "item", "identical", "leak", "difference"])


def leak_audit_all(methods=None, errors: str = "raise", **kw) -> pd.DataFrame:
    """:func:`leak_audit` of every configuration of :func:`leak_configurations` (every registered
    generator at small settings, and the missing-data wrappers around a replace-one generator too).
    ``errors="report"``: a configuration that fails to run on D gives one row (item "fit",
    ``leak`` False, the error as difference) instead of raising."""
    if errors not in ("raise", "report"):
        raise ValueError(f"errors must be 'raise' or 'report', got {errors!r}")
    frames = []
    for label, (method, epsilon, opts) in leak_configurations(methods).items():
        try:
            frames.append(leak_audit(method, epsilon, label=label, **kw, **opts))
        except Exception as err:  # noqa: BLE001 - reported per configuration, the others still run
            if errors == "raise":
                raise
            frames.append(pd.DataFrame([{"generator": label, "neighbour": "", "item": "fit", "identical": False,
                                         "leak": False, "difference": f"error: {type(err).__name__}: {err}"}]))
    return pd.concat(frames, ignore_index=True)
