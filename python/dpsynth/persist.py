"""Saving a fitted generator as data only: no pickle, nothing executed on load.

File format (``FORMAT``, version ``VERSION``): one numpy ``.npz`` archive, readable with
``np.load(path, allow_pickle=False)``. The entry ``structure`` holds UTF-8 JSON (as uint8 bytes)::

    {"format": "dpsynth-generator", "version": 1, "dpsynth": "<version>", "root": <node>}

and the entries ``a0``, ``a1``, … hold the numeric arrays the nodes point to. A node is a JSON
value (None, bool, int, float, str, list) or a tagged object:

====================  ==============================================================
``{"$tuple": [..]}``  tuple; likewise ``$set``, ``$frozenset``
``{"$dict": [[k, v], ..]}``  dict (keys are nodes too); ``$odict`` for OrderedDict
``{"$array": i}``     the numeric array ``a<i>`` (``$scalar``: a numpy scalar stored as ``a<i>``)
``{"$objarray": {..}}``  an object-dtype array as shape + a list of nodes
``{"$dtype": "int64"}``  a numpy dtype
``{"$tensor": i, ..}``   a torch tensor from ``a<i>`` (``$parameter``: an ``nn.Parameter``)
``{"$series": ..}``, ``{"$frame": ..}``, ``{"$index": ..}``  pandas objects, column by column
``{"$schema": {..}}``   a :class:`dpsynth.Schema` through ``Schema.to_dict``
``{"$class": "m:q"}``   a class; ``{"$obj": "m:q", "id": k, "state": node}`` an instance
``{"$ref": k}``         the instance with id k again (shared objects stay shared)
====================  ==============================================================

Only classes defined in a ``dpsynth.`` module, torch ``nn`` modules and numpy's bit generators
are rebuilt, by ``cls.__new__(cls)`` and setting the saved attributes (``__setstate__`` where the
class defines one); any other class path is refused with ValueError. Nothing is evaluated.

Example
-------
>>> import io, numpy as np
>>> buf = io.BytesIO()
>>> save_object({"w": np.arange(3.0), "k": (1, "a")}, buf)
>>> _ = buf.seek(0)
>>> out = load_object(buf)
>>> out["w"].tolist(), out["k"]
([0.0, 1.0, 2.0], (1, 'a'))
"""
from __future__ import annotations

import collections
import importlib
import io
import json
import os
import re
import sys

import numpy as np
import pandas as pd

from .version import __version__

FORMAT = "dpsynth-generator"
VERSION = 1
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def save_object(obj, file) -> None:
    """Write ``obj`` to ``file`` (a path or a binary file object) in the format above.
    TypeError names the attribute path of anything that cannot be saved as data (e.g. a function)."""
    enc = _Encoder()
    root = enc.node(obj, "obj")
    head = {"format": FORMAT, "version": VERSION, "dpsynth": __version__, "root": root}
    arrays = {"structure": np.frombuffer(json.dumps(head).encode("utf-8"), dtype=np.uint8)}
    arrays.update({f"a{i}": a for i, a in enumerate(enc.arrays)})
    np.savez(file, **arrays)


def load_object(file):
    """Read an object written by :func:`save_object`; ValueError for anything else (another
    format or version, a class outside the whitelist, an unknown tag)."""
    try:
        with np.load(file, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError) as err:
        raise ValueError(f"{_label(file)} is not a saved dpsynth generator (not a numpy .npz archive without "
                         f"pickled data: {err})") from None
    if "structure" not in arrays:
        raise ValueError(f"{_label(file)} is not a saved dpsynth generator (no 'structure' entry)")
    head = json.loads(arrays.pop("structure").tobytes().decode("utf-8"))
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise ValueError(f"{_label(file)} is not a saved dpsynth generator")
    if head.get("version") != VERSION:
        raise ValueError(f"{_label(file)} has format version {head.get('version')!r}; this dpsynth reads "
                         f"version {VERSION}: load it with the dpsynth that saved it ({head.get('dpsynth')})")
    try:
        return _Decoder(arrays).node(head["root"])
    except (TypeError, KeyError, AttributeError, IndexError) as err:
        raise ValueError(f"{_label(file)} is a malformed saved generator: {type(err).__name__}: {err}") from None


def _label(file) -> str:
    return str(file) if isinstance(file, (str, os.PathLike)) else "the file"


#: classes renamed since files were saved: (module, old name) → (module, new name)
MOVED = {("dpsynth.generators.pmse", "_Col"): ("dpsynth.generators.pmse", "ModelColumn")}


