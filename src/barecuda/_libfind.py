"""Finding NVIDIA's optional libraries (NVRTC, nvJitLink, NCCL...) without a toolkit.

Owns: the search order for a library that may come from an environment variable, a
pip wheel (``nvidia-*`` packages put their libraries under ``site-packages/nvidia``),
``CUDA_HOME``/``CUDA_PATH``, or the usual system folders. Pure Python, imports
nothing outside the standard library, never opens a library itself: callers dlopen
the candidates in order and report every failure with :func:`describe`.

API (shared by _nvrtc, _program and other modules)::

    candidates(spec) -> list[str]      # paths/names to try, best first
    describe(spec, tried) -> str       # "not found" message with the pip package to install
    LibSpec(...)                       # what to look for (see NVRTC, NVJITLINK below)
"""
import glob
import os
import sys

__all__ = ["LibSpec", "candidates", "describe", "site_dirs", "NVRTC", "NVJITLINK", "NCCL"]


class LibSpec:
    """What to look for.

    Parameters
    ----------
    title : str
        Human name (``"NVRTC"``).
    env : str
        Environment variable holding an explicit path, or several separated by
        ``os.pathsep`` (tried in order, nothing else is tried then).
    linux, windows : tuple of str
        File name patterns (``glob`` syntax) on each platform, best first.
    wheel_dirs : tuple of str
        Folders under ``site-packages`` that pip wheels install the library to.
    pip : tuple of str
        The pip packages that provide it (named in the "not found" message).
    toolkit : bool
        Whether ``CUDA_HOME``/``CUDA_PATH`` and ``/usr/local/cuda*`` can hold it.
    """

    __slots__ = ("title", "env", "linux", "windows", "wheel_dirs", "pip", "toolkit")

    def __init__(self, title, env, linux, windows, wheel_dirs, pip, toolkit=True):
        self.title = title
        self.env = env
        self.linux = tuple(linux)
        self.windows = tuple(windows)
        self.wheel_dirs = tuple(wheel_dirs)
        self.pip = tuple(pip)
        self.toolkit = toolkit

    @property
    def patterns(self):
        return self.windows if sys.platform == "win32" else self.linux


NVRTC = LibSpec(
    "NVRTC", "BARECUDA_NVRTC",
    linux=("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"),
    windows=("nvrtc64_13*.dll", "nvrtc64_12*.dll", "nvrtc64_*.dll"),
    wheel_dirs=("nvidia/cu13/lib", "nvidia/cu13/bin", "nvidia/cu13/bin/x86_64",
                "nvidia/cuda_nvrtc/lib", "nvidia/cuda_nvrtc/bin"),
    pip=("nvidia-cuda-nvrtc (CUDA 13)", "nvidia-cuda-nvrtc-cu12 (CUDA 12)"),
)
NVJITLINK = LibSpec(
    "nvJitLink", "BARECUDA_NVJITLINK",
    linux=("libnvJitLink.so.13", "libnvJitLink.so.12", "libnvJitLink.so"),
    windows=("nvJitLink_13*.dll", "nvJitLink_12*.dll", "nvJitLink*.dll"),
    wheel_dirs=("nvidia/cu13/lib", "nvidia/cu13/bin", "nvidia/cu13/bin/x86_64",
                "nvidia/nvjitlink/lib", "nvidia/nvjitlink/bin"),
    pip=("nvidia-nvjitlink (CUDA 13)", "nvidia-nvjitlink-cu12 (CUDA 12)"),
)
NCCL = LibSpec(
    "NCCL", "BARECUDA_NCCL",
    linux=("libnccl.so.2", "libnccl.so"),
    windows=(),
    wheel_dirs=("nvidia/nccl/lib", "nvidia/cu13/lib"),
    pip=("nvidia-nccl-cu13", "nvidia-nccl-cu12"),
)

_SYSTEM_DIRS = ("/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/local/cuda/targets/x86_64-linux/lib",
                "/usr/local/cuda/targets/sbsa-linux/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                "/usr/lib64", "/usr/lib")


def site_dirs():
    """``site-packages`` folders of this interpreter (and the user site), in ``sys.path`` order."""
    out = []
    for p in sys.path:
        if p and os.path.basename(p) in ("site-packages", "dist-packages") and p not in out:
            out.append(p)
    try:
        import site
        extra = list(site.getsitepackages()) + [site.getusersitepackages()]
    except Exception:        # embedded interpreters, virtualenv's old site.py
        extra = []
    for p in extra:
        if p and p not in out:
            out.append(p)
    return out


def _matches(folder, patterns):
    found = []
    for pat in patterns:
        for path in sorted(glob.glob(os.path.join(folder, pat)), reverse=True):
            if path not in found and os.path.isfile(path):
                found.append(path)
    return found


def candidates(spec, environ=None):
    """Paths (or bare names for the system loader) to try for ``spec``, best first.

    Order: the environment variable (exclusively, when set); the pip wheels'
    folders in every ``site-packages``; ``CUDA_HOME``/``CUDA_PATH``; ``/usr/local/cuda*``
    and the usual system library folders; finally the bare names, for the dynamic
    loader's own search (``LD_LIBRARY_PATH``, ldconfig cache).
    """
    env = os.environ if environ is None else environ
    override = env.get(spec.env)
    if override:
        return [p for p in override.split(os.pathsep) if p]
    out = []

    def add(paths):
        for p in paths:
            if p not in out:
                out.append(p)

    for site in site_dirs():
        for sub in spec.wheel_dirs:
            add(_matches(os.path.join(site, *sub.split("/")), spec.patterns))
    if spec.toolkit:
        for var in ("CUDA_HOME", "CUDA_PATH"):
            root = env.get(var)
            if root:
                for sub in ("lib64", "lib", os.path.join("lib", "x64"), "bin", os.path.join("bin", "x64")):
                    add(_matches(os.path.join(root, sub), spec.patterns))
        if sys.platform != "win32":
            dirs = list(_SYSTEM_DIRS)
            for root in sorted(glob.glob("/usr/local/cuda-*"), reverse=True):
                dirs += [os.path.join(root, "lib64"), os.path.join(root, "lib")]
            for d in dirs:
                add(_matches(d, spec.patterns))
    add([p for p in spec.patterns if "*" not in p])
    return out


def describe(spec, tried):
    """The "not found" message: what was tried and which pip package to install."""
    lines = [f"Could not load {spec.title}. Tried:"]
    lines += [f"  - {t}" for t in tried] or ["  (no candidate found)"]
    pkgs = " or ".join(f"`pip install {p.split(' ')[0]}`" + (" " + p.split(" ", 1)[1] if " " in p else "")
                       for p in spec.pip)
    lines.append(f"Install it with {pkgs}, or point barecuda at the library: {spec.env}=/path/to/library")
    return "\n".join(lines)
