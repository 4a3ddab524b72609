"""Build barecuda: Cython extensions, no CUDA toolkit, headers or driver needed.

Every ``src/barecuda/**/*.pyx`` becomes one extension module; ``C_SOURCES`` adds
hand-written C files (they live in ``src/csrc/``) to the extension that needs them.
Cython's helper code (function objects, memoryviews...) is generated once, into the
shared utility module ``barecuda._cyutility``, instead of into every module.

Build modes
-----------
release (default)
    ``-O2 -g0``, linked with ``-s`` on Linux (stripped), bounds checks off.
debug (``BARECUDA_DEBUG=1``)
    bounds checks, line tracing (``CYTHON_TRACE_NOGIL``) and ``-g``.

The mode, the Cython directives, the compiler flags and the Cython version form a
*build key*, stored in ``build/barecuda-build-key.json``. When it differs from the
last build's (or there was none), every module is re-cythonized and recompiled, so
that a debug build never leaks into a release build. The key is also written into
``src/barecuda/_build_info.py`` (generated, not in git), which ``python -m
barecuda`` shows.

Incremental builds
------------------
A module's C file is regenerated only when its *content key* changed: the build key
plus the content of its ``.pyx`` and of every project ``.pxd``/``.pxi`` it cimports or
includes (``build/barecuda-cython-keys.json`` keeps the keys of the last build). Cython's
own ``.pxd`` files are covered by its version in the build key, not by their time
stamps: pip's isolated build installs a fresh Cython for every ``pip install .``, whose
files are always newer than the generated C. An unchanged C file keeps its time stamp,
so setuptools then skips its compile too.

Parallel builds
---------------
Cython and the C compiler both run on every core by default; ``BARECUDA_BUILD_JOBS=N``
(or ``build_ext -j N``) sets the number of jobs, ``1`` builds serially.

A build that finds no ``.pyx`` file fails loudly instead of producing a wheel
without extension modules.
"""
import glob
import hashlib
import json
import os
import platform
import sys
import sysconfig

import Cython
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext as _build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
os.chdir(HERE)   # every path below is relative to the source root

DEBUG = os.environ.get("BARECUDA_DEBUG", "") not in ("", "0")
MSVC = sys.platform == "win32"
LINUX = sys.platform.startswith("linux")
JOBS = int(os.environ.get("BARECUDA_BUILD_JOBS", "0")) or os.cpu_count() or 1

# The shared utility module (Cython 3.1+): one copy of Cython's helper code for all modules.
SHARED_UTILITY = "barecuda._cyutility"

directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "embedsignature": True,
    "cdivision": True,
    # Free-threaded CPython (3.13t, 3.14t) imports the modules without re-enabling the
    # GIL; no effect on a GIL build. docs/packaging.md ("Free-threaded Python").
    "freethreading_compatible": True,
}
macros = []
if DEBUG:
    directives["linetrace"] = True
    macros.append(("CYTHON_TRACE_NOGIL", "1"))

if MSVC:
    compile_args = ["/O2", "/Zi"] if DEBUG else ["/O2"]
    link_args = ["/DEBUG"] if DEBUG else []
    libraries = []
else:
    compile_args = ["-O2", "-std=gnu11", "-Wno-unused-function"]
    compile_args += ["-g"] if DEBUG else ["-g0"]
    link_args = [] if DEBUG or not LINUX else ["-s"]
    libraries = ["dl", "pthread"] if LINUX else []

# Extra hand-written C sources per extension module (paths relative to the root).
C_SOURCES = {
    "barecuda._staging": ["src/csrc/bc_staging.c"],
}

include_dirs = ["include", "src/csrc"]
HEADERS = sorted(glob.glob("include/barecuda/*.h") + glob.glob("src/csrc/*.h"))


def _module_name(pyx):
    rel = os.path.relpath(pyx, "src")
    return os.path.splitext(rel)[0].replace(os.sep, ".").replace("/", ".")


def _c_path(name):
    return os.path.join("src", *name.split(".")) + ".c"


def _extension(name, sources):
    return Extension(name, sources, include_dirs=include_dirs, define_macros=macros,
                     extra_compile_args=compile_args, extra_link_args=link_args,
                     libraries=libraries, depends=HEADERS)


extensions = [_extension(_module_name(pyx), [pyx] + C_SOURCES.get(_module_name(pyx), []))
              for pyx in sorted(glob.glob("src/barecuda/**/*.pyx", recursive=True))]
if not extensions:
    sys.exit("setup.py: no src/barecuda/**/*.pyx found -- refusing to build barecuda without its "
             "extension modules (an sdist must carry the .pyx, .pxd and include/ files; see MANIFEST.in)")
unknown = sorted(set(C_SOURCES) - {e.name for e in extensions})
if unknown:
    sys.exit(f"setup.py: C_SOURCES names modules without a .pyx: {unknown}")
extensions.append(_extension(SHARED_UTILITY, [_c_path(SHARED_UTILITY)]))

