"""Every copy made for speed does what its slow original does: the one parity file.

``_dispatch.py``'s map lists each loop over hooks; those that exist twice for
speed, and the fast constructors, are checked here against their slow twin:

* ``Handle.plain``, ``bus.on``'s inline handle (``_registry.on_event``) and
  ``CallContext.for_call`` against the classes' ``__init__``;
* ``EventBus.emit``'s inline loop (and its lone hook's, with no loop) against
  ``dispatch_event`` (and ``Event.emit``,
  ``bus.emit`` with the name bound, against ``bus.emit``);
* ``Registry.register``'s flat path against ``_register_checked``, and
  ``Registry.unregister``'s inline drop against ``_drop_locked`` (through
  ``Registry.remove``), and the bus lock they take and give back inline against
  ``Mutex.acquire`` and ``release`` (they wait for a held lock, and leave it free); and
  its flat paths for a hook point's plain pre, post and exception hooks against
  ``_register_checked`` and ``_drop_locked``, and the plan a
  point follows to through them (``HookPoint.follow``) against ``Registry.plan``;
  ``bus.pre``, ``bus.post`` and ``bus.exception`` (``_registry.point_hook_body``)
  against ``Registry.register``;
* ``Registry.plan``'s inline lookup of a point's hooks against ``_matching_locked``, and
  the bare callables it finds in the same loop against what ``PointPlan`` works out
  from the hooks alone;
* the torch module point's post phase (the native post hook torch calls, generated
  by ``native_post_hook``) against ``run_phase``, and the context it builds against
  ``CallContext.__init__`` (these need PyTorch, and are skipped without it);
* the operation point's and the name point's post phase (``OperationSite.run``,
  ``NamePoint.emit``, the same generated code) against ``run_phase``;
* an operation point's lone reader (``ResultReader``, ``ArgumentsReader``: the names
  vocabulary's private hooks), read with no context, against its hook run by
  ``run_phase``;
* a function swap's dispatcher handing its one mode's call straight to the site,
  against the same site seeing the call through a torch function mode.

An open trace sends every call to the slow twin, so each test runs the same hooks
both ways and compares what a user sees: the calls, the result, the error and its
notes. (A hook point's compiled call is no copy: ``test_compiled_call.py`` checks
its generator against ``call_with_hooks``.)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from typing import Any, Callable, List, Tuple

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hookbus import CallContext, Event, EventBus
from hookbus._handle import Handle
from hookbus._names import matcher_for
from hookbus._plan import PointPlan

try:
    import torch
    from torch import nn

    import hookbus.torch
except ImportError:  # the core suite on a Python without PyTorch
    torch = None  # type: ignore[assignment]

NO_TORCH = 'the torch adapter tests need PyTorch: pip install -e ".[torch]"'


def _fields(obj: object) -> dict:
    slots = [s for klass in type(obj).__mro__ for s in getattr(klass, "__slots__", ())]
    return {slot: getattr(obj, slot) for slot in slots if slot != "__weakref__"}


@pytest.mark.parametrize("is_async", [False, True])
@pytest.mark.parametrize("match", [None, matcher_for("a.*")])
def test_handle_plain_builds_what_handle_init_builds(is_async: bool, match: Any) -> None:
    bus = EventBus()
    fast = Handle.plain(bus.registry, "event", "a.b", print, is_async, match)
    slow = Handle(bus.registry, "event", "a.b", print, 0, 0, False, None, False, is_async, match)
    assert _fields(fast) == _fields(slow)
    assert set(_fields(fast)) == set(Handle.__slots__) - {"__weakref__"}


def test_an_event_registration_builds_what_handle_init_builds() -> None:
    # bus.on (on_event) builds a plain handle inline, as Handle.plain does.
    bus = EventBus()
    fast = bus.on("a.b", print)
    registry, seq = bus.registry, fast.seq
    slow = Handle(registry, "event", "a.b", print, 0, seq, False, None, False, False, None)
    slow._registered = True
    assert _fields(fast) == _fields(slow)
    assert set(_fields(fast)) == set(Handle.__slots__) - {"__weakref__"}


def _public(handle: Handle) -> tuple:
    return (
        type(handle), handle.kind, handle.name, handle.hook, handle.seq, handle.priority,
        handle.once, handle.target, handle.weak, handle.with_name, handle.optional,
        handle.is_async, handle.match, handle.active, repr(handle),
    )  # fmt: skip


@pytest.mark.parametrize(
    "options", [{}, {"priority": 3}, {"once": True, "with_name": True}, {"optional": True}]
)
def test_bus_on_registers_what_its_written_body_registers(options: dict) -> None:
    # bus.on runs on_event's code as its own (one frame); its written body calls it.
    fast_bus, slow_bus = EventBus(), EventBus()
    fast = fast_bus.on("a.b", print, **options)
    slow = EventBus.on.__wrapped__(slow_bus, "a.b", print, **options)  # type: ignore[attr-defined]
    assert _public(fast) == _public(slow)
    assert fast_bus.hooks() == [fast]
    assert slow_bus.hooks() == [slow]
    fast.remove()
    slow.remove()
    assert fast_bus.hooks() == slow_bus.hooks() == []


class _CallableHook:
    def __call__(self, ctx: Any) -> None:
        return None


async def _async_point_hook(ctx: Any) -> None:
    return None


def _point_hooks() -> List[Any]:
    def plain(ctx: Any) -> None:
        return None

    def other(ctx: Any) -> None:
        return None

    return [plain, other, functools.partial(plain), _CallableHook(), _async_point_hook]


@pytest.mark.parametrize("kind", ["pre", "post", "exception"])
@pytest.mark.parametrize("name", ["a.b", "a.*", "a.c"])
@pytest.mark.parametrize("options", [{}, {"priority": 3}, {"once": True}])
def test_bus_point_methods_register_what_register_registers(
    kind: str, name: str, options: dict
) -> None:
    # bus.pre, bus.post and bus.exception run a body of their own that sends a plain
    # function for a name checked before straight to the flat point path: each
    # registration must be the one Registry.register makes, a name's first and later.
    fast_bus, slow_bus = EventBus(), EventBus()
    for bus in (fast_bus, slow_bus):
        bus.wrap(lambda x: x, "a.b")
    fast_handles, slow_handles = [], []
    for fast_hook, slow_hook in zip(_point_hooks(), _point_hooks()):
        outcomes = []
        for bus, hook, handles in (
            (fast_bus, fast_hook, fast_handles),
            (slow_bus, slow_hook, slow_handles),
        ):
            try:
                if bus is fast_bus:
                    handle = getattr(bus, kind)(name, hook, **options)
                else:
                    handle = bus.registry.register(kind, name, hook, options)
            except (TypeError, ValueError) as error:
                outcomes.append((type(error), str(error).replace(repr(hook), "HOOK")))
                continue
            handles.append(handle)
            public = _public(handle)  # the hook (index 3) and its repr (last) differ
            outcomes.append(public[:3] + public[4:-1])
        assert outcomes[0] == outcomes[1]
    assert [_public(h)[1:3] for h in fast_bus.hooks()] == [
        _public(h)[1:3] for h in slow_bus.hooks()
    ]
    for handle in fast_handles + slow_handles:
        handle.remove()
    assert fast_bus.hooks() == slow_bus.hooks() == []


def test_an_event_registration_with_options_builds_what_handle_init_builds() -> None:
    bus = EventBus()
    fast = bus.on("a.b", print, priority=3, once=True)
    slow = Handle(bus.registry, "event", "a.b", print, 3, fast.seq, True, None, False, False, None)
    slow._registered = True
    assert _public(fast)[1:] == _public(slow)[1:]  # the handle bus.on makes drops inline


@pytest.mark.parametrize("kind", ["pre", "post", "exception"])
def test_a_point_hook_registration_builds_what_handle_init_builds(kind: str) -> None:
    # register's flat point path builds a plain handle inline, as Handle.plain does.
    bus = EventBus()
    bus.wrap(lambda x: x, "a.b")

    def hook(ctx: Any) -> None:
        return None

    fast = getattr(bus, kind)("a.b", hook)
    registry, seq = bus.registry, fast.seq
    slow = Handle(registry, kind, "a.b", hook, 0, seq, False, None, False, False, None)
    slow._registered = True
    assert _fields(fast) == _fields(slow)
    assert set(_fields(fast)) == set(Handle.__slots__) - {"__weakref__"}


@pytest.mark.parametrize("phase", ["pre", "post", "grad"])
def test_for_call_builds_what_call_context_init_builds(phase: str) -> None:
    args, kwargs, target = (1, 2), {"k": 3}, object()
    fast = CallContext.for_call("point", target, args, kwargs, 7, phase)
    slow = CallContext("point", target, args, kwargs, 7, phase)
    assert _fields(fast) == _fields(slow)
    assert set(_fields(fast)) == set(CallContext.__slots__)


# --- emit's inline fast loop against dispatch_event, its slow twin --------------------

# A hook's behaviour: return None, return a value, or raise.
behaviours = st.lists(st.sampled_from(["none", "value", "raise"]), max_size=6)


def _run(plan: List[str], slow: bool, with_kwargs: bool) -> Tuple[List[Any], Any]:
    bus = EventBus()
    calls: List[Any] = []

    def make(index: int, behaviour: str) -> Callable[..., Any]:
        def hook(*args: Any, **kwargs: Any) -> Any:
            calls.append((index, args, kwargs))
            if behaviour == "raise":
                raise ValueError(f"hook {index}")
            return index if behaviour == "value" else None

        hook.__qualname__ = f"hook{index}"
        return hook

    for index, behaviour in enumerate(plan):
        bus.on("e", make(index, behaviour))
    fast_path = bus.registry.plan_event("e").__class__ is tuple
    assert fast_path == bool(plan)  # plain hooks: the inline loop, unless none
    error = None
    try:
        if slow:
            with bus.trace():  # a trace switches emit to the full loop
                bus.emit("e", 1, **({"k": 2} if with_kwargs else {}))
        else:
            bus.emit("e", 1, **({"k": 2} if with_kwargs else {}))
    except ValueError as raised:
        error = (str(raised), getattr(raised, "__notes__", []))
    return calls, error


@given(behaviours, st.booleans())
def test_emit_fast_loop_matches_the_full_loop(plan: List[str], with_kwargs: bool) -> None:
    assert _run(plan, slow=False, with_kwargs=with_kwargs) == _run(
        plan, slow=True, with_kwargs=with_kwargs
    )


@pytest.mark.parametrize("behaviour", ["none", "value", "raise", "coroutine"])
@pytest.mark.parametrize("with_kwargs", [False, True])
def test_emit_of_a_lone_hook_matches_the_full_loop(behaviour: str, with_kwargs: bool) -> None:
    # emit unrolls its loop for a lone hook called without keywords: the same calls,
    # result, error and notes as the full loop, a coroutine refused (and closed) alike.
    def run(slow: bool) -> Tuple[List[Any], Any]:
        bus = EventBus()
        calls: List[Any] = []
        made: List[Any] = []

        def lone(*args: Any, **kwargs: Any) -> Any:
            calls.append((args, kwargs))
            if behaviour == "raise":
                raise ValueError("lone")
            if behaviour == "coroutine":
                made.append(asyncio.sleep(0))
                return made[-1]
            return 1 if behaviour == "value" else None

        bus.on("e", lone)
        assert bus.registry.plan_event("e") == (lone,)  # one bare callable: the unrolled loop
        outcome = None
        try:
            with bus.trace() if slow else contextlib.nullcontext():
                bus.emit("e", 1, **({"k": 2} if with_kwargs else {}))
        except (ValueError, TypeError) as raised:
            outcome = (type(raised).__name__, str(raised), getattr(raised, "__notes__", []))
        closed = [coroutine.cr_frame is None for coroutine in made]
        return [calls, closed], outcome

    assert run(slow=False) == run(slow=True)


# --- Event.emit (bus.emit with the name bound) against bus.emit ---------------------------


def _run_declared(
    plan: List[str], how: str, args: Tuple[Any, ...], same_shape: bool
) -> Tuple[List[Any], Any]:
    bus = EventBus()
    # With the hooks' own shape, the first hook's call checks the arguments; else the binder.
    event = bus.event("e")((lambda *args: None) if same_shape else (lambda x, /, *rest: None))
    calls: List[Any] = []

    def make(index: int, behaviour: str) -> Callable[..., Any]:
        def hook(*args: Any) -> Any:
            calls.append((index, args))
            if behaviour == "raise":
                raise ValueError(f"hook {index}")
            if behaviour == "coroutine":
                return asyncio.sleep(0)
            return index if behaviour == "value" else None

        hook.__qualname__ = f"hook{index}"
        return hook

    for index, behaviour in enumerate(plan):
        event.on(make(index, behaviour))
    assert bus.registry.plan_event("e").__class__ is tuple  # cached: the copy runs
    assert "emit" not in vars(event)  # the method, the copy: no instance value shadows it
    outcome = None
    try:
        if how == "event":
            event.emit(*args)
        else:
            bus.emit("e", *args)
    except (ValueError, TypeError) as raised:
        outcome = (type(raised).__name__, str(raised), getattr(raised, "__notes__", []))
    return calls, outcome


@given(
    st.lists(st.sampled_from(["none", "value", "raise", "coroutine"]), max_size=5),
    st.lists(st.integers(), max_size=3).map(tuple),
    st.booleans(),
)
def test_event_emit_matches_bus_emit(
    plan: List[str], args: Tuple[Any, ...], same_shape: bool
) -> None:
    """Same hooks called, same errors and notes, the same refusal of bad arguments."""
    assert _run_declared(plan, "event", args, same_shape) == _run_declared(
        plan, "bus", args, same_shape
    )


def _run_counted(plan: List[str], how: str, args: Tuple[Any, ...], keyword: bool) -> Any:
    """A spec whose positional check is a count: the plan's first callable checks the
    arguments and calls the first hook (a ``CheckedPlan``); with a keyword, the binder's."""
    bus = EventBus()
    event = bus.event("e")(lambda x, y: None)
    calls: List[Any] = []

    def make(index: int, behaviour: str) -> Callable[..., Any]:
        def hook(*args: Any, **kwargs: Any) -> Any:
            calls.append((index, args, kwargs))
            if behaviour == "raise":
                raise ValueError(f"hook {index}")
            if behaviour == "coroutine":
                return asyncio.sleep(0)
            return index if behaviour == "value" else None

        hook.__qualname__ = f"hook{index}"
        return hook

    for index, behaviour in enumerate(plan):
        event.on(make(index, behaviour))
    kwargs = {"y": args[-1]} if keyword and args else {}
    positional = args[:-1] if kwargs else args
    outcome = None
    try:
        if how == "event":
            event.emit(*positional, **kwargs)
        else:
            bus.emit("e", *positional, **kwargs)
    except (ValueError, TypeError) as raised:
        outcome = (type(raised).__name__, str(raised), getattr(raised, "__notes__", []))
    if plan:
        assert bus.registry.plan_event("e").__class__.__name__ == "CheckedPlan"
    return calls, outcome


