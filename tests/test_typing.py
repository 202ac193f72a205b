"""Type checkers see what hookbus promises, mypy and pyright alike: decorators keep the wrapped
signature (ParamSpec), and declared events check emit's arguments and their hooks.

Each file in tests/typing/ marks the lines that must be reported with ``# error``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

ROOT = Path(__file__).resolve().parent.parent
SNIPPETS = sorted(
    path
    for path in (Path(__file__).resolve().parent / "typing").glob("*.py")
    if path.name != "conftest.py"
)


def expected_error_lines(snippet: Path) -> List[int]:
    lines = snippet.read_text().splitlines()
    return [number for number, line in enumerate(lines, 1) if "# error" in line]


def run(command: List[str]) -> str:
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env)
    return done.stdout + done.stderr


def skip_without_torch(snippet: Path) -> None:
    if snippet.name.startswith("torch_"):
        pytest.importorskip("torch", reason="the torch adapter's snippets need torch")


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda path: path.name)
def test_mypy_reports_exactly_the_marked_lines(snippet: Path) -> None:
    pytest.importorskip("mypy", reason="mypy comes with the dev extra")
    skip_without_torch(snippet)
    output = run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(snippet)])
    pattern = rf"{re.escape(snippet.name)}:(\d+): error"
    reported = sorted({int(n) for n in re.findall(pattern, output)})
    assert reported == expected_error_lines(snippet), output


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda path: path.name)
def test_pyright_reports_exactly_the_marked_lines(snippet: Path) -> None:
    pyright = shutil.which("pyright", path=str(Path(sys.executable).parent))
    if pyright is None:
        pytest.skip("pyright comes with the dev extra")
    skip_without_torch(snippet)
    output = run([pyright, "--pythonpath", sys.executable, str(snippet)])
    pattern = rf"{re.escape(snippet.name)}:(\d+):\d+ - error"
    reported = sorted({int(n) for n in re.findall(pattern, output)})
    assert reported == expected_error_lines(snippet), output