COMPILER = "msvc" if MSVC else (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
BUILD_INFO = {
    "mode": "debug" if DEBUG else "release",
    "cython": Cython.__version__,
    "compiler": COMPILER,
    "compile_args": " ".join(compile_args),
    "link_args": " ".join(link_args),
    "python": platform.python_version(),
    "platform": sysconfig.get_platform(),
}
# What the generated C and the objects depend on (not the Python version: setuptools
# keeps objects per interpreter apart, and Cython's C serves every version).
BUILD_KEY = hashlib.sha256(json.dumps(
    {"mode": BUILD_INFO["mode"], "cython": Cython.__version__, "compiler": COMPILER,
     "compile_args": compile_args, "link_args": link_args, "directives": directives, "macros": macros,
     "shared_utility": SHARED_UTILITY},
    sort_keys=True).encode()).hexdigest()[:16]
BUILD_INFO["key"] = BUILD_KEY
KEY_FILE = os.path.join("build", "barecuda-build-key.json")
CYTHON_KEYS_FILE = os.path.join("build", "barecuda-cython-keys.json")


def _write_build_info():
    text = ('"""How this copy of barecuda was built (generated by setup.py; not in git)."""\n'
            "from typing import Dict\n\n"
            f"BUILD: Dict[str, str] = {json.dumps(BUILD_INFO, indent=4, sort_keys=True)}\n")
    path = os.path.join("src", "barecuda", "_build_info.py")
    try:
        with open(path) as f:
            if f.read() == text:
                return
    except OSError:
        pass
    with open(path, "w") as f:
        f.write(text)


def _read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _write_json(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)


def _key_changed():
    last = _read_json(KEY_FILE)
    return not isinstance(last, dict) or last.get("key") != BUILD_KEY


def _content_keys(pyx_files):
    """``{pyx: key}``: the build key plus the content of the ``.pyx`` and of every project
    file it cimports or includes (found by Cython's own dependency scanner)."""
    from Cython.Build.Dependencies import DependencyTree
    from Cython.Compiler.Main import CompilationOptions, Context, default_options
    ctx = Context.from_options(CompilationOptions(default_options, include_path=["src"]))
    tree = DependencyTree(ctx, quiet=True)
    root = os.path.join(HERE, "")
    keys = {}
    for pyx in pyx_files:
        h = hashlib.sha256(BUILD_KEY.encode())
        for dep in sorted(os.path.abspath(d) for d in tree.all_dependencies(pyx)):
            if dep.startswith(root):            # Cython's own files: its version is in BUILD_KEY
                h.update(os.path.relpath(dep, HERE).encode())
                with open(dep, "rb") as f:
                    h.update(hashlib.sha256(f.read()).digest())
        keys[pyx] = h.hexdigest()[:32]
    return keys


class build_ext(_build_ext):
    """Cythonize at build time (not when an sdist is made): only the modules whose
    content key changed, everything when the build key changed; compile in parallel."""

    def finalize_options(self):
        if self.parallel is None:               # `build_ext -j N` wins over BARECUDA_BUILD_JOBS
            self.parallel = JOBS if JOBS > 1 else None
        super().finalize_options()

    def run(self):
        # Here, not in finalize_options: pip's metadata step finalizes this command too.
        keys = self._cythonize()
        super().run()
        _write_json(KEY_FILE, BUILD_INFO)
        _write_json(CYTHON_KEYS_FILE, keys)
        _prebuild_kernels(self)        # build-time hooks go here, after the extensions

    def _cythonize(self):
        """Point every extension at its C file, regenerating the stale ones; returns the
        content keys to record once the build succeeded."""
        from Cython.Build import cythonize
        changed = _key_changed()
        if changed:
            self.force = True
        exts = self.extensions
        pyx_of = {e.name: e.sources[0] for e in exts if e.sources[0].endswith(".pyx")}
        keys = _content_keys(sorted(pyx_of.values()))
        last = {} if changed else (_read_json(CYTHON_KEYS_FILE) or {})
        stale = [e for e in exts if e.name in pyx_of and
                 (last.get(pyx_of[e.name]) != keys[pyx_of[e.name]] or not os.path.exists(_c_path(e.name)))]
        # The shared module's C depends only on the build key (Cython version, directives).
        shared = [e for e in exts if e.name == SHARED_UTILITY
                  and (changed or not os.path.exists(_c_path(SHARED_UTILITY)))]
        done = {}
        if stale or shared:
            jobs = self.parallel if isinstance(self.parallel, int) and self.parallel > 1 else 0
            done = {e.name: e for e in cythonize(
                [_extension(e.name, list(e.sources)) for e in stale + shared],
                compiler_directives=directives, include_path=["src"], force=True, quiet=True,
                nthreads=jobs, shared_utility_qualified_name=SHARED_UTILITY)}
        for e in exts:
            if e.name in done:
                e.sources = list(done[e.name].sources)
            elif e.name in pyx_of:              # up to date: compile its C file as it is
                e.sources = [_c_path(e.name)] + e.sources[1:]
        return keys


# --- kernels: prebuilt cubins/PTX for the wheel (src/barecuda/kernels/_prebuild.py, docs/kernels.md).
# Runs after the extensions are built, in a child interpreter that imports the fresh build.
# BARECUDA_PREBUILD_KERNELS=1: always (fails without NVRTC); =0: never; unset: only for
# non-in-place builds (wheels) when NVRTC is importable here, so `pip install .` without
# NVRTC and in-place developer builds stay fast (kernels then compile on first use).
def _prebuild_kernels(cmd):
    import importlib.util
    import subprocess
    def importable(name):        # find_spec of a dotted name raises when its parent package is absent
        try:
            return importlib.util.find_spec(name) is not None
        except ImportError:
            return False
    want = os.environ.get("BARECUDA_PREBUILD_KERNELS", "").strip()
    if want == "0" or (not want and (cmd.inplace or not (importable("nvidia.cu13") or importable("nvidia.cuda_nvrtc")))):
        return
    root = os.path.abspath("src" if cmd.inplace else cmd.build_lib)
    out = os.path.join(root, "barecuda", "kernels", "prebuilt")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    subprocess.run([sys.executable, "-m", "barecuda.kernels._prebuild", "--out", out], env=env, check=True)


_write_build_info()
setup(ext_modules=extensions, cmdclass={"build_ext": build_ext})