@given(
    st.lists(st.sampled_from(["none", "value", "raise", "coroutine"]), max_size=4),
    st.lists(st.integers(), max_size=3).map(tuple),
    st.booleans(),
)
def test_event_emit_matches_bus_emit_through_the_checking_caller(
    plan: List[str], args: Tuple[Any, ...], keyword: bool
) -> None:
    """The same through a plan whose first callable is the checking caller."""
    assert _run_counted(plan, "event", args, keyword) == _run_counted(plan, "bus", args, keyword)


def test_event_emit_of_a_bus_whose_class_changes_emit_runs_that_emit() -> None:
    seen: List[Any] = []

    class Logged(EventBus):
        def emit(self, event: str, /, *args: Any, **kwargs: Any) -> None:
            seen.append((event, args))
            super().emit(event, *args, **kwargs)

    bus = Logged()
    event = bus.event("e")(lambda x: None)
    event.on(lambda x: seen.append(x))
    event.emit(1)
    assert seen == [("e", (1,)), 1]
    assert "emit" not in vars(event)  # no event shadows the method (see Event.__init__)


def test_an_event_made_without_its_bus_plans_emits_through_bus_emit() -> None:
    # Event(...) by hand gets no plans: its emit is bus.emit's.
    bus = EventBus()
    declared = bus.event("e")(lambda x: None)
    seen: List[Any] = []
    declared.on(lambda x: seen.append(x))
    event = Event(bus, "e", declared.__wrapped__, declared.signature)
    event.emit(1)
    assert seen == [1]
    assert "emit" not in vars(event)  # no event shadows the method (see Event.__init__)


