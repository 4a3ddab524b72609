"""The module walk of a call path: which barecuda modules' code runs, in order of first entry.

    python tools/walk.py            # build a line-traced copy in build/walk/, then walk
    python tools/walk.py --no-build # walk with the traced copy already there

The walks (docs/architecture.md, "The graph wing"): a capture + ``set_arg`` + replay
(``with s.capture() as g: k.launch(...)``, ``g.kernel_nodes()``, ``g.instantiate()``,
``exe.kernel_node(n)``, ``h.set_arg(i, v)``, ``exe.launch(s)``), and the loop a decode
step repeats (``set_arg`` + ``launch``), against the driver double (tests/fakecuda).

How: a release build runs no Python-visible frames for Cython code, so this builds a
copy of the tree with ``BARECUDA_DEBUG=1`` (line tracing on, the same modules and the
same calls) in ``build/walk/`` and runs each path under ``sys.setprofile``: every
Cython function (``def``, ``cdef``, ``cpdef``) reports a call with its source file. A
module counts where its own ``.pyx``/``.py`` code runs; inline helpers from a ``.pxd``
and C headers are compiled into their caller and do not count. Each path runs once
untraced first, so imports and first-use caches are not part of the walk.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import io

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WALK = os.path.join(ROOT, "build", "walk")
FAKE_LIB = os.path.join(ROOT, "tests", "fakecuda", "build", "libfakecuda.so")


def build():
    """Copy the sources to build/walk/ and build them there with line tracing."""
    os.makedirs(WALK, exist_ok=True)
    buf = io.BytesIO()
    skip = (".so", ".c", ".html", ".pyc")
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in ("src", "include", "setup.py", "pyproject.toml", "README.md", "LICENSE"):
            tar.add(os.path.join(ROOT, name), arcname=name, filter=lambda t: None if (
                t.name.endswith(skip) and not t.name.startswith("src/csrc/")) or "__pycache__" in t.name
                or t.name.endswith("_build_info.py") else t)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        tar.extractall(WALK, filter="data")
    env = dict(os.environ, BARECUDA_DEBUG="1")
    p = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "-q", "-j", "2"],
                       cwd=WALK, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"tools/walk.py: the traced build failed:\n{p.stdout[-4000:]}{p.stderr[-4000:]}")


def fake_lib():
    """The driver double, compiled as tests/conftest.py does when it is missing."""
    if not os.path.exists(FAKE_LIB):
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        import conftest  # noqa: F401  (builds the double at import)
    return FAKE_LIB


def _module_of(filename):
    """``barecuda.graph._exec`` for .../barecuda/graph/_exec.pyx; None for .pxd and others."""
    path = filename.replace(os.sep, "/")
    if "barecuda/" not in path or not path.endswith((".pyx", ".py")):
        return None
    rel = path[path.rindex("barecuda/"):]
    return os.path.splitext(rel)[0].replace("/", ".")


def walk(fn):
    """The barecuda modules whose code runs during ``fn()``, in order of first entry."""
    seen = []

    def prof(frame, event, arg):
        if event == "call":
            mod = _module_of(frame.f_code.co_filename)
            if mod is not None and mod not in seen:
                seen.append(mod)
    fn()                      # untraced: imports, first-use caches
    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


def paths():
    """The call paths walked: name -> a function running the path once."""
    import barecuda as bc
    from barecuda._ptx_samples import GRAPH_VADD
    k = bc.Module.from_ptx(GRAPH_VADD).get_kernel("gvadd")
    s = bc.Stream()
    a, b, o = bc.alloc(256), bc.alloc(256), bc.alloc(256)

    def capture_set_arg_replay():
        with s.capture() as g:
            k.launch(1, 32, o, a, b, 64, stream=s)
        exe = g.instantiate()
        h = exe.kernel_node(g.kernel_nodes()[0])
        h.set_arg(3, 32)
        exe.launch(s)
        s.synchronize()

    with s.capture() as g:
        k.launch(1, 32, o, a, b, 64, stream=s)
    exe = g.instantiate()
    h = exe.kernel_node(g.kernel_nodes()[0])

    def set_arg_launch():
        h.set_arg(3, 16)
        h.set_arg(0, o)
        exe.launch(s)

    def launch():
        k.launch(1, 32, o, a, b, 64, stream=s)

    return {"capture + set_arg + replay": capture_set_arg_replay,
            "set_arg + launch (the decode loop)": set_arg_launch,
            "launch (DeviceBuffers)": launch}


def run():
    from barecuda._build_info import BUILD
    if BUILD["mode"] != "debug":
        sys.exit("tools/walk.py: this barecuda is a release build (no traced frames); run it "
                 "without --child")
    for name, fn in paths().items():
        mods = walk(fn)
        print(f"{name} ({len(mods)}): " + " -> ".join(m.removeprefix("barecuda.") for m in mods))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-build", action="store_true", help="use the traced copy already in build/walk/")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return run()
    if not args.no_build:
        build()
    env = dict(os.environ, PYTHONPATH=os.path.join(WALK, "src"), BARECUDA_LIBCUDA=fake_lib())
    subprocess.run([sys.executable, os.path.abspath(__file__), "--child"], cwd=WALK, env=env, check=True)


if __name__ == "__main__":
    main()
