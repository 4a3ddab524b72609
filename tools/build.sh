#!/usr/bin/env bash
# Build the extensions in place. Serialized with a lock so that several shells
# (or helper sessions) building the same tree never interleave.
set -e
cd "$(dirname "$0")/.."
exec flock /tmp/barecuda-build.lock python3 setup.py build_ext --inplace -q "$@"