# --- the registry's fast paths of register and remove against their slow twins --------


class _NoScope:
    """A scope that takes nothing: passing it sends ``register`` to its checked path."""

    registry = None

    def add(self, handle: object) -> None:
        pass


def _add(registry: Any, kind: str, name: str, hook: Any, slow: bool) -> Any:
    """Register by the fast path, or by its checked twin (a scope sends it there)."""
    if slow:
        return registry.register(kind, name, hook, {}, scope=_NoScope())
    return registry.register(kind, name, hook, {})


def _remove(registry: Any, handle: Any, slow: bool) -> None:
    """Unregister by the fast path, or by its twin, ``_drop_locked`` (``remove``)."""
    if slow:
        registry.remove([handle])
    else:
        registry.unregister(handle)


# One step: ("add", hook, name), ("remove", hook, name) or ("emit", 0, name).
steps = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove", "emit"]),
        st.integers(0, 2),
        st.sampled_from(["e", "f"]),
    ),
    max_size=12,
)


def _registrations(plan: List[Tuple[str, int, str]], slow: bool) -> List[Any]:
    bus = EventBus("parity")
    registry = bus.registry
    calls: List[Any] = []

    def make(index: int) -> Callable[..., Any]:
        def hook(*args: Any) -> None:
            calls.append((index, args))

        hook.__qualname__ = f"hook{index}"
        return hook

    hooks = [make(index) for index in range(3)]
    handles: dict = {}
    seen: List[Any] = []
    for action, index, name in plan:
        outcome: Any = None
        try:
            if action == "add":
                handles[(index, name)] = _add(registry, "event", name, hooks[index], slow)
            elif action == "remove" and (index, name) in handles:
                handle = handles[(index, name)]
                _remove(registry, handle, slow)
                outcome = handle.active
            elif action == "emit":
                bus.emit(name, index)
        except ValueError as error:  # a second registration of one hook on one name
            outcome = str(error)
        hooks_now = [(h.name, h.hook.__qualname__, h.seq, h.active) for h in bus.hooks()]  # type: ignore[union-attr]
        seen.append((outcome, hooks_now, list(calls)))
    return seen


