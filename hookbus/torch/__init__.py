"""hookbus.torch: ``nn.Module`` hooks through the same bus API, with capture and cleanup.

Attach a model and every module is a hook point named by its qualified name; the
usual ``bus.pre`` / ``bus.post`` / ``bus.exception`` then apply to module calls:

    >>> import hookbus, torch, hookbus.torch
    >>> from torch import nn
    >>> bus = hookbus.EventBus()
    >>> model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    >>> net = hookbus.torch.attach(model, bus)
    >>> def double(ctx):
    ...     ctx.result = ctx.result * 2
    >>> with bus.post("1", double):
    ...     model(torch.ones(1, 2)).shape
    torch.Size([1, 2])

The one-line way to look inside a model is :func:`capture`:

    >>> with hookbus.torch.capture(model, nn.Linear) as cache:
    ...     y = model(torch.ones(1, 2))
    >>> cache["0"].output.shape
    torch.Size([1, 2])

This is the only part of hookbus that imports torch (the ``torch`` extra: ``pip install -e
".[torch]"`` in a checkout, or a built wheel with ``[torch]``; hookbus is not on PyPI).
"""

from __future__ import annotations

import warnings as _warnings
from typing import TYPE_CHECKING, Any, Dict

try:
    import torch as _torch  # noqa: F401  # pyright: ignore[reportUnusedImport] - fail here
except ImportError as _error:  # pragma: no cover - tested in a subprocess without torch
    raise ImportError(
        "hookbus.torch needs PyTorch, which is not installed: pip install torch, or install "
        'hookbus with its torch extra (not on PyPI: pip install -e ".[torch]" in a checkout)'
    ) from _error

from ._attach import Attachment, attach
from ._cache import Cache, Call, CapturedCalls
from ._capture import Capture, capture
from ._every_module import EveryModule, every_module
from ._generation import Steps, steps
from ._grad import GradHandle, on_accumulated_grad, on_grad
from ._moments import Moments
from ._operations import OperationSelection
from ._patching import Patch, patch
from ._point import inert_point
from ._script_refusal import ScriptRefusal
from ._selection import ROOT, Selector
from ._stats import Stats, stats
from ._unwrap import CompiledModelWarning, bare_names
from ._value_point import NamePoint
from ._vocabulary import Vocabulary

# What a pickle names (a hooked module saved with torch.save holds inert_point and a
# ScriptRefusal; Moments are saved as themselves): the public package, so that
# moving a private module never breaks loading a file saved before.
for _saved in (inert_point, ScriptRefusal, Moments):
    _saved.__module__ = __name__

__all__ = [
    "ROOT",
    "Attachment",
    "Cache",
    "Call",
    "Capture",
    "CapturedCalls",
    "CompiledModelWarning",
    "EveryModule",
    "GradHandle",
    "Moments",
    "NamePoint",
    "OperationSelection",
    "Patch",
    "Selector",
    "Stats",
    "Steps",
    "Vocabulary",
    "attach",
    "bare_names",
    "capture",
    "every_module",
    "on_accumulated_grad",
    "on_grad",
    "patch",
    "stats",
    "steps",
]

# Public names renamed so that a reader cannot confuse them -> their new names. The
# old ones still work, with a DeprecationWarning: code written before, and files
# saved before (a pickle names a class by its public name).
_RENAMED: Dict[str, str] = {"Record": "CapturedCalls", "Stat": "Moments"}

if not TYPE_CHECKING:  # type checkers see only the new names

    def __getattr__(name: str) -> Any:
        new = _RENAMED.get(name)
        if new is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        _warnings.warn(
            f"hookbus.torch.{name} is now called hookbus.torch.{new}",
            DeprecationWarning,
            stacklevel=2,
        )
        return globals()[new]
