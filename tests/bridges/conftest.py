"""The trainer bridges' tests: skipped, saying why, where PyTorch is not installed."""

from __future__ import annotations

from pathlib import Path
from typing import List

import pytest

pytest.importorskip(
    "torch", reason='the trainer bridges\' tests need PyTorch: pip install -e ".[torch]"'
)

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: List[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.torch)
