"""Decorators keep the wrapped signature for type checkers (ParamSpec), mypy and pyright alike."""

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
SNIPPET = Path(__file__).resolve().parent / "typing" / "decorated.py"


def expected_error_lines() -> List[int]:
    lines = SNIPPET.read_text().splitlines()
    return [number for number, line in enumerate(lines, 1) if "# error" in line]


def run(command: List[str]) -> str:
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env)
    return done.stdout + done.stderr


def test_mypy_sees_the_original_signatures() -> None:
    pytest.importorskip("mypy", reason="mypy comes with the dev extra")
    output = run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(SNIPPET)])
    reported = sorted({int(n) for n in re.findall(r"decorated\.py:(\d+): error", output)})
    assert reported == expected_error_lines(), output


def test_pyright_sees_the_original_signatures() -> None:
    pyright = shutil.which("pyright", path=str(Path(sys.executable).parent))
    if pyright is None:
        pytest.skip("pyright comes with the dev extra")
    output = run([pyright, "--pythonpath", sys.executable, str(SNIPPET)])
    reported = sorted({int(n) for n in re.findall(r"decorated\.py:(\d+):\d+ - error", output)})
    assert reported == expected_error_lines(), output
