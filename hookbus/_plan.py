"""Plans, and the seam between the registry and hook points.

A *plan* is what one dispatch of one name runs: the matching hooks, sorted, as
immutable tuples. The registry builds every plan here (:func:`event_plan`,
:class:`PointPlan`), and :func:`fast_hooks` is the one rule for when a tuple of
hooks can run as bare callables in a short loop.

A hook point is anything with the :class:`Point` shape: the core's
:class:`~hookbus.HookPoint` and the torch adapter's module points alike. The
registry keeps points weakly by name and calls :meth:`Point.invalidate` *after*
releasing its lock whenever the hooks that may match a point change; the point
then asks ``Registry.plan()`` for its new
plan. So no point runs its own code (torch's, a warning, a user's) under the
bus lock. A point may also have ``follow(handle, added)``, which the registry calls
under its lock when a plain hook for the point's exact name comes or goes: bookkeeping
only, it takes the plan that follows from its own (:meth:`PointPlan.with_hook`,
:meth:`PointPlan.without_hook`) and returns the one it replaced, or returns ``None``
to be invalidated after the lock (``HookPoint.follow``).

An adapter with many possible points (a torch model's modules) may make them
only when a hook may match: it registers a :class:`PointSource`, which the
registry asks, before registering a hook of a point kind, to make the points
the hook will match (or to refuse a name that can only be a typo of one of its
names).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from typing_extensions import Protocol

if TYPE_CHECKING:
    from ._context import Layout
    from ._declarations import Declared
    from ._errors import ErrorPolicy
    from ._handle import Handle
    from ._names import Matcher
    from ._trace import Tracer

__all__ = [
    "NO_HOOKS", "CheckedPlan", "DispatchSettings", "EventPlan", "Point", "PointPlan",
    "PointSource", "event_plan", "fast_hooks",
]  # fmt: skip

Hooks = Tuple["Handle", ...]
_new_object = object.__new__
FastHooks = Optional[Tuple[Callable[..., Any], ...]]


class Point(Protocol):
    """What the registry needs of a hook point (the adapter seam)."""

    @property
    def name(self) -> str:
        """The point's name: hooks registered for it (or a matching pattern) apply."""
        ...

    @property
    def kinds(self) -> Tuple[str, ...]:
        """The hook kinds that apply to the point (``"pre"``, ``"post"``, ...): the ``runs``
        of its kind's row of the table (``hookbus.adapter.PointKind``)."""
        ...

    @property
    def is_async(self) -> bool:
        """Whether calls of the point can await async hooks."""
        ...

    @property
    def kind(self) -> str:
        """What the point wraps (``bus.points()``): ``"function"``, ``"method"``, ``"module"``."""
        ...

    @property
    def where(self) -> str:
        """Where what it wraps is defined, as ``file:line`` (``"?"`` if unknown)."""
        ...

    def invalidate(self) -> None:
        """The hooks that may match changed; called with no lock held."""
        ...

    @property
    def skip_refusal(self) -> Optional[str]:
        """Why ``ctx.skip()`` cannot work on this point (the error's message), or ``None``."""
        ...

    def layout(self) -> Layout:
        """The parameters of what the point wraps, for ``ctx.arguments`` (read lazily)."""
        ...


class DispatchSettings(Protocol):
    """What every dispatch loop reads of the registry, per call (the adapter seam).

    ``bus.registry`` is one: the loops of ``_dispatch`` take it, and read only these.
    """

    @property
    def errors(self) -> ErrorPolicy:
        """The error policy: ``"raise"``, ``"collect"`` or ``"log"``."""
        ...

    @property
    def tracer(self) -> Optional[Tracer]:
        """What hook calls are recorded into while a trace is open, else ``None``."""
        ...

    def keyword_sender(self, event: str, kwargs: Dict[str, Any]) -> Any:
        """The sender of an emission of ``event`` with no positional argument: a declared
        event's first parameter passed by keyword, else ``NO_SENDER``."""
        ...


