"""The guarantees page names exactly the tests that the suite marks as expected failures.

A known limit shown by a test is marked ``xfail``; the page's "Expected failures"
section names each such test, and no other, and the rest of the docs never call a
test an expected failure. The marks are found in the test sources (with ``ast``, so
torch-only tests count where torch is missing): ``@pytest.mark.xfail``,
``pytest.param(..., marks=pytest.mark.xfail)``, ``pytest.xfail()`` in a test's body,
``request.applymarker(pytest.mark.xfail)``, and ``pytestmark`` on a module or class.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Dict, Iterator, List, Set, Union

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
GUARANTEES = ROOT / "docs" / "guarantees.md"
SECTION = "## Expected failures"

_Function = Union[ast.FunctionDef, ast.AsyncFunctionDef]


def _tests_in(node: ast.AST) -> Iterator[_Function]:
    for child in ast.walk(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) and child.name.startswith(
            "test"
        ):
            yield child


def xfail_tests(source: str, where: str) -> Set[str]:
    """The names of the test functions of ``source`` that an ``xfail`` applies to."""
    tree = ast.parse(source)
    parents: Dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    found: Set[str] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr == "xfail"):
            continue
        owner = parents.get(node)
        while owner is not None and not isinstance(
            owner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign)
        ):
            owner = parents.get(owner)
        if isinstance(owner, ast.Assign):  # pytestmark = ... (module or class level)
            targets = [t.id for t in owner.targets if isinstance(t, ast.Name)]
            assert targets == ["pytestmark"], f"{where}:{node.lineno}: xfail outside a test"
            scope = parents.get(owner)
            found.update(test.name for test in _tests_in(scope or tree))
        elif isinstance(owner, ast.ClassDef):  # a class decorator
            found.update(test.name for test in _tests_in(owner))
        elif owner is not None and owner.name.startswith("test"):
            found.add(owner.name)  # its decorator, its parameters, or its body
        else:
            name = getattr(owner, "name", "the module")
            raise AssertionError(f"{where}:{node.lineno}: xfail in {name}, not in a test")
    return found


def suite_xfails() -> Set[str]:
    found: Set[str] = set()
    for path in sorted(TESTS.rglob("test_*.py")):
        found |= xfail_tests(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    return found


def _section(text: str) -> str:
    if SECTION not in text:
        return ""
    start = text.index(SECTION) + len(SECTION)
    end = text.find("\n## ", start)
    return text[start : end if end != -1 else len(text)]


def test_the_guarantees_page_names_every_expected_failure_and_no_other() -> None:
    text = GUARANTEES.read_text(encoding="utf-8")
    assert SECTION in text, f"docs/guarantees.md has no {SECTION!r} section"
    named = set(re.findall(r"`(test_\w+)(?:\[[^\]`]*\])?`", _section(text)))
    marked = suite_xfails()
    assert named == marked, (
        f"marked xfail but not named on the page: {sorted(marked - named)}; "
        f"named on the page but not marked xfail: {sorted(named - marked)}"
    )


def test_no_other_page_calls_a_test_an_expected_failure() -> None:
    claims: List[str] = []
    for page in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        text = page.read_text(encoding="utf-8")
        if page == GUARANTEES:
            text = text.replace(SECTION + _section(text), "")
        for number, line in enumerate(text.splitlines(), 1):
            if re.search(r"expected[- ]failure|xfail", line, re.I):
                claims.append(f"{page.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not claims, "expected failures named outside docs/guarantees.md's section:\n" + (
        "\n".join(claims)
    )


# --- the finder finds every way of marking a test -------------------------------------

_MARKED = """
import pytest

pytestmark = [pytest.mark.slow]

@pytest.mark.xfail(reason="a known limit")
def test_decorated(): ...

@pytest.mark.parametrize("x", [1, pytest.param(2, marks=pytest.mark.xfail)])
def test_one_parameter(x): ...

def test_imperative():
    pytest.xfail("not yet")

def test_applied(request):
    request.applymarker(pytest.mark.xfail(strict=True))

def test_plain(): ...

@pytest.mark.xfail
class TestGroup:
    def test_in_class(self): ...

class TestMarked:
    pytestmark = pytest.mark.xfail
    def test_by_class_mark(self): ...
"""


def test_the_finder_sees_every_form_of_xfail() -> None:
    assert xfail_tests(_MARKED, "example") == {
        "test_decorated",
        "test_one_parameter",
        "test_imperative",
        "test_applied",
        "test_in_class",
        "test_by_class_mark",
    }
    module_wide = "import pytest\npytestmark = pytest.mark.xfail\ndef test_a(): ...\n"
    assert xfail_tests(module_wide, "example") == {"test_a"}