@given(steps)
def test_register_and_unregister_fast_paths_match_their_slow_twins(
    plan: List[Tuple[str, int, str]],
) -> None:
    assert _registrations(plan, slow=False) == _registrations(plan, slow=True)


def _spy_on_the_checked_path(registry: Any) -> List[str]:
    """A list that gets "checked" each time ``registry`` takes its checked register path."""
    taken: List[str] = []
    original = registry._register_checked

    def checked(*args: Any) -> Any:
        taken.append("checked")
        return original(*args)

    registry._register_checked = checked
    return taken


def test_the_fast_registration_paths_are_the_ones_taken() -> None:
    # Guards the test above: the plain case must not already take the checked path.
    bus = EventBus()
    registry = bus.registry
    taken = _spy_on_the_checked_path(registry)
    handle = registry.register("event", "e", print, {})
    assert taken == []
    registry.register("event", "f", print, {}, scope=_NoScope())
    assert taken == ["checked"]
    registry.unregister(handle)
    assert not handle.active


@pytest.mark.parametrize("step", ["register", "remove"])
def test_the_inline_bus_lock_of_bus_on_and_its_remove_waits_as_mutex_acquire(step: str) -> None:
    # bus.on and its handle's remove() take the lock's token inline, as Mutex.acquire
    # does, and give it back as Mutex.release does: while another thread holds the
    # lock, each waits (counted as a waiter), and the release lets it finish.
    bus = EventBus()
    lock = bus.registry._lock
    handle = bus.on("saved", print) if step == "remove" else None
    finished: List[bool] = []

    def change() -> None:
        if handle is None:
            bus.on("saved", print)
        else:
            handle.remove()
        finished.append(True)

    lock.acquire()
    thread = threading.Thread(target=change)
    thread.start()
    deadline = time.monotonic() + 10
    while lock.waiting != 1:
        assert time.monotonic() < deadline, "the change never waited for the lock"
        time.sleep(0.001)
    assert finished == []
    lock.release()
    thread.join(10)
    assert not thread.is_alive()
    assert finished == [True]
    assert not lock.locked()
    assert lock.waiting == 0
    assert len(bus.hooks("saved")) == (1 if step == "register" else 0)


