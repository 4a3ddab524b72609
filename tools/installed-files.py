"""The files of the barecuda package this interpreter imports, as JSON: {path: sha256}.

    python tools/installed-files.py > a.json             # what this install holds
    python tools/installed-files.py --compare a.json     # exit 1 unless this install holds the same

Paths are relative to the package folder. Compiled extension modules and the build record
(_build_info.py) are listed by name only (None): two builds of one tree differ in their
bytes. Everything else (Python, stubs, kernel sources, headers) must be byte-identical.
.ci/run uses it to check that the wheel built from the sdist installs what `pip install .`
from the tree installed.
"""
import argparse
import hashlib
import json
import os
import sys


def listing():
    import barecuda
    top = os.path.dirname(os.path.abspath(barecuda.__file__))
    out = {}
    for d, dirs, files in os.walk(top):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        for f in sorted(files):
            path = os.path.join(d, f)
            rel = os.path.relpath(path, top).replace(os.sep, "/")
            if f.endswith((".so", ".pyd")) or rel == "_build_info.py":
                out[rel] = None
            else:
                with open(path, "rb") as fh:
                    out[rel] = hashlib.sha256(fh.read()).hexdigest()
    return top, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--compare", metavar="JSON", help="a listing to compare this install with")
    a = ap.parse_args()
    top, mine = listing()
    if not a.compare:
        json.dump(mine, sys.stdout, indent=0, sort_keys=True)
        return 0
    with open(a.compare) as f:
        ref = json.load(f)
    missing = sorted(set(ref) - set(mine))
    extra = sorted(set(mine) - set(ref))
    changed = sorted(p for p in set(ref) & set(mine) if ref[p] != mine[p])
    for what, paths in (("missing", missing), ("extra", extra), ("different", changed)):
        for p in paths:
            print(f"{what}: {p}", file=sys.stderr)
    if missing or extra or changed:
        print(f"{top}: {len(missing)} missing, {len(extra)} extra, {len(changed)} different files "
              f"against {a.compare}", file=sys.stderr)
        return 1
    print(f"{top}: the same {len(mine)} files as {a.compare}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
