"""The root conftest skips a docstring example whose imports cannot run here, saying why,
instead of failing on a Python without the optional dependencies (CI's core runs)."""

from __future__ import annotations

import doctest
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any, List, Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _root_conftest() -> ModuleType:
    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Item:
    """A doctest item as the hook sees it: its DocTest, and the markers added."""

    def __init__(self, source: str) -> None:
        self.dtest = doctest.DocTestParser().get_doctest(source, {}, "example", None, 0)
        self.markers: List[Any] = []

    def add_marker(self, marker: Any) -> None:
        self.markers.append(marker)


def _skip_reason(source: str, absent: List[str], monkeypatch: pytest.MonkeyPatch) -> Optional[str]:
    conftest = _root_conftest()
    find_spec = importlib.util.find_spec

    def fake_find_spec(name: str, *args: Any) -> Any:
        return None if name in absent else find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", fake_find_spec)
    item = _Item(source)
    conftest.pytest_collection_modifyitems([item])
    if not item.markers:
        return None
    (marker,) = item.markers
    assert marker.name == "skip"
    return str(marker.kwargs["reason"])


def test_an_example_importing_several_modules_is_skipped_when_any_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reason = _skip_reason(">>> import asyncio, blinker\n", ["blinker"], monkeypatch)
    assert reason == "the example imports blinker, which is not installed"


def test_an_example_building_a_transformers_model_is_skipped_without_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = ">>> import transformers\n>>> from hookbus import bridges\n"
    reason = _skip_reason(source, ["torch"], monkeypatch)
    assert reason == "the example imports torch, which is not installed"


def test_an_example_whose_imports_are_all_here_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _skip_reason(">>> import asyncio, json\n", [], monkeypatch) is None