def test_removing_an_event_handle_takes_the_inline_drop() -> None:
    # Guards the parity test above: remove() of a handle that bus.on made for an exact
    # name, and registry.unregister() of one, drop it inline; a pattern's takes the twin.
    bus = EventBus()
    registry = bus.registry
    dropped: List[Any] = []
    original = registry._drop_locked

    def drop_locked(handle: Any) -> None:
        dropped.append(handle)
        original(handle)

    registry._drop_locked = drop_locked
    first, second = bus.on("e", print), bus.on("e", len)
    third = bus.on("f", print, priority=1)
    first.remove()
    registry.unregister(second)
    third.remove()
    assert dropped == []
    assert [first.active, second.active, third.active] == [False, False, False]
    assert bus.hooks() == []
    pattern = bus.on("e.*", print)
    pattern.remove()
    assert dropped == [pattern]
    assert bus.hooks() == []
    # A handle made by register's checked path (a scope) drops inline too, as it did
    # before the inline drop moved into the handle.
    with bus.scope() as scope:
        scoped = scope.on("e", print)
        ranked = scope.on("e", len, priority=2)
        scoped.remove()
        registry.unregister(ranked)
        assert dropped == [pattern]  # the scope's exit drops what is left by the twin
    assert [scoped.active, ranked.active] == [False, False]
    assert bus.hooks() == []


# One step on a hook point: ("add", kind, hook, name), ("remove", kind, hook, name) or
# ("call", ...): the points "p" (two of them) and "q", their calls' hooks seen.
point_steps = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove", "call"]),
        st.sampled_from(["pre", "post", "exception"]),
        st.integers(0, 2),
        st.sampled_from(["p", "q", "r"]),
    ),
    max_size=14,
)


def _point_registrations(plan: List[Tuple[str, str, int, str]], slow: bool) -> List[Any]:
    bus = EventBus("parity")
    registry = bus.registry
    calls: List[Any] = []

    def make(index: int) -> Callable[..., Any]:
        def hook(ctx: CallContext) -> None:
            calls.append((index, ctx.name, ctx.phase))
            if index == 2 and ctx.phase == "pre":
                raise KeyError(index)  # the call fails: the exception hooks run

        hook.__qualname__ = f"hook{index}"
        return hook

    hooks = [make(index) for index in range(3)]
    points = {
        "p": [bus.wrap(lambda x: x, "p"), bus.wrap(lambda x: -x, "p")],
        "q": [bus.wrap(lambda x: x, "q")],
        "r": [],  # no point: a name a point may take later
    }
    handles: dict = {}
    seen: List[Any] = []
    for action, kind, index, name in plan:
        outcome: Any = None
        try:
            if action == "add":
                handles[(kind, index, name)] = _add(registry, kind, name, hooks[index], slow)
            elif action == "remove" and (kind, index, name) in handles:
                handle = handles[(kind, index, name)]
                _remove(registry, handle, slow)
                outcome = handle.active
            elif action == "call":
                outcome = [point(index) for point in points[name]]
        except (ValueError, KeyError) as error:  # a second registration; a failed call
            outcome = (type(error).__name__, str(error), getattr(error, "__notes__", []))
        hooks_now = [
            (h.kind, h.name, h.hook.__qualname__, h.seq, h.active)  # type: ignore[union-attr]
            for h in bus.hooks()
        ]
        seen.append((outcome, hooks_now, list(calls)))
    return seen


@given(point_steps)
def test_the_flat_point_registration_matches_its_slow_twin(
    plan: List[Tuple[str, str, int, str]],
) -> None:
    assert _point_registrations(plan, slow=False) == _point_registrations(plan, slow=True)


def test_the_flat_point_registration_is_the_one_taken() -> None:
    # Guards the test above: a point's plain hook must not already take the checked path.
    bus = EventBus()
    point = bus.wrap(lambda x: x, "p")
    registry = bus.registry
    taken = _spy_on_the_checked_path(registry)
    handles = [registry.register(kind, "p", print, {}) for kind in ("pre", "post", "exception")]
    assert taken == []
    assert point.__hookbus_point__.current_plan() is not None  # type: ignore[attr-defined]
    registry.register("pre", "p", repr, {}, scope=_NoScope())
    registry.register("post", "p", repr, {"priority": 1})
    registry.register("around", "p", _around, {})
    assert taken == ["checked"] * 3
    for handle in handles:
        registry.unregister(handle)
    assert not any(handle.active for handle in handles)


plan_registrations = st.lists(
    st.tuples(
        st.sampled_from(["pre", "post", "exception", "around"]),
        st.sampled_from(["a.b", "a.*", "a.c"]),
        st.sampled_from(["plain", "priority", "once", "async"]),
    ),
    max_size=6,
)


async def _async_hook(ctx: Any) -> None:
    return None


async def _async_around(ctx: Any) -> Any:
    yield


@given(plan_registrations, st.sampled_from(["raise", "collect"]), st.booleans())
def test_plan_finds_the_bare_callables_point_plan_works_out(
    registrations: List[Any], policy: str, traced: bool
) -> None:
    bus = EventBus()
    sync_point = bus.wrap(lambda: None, "a.b").__hookbus_point__  # type: ignore[attr-defined]

    async def job() -> None:
        return None

    async_point = bus.wrap(job, "a.c").__hookbus_point__  # type: ignore[attr-defined]
    for kind, name, option in registrations:
        if option == "async":
            hook: Any = _async_around if kind == "around" else _async_hook
            hook = functools.partial(hook)
        else:
            hook = functools.partial(_around if kind == "around" else _pre_post_or_exception)
        options = {"priority": {"priority": 1}, "once": {"once": True}}.get(option, {})
        with contextlib.suppress(TypeError):  # an async hook where the sync point runs it
            getattr(bus, kind)(name, hook, **options)
    bus.errors = policy  # type: ignore[assignment]
    for point in (sync_point, async_point):
        with bus.trace() if traced else contextlib.nullcontext():
            plan = bus.registry.plan(point)
        if plan is None:
            continue
        plain = policy == "raise" and not traced
        expected = PointPlan(plan.hooks, plain)
        worked_out = [s for s in PointPlan.__slots__ if s not in ("run", "shape", "bindings")]
        assert [getattr(plan, s) for s in worked_out] == [getattr(expected, s) for s in worked_out]


