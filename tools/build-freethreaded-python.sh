#!/usr/bin/env bash
# Build a free-threaded CPython (PEP 703, `--disable-gil`) from the upstream source tarball
# that Debian's source pool carries, checked against a pinned SHA-256, and install it under
# a cache directory; print the interpreter's path as the last line of standard output.
#
#   tools/build-freethreaded-python.sh            # -> ~/.cache/barecuda-ft/py3.13t/bin/python3.13t
#   BARECUDA_FT_PREFIX=/opt/py313t tools/build-freethreaded-python.sh
#
# A second run with the interpreter already installed (and free-threaded) builds nothing.
# Debian ships no free-threaded interpreter, hence the source build: no PGO, no LTO, so it
# takes a few minutes on two cores (JOBS, default 2). Missing build dependencies are
# installed with apt-get when running as root; otherwise the configure step reports them.
set -euo pipefail

cache="${BARECUDA_FT_CACHE:-$HOME/.cache/barecuda-ft}"
prefix="${BARECUDA_FT_PREFIX:-$cache/py3.13t}"
jobs="${JOBS:-2}"
pool="${BARECUDA_FT_POOL:-http://deb.debian.org/debian/pool/main/p}"

# version  sha256 of python3.X_VERSION.orig.tar.xz (the upstream Python-VERSION.tar.xz),
# newest first: the first one the pool still serves is used. 3.13.15 is in Debian
# testing, 3.13.5 in trixie (stable). No 3.14 orig tarball is served by the pool here yet.
candidates=(
    "3.13.15 1e66a7945a48390ee4c2a4268a0e4185884059a13c4aab6d148aa208deea4a76"
    "3.13.5 93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640"
)

is_ft() {  # is_ft PYTHON: a working interpreter built with Py_GIL_DISABLED
    [ -x "$1" ] && "$1" -c 'import sys, sysconfig; sys.exit(0 if sysconfig.get_config_var("Py_GIL_DISABLED") else 1)' 2>/dev/null
}

for py in "$prefix"/bin/python3.1[0-9]t; do
    if is_ft "$py"; then
        echo "free-threaded interpreter already built: $("$py" -VV | head -1)" >&2
        echo "$py"
        exit 0
    fi
done

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    need=()
    for p in build-essential pkg-config libssl-dev libffi-dev zlib1g-dev libbz2-dev liblzma-dev \
             libsqlite3-dev libreadline-dev libncurses-dev uuid-dev; do
        dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
    done
    if [ ${#need[@]} -gt 0 ]; then
        echo "installing build dependencies: ${need[*]}" >&2
        apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
    fi
fi

mkdir -p "$cache"
tarball=""
for c in "${candidates[@]}"; do
    read -r version sha <<<"$c"
    minor="${version%.*}"
    f="$cache/python${minor}_${version}.orig.tar.xz"
    if [ ! -s "$f" ] || ! echo "$sha  $f" | sha256sum -c --quiet - >/dev/null 2>&1; then
        rm -f "$f"
        echo "fetching python${minor}_${version}.orig.tar.xz" >&2
        curl -fsS --retry 3 -o "$f.part" "$pool/python${minor}/python${minor}_${version}.orig.tar.xz" \
            || { rm -f "$f.part"; echo "  not served; trying the next" >&2; continue; }
        mv "$f.part" "$f"
    fi
    if echo "$sha  $f" | sha256sum -c --quiet - >&2; then
        tarball="$f"
        break
    fi
    echo "checksum mismatch for $f" >&2
    rm -f "$f"
    exit 1
done
[ -n "$tarball" ] || { echo "no pinned CPython tarball could be fetched" >&2; exit 1; }

build="$(mktemp -d "${TMPDIR:-/tmp}/barecuda-ft-build.XXXXXX")"
trap 'rm -rf "$build"' EXIT
tar -xJf "$tarball" -C "$build"
cd "$build"/Python-"$version"
log="$cache/build-$version.log"
echo "building CPython $version --disable-gil into $prefix (log: $log)" >&2
start=$SECONDS
{
    ./configure --disable-gil --prefix="$prefix" --with-ensurepip=install
    make -j"$jobs"
    make install
} >"$log" 2>&1 || { tail -40 "$log" >&2; exit 1; }
py="$prefix/bin/python${minor}t"
is_ft "$py" || { echo "$py is not a free-threaded build" >&2; exit 1; }
echo "built $("$py" -VV | head -1) in $((SECONDS - start)) s" >&2
echo "$py"
