"""The README's code runs as written, and its commands are the ones CI uses."""

from __future__ import annotations

import re
from pathlib import Path
from typing import List

import pytest

import hookbus

README = Path(__file__).resolve().parent.parent / "README.md"


def python_blocks() -> List[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_readme_python_block_runs(index: int, capsys: pytest.CaptureFixture[str]) -> None:
    block = python_blocks()[index]
    if "import torch" in block:
        pytest.importorskip("torch")
    try:
        exec(compile(block, f"README.md block {index}", "exec"), {})
    finally:
        hookbus.clear()
    printed = capsys.readouterr().out.splitlines()
    # A comment "# prints: a / b" promises those lines, in that order.
    for promise in re.findall(r"# prints: (.*)", block):
        expected = [line.strip() for line in promise.split(" / ")]
        assert [line for line in printed if line in expected] == expected


def test_readme_commands_pin_torch_and_run_demo_and_tests() -> None:
    text = README.read_text()
    demo = re.search(r"<!-- demo-command -->\n```bash\n(.*?)\n```", text, flags=re.S)
    tests = re.search(r"<!-- test-command -->\n```bash\n(.*?)\n```", text, flags=re.S)
    assert demo
    assert tests
    assert "torch==2.13.0" in demo.group(1)
    assert demo.group(1).endswith("python -m hookbus.demo")
    assert "torch==2.13.0" in tests.group(1)
    assert tests.group(1).endswith("pytest")


def test_readme_quick_test_command_leaves_out_only_what_exists() -> None:
    """The quick subset names a marker the suite defines and a test file that exists."""
    root = README.parent
    text = README.read_text()
    quick = re.search(r"<!-- quick-test-command -->\n```bash\n(.*?)\n```", text, flags=re.S)
    assert quick
    command = quick.group(1)
    assert command.startswith("pytest ")
    for marker in re.findall(r"not (\w+)", command):
        assert f'"{marker}:' in (root / "pyproject.toml").read_text(), marker
    for ignored in re.findall(r"--ignore=(\S+)", command):
        assert (root / ignored).is_file(), ignored
