"""``python -m hookbus.demo`` (it runs ``examples/tour.py``), the README's demo: a clean
first run that shows every part, each titled, with the code that ran above what it printed."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOUR = ROOT / "examples" / "tour.py"

# What each part must show: its title, and lines that prove it ran.
PARTS = {
    "Events": ["audit (priority HIGH): order 1", "collect plugins.formats -> ['csv', 'json']"],
    "Declared events": ["welcome ada (admin=True)", "fails at once", "did you mean"],
    "Hook points": ["convert(100) -> 110.5", "convert(-5) -> 0.5"],
    "Handles, scopes": ["after remove (twice), active = False", "after the scope, hooks left: []"],
    "Hook classes": ["Analytics.items: a post hook", "<HandleGroup 3 handles, 0 active>"],
    "Training-loop events": ["iter 1: loss 0.60", "epoch 0 done"],
    "Async": ["async hook: mailed ada", "async post hook: caching <page /home>"],
    "Error policies": ["HookError(", "ERROR:hookbus: hook"],
    "Testing": ["bus_recorder"],
    "The PyTorch adapter": [],
}


@pytest.fixture(scope="module")
def demo() -> subprocess.CompletedProcess[str]:
    # -X dev -W default: every warning shows, DeprecationWarning and ResourceWarning too.
    return subprocess.run(
        [sys.executable, "-X", "dev", "-W", "default", "-m", "hookbus.demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )


# A call that each part's code must show: the API the part is about.
CODE = [
    "bus.emit(",
    "@bus.event",
    "bus.pre(",
    "handle.remove()",
    "bus.subscribe(",
    "training.AFTER_TRAIN_ITER",
    "await bus.emit_async(",
    'bus.errors = "collect"',
    "bus_recorder.assert_emitted_with(",
    "hookbus.torch.capture(",
]


def _sections(output: str) -> Dict[str, Dict[str, List[str]]]:
    """Each part's title line, and its code and output lines."""
    parts: Dict[str, Dict[str, List[str]]] = {}
    section: List[str] = []
    for line in output.splitlines():
        if line.startswith("== "):
            current = parts[line] = {"code": [], "output": []}
            section = current["code"]
        elif line == "-- code:":
            section = current["code"]
        elif line == "-- output:":
            section = current["output"]
        elif line:
            section.append(line)
    return parts


def _parts(output: str) -> Dict[str, List[str]]:
    """The title line of each part, and the lines it printed."""
    return {title: lines["output"] for title, lines in _sections(output).items()}


def test_the_demo_runs_clean(demo: subprocess.CompletedProcess[str]) -> None:
    assert demo.returncode == 0, demo.stderr
    assert demo.stderr == "", f"the demo wrote to stderr (a warning?):\n{demo.stderr}"


def test_every_part_has_a_numbered_title_in_order(demo: subprocess.CompletedProcess[str]) -> None:
    titles = list(_parts(demo.stdout))
    assert len(titles) == len(PARTS)
    for number, (title, expected) in enumerate(zip(titles, PARTS), 1):
        assert title.startswith(f"== {number}. {expected}"), (title, expected)


def test_each_title_names_a_docs_page_and_section(demo: subprocess.CompletedProcess[str]) -> None:
    """A reader maps a part to the docs: the page's nav title, and a section of it."""
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = dict(re.findall(r"^\s+- ([^:\n]+):\s*(\S+\.md)\s*$", config, re.M))
    for title in _parts(demo.stdout):
        found = re.search(r"\(docs: ([^,)]+)(?:, ([^)]+))?\)$", title)
        assert found, f"no (docs: ...) in {title!r}"
        page, section = found.groups()
        assert page in pages, f"{title!r}: no page titled {page!r} in mkdocs.yml's nav"
        if section:
            text = (ROOT / "docs" / pages[page]).read_text(encoding="utf-8")
            assert re.search(rf"^##+ {re.escape(section)}\s*$", text, re.M), (title, section)


def test_each_part_shows_what_it_is_about_in_a_screenful_or_two(
    demo: subprocess.CompletedProcess[str],
) -> None:
    for (title, lines), expected in zip(_parts(demo.stdout).items(), PARTS.values()):
        printed = " ".join(" ".join(lines).split())  # long lines are wrapped
        for line in expected:
            assert line in printed, f"{title}: {line!r} missing from\n" + "\n".join(lines)
        assert 1 <= len(lines) <= 40, f"{title}: {len(lines)} lines"
        assert all(len(line) <= 100 for line in lines), f"{title}: a line over 100 characters"


def test_each_part_shows_its_code_above_its_output(
    demo: subprocess.CompletedProcess[str],
) -> None:
    """The tour teaches the API: the lines that ran, as they are in examples/tour.py."""
    source = TOUR.read_text(encoding="utf-8")
    for (title, lines), call in zip(_sections(demo.stdout).items(), CODE):
        code = lines["code"]
        assert 3 <= len(code) <= 50, f"{title}: {len(code)} lines of code"
        assert all(len(line) <= 100 for line in code), f"{title}: a line over 100 characters"
        assert any(call in line for line in code), f"{title}: {call!r} not in its code"
        shown = [line.strip() for line in code]
        assert all(line in source for line in shown), f"{title}: code not from the tour"


def test_the_pytest_part_runs_the_fixtures(demo: subprocess.CompletedProcess[str]) -> None:
    printed = "\n".join(list(_parts(demo.stdout).values())[8])
    for fixture in ("event_bus", "default_bus", "bus_recorder"):
        assert fixture in printed
    # Two tests pass; the one that fails on purpose shows the recorder's message.
    assert "1 failed, 2 passed" in printed
    assert "(did you mean `order.placed`?)" in " ".join(printed.split())


def test_the_torch_part_runs_when_torch_is_installed(
    demo: subprocess.CompletedProcess[str],
) -> None:
    printed = "\n".join(list(_parts(demo.stdout).values())[9])
    if importlib.util.find_spec("torch") is None:
        assert 'pip install torch==2.13.0 -e ".[torch]"' in " ".join(printed.split())
        return
    assert "captured == forward's own tensors: True" in printed
    assert "native hooks left on the net: 0" in printed


def test_without_pytest_the_recorder_still_shows_the_checks() -> None:
    # A first run with only the torch extra has no pytest: the part runs in-process.
    code = (
        "import sys, runpy; sys.modules['pytest'] = None; "
        f"tour = runpy.run_path({str(TOUR)!r}); "
        "[run() for title, docs, run, code in tour['PARTS'] if title.startswith('Testing')]"
    )
    run = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "default", "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    printed = " ".join(run.stdout.split())
    assert "pip install pytest" in printed
    assert "assert_emitted_with('order.placed', 7, total='9.99 EUR') passed" in printed
    assert "(did you mean `order.placed`?)" in printed


def test_the_demo_module_says_where_the_tour_is_when_it_is_not_there(tmp_path: Path) -> None:
    # A wheel ships no examples/: hookbus.demo says where the tour is, and fails.
    script = (
        "import sys, pathlib, hookbus.demo as demo; "
        f"demo._TOUR = pathlib.Path({str(tmp_path / 'missing.py')!r}); sys.exit(demo._main())"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    assert "examples/tour.py" in done.stderr