class PointSource(Protocol):
    """What makes hook points on demand (the adapter seam): ``registry.add_source``.

    The registry holds a source weakly and calls it with no lock held: before
    registering a hook of any kind but ``"event"`` (through ``bus.pre``,
    ``bus.post``, ... or an adapter's own methods), from :meth:`Registry.points`
    (listing), and for hooks that ``Registry.restore`` brings back.
    """

    def make_points(self, kind: Optional[str], name: str, match: Optional[Matcher]) -> bool:
        """Make and add (``registry.add_points``) the points that a hook of ``kind``
        for ``name`` would match (``match``: ``name`` is a pattern; ``kind`` ``None``:
        any kind), each told of the hooks that match it already; return whether the
        name is one of this source's (it then needs no other point to be right)."""
        ...

    def refuse_unmatched(self, kind: str, name: str, match: Optional[Matcher]) -> None:
        """A hook of ``kind`` for ``name`` matches no source's name and no point:
        raise to refuse it as a typo of one of this source's names, else return."""
        ...


def fast_hooks(handles: Hooks, plain: bool) -> FastHooks:
    """The bare callables, when the short loop can run them; else ``None``.

    ``plain`` says the bus adds nothing per hook (errors raise, no trace). Any
    hook with a rare option (once, weak, target, async, with_name) needs the full
    loop of ``_dispatch``, which asks the handle what to run.
    """
    if not handles:
        return () if plain else None
    if not plain:
        return None
    # Loops, not all(...) or a generator: plans are worked out at each hook change, and
    # a plan that changes at every call is a benchmark row.
    # A handle's fields, not its properties (``bare``, ``hook``): a property is a call
    # through C that Python 3.11 cannot inline, a tenth of a plan's build per read.
    hooks: List[Callable[..., Any]] = []
    for h in handles:
        if h.is_async or not h._options.bare:
            return None
        hooks.append(h._hook)  # the hook itself: a bare handle holds it strongly
    return tuple(hooks)


class EventPlan(Tuple[Callable[..., Any], ...]):
    """The plan of an event whose hooks the fast loop can't run as bare callables.

    It holds one callable, which runs the full loop of the emission (``emit`` calls it
    with the emission's arguments, as it calls a hook), or nothing (:data:`NO_HOOKS`).
    A tuple, so that emit iterates every plan alike, with no test of its kind; a
    subclass, so that its class tells it from a plan of bare callables (emit names
    the hook that failed only in those: the full loop names its own).
    """

    __slots__ = ()


NO_HOOKS = EventPlan()
"""The plan of an event without hooks: emit's loop has nothing to run."""


class CheckedPlan(Tuple[Callable[..., Any], ...]):
    """The plan of a declared event whose first hook is called through the caller that
    checks a positional emission (``_spec.make_checking_call``): bare callables, as a
    plain tuple's, for an emission without keywords.

    That caller takes its arguments by position only, so an emission with keywords
    runs :attr:`keywords` instead: the binder, then the hooks themselves.
    """

    keywords: Tuple[Callable[..., Any], ...]


def event_plan(
    handles: Hooks, plain: bool, full: Callable[..., Any], declared: Optional[Declared] = None
) -> Any:
    """What ``emit`` runs: ``NO_HOOKS``, a tuple of bare callables, or an :class:`EventPlan`
    holding ``full``, what runs the emission's full loop.

    Typed ``Any``: a plan's class says which it is (emit iterates any of them).

    A declared event's tuple starts with something that raises ``TypeError`` before
    any hook runs when the arguments don't bind to the spec: the first hook itself
    if its own parameters are the spec's, else the generated binder; or, where a
    count is the whole positional check, a :class:`CheckedPlan`, whose first callable
    checks and calls the first hook in one frame. A hook that
    takes the spec's arguments by name runs as its caller (``_spec.by_name``), which
    has the spec's parameters, so it checks them too when it comes first. A historic
    event always takes the full loop, which records each emission.
    """
    if declared is None:
        if not handles:
            return NO_HOOKS
        fast = fast_hooks(handles, plain)
        return EventPlan((full,)) if fast is None else fast
    fast = None if declared.historic else fast_hooks(handles, plain)
    if fast is None:
        return EventPlan((full,))
    if any(h.by_name for h in handles):  # hooks that take the spec's arguments by name
        fast = tuple(h.call_for(declared.name, hook) for h, hook in zip(handles, fast))
    if fast and declared.checks_itself(fast[0]):
        return fast
    checked = (declared.binder, *fast)
    if not fast or declared.checking_call is None:
        return checked
    plan = CheckedPlan((declared.checking_call(fast[0]), *fast[1:]))
    plan.keywords = checked
    return plan