def class_path(cls) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def resolve_class(path: str) -> type:
    """The class named ``module:qualname`` if it is on the whitelist (defined in a ``dpsynth.``
    module, a torch ``nn`` module or parameter, a numpy bit generator); ValueError otherwise."""
    if not isinstance(path, str) or path.count(":") != 1:
        raise ValueError(f"refusing class path {path!r}: expected 'module:ClassName'")
    module, qualname = path.split(":")
    if not (_NAME.match(module) and _NAME.match(qualname)) or "<" in qualname:
        raise ValueError(f"refusing class path {path!r}")
    allowed = (module == "dpsynth" or module.startswith("dpsynth.") or module.startswith("torch.nn.")
               or module in ("numpy.random._pcg64", "numpy.random._philox", "numpy.random._sfc64",
                             "numpy.random._mt19937", "numpy.random._generator"))
    if not allowed:
        raise ValueError(f"refusing class {path!r}: a saved generator may only hold dpsynth classes, torch nn "
                         "modules and numpy random generators")
    module, qualname = MOVED.get((module, qualname), (module, qualname))
    cls = importlib.import_module(module)
    for part in qualname.split("."):
        cls = getattr(cls, part, None)
    # a dpsynth module that became a package re-exports its classes from the modules inside it
    inside = module.startswith("dpsynth") and isinstance(cls, type) and cls.__module__.startswith(module + ".")
    if not isinstance(cls, type) or (cls.__module__ != module and not inside) or cls.__qualname__ != qualname:
        raise ValueError(f"refusing class path {path!r}: not a class defined in {module}")
    if module.startswith("torch.nn."):
        import torch

        if not issubclass(cls, (torch.nn.Module, torch.nn.Parameter)):
            raise ValueError(f"refusing class {path!r}: only torch nn modules are rebuilt")
    return cls


def _state_of(obj) -> dict:
    """The attributes of an instance: its ``__getstate__`` where its class defines one, its
    ``__dict__`` and its ``__slots__``."""
    getstate = getattr(type(obj), "__getstate__", None)
    if getstate is not None and getstate is not object.__getstate__:
        state = obj.__getstate__()
        if isinstance(state, dict):
            return state
        raise TypeError(f"{class_path(type(obj))}.__getstate__ returns {type(state).__name__}, not a dict")
    state = dict(getattr(obj, "__dict__", {}))
    for klass in type(obj).__mro__:
        for slot in getattr(klass, "__slots__", ()):
            if slot not in ("__dict__", "__weakref__") and hasattr(obj, slot):
                state[slot] = getattr(obj, slot)
    return state