# --- the module point's generated post phase against run_phase, its slow twin ---------

module_behaviours = st.lists(st.sampled_from(["none", "double", "raise", "return"]), max_size=4)


def _forward(plan: List[str], phase: str, slow: bool) -> Tuple[List[int], Any, Any]:
    model = nn.Sequential(nn.Identity())
    bus = EventBus()
    attached = hookbus.torch.attach(model, bus)
    calls: List[int] = []

    def make(index: int, behaviour: str) -> Any:
        def hook(ctx: CallContext) -> Any:
            calls.append(index)
            if behaviour == "double":
                if phase == "pre":
                    ctx.args = (ctx.args[0] * 2,)
                else:
                    ctx.result = ctx.result * 2
            elif behaviour == "raise":
                raise ValueError(f"hook {index}")
            elif behaviour == "return":
                return index
            return None

        hook.__qualname__ = f"hook{index}"
        return hook

    for index, behaviour in enumerate(plan):
        getattr(attached, phase)("0", make(index, behaviour))
    out: Any = None
    error: Any = None
    try:
        if slow:
            with bus.trace():  # a trace switches the point to run_phase
                out = model(torch.ones(2))
        else:
            out = model(torch.ones(2))
    except (ValueError, TypeError) as raised:
        error = (type(raised), str(raised), getattr(raised, "__notes__", []))
    attached.detach()
    return calls, None if out is None else out.tolist(), error


point_registrations = st.lists(
    st.tuples(
        st.sampled_from(["pre", "post", "exception", "around"]),
        st.sampled_from(["a.b", "a.*", "*", "a.c"]),
        st.integers(-1, 1),
        st.booleans(),  # removed again
    ),
    max_size=8,
)


def _around(ctx: Any) -> Any:
    yield


def _pre_post_or_exception(ctx: Any) -> None:
    return None


@given(point_registrations)
def test_plan_finds_the_hooks_matching_locked_finds(registrations: List[Any]) -> None:
    bus = EventBus()
    point = bus.wrap(lambda: None, "a.b").__hookbus_point__  # type: ignore[attr-defined]
    registry = bus.registry
    for kind, name, priority, removed in registrations:
        # A new callable each time: the same one twice for a name would be refused.
        hook = functools.partial(_around if kind == "around" else _pre_post_or_exception)
        handle = getattr(bus, kind)(name, hook, priority=priority)
        if removed:
            handle.remove()
        plan = registry.plan(point)
        with registry._lock:
            expected = {kind: registry._matching_locked(kind, "a.b", True) for kind in point.kinds}
        if not any(expected.values()):
            assert plan is None
        else:
            assert plan is not None
            assert plan.hooks == expected


@pytest.mark.torch
@pytest.mark.skipif(torch is None, reason=NO_TORCH)
@settings(max_examples=30, deadline=None)
@given(module_behaviours)
def test_module_post_fast_loop_matches_run_phase(plan: List[str]) -> None:
    assert _forward(plan, "post", slow=False) == _forward(plan, "post", slow=True)


@pytest.mark.torch
@pytest.mark.skipif(torch is None, reason=NO_TORCH)
def test_module_post_context_matches_call_context_init() -> None:
    model = nn.Sequential(nn.Identity())
    bus = EventBus()
    hookbus.torch.attach(model, bus)
    seen: List[CallContext] = []
    bus.post("0", seen.append)  # plain post hooks alone: the generated post phase
    x = torch.ones(2)
    model(x, **{})
    (fast,) = seen
    slow = CallContext("0", model[0], fast.args, fast.kwargs, fast.call_index, "post", fast._point)
    slow.result = fast.result
    assert _fields(fast) == _fields(slow)
    assert fast._point is not None
    assert fast.name == "0"
    assert fast.result is x


# --- the operation point's and the name point's post phase against run_phase -----------


def _make_hooks(plan: List[str], calls: List[int]) -> List[Any]:
    def make(index: int, behaviour: str) -> Any:
        def hook(ctx: CallContext) -> Any:
            calls.append(index)
            if behaviour == "double":
                ctx.result = ctx.result * 2
            elif behaviour == "raise":
                raise ValueError(f"hook {index}")
            elif behaviour == "return":
                return index
            return None

        hook.__qualname__ = f"hook{index}"
        return hook

    return [make(index, behaviour) for index, behaviour in enumerate(plan)]


def _run_traced_or_not(bus: EventBus, run: Callable[[], Any], slow: bool) -> Tuple[Any, Any]:
    out: Any = None
    error: Any = None
    try:
        if slow:
            with bus.trace():  # a trace switches the point to run_phase
                out = run()
        else:
            out = run()
    except (ValueError, TypeError) as raised:
        error = (type(raised), str(raised), getattr(raised, "__notes__", []))
    return None if out is None else out.tolist(), error


def _operation(plan: List[str], slow: bool) -> Tuple[List[int], Any, Any]:
    model = nn.Sequential(nn.Softmax(dim=-1))
    bus = EventBus()
    attached = hookbus.torch.attach(model, bus)
    attached.operations("0", "softmax")
    x = torch.tensor([[0.0, 1.0]])
    model(x)  # the discovery forward makes the point
    calls: List[int] = []
    for hook in _make_hooks(plan, calls):
        attached.post("0:softmax.0", hook)  # post hooks alone: the generated post phase
    out, error = _run_traced_or_not(bus, lambda: model(x), slow)
    attached.detach()
    return calls, out, error


