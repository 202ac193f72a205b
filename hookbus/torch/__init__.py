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

try:
    import torch as _torch  # noqa: F401  # pyright: ignore[reportUnusedImport] - fail here
except ImportError as _error:  # pragma: no cover - tested in a subprocess without torch
    raise ImportError(
        "hookbus.torch needs PyTorch, which is not installed: pip install torch, or install "
        'hookbus with its torch extra (not on PyPI: pip install -e ".[torch]" in a checkout)'
    ) from _error

from ._attach import ROOT, Attachment, EveryModule, Selector, attach, every_module
from ._capture import Cache, Call, Record, capture
from ._generation import steps
from ._grad import GradHandle, on_accumulated_grad, on_grad
from ._moments import Stat
from ._operations import OperationSelection
from ._patching import patch
from ._point import ScriptRefusal, inert_point
from ._stats import Stats, stats
from ._unwrap import CompiledModelWarning, bare_names
from ._vocabulary import NamePoint, Vocabulary, vocabulary

# What a pickle names (a hooked module saved with torch.save holds inert_point and a
# ScriptRefusal; a Stat is saved as itself): the public package, so that moving a
# private module never breaks loading a file saved before.
for _saved in (inert_point, ScriptRefusal, Stat):
    _saved.__module__ = __name__

__all__ = [
    "ROOT",
    "Attachment",
    "Cache",
    "Call",
    "CompiledModelWarning",
    "EveryModule",
    "GradHandle",
    "NamePoint",
    "OperationSelection",
    "Record",
    "Selector",
    "Stat",
    "Stats",
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
    "vocabulary",
]
