"""Hooks that log their calls, for the core tests: one hook per label, and the labels in order."""

from __future__ import annotations

from typing import Any, List


def recorder(log: List[Any], label: Any) -> Any:
    def hook(*args: Any, **kwargs: Any) -> Any:
        log.append((label, args, kwargs))
        return label

    return hook


def labels(log: List[Any]) -> List[Any]:
    return [entry[0] for entry in log]
