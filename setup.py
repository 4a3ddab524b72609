"""Build barecuda: Cython extensions, no CUDA toolkit, headers or driver needed.

Set BARECUDA_DEBUG=1 to turn bounds checks and line tracing back on (for debugging
and coverage).
"""
import glob
import os
import sys

from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("BARECUDA_DEBUG", "") not in ("", "0")

directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "embedsignature": True,
    "cdivision": True,
}
macros = []
if DEBUG:
    directives["linetrace"] = True
    macros.append(("CYTHON_TRACE_NOGIL", "1"))

if sys.platform == "win32":
    compile_args = ["/O2"]
    libraries = []
else:
    compile_args = ["-O2", "-std=gnu11", "-Wno-unused-function"]
    libraries = ["dl", "pthread"] if sys.platform.startswith("linux") else []

extensions = []
for pyx in sorted(glob.glob("src/barecuda/**/*.pyx", recursive=True)):   # bench wing: barecuda.bench._baseline
    name = os.path.splitext(os.path.relpath(pyx, "src"))[0].replace(os.sep, ".")
    extensions.append(Extension(
        name, [pyx],
        include_dirs=["include"],
        define_macros=macros,
        extra_compile_args=compile_args,
        libraries=libraries,
    ))

setup(
    ext_modules=cythonize(extensions, compiler_directives=directives,
                          include_path=["src"], nthreads=int(os.environ.get("BARECUDA_BUILD_JOBS", "0"))),
)
