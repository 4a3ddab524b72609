"""Finding the libraries barecuda opens at run time, without a toolkit: one finder for all.

Owns: the table of those libraries (the CUDA driver, NVRTC, nvJitLink, NCCL, cuBLASLt),
each library's search order, the pip packages that provide it for each CUDA major
version, and the one wording of every "library not found" message. Pure Python,
imports nothing outside the standard library (``cuda-pathfinder`` is asked when it is
installed), never opens a library itself: ``_libopen.open_table`` dlopens the candidates in order and
reports every failure with :func:`describe` (the driver's loader does the same itself).

API (used by _loader, _libopen, _nvrtc, _nccl, _program and the doctor)::

    candidates(spec) -> list[str]          # paths/names to try, best first
    describe(spec, tried, cuda_major) -> str   # the "not found" message
    install_advice(spec, cuda_major) -> str    # which package to install for that driver
    LibSpec(...)                           # what to look for: DRIVER, NVRTC, NVJITLINK, NCCL, CUBLASLT
"""
import glob
import os
import sys

__all__ = ["LibSpec", "LIBRARIES", "candidates", "describe", "install_advice", "searched_folders",
           "site_dirs", "pathfinder_path", "driver_cuda_major",
           "DRIVER", "NVRTC", "NVJITLINK", "NCCL", "CUBLASLT"]


class LibSpec:
    """What to look for.

    Parameters
    ----------
    title : str
        Human name (``"NVRTC"``).
    env : str
        Environment variable holding an explicit path (a file, or a folder to search),
        or several separated by ``os.pathsep``; nothing else is tried then.
    linux, windows : tuple of str
        File name patterns (``glob`` syntax) on each platform, best first.
    wheel_dirs : tuple of str
        Folders under ``site-packages`` that pip wheels install the library to.
    packages : dict
        ``{cuda_major: (pip package, barecuda extra or None)}``: what provides it for a
        driver of that CUDA major version.
    folders : bool
        Whether the wheels', ``CUDA_HOME``/``CUDA_PATH``'s and the system's folders are
        searched (``False`` for the driver: only the system loader may pick it).
    pathfinder : str or None
        The name ``cuda-pathfinder`` knows the library by, or None.
    fix : str
        What to do instead of installing a pip package (the driver), or ``""``.
    """

    __slots__ = ("title", "env", "linux", "windows", "wheel_dirs", "packages", "folders", "pathfinder", "fix")

    def __init__(self, title, env, linux, windows, wheel_dirs=(), packages=None, folders=True,
                 pathfinder=None, fix=""):
        self.title = title
        self.env = env
        self.linux = tuple(linux)
        self.windows = tuple(windows)
        self.wheel_dirs = tuple(wheel_dirs)
        self.packages = dict(packages or {})
        self.folders = folders
        self.pathfinder = pathfinder
        self.fix = fix

    @property
    def patterns(self):
        return self.windows if sys.platform == "win32" else self.linux

    @property
    def file_name(self):
        """The library's usual file name, for messages."""
        return (self.patterns or self.linux)[0]

    def __repr__(self):
        return f"<LibSpec {self.title}>"


# NVIDIA's CUDA 13 wheels put every library of the release under nvidia/cu13/; the CUDA
# 12 ones use a folder per component (nvidia/cuda_nvrtc/, nvidia/nvjitlink/, ...).
DRIVER = LibSpec(
    "the CUDA driver", "BARECUDA_LIBCUDA",
    linux=("libcuda.so.1", "libcuda.so"), windows=("nvcuda.dll",), folders=False,
    fix="install the NVIDIA driver (check with `nvidia-smi`)",
)
def _toolkit_lib(title, stem, component, windows):
    """A CUDA 12/13 toolkit library NVRTC's extra installs (NVRTC, nvJitLink): its
    ``BARECUDA_<STEM>`` variable, ``lib<stem>.so.13/.12`` names, wheel folders
    (``nvidia/cu13/`` or ``nvidia/<component>/``), pip packages and pathfinder name."""
    pip = "nvidia-" + component.replace("_", "-")
    return LibSpec(
        title, "BARECUDA_" + stem.upper(),
        linux=(f"lib{stem}.so.13", f"lib{stem}.so.12", f"lib{stem}.so"), windows=windows,
        wheel_dirs=("nvidia/cu13/lib", "nvidia/cu13/bin", "nvidia/cu13/bin/x86_64",
                    f"nvidia/{component}/lib", f"nvidia/{component}/bin"),
        packages={13: (pip, "nvrtc"), 12: (pip + "-cu12", "nvrtc-cu12")},
        pathfinder=stem,
    )