@pytest.mark.torch
@pytest.mark.skipif(torch is None, reason=NO_TORCH)
@settings(max_examples=30, deadline=None)
@given(module_behaviours)
def test_operation_post_fast_loop_matches_run_phase(plan: List[str]) -> None:
    assert _operation(plan, slow=False) == _operation(plan, slow=True)


def _reader(kind: str, behaviour: str, slow: bool) -> Tuple[List[str], Any, Any]:
    from hookbus.torch._operations import RUN, ArgumentsReader, ResultReader

    model = nn.Sequential(nn.Softmax(dim=-1))
    bus = EventBus()
    attached = hookbus.torch.attach(model, bus)
    attached.operations("0", "softmax")
    x = torch.tensor([[0.0, 1.0]])
    model(x)  # the discovery forward makes the point
    seen: List[str] = []

    def act(value: Any, module: Any) -> Any:
        seen.append(type(module).__name__)
        if behaviour == "raise":
            raise ValueError("reader")
        return value * 2 if behaviour == "double" else value

    def read_arguments(args: Any, kwargs: Any, module: Any) -> Any:
        seen.append(f"{len(args)} {sorted(kwargs)}")
        new = act(args[0], module)
        return RUN if new is args[0] else new

    if kind == "result":
        attached.post("0:softmax.0", ResultReader(act))
    else:
        attached.pre("0:softmax.0", ArgumentsReader(read_arguments))
    out, error = _run_traced_or_not(bus, lambda: model(x), slow)
    attached.detach()
    return seen, out, error


@pytest.mark.torch
@pytest.mark.skipif(torch is None, reason=NO_TORCH)
@pytest.mark.parametrize("behaviour", ["none", "double", "raise"])
@pytest.mark.parametrize("kind", ["result", "arguments"])
def test_operation_lone_reader_matches_its_hook_in_run_phase(kind: str, behaviour: str) -> None:
    fast = _reader(kind, behaviour, slow=False)
    assert fast == _reader(kind, behaviour, slow=True)
    if behaviour == "raise":  # one note, naming the reader's hook and its point
        notes = fast[2][2]
        assert len(notes) == 1
        assert "Reader" in notes[0]
        assert "'0:softmax.0'" in notes[0]


def _swapped_site(
    plan: List[str], through_mode: bool, *, native: bool = False
) -> Tuple[List[str], Any, Any, List[str]]:
    """``native``: the same site without the swaps (a plain selection: native hooks push
    its mode on torch's stack), against which the forward swap's bracket is checked."""
    from hookbus.torch._function_swap import THREAD
    from hookbus.torch._recipes import quiet, swapped

    functional = torch.nn.functional

    class CallsSoftmax(nn.Module):
        """A forward that calls ``F.softmax`` through the module attribute, as attentions do."""

        def forward(self, x: Any) -> Any:
            return functional.softmax(x, dim=-1) + 1

    model = nn.Sequential(CallsSoftmax())
    bus = EventBus()
    attached = hookbus.torch.attach(model, bus)
    selection = attached.operations("0", "softmax")
    undo = [quiet(selection)] if native else swapped(selection, "softmax")
    x = torch.tensor([[0.0, 1.0]])
    model(x)  # the discovery forward makes the point
    seen: List[str] = []

    def make(index: int, behaviour: str) -> Any:
        def hook(ctx: CallContext) -> None:
            assert [mode.swap for mode in THREAD.modes] == [not through_mode]  # the path taken
            seen.append(f"{index} {ctx.name} {ctx.phase} {type(ctx.target).__name__}")
            if behaviour == "double":
                ctx.result = ctx.result * 2
            elif behaviour == "args":
                ctx.args = (ctx.args[0] * 3, *ctx.args[1:])
            elif behaviour == "raise":
                raise ValueError(f"hook {index}")
            elif behaviour == "calls":  # a hook's own softmax is no call of the forward
                seen.append(str(functional.softmax(torch.ones(2), dim=-1).tolist()))

        return hook

    for index, behaviour in enumerate(plan):
        phase = attached.pre if behaviour == "args" else attached.post
        phase("0:softmax.0", make(index, behaviour))
    dispatcher = functional.softmax
    if through_mode and not native:  # code that put back what it saved: a mode sees it
        functional.softmax = dispatcher.__wrapped__
    try:
        out: Any = model(x).tolist()
        error: Any = None
    except ValueError as raised:
        out, error = None, (str(raised), getattr(raised, "__notes__", []))
    finally:
        functional.softmax = dispatcher
    points = sorted(p.name for p in bus.registry.points() if p.name.startswith("0:"))
    assert THREAD.modes == []  # no mode left behind
    assert torch._C._len_torch_function_stack() == 0
    for each in undo:
        each.remove()
    attached.detach()
    return seen, out, error, points


@pytest.mark.torch
@pytest.mark.skipif(torch is None, reason=NO_TORCH)
@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(["none", "double", "args", "raise", "calls"]), max_size=4))
def test_swap_dispatcher_direct_call_matches_the_mode(plan: List[str]) -> None:
    assert _swapped_site(plan, through_mode=False) == _swapped_site(plan, through_mode=True)