class _Encoder:
    def __init__(self):
        self.arrays: list[np.ndarray] = []
        self.ids: dict[int, int] = {}
        self.keep: list = []  # keeps encoded objects alive so that their ids stay unique

    def array(self, a: np.ndarray) -> int:
        self.arrays.append(np.asarray(a))  # (np.ascontiguousarray would turn a 0-d array into 1-d)
        return len(self.arrays) - 1

    def node(self, o, path: str):
        if o is None or type(o) in (bool, int, str):
            return o
        if type(o) is float:
            return o if np.isfinite(o) else {"$float": repr(o)}
        if isinstance(o, np.generic):
            return {"$scalar": self.array(np.asarray(o))}
        if isinstance(o, np.ndarray):
            if o.dtype.hasobject:
                return {"$objarray": {"shape": list(o.shape),
                                      "items": [self.node(v, f"{path}[{i}]") for i, v in enumerate(o.ravel())]}}
            return {"$array": self.array(o)}
        if isinstance(o, np.dtype):
            if o.names is not None:
                self._fail(o, path)
            return {"$dtype": "object" if o.hasobject else o.str}
        if type(o) is list:
            return [self.node(v, f"{path}[{i}]") for i, v in enumerate(o)]
        if type(o) in (tuple, set, frozenset):
            items = sorted(o, key=repr) if type(o) is not tuple else o
            return {f"${type(o).__name__}": [self.node(v, f"{path}[]") for v in items]}
        if type(o) in (dict, collections.OrderedDict):
            tag = "$dict" if type(o) is dict else "$odict"
            return {tag: [[self.node(k, f"{path} key"), self.node(v, f"{path}[{k!r}]")] for k, v in o.items()]}
        if isinstance(o, type):
            resolve_class(class_path(o))  # only whitelisted classes are written
            return {"$class": class_path(o)}
        pandas = self._pandas(o, path)
        if pandas is not None:
            return pandas
        torch_node = self._torch(o, path)
        if torch_node is not None:
            return torch_node
        from .schema import Schema

        if type(o) is Schema:
            return {"$schema": o.to_dict()}
        if isinstance(o, np.random.Generator):
            return {"$rng": self.node(o.bit_generator.state, f"{path}.bit_generator.state")}
        return self._instance(o, path)

    def _instance(self, o, path):
        cls = type(o)
        try:
            resolve_class(class_path(cls))
        except ValueError:
            self._fail(o, path)
        if id(o) in self.ids:
            return {"$ref": self.ids[id(o)]}
        self.ids[id(o)] = k = len(self.ids)
        self.keep.append(o)
        state = _state_of(o)
        return {"$obj": class_path(cls), "id": k,
                "state": {"$dict": [[name, self.node(v, f"{path}.{name}")] for name, v in state.items()]}}

    def _pandas(self, o, path):
        if isinstance(o, pd.DataFrame):
            return {"$frame": {"columns": [[self.node(c, f"{path} column"), self._series(o[c], f"{path}[{c!r}]")]
                                           for c in o.columns],
                               "index": self.node(o.index, f"{path}.index")}}
        if isinstance(o, pd.Series):
            return {"$series": {**self._series(o, path), "name": self.node(o.name, f"{path}.name"),
                                "index": self.node(o.index, f"{path}.index")}}
        if isinstance(o, pd.RangeIndex):
            return {"$index": {"range": [o.start, o.stop, o.step], "name": self.node(o.name, f"{path}.name")}}
        if isinstance(o, pd.Index) and not isinstance(o, pd.MultiIndex):
            return {"$index": {**self._series(pd.Series(o), path), "name": self.node(o.name, f"{path}.name")}}
        if isinstance(o, pd.CategoricalDtype):
            return {"$catdtype": {"categories": self.node(list(o.categories), path), "ordered": bool(o.ordered)}}
        return None

    def _series(self, s: pd.Series, path) -> dict:
        """The values of a column: category codes + categories, or the values with their dtype."""
        if isinstance(s.dtype, pd.CategoricalDtype):
            return {"codes": self.node(s.cat.codes.to_numpy(), path), "dtype": self.node(s.dtype, path)}
        mask = s.isna().to_numpy()
        if isinstance(s.dtype, np.dtype) and not s.dtype.hasobject:
            return {"values": self.node(s.to_numpy(), path), "dtype": str(s.dtype)}
        values = s.astype(object).where(~mask, None).tolist()
        return {"values": self.node(values, path), "dtype": str(s.dtype)}

    def _torch(self, o, path):
        torch = sys.modules.get("torch")  # an object can only be a tensor if torch is loaded: never import it here
        if torch is None:
            return None
        if isinstance(o, torch.nn.Parameter):
            return {"$parameter": self._tensor(o.data, path), "requires_grad": bool(o.requires_grad)}
        if isinstance(o, torch.Tensor):
            return self._tensor(o, path)
        if isinstance(o, torch.dtype):
            return {"$torchdtype": str(o).removeprefix("torch.")}
        if isinstance(o, torch.device):
            return {"$device": "cpu"}
        return None

    def _tensor(self, t, path) -> dict:
        t = t.detach().cpu()
        if t.is_sparse or t.dtype not in _torch_dtypes():
            self._fail(t, path)
        return {"$tensor": self.array(t.numpy()), "dtype": str(t.dtype).removeprefix("torch."),
                "requires_grad": bool(t.requires_grad)}

    @staticmethod
    def _fail(o, path):
        raise TypeError(f"cannot save {path} ({type(o).__module__}.{type(o).__qualname__}) as data; a fitted "
                        "generator may hold numbers, strings, containers, numpy arrays, torch tensors and modules, "
                        "pandas objects and dpsynth objects")


def _torch_dtypes() -> set:
    """The torch dtypes a saved tensor may have (torch imported on first use, not with dpsynth)."""
    import torch as _torch

    return {_torch.float64, _torch.float32, _torch.float16, _torch.int64, _torch.int32, _torch.int16,
            _torch.int8, _torch.uint8, _torch.bool, _torch.complex64, _torch.complex128}


_TAGS = {"float", "scalar", "array", "objarray", "dtype", "tuple", "set", "frozenset", "dict", "odict", "class",
         "schema", "rng", "ref", "obj", "series", "frame", "index", "catdtype", "tensor", "parameter", "torchdtype",
         "device"}