NVRTC = _toolkit_lib("NVRTC", "nvrtc", "cuda_nvrtc", ("nvrtc64_13*.dll", "nvrtc64_12*.dll", "nvrtc64_*.dll"))
NVJITLINK = _toolkit_lib("nvJitLink", "nvJitLink", "nvjitlink",
                         ("nvJitLink_13*.dll", "nvJitLink_12*.dll", "nvJitLink*.dll"))
NCCL = LibSpec(
    "NCCL", "BARECUDA_NCCL",
    linux=("libnccl.so.2", "libnccl.so"), windows=(),
    wheel_dirs=("nvidia/nccl/lib", "nvidia/cu13/lib", "nvidia/cu12/lib"),
    packages={13: ("nvidia-nccl-cu13", "nccl"), 12: ("nvidia-nccl-cu12", "nccl-cu12")},
    pathfinder="nccl",
)
CUBLASLT = LibSpec(
    "cuBLASLt", "BARECUDA_CUBLASLT",
    linux=("libcublasLt.so.13", "libcublasLt.so.12"),
    windows=("cublasLt64_13*.dll", "cublasLt64_12*.dll"),
    wheel_dirs=("nvidia/cu13/lib", "nvidia/cu13/bin", "nvidia/cu13/bin/x86_64",
                "nvidia/cublas/lib", "nvidia/cublas/bin"),
    packages={13: ("nvidia-cublas", None), 12: ("nvidia-cublas-cu12", None)},
    pathfinder="cublasLt",
)
LIBRARIES = (DRIVER, NVRTC, NVJITLINK, NCCL, CUBLASLT)

