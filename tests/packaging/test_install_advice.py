"""Every piece of install advice names something that exists, for the driver found.

The package lists the code knows are `_libfind.LIBRARIES` (which pip package provides
each library for each CUDA major version, and which barecuda extra pulls it) and the
extras in `pyproject.toml`. Every `pip install ...` in the docs, the README, the examples,
the package's sources and its error messages is resolved against them."""
import glob
import os
import re

import pytest

import barecuda as bc
from barecuda import _libfind, _program

from _helpers import REPO  # noqa: E402  (the repository root)
tomllib = pytest.importorskip("tomllib")        # Python 3.11+


def _extras():
    path = os.path.join(REPO, "pyproject.toml")
    if not os.path.exists(path):
        pytest.skip("pyproject.toml is not beside the tests (installed tests)")
    with open(path, "rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"]


def _req_name(req):
    return re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].strip().lower()


# Third-party packages advised for an optional feature outside barecuda's extras.
OPTIONAL_THIRD_PARTY = {"jinja2"}          # chat templates (barecuda/models/tokenizer.py)


def _known_packages():
    known = {pkg for spec in _libfind.LIBRARIES for pkg, _ in spec.packages.values()} | OPTIONAL_THIRD_PARTY
    known |= {_req_name(r) for reqs in _extras().values() for r in reqs}
    return known


def _advice_texts():
    """(where, text) of every install command in the docs, README, examples and sources."""
    files = [os.path.join(REPO, "README.md")]
    files += [p for p in glob.glob(os.path.join(REPO, "docs", "*.md")) if not p.endswith("measurements.md")]
    files += glob.glob(os.path.join(REPO, "examples", "*.py"))
    files += glob.glob(os.path.join(REPO, "src", "barecuda", "**", "*.py"), recursive=True)
    files += glob.glob(os.path.join(REPO, "src", "barecuda", "**", "*.pyx"), recursive=True)
    for path in files:
        with open(path, encoding="utf-8") as f:
            yield os.path.relpath(path, REPO), f.read()
    for spec in _libfind.LIBRARIES:
        for major in (None, 12, 13):
            yield f"_libfind.describe({spec.title}, {major})", _libfind.describe(spec, ["x: no"], major)


_PROSE = {"from", "or", "for", "and", "to", "once", "with", "then", "if", "in", "on", "(from", "--", "-", "is"}
_PIP = re.compile(r"pip install ((?:[^`\n;&|)]|\)(?=[\]\"']))+)")


def _commands():
    for where, text in _advice_texts():
        for m in _PIP.finditer(text):
            yield where, text, m


def test_every_advised_package_and_extra_exists():
    known, extras = _known_packages(), _extras()
    seen = 0
    for where, text, m in _commands():
        for tok in m.group(1).split():
            if tok in _PROSE:                    # the command ended; the sentence goes on
                break
            tok = tok.strip("\"'`,")
            if not tok or tok.startswith("-") or tok in (".", "&&"):
                continue
            ex = re.fullmatch(r"(\.|barecuda)\[([\w,-]+)\]", tok)
            if ex:
                for name in ex.group(2).split(","):
                    assert name in extras, f"{where}: extra [{name}] does not exist ({m.group(0)!r})"
                if ex.group(1) == "barecuda":
                    around = text[max(0, m.start() - 300):m.end() + 300].lower()
                    assert "published" in around, (
                        f"{where}: {m.group(0)!r} names the unpublished package without saying "
                        "it is the command once published")
                seen += 1
                continue
            if re.fullmatch(r"[A-Za-z0-9_.-]+(==[\w.*]+)?", tok):
                assert _req_name(tok) in known, f"{where}: advises unknown package {tok!r} ({m.group(0)!r})"
                seen += 1
    assert seen > 20


@pytest.mark.parametrize("spec", [s for s in _libfind.LIBRARIES if s.packages], ids=lambda s: s.env)
def test_packages_match_the_cuda_major(spec):
    extras = _extras()
    assert sorted(spec.packages) == [12, 13]
    for major, (pkg, extra) in spec.packages.items():
        assert pkg.endswith("-cu12") == (major == 12), (spec.title, major, pkg)
        if extra is not None:
            assert pkg in {_req_name(r) for r in extras[extra]}, (extra, pkg)
        advice = _libfind.install_advice(spec, major)
        assert f"pip install {pkg}`" in advice
        other = spec.packages[25 - major][0]
        assert f"pip install {other}`" not in advice


def test_nvrtc_newer_than_driver_advises_the_drivers_package():
    with pytest.raises(bc.DriverVersionError) as ei:
        _program.select_target("auto", (13, 0), (12, 4), 90, (90,))
    msg = str(ei.value)
    assert "nvidia-cuda-nvrtc-cu12" in msg and ".[nvrtc-cu12]" in msg
    assert "==12.4" not in msg            # no package of that name and version exists


def test_extras_cover_both_cuda_majors():
    extras = _extras()
    for a, b in (("nvrtc", "nvrtc-cu12"), ("nccl", "nccl-cu12")):
        assert a in extras and b in extras
        assert all(_req_name(r).endswith("-cu12") for r in extras[b])
        assert not any(_req_name(r).endswith("-cu12") for r in extras[a])
