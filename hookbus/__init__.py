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

The PyTorch adapter lives in :mod:`hookbus.torch` (the ``torch`` extra: ``pip install -e
".[torch]"`` in a checkout); importing :mod:`hookbus` never imports torch.
"""

# No ``from __future__ import annotations`` here: it would put ``annotations`` in
# ``dir(hookbus)``, and this module annotates nothing.
from ._bus import EventBus, PointInfo
from ._context import Arguments, CallContext
from ._declarations import UnknownNameError
from ._errors import ErrorPolicy, HookError
from ._event import Event
from ._handle import Handle, HandleGroup
from ._hookpoint import AsyncTypedPoint, HookPoint, SharedNameWarning, TypedClassPoint, TypedPoint
from ._names import literal
from ._options import EventHookOptions, HookOptions, Priority, PriorityLike
from ._scope import Scope
from ._subscribe import listens
from ._trace import Trace, TraceRecord

__all__ = [
    "Arguments",
    "AsyncTypedPoint",
    "CallContext",
    "ErrorPolicy",
    "Event",
    "EventBus",
    "EventHookOptions",
    "Handle",
    "HandleGroup",
    "HookError",
    "HookOptions",
    "HookPoint",
    "PointInfo",
    "Priority",
    "PriorityLike",
    "Scope",
    "SharedNameWarning",
    "Trace",
    "TraceRecord",
    "TypedClassPoint",
    "TypedPoint",
    "UnknownNameError",
    "around",
    "check_pending",
    "clear",
    "collect",
    "collect_async",
    "collect_pairs",
    "collect_pairs_async",
    "default_bus",
    "emit",
    "emit_async",
    "event",
    "events",
    "exception",
    "explain",
    "first",
    "forget",
    "gather",
    "handles_of",
    "hookable",
    "hooks",
    "listens",
    "literal",
    "on",
    "paused",
    "points",
    "post",
    "pre",
    "scope",
    "subscribe",
    "trace",
    "without",
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
first = default_bus.first
emit_async = default_bus.emit_async
collect_async = default_bus.collect_async
collect_pairs = default_bus.collect_pairs
collect_pairs_async = default_bus.collect_pairs_async
gather = default_bus.gather
event = default_bus.event
forget = default_bus.forget
check_pending = default_bus.check_pending
pre = default_bus.pre
post = default_bus.post
exception = default_bus.exception
around = default_bus.around
hookable = default_bus.hookable
wrap = default_bus.wrap
scope = default_bus.scope
paused = default_bus.paused
clear = default_bus.clear
hooks = default_bus.hooks
handles_of = default_bus.handles_of
events = default_bus.events
points = default_bus.points
explain = default_bus.explain
trace = default_bus.trace
subscribe = default_bus.subscribe
without = default_bus.without
