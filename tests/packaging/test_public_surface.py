"""The package's public surface: __all__, stubs for every extension module, build info."""
import importlib
import importlib.machinery
import os
import pkgutil
import types

import barecuda as bc


def test_all_lists_exactly_the_public_names():
    public = {n for n, v in vars(bc).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    assert sorted(public - set(bc.__all__)) == [], "re-exported but missing from barecuda.__all__"
    assert sorted(set(bc.__all__) - set(vars(bc))) == [], "in __all__ but not defined"
    assert len(bc.__all__) == len(set(bc.__all__)), "duplicates in __all__"


def _extension_modules():
    """(name, path) of every compiled module in the barecuda package tree."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    for info in pkgutil.walk_packages(bc.__path__, "barecuda."):
        spec = importlib.util.find_spec(info.name)
        if spec is not None and spec.origin and spec.origin.endswith(suffixes):
            yield info.name, spec.origin


def test_every_extension_module_has_a_stub_and_a_docstring():
    mods = list(_extension_modules())
    assert len(mods) >= 8, mods
    for name, origin in mods:
        if name == "barecuda._cyutility":       # Cython's shared helper code (setup.py), no API of ours
            continue
        stub = os.path.join(os.path.dirname(origin), name.rsplit(".", 1)[1] + ".pyi")
        assert os.path.exists(stub), f"{name} has no .pyi stub"
        assert (importlib.import_module(name).__doc__ or "").strip(), f"{name} has no module docstring"
    assert os.path.exists(os.path.join(os.path.dirname(bc.__file__), "py.typed"))


def test_build_info_says_how_barecuda_was_built():
    from barecuda._build_info import BUILD
    assert BUILD["mode"] in ("debug", "release")
    assert int(BUILD["cython"].split(".")[0]) >= 3
    assert BUILD["compiler"] and BUILD["key"]
    assert ("-g0" in BUILD["compile_args"]) == (BUILD["mode"] == "release") or BUILD["compiler"] == "msvc"


def test_ipc_names_live_in_barecuda_ipc_only():
    """One spelling per name: the IPC classes are barecuda.ipc's; the old top-level
    spellings still work for one release, with a DeprecationWarning naming the new one."""
    import warnings
    import barecuda.ipc as ipc
    names = ("IpcAllocator", "IpcMemoryPool", "IpcError", "IpcStaleHandleError", "IpcForeignHostError",
             "IpcAlreadyOpenError")
    assert not set(names) & set(bc.__all__) and set(names) <= set(ipc.__all__)
    for n in names:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            assert getattr(bc, n) is getattr(ipc, n)
        assert [x.category for x in w] == [DeprecationWarning] and f"barecuda.ipc.{n}" in str(w[0].message)


def test_graph_names_come_from_the_wing_modules():
    """barecuda.graph assembles its modules' own __all__; barecuda re-exports each name."""
    import barecuda.graph as g
    from barecuda.graph import _args, _capture, _exec, _graph, _host_node, _nodes
    parts = [_graph, _nodes, _exec, _args, _capture, _host_node]
    assert g.__all__ == [n for m in parts for n in m.__all__]
    for m in parts:
        for n in m.__all__:
            assert getattr(g, n) is getattr(m, n) is getattr(bc, n), n


# The modules the top level is assembled from, in barecuda/__init__.py's order.
_SOURCES = ("_errors", "_loader", "_device", "_stream", "_buffer", "_allocators", "_interop", "_copy", "_host",
            "_managed", "_staging", "_pool", "_driver_pool", "_pinned_pool", "_module", "_launch", "_plan", "_launch_config",
            "_program", "_topology")


def test_the_top_level_is_its_modules_own_all():
    """Each module declares its own __all__ (its stub the same list); barecuda.__all__ is
    those lists in order, then the graph wing's, then the public submodules."""
    import barecuda.graph as g
    mods = [importlib.import_module(f"barecuda.{m}") for m in _SOURCES]
    assert bc.__all__ == ["__version__", *[n for m in mods for n in m.__all__], *g.__all__, "graph", "ipc", "nccl"]
    for m in mods:
        stub = open(os.path.join(os.path.dirname(bc.__file__), m.__name__.rsplit(".", 1)[1] + ".pyi")).read()
        assert f"__all__ = [" in stub, f"{m.__name__}.pyi has no __all__"
        for n in m.__all__:
            assert getattr(bc, n) is getattr(m, n), n


def test_old_spellings_warn_and_give_the_same_value(fake, vadd):
    """One spelling per fact: ``is_closed`` and ``handle_int``; ``closed`` and ``handle``
    still work for one release, with a DeprecationWarning naming the new spelling."""
    import warnings
    b = bc.alloc(16)
    p = bc.PinnedBuffer(16)
    pool = bc.DriverMemoryPool()
    cases = [(b, "closed", "is_closed"), (p, "closed", "is_closed"), (vadd.module, "closed", "is_closed"),
             (vadd, "handle", "handle_int"), (pool, "handle", "handle_int")]
    for obj, old, new in cases:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            assert getattr(obj, old) == getattr(obj, new)
        assert [x.category for x in w] == [DeprecationWarning], (obj, old)
        assert f".{new}" in str(w[0].message) and w[0].filename == __file__
    b.close()
    p.close()
    assert b.is_closed and p.is_closed and not vadd.module.is_closed
    assert bc.LibraryNotFoundError is bc.DriverNotFoundError.__mro__[1]
