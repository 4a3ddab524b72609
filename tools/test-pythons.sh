#!/usr/bin/env bash
# Run the CPU suite (driver double) on other Python versions than CI's: each gets a
# fresh venv, installs barecuda with its test extras from this tree, and runs the
# tests from outside the tree (so the installed build is what is tested).
#   tools/test-pythons.sh              # 3.10 and 3.14 (requires-python's ends)
#   tools/test-pythons.sh 3.10 3.12    # others
# Finds interpreters under pyenv (~/.pyenv/versions/X.Y.*) or as pythonX.Y on PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
versions=("$@")
[ ${#versions[@]} -eq 0 ] && versions=(3.10 3.14)
work="${BARECUDA_PYTHONS_DIR:-$(mktemp -d)}"
status=0
for v in "${versions[@]}"; do
    py=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$v".*/bin/python 2>/dev/null | sort -V | tail -1 || true)
    if [ -z "$py" ]; then
        py=$(command -v "python$v" || true)
    fi
    if [ -n "$py" ] && ! "$py" -c "" 2>/dev/null; then py=""; fi    # e.g. a pyenv shim of no version
    if [ -z "$py" ]; then echo "== python $v: not found, skipped"; status=1; continue; fi
    echo "== python $v: $py"
    "$py" -m venv "$work/venv-$v"
    "$work/venv-$v/bin/python" -m pip install -q --upgrade pip
    "$work/venv-$v/bin/python" -m pip install -q "$root[test]"
    if (cd "$work" && "$work/venv-$v/bin/python" -m pytest "$root/tests" -q -p no:cacheprovider); then
        echo "== python $v: passed"
    else
        echo "== python $v: FAILED"; status=1
    fi
done
exit $status
