"""The test suite itself: CI runs its core part on Pythons without PyTorch (``.ci/run``,
``-m "not torch and not install"``), so every test module must at least be collected
there; a module-level use of ``torch`` or ``nn`` outside its import guard breaks that
whole run, while the suite with torch installed passes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# torch made unimportable, as on a Python where it is not installed.
_WITHOUT_TORCH = """
import sys
sys.modules["torch"] = None
import pytest
sys.exit(pytest.main(sys.argv[1:]))
"""


def test_every_test_module_is_collected_without_torch() -> None:
    args = ["--collect-only", "-q", "-m", "not torch and not install", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_TORCH, *args, "tests"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = [line for line in done.stdout.splitlines() if line.startswith("ERROR")]
    assert done.returncode == 0, "\n".join(errors) or done.stdout[-2000:] + done.stderr[-2000:]
