"""Every public name has a docstring: the names in the public modules' ``__all__``, and
the public methods and properties of the public classes among them."""
import inspect
import types

import barecuda
import barecuda.graph
import barecuda.ipc
import barecuda.nccl

PUBLIC_MODULES = (barecuda, barecuda.graph, barecuda.ipc, barecuda.nccl)


def _doc(obj, name):
    """obj's own docstring, without the signature line Cython's embedsignature adds."""
    doc = (getattr(obj, "__doc__", None) or "").strip()
    lines = [line for line in doc.splitlines() if line.strip()]
    if lines and lines[0].startswith(f"{name}(") and len(lines) == 1:
        return ""                       # only the embedded signature
    return doc


def _undocumented():
    missing, seen = [], set()
    for mod in PUBLIC_MODULES:
        for name in mod.__all__:
            obj = getattr(mod, name)
            if isinstance(obj, (types.ModuleType, str, int, float, dict, tuple, list)) or id(obj) in seen:
                continue                # modules have their own docstrings; constants have none
            seen.add(id(obj))
            where = f"{mod.__name__}.{name}"
            own = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
            if not (own or "").strip() or (not inspect.isclass(obj) and not _doc(obj, name)):
                missing.append(where)
            if not inspect.isclass(obj):
                continue
            for attr, value in vars(obj).items():
                if attr.startswith("_") or not (callable(value) or inspect.isdatadescriptor(value)
                                                or isinstance(value, (classmethod, staticmethod))):
                    continue
                if not _doc(value, attr):
                    missing.append(f"{where}.{attr}")
    return missing


def test_every_public_name_has_a_docstring():
    assert _undocumented() == []


def test_the_check_sees_what_it_checks():
    """The walk reaches properties, cdef attributes and methods of extension types."""
    assert _doc(barecuda.DeviceBuffer.__dict__["nbytes"], "nbytes")
    assert _doc(barecuda.Device.__dict__["ordinal"], "ordinal")          # a cdef readonly attribute
    assert _doc(barecuda.Kernel.__dict__["launch"], "launch")
    assert not _doc(types.SimpleNamespace(__doc__="f(self)"), "f")        # signature only: no docstring
