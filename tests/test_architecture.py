"""The shape of the code: who may touch whose internals, and the registry's seam."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

import hookbus

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hookbus"

# The name an object goes by -> the one module allowed to use its private attributes.
OWNERS = {
    "bus": "_bus.py",
    "_bus": "_bus.py",
    "registry": "_registry.py",
    "_registry": "_registry.py",
}


def _holder_name(node: ast.expr) -> str:
    """``bus`` for ``bus``, ``self.bus``, ``handle.bus``; else ``""``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def private_reaches(source: str, module: str) -> List[Tuple[int, str]]:
    """``(line, text)`` of every ``<bus or registry>._private`` outside its owner module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        private = node.attr.startswith("_") and not node.attr.startswith("__")
        owner = OWNERS.get(_holder_name(node.value))
        if private and owner is not None and module != owner:
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_module_reaches_into_the_bus_or_the_registry() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        for line, text in private_reaches(path.read_text(encoding="utf-8"), relative):
            offenders.append(f"hookbus/{relative}:{line}: {text}")
    assert not offenders, "private access outside the owning module:\n" + "\n".join(offenders)


@pytest.mark.parametrize(
    "source",
    [
        "bus._lock",
        "self.bus._points.get(name)",
        "handle.bus._claim(handle)",
        "self.registry._resolve_locked('pre', name)",
        "with bus._lock:\n    pass",
    ],
)
def test_the_check_finds_each_kind_of_reach(source: str) -> None:
    assert private_reaches(source, "torch/_attach.py")
    assert not private_reaches(source.replace("._", "."), "torch/_attach.py")


def test_the_owner_may_use_its_own_privates() -> None:
    assert not private_reaches("self.registry._lock", "_registry.py")
    assert private_reaches("self.registry._lock", "_bus.py")


# --- the registry's seam is public and documented; the module picture is current -----------


def test_registry_methods_other_modules_use_are_public_and_documented() -> None:
    public = [
        "register", "unregister", "remove", "clear", "claim",
        "forget_collected", "plan_event", "event_handles", "plan",
        "add_point", "remove_point", "points", "set_errors", "set_trace", "pause",
        "snapshot", "restore", "hooks", "record_emission", "declare", "checked_handles",
        "unmatched", "decorator", "forget",
    ]  # fmt: skip
    registry = hookbus.EventBus().registry
    for name in public:
        assert (getattr(type(registry), name).__doc__ or "").strip(), name


def test_the_module_picture_in_the_docs_is_current() -> None:
    script = ROOT / "docs" / "_ext" / "module_graph.py"
    done = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_module_picture_does_not_depend_on_string_hashing() -> None:
    # An import cycle (there was torch/_point <-> torch/_copies, one import inside a
    # function) is cut where the walk meets it: the walk must not follow set order.
    script = ROOT / "docs" / "_ext" / "module_graph.py"
    code = f"import runpy; print(runpy.run_path({str(script)!r})['render']())"
    pictures = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
        ).stdout
        for seed in range(6)
    }
    assert len(pictures) == 1


# --- one concept per module, one class per concept ------------------------------------

# In-package bases that hold only methods, each with why it is not a mixin: a class
# that gets its methods from such a base splits one concept across files.
_INTERFACES = {
    "Removable": "the interface of everything remove() undoes: remove() and `with`",
}


def _package_classes() -> List[Tuple[str, ast.ClassDef]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        relative = path.relative_to(ROOT).as_posix()
        found += [(relative, node) for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    return found


def _methods_only(node: ast.ClassDef) -> bool:
    for statement in node.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if statement.name == "__init__":
                return False
            continue
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # the docstring
        if isinstance(statement, ast.Assign) and ast.unparse(statement) == "__slots__ = ()":
            continue
        return False
    return True


def test_no_class_gets_its_methods_from_a_methods_only_base() -> None:
    classes = _package_classes()
    by_name = {node.name: node for _, node in classes}
    offenders = [
        f"{path}: {node.name}({ast.unparse(base)})"
        for path, node in classes
        for base in node.bases
        if isinstance(base, ast.Name)
        and base.id in by_name
        and base.id not in _INTERFACES
        and _methods_only(by_name[base.id])
    ]
    assert not offenders, "classes assembled from methods-only bases:\n" + "\n".join(offenders)


def test_the_methods_only_check_finds_a_mixin() -> None:
    mixin, interface = ast.parse("class M:\n    def f(self): ...\nclass I:\n    x: int = 0\n").body
    assert _methods_only(mixin)  # type: ignore[arg-type]
    assert not _methods_only(interface)  # type: ignore[arg-type]


def test_no_module_reaches_its_real_class_through_a_cast_of_self() -> None:
    offenders = [
        f"{path.relative_to(ROOT).as_posix()}:{number}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "cast(" in line and ", self)" in line
    ]
    assert not offenders, offenders


def _stems() -> List[str]:
    return sorted(
        path.stem.lstrip("_") for path in PACKAGE.rglob("*.py") if path.stem != "__init__"
    )


def _confusable(first: str, second: str) -> bool:
    """Stems that differ only by a suffix: ``stat``/``stats``, ``declared``/``declaring``."""
    common = next(
        (i for i, (a, b) in enumerate(zip(first, second)) if a != b), min(len(first), len(second))
    )
    return common >= 4 and common >= min(len(first), len(second)) - 3


@pytest.mark.parametrize(
    ("first", "second", "confusable"),
    [
        ("stat", "stats", True),
        ("wrapper", "wrappers", True),
        ("declared", "declaring", True),
        ("registry", "register", True),
        ("handle", "hookpoint", False),
        ("trace", "training", False),
    ],
)
def test_the_stem_check_tells_confusable_names(first: str, second: str, confusable: bool) -> None:
    assert _confusable(first, second) is confusable


def test_no_two_modules_share_a_stem() -> None:
    stems = _stems()
    pairs = [
        (first, second)
        for index, first in enumerate(stems)
        for second in stems[index + 1 :]
        if first == second or _confusable(first, second)
    ]
    assert not pairs, f"module names a reader could confuse: {pairs}"


# --- no tracker numbers ---------------------------------------------------------------------

# A tracker number (the word issue, item or section followed by a number, or the section sign
# before one) means nothing to a reader of the code, the tests or the docs: a comment or a
# page says the behaviour instead.
TRACKER_REFERENCE = re.compile(
    r"\b[Ii]ssues?\s*#?\d+|§\s*\d|\b[Ii]tems?\s+\d+|\b[Ss]ections?\s+\d+\b"
)
_SEARCHED_FOLDERS = ("hookbus", "tests", "docs", "examples", "benchmarks", "tools")
_SEARCHED_FILES = ("pyproject.toml", "README.md", "CONTRIBUTING.md", "conftest.py", "mkdocs.yml")
_TEXT_SUFFIXES = (".py", ".md", ".toml", ".yml", ".yaml", ".cfg", ".ini", ".txt")


def _searched_files() -> List[Path]:
    files = [ROOT / name for name in _SEARCHED_FILES] + [ROOT / ".ci" / "run"]
    for folder in _SEARCHED_FOLDERS:
        files += [
            path
            for path in sorted((ROOT / folder).rglob("*"))
            if path.suffix in _TEXT_SUFFIXES and "__pycache__" not in path.parts
        ]
    return [path for path in files if path.is_file()]


def tracker_references(text: str) -> List[str]:
    return [match.group(0) for match in TRACKER_REFERENCE.finditer(text)]


def test_no_tracker_numbers_in_the_code_the_tests_or_the_docs() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _searched_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if tracker_references(line)
    ]
    assert not found, "tracker numbers, which a reader cannot resolve: say the behaviour\n" + (
        "\n".join(found)
    )


# The spaces and section signs are escapes, so that this file names no tracker number itself.
@pytest.mark.parametrize(
    ("line", "found"),
    [
        ("(issue\N{SPACE}22)", ["issue\N{SPACE}22"]),
        ("Issue\N{SPACE}10, item\N{SPACE}3's audit", ["Issue\N{SPACE}10", "item\N{SPACE}3"]),
        ("after issues\N{SPACE}18 and 22", ["issues\N{SPACE}18"]),
        ("Issue\N{SPACE}20.3: a NaN", ["Issue\N{SPACE}20"]),
        ("issue\N{SPACE}#7", ["issue\N{SPACE}#7"]),
        ("issue\N{SPACE}22 \N{SECTION SIGN}5", ["issue\N{SPACE}22", "\N{SECTION SIGN}5"]),
        ("\N{SECTION SIGN} 2", ["\N{SECTION SIGN} 2"]),
        ("items\N{SPACE}10, 11 and 12", ["items\N{SPACE}10"]),
        ("(section\N{SPACE}1)", ["section\N{SPACE}1"]),
        ("a warning it issues", []),
        ("https://github.com/hookbus/hookbus/issues/12", []),
        ("the idiom of the issue", []),
        ("row 8, 3 items, the sections of a page", []),
    ],
)
def test_the_tracker_check_finds_each_form(line: str, found: List[str]) -> None:
    assert tracker_references(line) == found