class PointPlan:
    """The hooks of one hook point, per kind, in the order they run.

    ``hooks`` and ``fast`` map each of the point's kinds to its handles and to
    their bare callables (``None`` when the full loop must run them);
    ``pre``, ``post`` and ``exception`` are the core's three, read per call.
    ``direct`` says a call can run as straight-line code (``_compiled_call``),
    calling ``around_hooks``, ``pre_hooks`` and ``post_hooks``: no hook is async, and
    the around, pre and post hooks are all fast (exception hooks, rare by nature,
    always run in the full loop). ``run``, set by a hook point before it keeps the
    plan, runs one call of the point under this plan: ``run(point, plan, args, kwargs)``.
    Once a sync point compiled it, ``shape`` names its call shape and ``bindings``
    holds what the code of that shape reads (``_compiled_call``); until then ``""``.
    A plan that :meth:`with_hook` made from another keeps it as ``parent``, and the
    handle it added as ``added``: removing that hook again gives the parent back, as it
    was (compiled, if it was), at no cost. The parent's hooks are all the plan's but
    one, so it holds no hook that is not registered.
    """

    __slots__ = (
        "added", "around", "around_hooks", "bindings", "direct", "exception", "fast",
        "has_async", "hooks", "parent", "post", "post_hooks", "pre", "pre_hooks", "run",
        "shape",
    )  # fmt: skip

    run: Callable[[Any, PointPlan, Tuple[Any, ...], Dict[str, Any]], Any]
    hooks: Dict[str, Hooks]
    fast: Dict[str, FastHooks]
    pre: Hooks
    post: Hooks
    exception: Hooks
    around: Hooks
    around_hooks: FastHooks
    has_async: bool
    direct: bool
    pre_hooks: Tuple[Callable[..., Any], ...]
    post_hooks: Tuple[Callable[..., Any], ...]
    shape: str
    bindings: Tuple[Any, ...]
    parent: Optional[PointPlan]
    added: Optional[Handle]

    def __init__(
        self,
        hooks: Dict[str, Hooks],
        plain: bool,
        fast: Optional[Dict[str, FastHooks]] = None,
        has_async: bool = False,
    ) -> None:
        """``fast`` and ``has_async``, when given, are what this works out from ``hooks``
        and ``plain`` (``Registry.plan`` finds them in its own loop over the kinds)."""
        self.hooks = hooks
        self.shape = ""
        self.bindings = ()
        self.parent = self.added = None
        if fast is None:
            # One loop over the kinds (no generator): a plan that changes at every call is
            # a benchmark row. A kind's bare callables exist only if none of its hooks is
            # async.
            fast = {}
            has_async = False
            for kind, handles in hooks.items():
                if not handles:  # fast_hooks' first case, without the call
                    fast[kind] = () if plain else None
                    continue
                bare = fast[kind] = fast_hooks(handles, plain)
                if bare is None and not has_async:
                    for h in handles:
                        if h.is_async:
                            has_async = True
                            break
        self.fast = fast
        self.pre = hooks.get("pre", ())
        self.post = hooks.get("post", ())
        self.exception = hooks.get("exception", ())
        around = self.around = hooks.get("around", ())
        # The around hooks' bare callables when none has a rare option, else None.
        around_hooks = self.around_hooks = fast.get("around") if around else None
        self.has_async = has_async
        pre_hooks, post_hooks = fast.get("pre", ()), fast.get("post", ())
        self.direct = (
            not has_async
            and (not around or around_hooks is not None)
            and pre_hooks is not None
            and post_hooks is not None
        )
        self.pre_hooks = pre_hooks or ()
        self.post_hooks = post_hooks or ()

    def with_hook(self, handle: Handle) -> Optional[PointPlan]:
        """This plan with ``handle`` added, or ``None`` when that takes more than an append.

        ``handle`` is a plain sync hook (no option) just registered for the point's exact
        name: it runs last among its kind's hooks, unless one of those has a negative
        priority (then ``None``: the registry works the plan out again). A hook added and
        removed around each call (a benchmark row) so costs no lookup of the registry's
        hooks; ``tests/test_fast_copies.py`` checks the result against ``Registry.plan``.
        """
        kind = handle.kind
        hooks = self.hooks
        handles = hooks.get(kind)
        if handles is None or (handles and handles[-1]._options.priority < 0):
            return None
        # What _changed() works out, in this frame, and less of it: a plain sync hook
        # changes neither has_async nor, as its kind's bare callables stay there or
        # absent, direct; only its kind's fields change.
        plan: PointPlan = _new_object(PointPlan)
        plan.hooks = hooks = dict(hooks)
        # Concatenations, not (*handles, handle), which builds a list first: about 700
        # instructions of the row.
        handles = hooks[kind] = handles + (handle,)  # noqa: RUF005
        plan.fast = fast = dict(self.fast)
        bare = fast[kind]
        if bare is not None:
            bare = fast[kind] = bare + (handle._hook,)  # noqa: RUF005
        plan.shape = ""
        plan.bindings = ()
        # The parent's own parent is let go of: one step back is what a hook added and
        # removed around a call needs, and a chain would keep every plan before it.
        plan.parent, plan.added, self.parent, self.added = self, handle, None, None
        plan.pre, plan.post, plan.exception = self.pre, self.post, self.exception
        plan.pre_hooks, plan.post_hooks = self.pre_hooks, self.post_hooks
        if kind == "pre":
            plan.pre = handles
            plan.pre_hooks = bare or ()
        elif kind == "post":
            plan.post = handles
            plan.post_hooks = bare or ()
        elif kind == "exception":
            plan.exception = handles
        plan.around, plan.around_hooks = self.around, self.around_hooks
        plan.has_async, plan.direct = self.has_async, self.direct
        return plan

    def without_hook(self, handle: Handle) -> Optional[PointPlan]:
        """This plan less ``handle``, a sync hook with no option, just unregistered; or
        ``None`` when it is not in the plan or was its last hook (:meth:`with_hook`'s
        twin: the plan of no hooks is ``None``, worked out again)."""
        if self.added is handle:  # the hook this plan added: its parent, as it was
            return self.parent
        kind = handle.kind
        handles = self.hooks.get(kind)
        if handles is None or handle.is_async or not handle._options.bare:
            return None
        index = 0
        for each in handles:
            if each is handle:
                break
            index += 1
        else:
            return None
        kept = handles[:index] + handles[index + 1 :]
        if not kept and sum(map(len, self.hooks.values())) == 1:  # no hook left at all
            return None
        bare = self.fast[kind]  # one bare callable per handle, in order, when not None
        if bare is not None:
            bare = bare[:index] + bare[index + 1 :]
        return self._changed(kind, kept, bare)

    def _changed(self, kind: str, handles: Hooks, bare: FastHooks) -> PointPlan:
        """This plan with ``kind``'s hooks replaced by ``handles`` (their bare callables
        ``bare``; no hook's sync-ness changed): what ``__init__`` works out, for that one
        kind, the rest copied (a plan that changes at every call is a benchmark row;
        parity with ``Registry.plan``: ``tests/test_fast_copies.py``)."""
        plan: PointPlan = _new_object(PointPlan)
        plan.hooks = hooks = dict(self.hooks)  # a copy, then a store: the fastest way
        hooks[kind] = handles
        plan.fast = fast = dict(self.fast)
        fast[kind] = bare
        plan.shape = ""
        plan.bindings = ()
        plan.parent = plan.added = None
        plan.pre = hooks.get("pre", ())
        plan.post = hooks.get("post", ())
        plan.exception = hooks.get("exception", ())
        plan.around = self.around
        plan.around_hooks = self.around_hooks
        plan.has_async = self.has_async
        pre_hooks, post_hooks = fast.get("pre", ()), fast.get("post", ())
        plan.direct = (
            not self.has_async
            and (not self.around or self.around_hooks is not None)
            and pre_hooks is not None
            and post_hooks is not None
        )
        plan.pre_hooks = pre_hooks or ()
        plan.post_hooks = post_hooks or ()
        return plan