@pytest.mark.torch
@pytest.mark.skipif(torch is None, reason=NO_TORCH)
@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(["none", "double", "args", "raise", "calls"]), max_size=4))
def test_forward_swap_bracket_matches_the_native_hooks(plan: List[str]) -> None:
    # A swapped site brackets the forward in its forward swap (OperationSite._around);
    # a plain site pushes its mode from native pre and post hooks (_on_pre, _on_post).
    bracketed = _swapped_site(plan, through_mode=True)
    assert bracketed == _swapped_site(plan, through_mode=True, native=True)


@pytest.fixture(scope="module")
def tiny_gpt2() -> Any:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=1, n_head=2, n_embd=8, vocab_size=10, n_positions=8, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    return transformers.GPT2LMHeadModel(config).eval()


def _name(model: Any, plan: List[str], slow: bool) -> Tuple[List[int], Any, Any]:
    bus = EventBus()
    attached = hookbus.torch.attach(model, bus, names="transformer")
    calls: List[int] = []
    for hook in _make_hooks(plan, calls):
        bus.post("blocks.0.hook_resid_post", hook)  # plain hooks: the name's generated post phase
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        out, error = _run_traced_or_not(bus, lambda: model(ids).logits, slow)
    attached.detach()
    return calls, out, error


@pytest.mark.torch
@pytest.mark.skipif(torch is None, reason=NO_TORCH)
@settings(max_examples=20, deadline=None)
@given(module_behaviours)
def test_name_post_fast_loop_matches_run_phase(tiny_gpt2: Any, plan: List[str]) -> None:
    assert _name(tiny_gpt2, plan, slow=False) == _name(tiny_gpt2, plan, slow=True)


# --- a point's plan followed through a change of hooks, against Registry.plan -------------

followed_steps = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove", "call"]),
        st.sampled_from(["pre", "post", "exception"]),
        st.integers(0, 3),
        st.sampled_from(["plain", "plain", "priority -1", "priority 1", "once", "pattern"]),
    ),
    max_size=16,
)


@given(followed_steps, st.booleans())
@example(  # a plain hook added after one of negative priority runs before it
    [("add", "pre", 0, "priority -1"), ("call", "pre", 0, ""), ("add", "pre", 1, "plain")],
    False,
)
def test_a_followed_plan_is_the_plan_the_registry_works_out(
    steps: List[Tuple[str, str, int, str]], traced: bool
) -> None:
    # A plain hook added or removed at a point whose plan is worked out takes the plan
    # that follows from it (HookPoint.follow: PointPlan.with_hook, without_hook, or the
    # parent given back); it must hold what Registry.plan works out from the hooks.
    bus = EventBus()
    wrapped = bus.wrap(lambda x: x, "a.b")
    point = wrapped.__hookbus_point__  # type: ignore[attr-defined]
    hooks = [functools.partial(_pre_post_or_exception) for _ in range(4)]
    handles: dict = {}
    compared = [s for s in PointPlan.__slots__ if s not in ("run", "shape", "bindings")]
    compared = [s for s in compared if s not in ("parent", "added")]
    with bus.trace() if traced else contextlib.nullcontext():
        for action, kind, index, option in steps:
            key = (kind, index, option)
            if action == "add" and key not in handles:
                options = {"priority -1": {"priority": -1}, "priority 1": {"priority": 1},
                           "once": {"once": True}}.get(option, {})  # fmt: skip
                name = "a.*" if option == "pattern" else "a.b"
                with contextlib.suppress(ValueError):  # the same hook twice for a name
                    handles[key] = getattr(bus, kind)(name, hooks[index], **options)
            elif action == "remove" and key in handles:
                handles.pop(key).remove()
            elif action == "call":
                wrapped(index)
            kept = point.plan
            if kept is None or kept.__class__ is not PointPlan:
                continue  # unresolved, or no hooks: the next call works it out
            expected = bus.registry.plan(point)
            assert expected is not None
            assert [getattr(kept, s) for s in compared] == [getattr(expected, s) for s in compared]


def test_a_plain_hook_added_and_removed_is_followed_not_worked_out_again() -> None:
    # Guards the test above: the follow path is the one taken, and the hook's removal
    # gives the plan before it back, compiled as it was.
    bus = EventBus()
    wrapped = bus.wrap(lambda x: x, "p")
    point = wrapped.__hookbus_point__  # type: ignore[attr-defined]
    bus.post("p", _pre_post_or_exception)
    wrapped(1)
    wrapped(1)
    before = point.plan
    assert before.shape  # compiled
    handle = bus.pre("p", functools.partial(_pre_post_or_exception))
    after = point.plan
    assert after.__class__ is PointPlan
    assert after.pre == (handle,)
    assert after.parent is before
    assert after.added is handle
    assert wrapped(2) == 2
    handle.remove()
    assert point.plan is before
    assert before.parent is None
    assert wrapped(3) == 3


def test_a_plan_given_back_runs_in_the_points_function_again() -> None:
    # The hook added was called enough to be compiled into the point's function; once it
    # is removed, the plan given back gets the function's code back at its next call.
    bus = EventBus()
    wrapped = bus.wrap(lambda x: x, "p")
    bus.post("p", _pre_post_or_exception)
    wrapped(1)
    wrapped(1)
    code = wrapped.__code__  # type: ignore[attr-defined]
    handle = bus.pre("p", functools.partial(_pre_post_or_exception))
    wrapped(1)
    wrapped(1)
    assert wrapped.__code__ is not code  # type: ignore[attr-defined]
    handle.remove()
    assert wrapped(2) == 2
    assert wrapped.__code__ is code  # type: ignore[attr-defined]
    assert wrapped(3) == 3