class _Decoder:
    def __init__(self, arrays: dict):
        self.arrays = arrays
        self.objects: dict[int, object] = {}

    def array(self, i) -> np.ndarray:
        key = f"a{int(i)}"
        if key not in self.arrays:
            raise ValueError(f"the file refers to a missing array {key}")
        return self.arrays[key]

    def node(self, n):
        if n is None or isinstance(n, (bool, int, float, str)):
            return n
        if isinstance(n, list):
            return [self.node(v) for v in n]
        if not isinstance(n, dict) or len([k for k in n if k.startswith("$")]) != 1:
            raise ValueError(f"malformed node in the saved generator: {str(n)[:80]}")
        tag = next(k for k in n if k.startswith("$"))
        if tag[1:] not in _TAGS:
            raise ValueError(f"unknown tag {tag!r} in the saved generator")
        return getattr(self, "_" + tag[1:])(n[tag], n)

    def _float(self, v, n):
        if v not in ("nan", "inf", "-inf"):
            raise ValueError(f"bad float {v!r}")
        return float(v)

    def _scalar(self, i, n):
        return self.array(i)[()]

    def _array(self, i, n):
        return self.array(i)

    def _objarray(self, v, n):
        items = [self.node(x) for x in v["items"]]
        out = np.empty(len(items), dtype=object)
        out[:] = items
        return out.reshape(v["shape"])

    def _dtype(self, v, n):
        return np.dtype(object) if v == "object" else np.dtype(str(v))

    def _tuple(self, v, n):
        return tuple(self.node(x) for x in v)

    def _set(self, v, n):
        return {self.node(x) for x in v}

    def _frozenset(self, v, n):
        return frozenset(self.node(x) for x in v)

    def _dict(self, v, n):
        return {self.node(k): self.node(x) for k, x in v}

    def _odict(self, v, n):
        return collections.OrderedDict((self.node(k), self.node(x)) for k, x in v)

    def _class(self, v, n):
        return resolve_class(v)

    def _schema(self, v, n):
        from .schema import Schema

        return Schema.from_dict(v)

    def _rng(self, v, n):
        state = self.node(v)
        bit = resolve_class(f"numpy.random._{state['bit_generator'].lower()}:{state['bit_generator']}")
        gen = bit()
        gen.state = state
        return np.random.Generator(gen)

    def _ref(self, k, n):
        if k not in self.objects:
            raise ValueError(f"the saved generator refers to object {k} before defining it")
        return self.objects[k]

    def _obj(self, path, n):
        cls = resolve_class(path)
        obj = cls.__new__(cls)
        self.objects[n.get("id")] = obj  # before the state: an attribute may refer back to it
        state = self.node(n["state"])
        if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
            raise ValueError(f"malformed state of {path}")
        setstate = getattr(cls, "__setstate__", None)
        if setstate is not None and setstate is not getattr(object, "__setstate__", None):
            obj.__setstate__(state)
        else:
            slots = {s for klass in cls.__mro__ for s in getattr(klass, "__slots__", ())}
            for name, value in state.items():
                if name in slots or not hasattr(obj, "__dict__"):
                    object.__setattr__(obj, name, value)
                else:
                    obj.__dict__[name] = value
        return obj

    def _series_values(self, v) -> pd.Series:
        if "codes" in v:
            dtype = self.node(v["dtype"])
            return pd.Series(pd.Categorical.from_codes(self.node(v["codes"]), dtype=dtype))
        return pd.Series(self.node(v["values"]), dtype=str(v["dtype"]))

    def _series(self, v, n):
        s = self._series_values(v)
        s.index = self.node(v["index"])
        s.name = self.node(v["name"])
        return s

    def _frame(self, v, n):
        index = self.node(v["index"])
        cols = {}
        for name, spec in v["columns"]:
            s = self._series_values(spec)
            s.index = index
            cols[self.node(name)] = s
        return pd.DataFrame(cols, index=index)

    def _index(self, v, n):
        if "range" in v:
            return pd.RangeIndex(*v["range"], name=self.node(v["name"]))
        return pd.Index(self._series_values(v), name=self.node(v["name"]))

    def _catdtype(self, v, n):
        return pd.CategoricalDtype(self.node(v["categories"]), ordered=bool(v["ordered"]))

    def _tensor(self, i, n):
        import torch

        dtype = getattr(torch, str(n.get("dtype")), None)
        if dtype not in _torch_dtypes():
            raise ValueError(f"bad tensor dtype {n.get('dtype')!r}")
        t = torch.from_numpy(np.array(self.array(i))).to(dtype)
        return t.requires_grad_(bool(n.get("requires_grad"))) if t.is_floating_point() else t

    def _parameter(self, v, n):
        import torch

        return torch.nn.Parameter(self.node(v).detach(), requires_grad=bool(n.get("requires_grad")))

    def _torchdtype(self, v, n):
        import torch

        dtype = getattr(torch, str(v), None)
        if dtype not in _torch_dtypes():
            raise ValueError(f"bad torch dtype {v!r}")
        return dtype

    def _device(self, v, n):
        import torch

        return torch.device("cpu")


def to_bytes(obj) -> bytes:
    """The saved form of ``obj`` as bytes (see :func:`save_object`)."""
    buf = io.BytesIO()
    save_object(obj, buf)
    return buf.getvalue()
