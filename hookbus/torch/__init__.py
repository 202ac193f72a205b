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

This is the only part of hookbus that imports torch (``pip install "hookbus[torch]"``).
"""

from __future__ import annotations

try:
    import torch as _torch  # noqa: F401  # pyright: ignore[reportUnusedImport] - fail here
except ImportError as _error:  # pragma: no cover - tested in a subprocess without torch
    raise ImportError(
        'hookbus.torch needs PyTorch, which is not installed: pip install "hookbus[torch]"'
    ) from _error

from ._attach import ROOT, Attachment, Selector, attach
from ._capture import Cache, Call, Record, capture
from ._generation import steps
from ._grad import GradHandle, on_grad
from ._moments import Stat
from ._patching import patch
from ._stats import Stats, stats
from ._unwrap import CompiledModelWarning, bare_names

__all__ = [
    "ROOT",
    "Attachment",
    "Cache",
    "Call",
    "CompiledModelWarning",
    "GradHandle",
    "Record",
    "Selector",
    "Stat",
    "Stats",
    "attach",
    "bare_names",
    "capture",
    "on_grad",
    "patch",
    "stats",
    "steps",
]
