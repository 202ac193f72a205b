"""hookbus: events, pre/post/exception hooks around any callable, and removable handles.

One :class:`EventBus` holds every hook. The functions of this module act on a
process-wide default bus, :data:`default_bus`, so that hooks need no set-up:

    >>> import hookbus
    >>> @hookbus.hookable("forward")
    ... def forward(x):
    ...     return x * 2
    >>> with hookbus.post("forward", lambda ctx: print("forward ->", ctx.result)):
    ...     forward(21)
    forward -> 42
    42

The PyTorch adapter lives in :mod:`hookbus.torch` (``pip install "hookbus[torch]"``);
importing :mod:`hookbus` never imports torch.
"""

from __future__ import annotations

from ._bus import EventBus
from ._context import CallContext
from ._errors import ErrorPolicy, HookError
from ._handle import Handle, HandleGroup, Scope
from ._options import EventHookOptions, HookOptions
from ._priority import Priority, PriorityLike
from ._subscribe import listens
from ._trace import Trace, TraceRecord
from ._wrapper import HookPoint

__all__ = [
    "CallContext",
    "ErrorPolicy",
    "EventBus",
    "EventHookOptions",
    "Handle",
    "HandleGroup",
    "HookError",
    "HookOptions",
    "HookPoint",
    "Priority",
    "PriorityLike",
    "Scope",
    "Trace",
    "TraceRecord",
    "clear",
    "collect",
    "default_bus",
    "emit",
    "emit_async",
    "exception",
    "hookable",
    "hooks",
    "listens",
    "on",
    "paused",
    "post",
    "pre",
    "scope",
    "subscribe",
    "wrap",
]

__version__ = "0.1.0"

default_bus = EventBus("default")
"""The process-wide bus behind the module-level functions (``hookbus.on`` ...)."""

# The module-level API is the default bus's bound methods: the same signatures,
# docs and speed as calling ``default_bus.emit`` directly.
on = default_bus.on
emit = default_bus.emit
collect = default_bus.collect
emit_async = default_bus.emit_async
pre = default_bus.pre
post = default_bus.post
exception = default_bus.exception
hookable = default_bus.hookable
wrap = default_bus.wrap
scope = default_bus.scope
paused = default_bus.paused
clear = default_bus.clear
hooks = default_bus.hooks
subscribe = default_bus.subscribe
