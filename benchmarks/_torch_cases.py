"""Row 5: a 4-layer MLP forward on CPU (one thread), with and without hooks."""

from __future__ import annotations

import importlib.util
from typing import List, Optional

from _harness import Case
from _suite import Line


def unavailable() -> Optional[str]:
    """Why the torch rows can't run here, or None."""
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    if importlib.util.find_spec("hookbus.torch") is None:
        return "hookbus.torch (the adapter) is not there yet"
    return None


def describe() -> str:
    import torch

    return f"torch {torch.__version__}, torch.set_num_threads(1)"


def cases() -> List[Case]:
    return []


def lines() -> List[Line]:
    return []
