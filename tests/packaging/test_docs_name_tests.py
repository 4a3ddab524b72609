"""Docs that name tests name real ones: docs/security.md lists each check with the test that
covers it, and the closing notes quote those names. A test renamed or moved out from under
the doc would leave the threat model pointing at nothing."""
import glob
import itertools
import os
import re

import pytest

from _helpers import REPO

DOCS = ["docs/security.md"]


def _defined_tests():
    names = set()
    for path in glob.glob(os.path.join(REPO, "tests", "**", "test_*.py"), recursive=True):
        with open(path, encoding="utf-8") as f:
            names.update(re.findall(r"^\s*(?:async\s+)?def (test_\w+)", f.read(), re.M))
    return names


def _expand(name):
    """``a_{x,y}_b`` -> ``a_x_b``, ``a_y_b`` (the doc's shorthand for a family)."""
    parts = re.split(r"\{([^}]*)\}", name)
    fixed, choices = parts[0::2], [p.split(",") for p in parts[1::2]]
    for pick in itertools.product(*choices):
        yield "".join(a + b for a, b in itertools.zip_longest(fixed, pick, fillvalue=""))


def named_tests(text):
    """(file or None, test name) for each test the text names in backquotes."""
    out = []
    for span in re.findall(r"`([^`]*)`", text):
        for ref in re.findall(r"((?:[\w/]+\.py::)?test_[\w{},]+)", span):
            path, _, name = ref.rpartition("::")
            out += [(path or None, n.rstrip("_")) for n in _expand(name)]
    return out


def test_expand_and_find_names():
    assert list(_expand("t_{a,b}_gpu")) == ["t_a_gpu", "t_b_gpu"]
    got = named_tests("x `dist/test_i.py::test_one[p, q]`, `test_two`; `test_r_{m,c}_gpu` and `plain`")
    assert got == [("dist/test_i.py", "test_one"), (None, "test_two"), (None, "test_r_m_gpu"),
                   (None, "test_r_c_gpu")]


@pytest.mark.parametrize("doc", DOCS)
def test_every_test_a_doc_names_exists(doc):
    with open(os.path.join(REPO, doc), encoding="utf-8") as f:
        text = f.read()
    refs = named_tests(text)
    assert len(refs) >= 20, f"{doc} names only {len(refs)} tests: the parser lost them"
    defined = _defined_tests()
    missing = sorted({n for _, n in refs if n not in defined})
    assert not missing, f"{doc} names tests that do not exist: {missing}"
    files = sorted({p for p, _ in refs if p and not os.path.exists(os.path.join(REPO, "tests", p))})
    assert not files, f"{doc} names test files that do not exist under tests/: {files}"