_SYSTEM_DIRS = ("/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/local/cuda/targets/x86_64-linux/lib",
                "/usr/local/cuda/targets/sbsa-linux/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                "/usr/lib64", "/usr/lib")


def site_dirs():
    """Folders pip wheels may have installed NVIDIA's libraries under, in ``sys.path``
    order: every ``site-packages`` (and the user site), and any ``sys.path`` entry that
    holds an ``nvidia`` folder."""
    out = []
    for p in sys.path:
        if p and p not in out and (os.path.basename(p) in ("site-packages", "dist-packages")
                                   or os.path.isdir(os.path.join(p, "nvidia"))):
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


def searched_folders(spec, environ=None):
    """The folders :func:`candidates` looks in for ``spec``, in order (existing or not)."""
    env = os.environ if environ is None else environ
    override = env.get(spec.env)
    if override:
        return [p for p in override.split(os.pathsep) if p and os.path.isdir(p)]
    if not spec.folders:
        return []
    out = []
    for site in site_dirs():
        out += [os.path.join(site, *sub.split("/")) for sub in spec.wheel_dirs]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = env.get(var)
        if root:
            out += [os.path.join(root, sub) for sub in
                    ("lib64", "lib", os.path.join("lib", "x64"), "bin", os.path.join("bin", "x64"))]
    if sys.platform != "win32":
        out += list(_SYSTEM_DIRS)
        for root in sorted(glob.glob("/usr/local/cuda-*"), reverse=True):
            out += [os.path.join(root, "lib64"), os.path.join(root, "lib")]
    seen = []
    for d in out:
        if d not in seen:
            seen.append(d)
    return seen


def _matches(folder, patterns):
    found = []
    for pat in patterns:
        for path in sorted(glob.glob(os.path.join(folder, pat)), reverse=True):
            if path not in found and os.path.isfile(path):
                found.append(path)
    return found


def pathfinder_path(spec):
    """The path ``cuda-pathfinder`` resolves ``spec`` to, when it is installed and knows
    the library; otherwise None. (It tracks the layouts of NVIDIA's wheels and conda.)"""
    if spec.pathfinder is None or "cuda.pathfinder" not in sys.modules and not _has_pathfinder():
        return None
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
        path = load_nvidia_dynamic_lib(spec.pathfinder).abs_path
    except Exception:               # not found, unknown name, an older pathfinder: our own search
        return None
    return path if path and os.path.isfile(path) else None


def _has_pathfinder():
    try:
        import importlib.util
        return importlib.util.find_spec("cuda.pathfinder") is not None
    except Exception:               # "cuda" is not a package, or a broken install
        return False


def candidates(spec, environ=None):
    """Paths (or bare names for the system loader) to try for ``spec``, best first.

    Order: the environment variable (exclusively, when set: a file, or a folder to
    search); what ``cuda-pathfinder`` finds, when it is installed; the pip wheels'
    folders in every ``site-packages``; ``CUDA_HOME``/``CUDA_PATH``; ``/usr/local/cuda*``
    and the usual system library folders; finally the bare names, for the dynamic
    loader's own search (``LD_LIBRARY_PATH``, the ldconfig cache).
    """
    env = os.environ if environ is None else environ
    override = env.get(spec.env)
    if override:
        out = []
        for p in (p for p in override.split(os.pathsep) if p):
            found = _matches(p, spec.patterns) if os.path.isdir(p) else []
            out += found or [os.path.join(p, spec.file_name) if os.path.isdir(p) else p]
        return out
    out = []

    def add(paths):
        for p in paths:
            if p not in out:
                out.append(p)

    if spec.folders:
        found = pathfinder_path(spec)
        if found:
            add([found])
        for d in searched_folders(spec, env):
            add(_matches(d, spec.patterns))
    add([p for p in spec.patterns if "*" not in p])
    return out


def driver_cuda_major():
    """The loaded driver's CUDA major version, or None when no driver is loaded yet (this
    never loads one: advice must not have side effects)."""
    try:
        from barecuda import _loader
        if not _loader._state()["loaded"]:
            return None
        return _loader.driver_version()[0]
    except Exception:
        return None


def install_advice(spec, cuda_major=None):
    """What to install to get ``spec``: the pip package for a driver of ``cuda_major``
    (those of every CUDA major barecuda supports when it is None or unknown), and the
    barecuda extra that pulls it, as it works from a checkout today."""
    if spec.fix:
        return spec.fix
    majors = [cuda_major] if cuda_major in spec.packages else sorted(spec.packages, reverse=True)
    text = " or ".join(f"`pip install {spec.packages[m][0]}` (CUDA {m})" for m in majors)
    extras = [spec.packages[m][1] for m in majors if spec.packages[m][1]]
    if extras:
        text += " (from a barecuda checkout: " + " or ".join(f"`pip install \".[{x}]\"`" for x in extras) + ")"
    return text


def describe(spec, tried, cuda_major=None, environ=None):
    """The one wording of "library not found": what was tried and why each failed, the
    folders searched, what to install for this driver, and the environment variable."""
    lines = [f"Could not load {spec.title} ({spec.file_name}). Tried:"]
    lines += [f"  - {t}" for t in tried] or ["  (no candidate found)"]
    env = os.environ if environ is None else environ
    if env.get(spec.env):
        lines.append(f"Only {spec.env} was tried (it is set).")
    else:
        folders = [d for d in searched_folders(spec, env) if os.path.isdir(d)]
        where = ", ".join(folders) if folders else "none of the wheel, CUDA_HOME/CUDA_PATH or system folders exists"
        if spec.folders:
            lines.append(f"Folders searched: {where}; then the system loader's path "
                         "(LD_LIBRARY_PATH, the ldconfig cache).")
        else:
            lines.append("Searched: the system loader's path (LD_LIBRARY_PATH, the ldconfig cache).")
    lines.append(f"To fix: {install_advice(spec, cuda_major)}, or point barecuda at the library: "
                 f"{spec.env}=/path/to/{spec.file_name}")
    return "\n".join(lines)
