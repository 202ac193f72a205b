"""The public seam for adapters: everything a framework adapter needs of the core.

An adapter puts a framework's own hooks (torch's module hooks, a web router's
handlers, the methods of an object) behind hookbus's API. It builds *hook
points*: objects of the :class:`Point` shape that the bus's registry keeps by
name. The registry tells a point when the hooks that may match it changed
(:meth:`Point.invalidate`, always with no lock held); the point then asks
``bus.registry.plan(point)`` for its :class:`PointPlan` (the matching hooks per
kind, in order) and, per call, builds one :class:`CallContext` with
:meth:`CallContext.for_call` and runs each phase's hooks with :func:`run_phase`,
or, when the adapter makes the call itself, the whole sequence (around, pre, the
call, post or exception hooks) with :func:`call_with_hooks`. An adapter with
many possible points makes them on demand through a :class:`PointSource`
(``bus.registry.add_source``). The kinds of hook an adapter adds (torch's ``grad``),
and the kinds of point it makes, are rows of the table of what is valid where:
it declares them with :func:`add_hook_kind` and :func:`add_point_kind`, and its
points' ``kinds`` read their row.

``hookbus.torch`` is built on this module and :mod:`hookbus` alone (a test
enforces it); docs/adapters.md walks through a small adapter from scratch, and
``examples/method_hooks.py`` is a second, complete one.

Example:
    >>> import hookbus
    >>> from hookbus import adapter
    >>> bus = hookbus.EventBus()
    >>> class Point:  # hook points for one name; a real adapter wraps something
    ...     name, kinds, kind, where = "job", ("pre",), "job", "?"
    ...     is_async, skip_refusal = False, None
    ...     def invalidate(self):
    ...         self.plan = bus.registry.plan(self)
    ...     def layout(self):
    ...         return adapter.layout_of(lambda size: None, self.name)
    ...     def run(self, size):
    ...         ctx = adapter.CallContext.for_call(self.name, None, (size,), {}, 0, point=self)
    ...         adapter.run_phase(bus.registry, self.plan.pre, ctx)
    ...         return ctx.args
    >>> point = Point()
    >>> bus.registry.add_points([point])
    >>> _ = bus.pre("job", lambda ctx: print("pre hook sees size", ctx.arguments["size"]))
    >>> point.run(3)
    pre hook sees size 3
    (3,)
"""

from __future__ import annotations

from ._arounds import Started
from ._bus import EventBus
from ._compiled_call import (
    NativePostOwner,
    PostRunner,
    compile_post_phase,
    native_post_hook,
    native_post_plan,
)
from ._context import CallContext, Layout, layout_of, rebind, reject_returned
from ._errors import add_note, describe
from ._handle import Handle, HandleGroup, Removable, where_defined
from ._kinds import (
    PLAIN,
    HookKind,
    PointKind,
    add_hook_kind,
    add_point_kind,
    hook_kind,
)
from ._names import Matcher, check_name, is_pattern, matcher_for
from ._options import HookOptions
from ._plan import Point, PointPlan, PointSource
from ._sync_dispatch import call_with_hooks, resume_arounds, run_phase, start_arounds

__all__ = [
    "PLAIN",
    "CallContext",
    "EventBus",
    "Handle",
    "HandleGroup",
    "HookKind",
    "HookOptions",
    "Layout",
    "Matcher",
    "NativePostOwner",
    "Point",
    "PointKind",
    "PointPlan",
    "PointSource",
    "PostRunner",
    "Removable",
    "Started",
    "add_hook_kind",
    "add_note",
    "add_point_kind",
    "call_with_hooks",
    "check_name",
    "compile_post_phase",
    "describe",
    "hook_kind",
    "is_pattern",
    "layout_of",
    "matcher_for",
    "native_post_hook",
    "native_post_plan",
    "rebind",
    "reject_returned",
    "resume_arounds",
    "run_phase",
    "start_arounds",
    "where_defined",
]
