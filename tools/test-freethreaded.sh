#!/usr/bin/env bash
# The CPU suite (driver double) under a free-threaded CPython (3.13t): builds the
# interpreter once (tools/build-freethreaded-python.sh, cached in ~/.cache/barecuda-ft),
# makes a fresh venv, installs barecuda from this tree and the test dependencies, and
# runs the tests from outside the tree, with PYTHON_GIL unset (the GIL stays off unless
# a module asks for it; tests/stress/test_free_threading.py checks that none does).
#   tools/test-freethreaded.sh                 # the whole suite
#   tools/test-freethreaded.sh tests/stress    # pytest arguments (paths relative to the tree)
# BARECUDA_FT_DIR: where the venv goes (default: a temporary folder).
#
# The test extras minus `tokenizers`: it ships only abi3 wheels, which a free-threaded
# interpreter cannot load, and its sdist needs a Rust toolchain; the tokenizer tests skip
# (pytest.importorskip), everything else runs. PyYAML (for gguf) has no cp313t wheel:
# pip builds it from its sdist (seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
work="${BARECUDA_FT_DIR:-$(mktemp -d)}"
unset PYTHON_GIL

py=$(bash "$root/tools/build-freethreaded-python.sh" | tail -1)
echo "== free-threaded interpreter: $("$py" -VV)"
rm -rf "$work/ft-venv"
"$py" -m venv "$work/ft-venv"
vpy="$work/ft-venv/bin/python"
"$vpy" -m pip install -q --only-binary=:all: "pytest>=7.4" "pytest-xdist>=3.5" "hypothesis>=6.80" "numpy>=1.23" jinja2 \
    "nvidia-cuda-nvrtc>=13.0" "nvidia-nvjitlink>=13.0"
"$vpy" -m pip install -q pyyaml "gguf>=0.10"
"$vpy" -m pip install -q --no-deps "$root"
"$vpy" -c 'import sys, barecuda; assert not sys._is_gil_enabled(), "importing barecuda enabled the GIL"; print("barecuda", barecuda.__version__, "imported; GIL disabled")'
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(tests)
for i in "${!args[@]}"; do
    case "${args[$i]}" in tests*) args[$i]="$root/${args[$i]}";; esac
done
cd "$work"          # nothing here shadows the installed package
"$vpy" -m pytest "${args[@]}" -q -p no:cacheprovider
