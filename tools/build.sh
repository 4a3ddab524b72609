#!/usr/bin/env bash
# Build the extensions in place (extra arguments go to build_ext, e.g. -j 4). Builds of
# one tree are serialized with flock, so that two shells never interleave their outputs.
set -e
cd "$(dirname "$0")/.."
exec flock /tmp/barecuda-build.lock python3 setup.py build_ext --inplace -q "$@"
