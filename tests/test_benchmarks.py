"""The benchmark commands keep working: their quick modes run and print their tables.

Timings are never asserted (the machines are noisy); only that every row is measured
and reported. Peers, torch and matplotlib that are not installed are skipped by the
benchmark itself, so this runs on every supported Python.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "benchmarks" / "run.py"
COMPARE = ROOT / "benchmarks" / "compare.py"


def test_quick_benchmark_prints_every_row(tmp_path: Path) -> None:
    plot = tmp_path / "emit.png"
    done = subprocess.run(
        [sys.executable, str(RUN), "--quick", "--plot", str(plot)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "| Row | Case | Median time | Ratio to floor" in out
    for row in (
        "1. emit, 0 hooks",
        "1. emit, 1 hook",
        "1. emit, 10 hooks",
        "2. register + remove",
        "3. wrapped call",
        "4. scale",
        "4. memory",
        "tracing off",
        "fast copies (each against its slow twin)",
    ):
        assert f"| {row}" in out, f"row {row!r} missing from:\n{out}"
    assert "**hookbus** `bus.emit`" in out
    # The torch rows run where torch and the adapter are installed, else say why not.
    assert "| 5. torch MLP forward" in out or "torch rows skipped:" in out
    assert "| 6. torch stats()" in out or "torch rows skipped:" in out
    assert "| 7. GPT-2 capture, every module" in out or "GPT-2 rows skipped:" in out
    assert "| 8. GPT-2 operation hook point" in out or "GPT-2 rows skipped:" in out
    assert "| 10. attach + detach, per module" in out or "GPT-2 rows skipped:" in out
    assert "floor: hand-written decorator" in out
    assert "Targets: " in out
    # The plot is written when matplotlib is there, and the output says which.
    if "Plot written to" in out:
        assert plot.stat().st_size > 0
    else:
        assert "Plot: matplotlib is not installed" in out
        assert not plot.exists()


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
    )


def test_compare_measures_a_commit_and_the_working_tree_each_with_its_own_hookbus() -> None:
    if _git("rev-parse", "--verify", "HEAD").returncode != 0:
        pytest.skip("not a git checkout: compare.py checks revisions out with git")
    done = subprocess.run(
        [sys.executable, str(COMPARE), "HEAD", "--quick", "--only", "2.", "--no-torch"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    imported = {}
    for side in ("base", "head"):
        (fact,) = [text for text in out.splitlines() if text.startswith(f"- {side}: ")]
        imported[side] = Path(fact.split("; hookbus from ", 1)[1])
    # The head side is this working tree; the base side a checkout of HEAD outside it,
    # removed at the end (from disk and from git's list of worktrees).
    assert imported["head"] == ROOT / "hookbus" / "__init__.py"
    base_tree = imported["base"].parent.parent
    assert imported["base"].name == "__init__.py"
    assert ROOT not in imported["base"].parents
    assert not base_tree.exists()
    assert str(base_tree) not in _git("worktree", "list").stdout
    # Both lines of the row measured on both sides: the same code, so a ratio near 1.
    rows = [text.split(" | ") for text in out.splitlines() if text.startswith("| 2. register")]
    assert [cells[1] for cells in rows] == [
        "floor: `list.append` + `list.remove`",
        "**hookbus** `bus.on(...)` + `handle.remove()`",
    ], out
    for cells in rows:
        assert 0.5 < float(cells[4].rstrip("x")) < 2.0, out
    assert "Only on the" not in out
    assert "Slower or larger by more than 5% beyond the noise:" in out


def test_a_hand_monkeypatch_leaves_a_function_swapped_after_it_was_made_in_place() -> None:
    # One run builds every row in one process: row 8's hand patches of F.softmax,
    # made first, must not undo the dispatcher that row 13's hook_pattern installs
    # later (its hooked cases would then measure a fallback that no row sets up).
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from _operation_cases import HandPatch
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    original = F.softmax
    module = torch.nn.Softmax(dim=-1)
    outputs: dict = {}
    HandPatch(module, "softmax", outputs)

    def swapped_later(*args: object, **kwargs: object) -> object:
        return original(*args, **kwargs)

    F.softmax = swapped_later  # type: ignore[assignment]
    try:
        module.forward = lambda x: F.softmax(x, dim=-1)  # type: ignore[method-assign]
        module(torch.zeros(1, 2))
        assert F.softmax is swapped_later
    finally:
        F.softmax = original  # type: ignore[assignment]
    assert outputs["out"].tolist() == [[0.5, 0.5]]
