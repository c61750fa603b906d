"""Issue 16: a saved generator is data only (dpsynth.persist), never a pickle."""
import json
import zipfile

import numpy as np
import pandas as pd
import pytest

import dpsynth
from dpsynth.generators import available_methods, make_generator
from dpsynth.generators.base import Generator
from dpsynth.persist import FORMAT, VERSION, load_object, to_bytes

from test_neighbours import SMALL


def _fit(method, toy):
    df, schema = toy
    opts = dict(SMALL.get(method, {}))
    delta = opts.pop("delta", None)
    data = df.dropna().reset_index(drop=True) if method == "pmse" else df
    return make_generator(method, 1.0, delta, **opts).fit(data, schema, seed=1)


@pytest.mark.parametrize("method", sorted(available_methods()))
def test_every_generator_round_trips_without_pickle(method, toy, tmp_path):
    gen = _fit(method, toy)
    path = tmp_path / "gen.npz"
    gen.save(path)
    with np.load(path, allow_pickle=False) as z:  # every entry is a plain numeric array
        entries = {k: z[k] for k in z.files}
    assert all(a.dtype != object for a in entries.values())
    head = json.loads(entries["structure"].tobytes())
    assert head["format"] == FORMAT and head["version"] == VERSION
    again = Generator.load(path)
    assert type(again) is type(gen) and again.method == gen.method
    a, b = gen.sample(n=40, m=2, seed=4), again.sample(n=40, m=2, seed=4)
    for x, y in zip(a.datasets, b.datasets):
        pd.testing.assert_frame_equal(x, y)
    pd.testing.assert_frame_equal(again.ledger.to_frame(), gen.ledger.to_frame())
    if hasattr(gen, "generator_"):  # a strategy and its wrapped generator still share one ledger
        assert again.generator_.ledger is again.ledger


def _crafted(tmp_path, root):
    head = {"format": FORMAT, "version": VERSION, "dpsynth": "0", "root": root}
    path = tmp_path / "evil.npz"
    np.savez(path, structure=np.frombuffer(json.dumps(head).encode(), dtype=np.uint8))
    return path


@pytest.mark.parametrize("root", [
    {"$obj": "os:system", "id": 0, "state": {"$dict": []}},
    {"$obj": "subprocess:Popen", "id": 0, "state": {"$dict": []}},
    {"$class": "builtins:eval"},
    {"$obj": "dpsynthevil.x:Y", "id": 0, "state": {"$dict": []}},
    {"$obj": "dpsynth.schema:os.system", "id": 0, "state": {"$dict": []}},  # not a class defined there
    {"$obj": "torch.nn.modules.module:torch.load", "id": 0, "state": {"$dict": []}},
    {"$pickle": "gASVAAAAAAAAAAA="},
])
def test_crafted_file_with_a_foreign_class_is_refused(tmp_path, root):
    with pytest.raises(ValueError):
        Generator.load(_crafted(tmp_path, root))


def test_pickle_files_and_other_versions_are_refused(tmp_path, toy):
    import pickle

    gen = dpsynth.IndependentMarginals(1.0).fit(*toy, seed=1)
    (tmp_path / "old.pkl").write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(ValueError, match="not a saved dpsynth generator"):
        Generator.load(tmp_path / "old.pkl")
    path = tmp_path / "g.npz"
    gen.save(path)
    with zipfile.ZipFile(path) as z:
        head = json.loads(np.load(path)["structure"].tobytes())
        names = z.namelist()
    head["version"] = VERSION + 1
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["structure"] = np.frombuffer(json.dumps(head).encode(), dtype=np.uint8)
    np.savez(tmp_path / "v2.npz", **arrays)
    with pytest.raises(ValueError, match="format version"):
        Generator.load(tmp_path / "v2.npz")
    assert "structure.npy" in names
    with pytest.raises(ValueError, match="not a PrivBayes"):
        dpsynth.PrivBayes.load(path)


def test_unsaveable_attribute_is_named_and_old_file_kept(tmp_path, toy):
    gen = dpsynth.IndependentMarginals(1.0).fit(*toy, seed=1)
    path = tmp_path / "g.npz"
    gen.save(path)
    before = path.read_bytes()
    gen.callback_ = lambda x: x
    with pytest.raises(TypeError, match="callback_"):
        gen.save(path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["g.npz"]


def test_generic_encoder_handles_pandas_torch_and_shared_objects():
    import torch

    shared = dpsynth.PrivacyLedger(1.0)
    obj = {
        "frame": pd.DataFrame({"c": pd.Categorical(["a", None], categories=["b", "a"]),
                               "i": pd.array([1, None], dtype="Int64"), "x": [0.5, np.nan],
                               "s": ["u", None]}),
        "series": pd.Series([1.0, 2.0], index=[3, 4], name="v"),
        "net": torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU()),
        "t": torch.arange(4.0), "rng": np.random.default_rng(3),
        "pair": (shared, shared), (1, "k"): {np.int64(2), 3}, "nan": float("nan"),
    }
    out = load_object(__import__("io").BytesIO(to_bytes(obj)))
    pd.testing.assert_frame_equal(out["frame"], obj["frame"])
    pd.testing.assert_series_equal(out["series"], obj["series"])
    x = torch.ones(5, 2)
    assert torch.equal(out["net"](x), obj["net"](x))
    assert torch.equal(out["t"], obj["t"]) and out[(1, "k")] == {2, 3} and np.isnan(out["nan"])
    assert out["rng"].random() == np.random.default_rng(3).random()
    assert out["pair"][0] is out["pair"][1] and isinstance(out["pair"][0], dpsynth.PrivacyLedger)


def test_class_paths_of_files_saved_before_a_module_became_a_package():
    """pmse.py became a package (its classes now live in modules inside it) and its _Col became
    ModelColumn: files saved before name the old paths, which still resolve; a class merely
    imported into a dpsynth module from elsewhere is still refused."""
    from dpsynth.generators.pmse import ModelColumn, PMSEMechanism
    from dpsynth.persist import resolve_class

    assert resolve_class("dpsynth.generators.pmse:PMSEMechanism") is PMSEMechanism
    assert resolve_class("dpsynth.generators.pmse:_Col") is ModelColumn
    with pytest.raises(ValueError, match="not a class defined"):
        resolve_class("dpsynth.generators.napsu:Domain")  # imported there from dpsynth.graphical
