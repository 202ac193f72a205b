"""The benchmark command keeps working: its quick mode runs and prints the results table.

Timings are never asserted (the machines are noisy); only that every row is measured
and reported. Peers, torch and matplotlib that are not installed are skipped by the
benchmark itself, so this runs on every supported Python.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "benchmarks" / "run.py"


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
