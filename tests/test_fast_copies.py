"""Every copy made for speed does what its slow original does (see ``_dispatch.py``'s map)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, List, Tuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hookbus import CallContext, EventBus
from hookbus._handle import Handle
from hookbus._names import matcher_for


def _fields(obj: object) -> dict:
    slots = [s for klass in type(obj).__mro__ for s in getattr(klass, "__slots__", ())]
    return {slot: getattr(obj, slot) for slot in slots if slot != "__weakref__"}


@pytest.mark.parametrize("is_async", [False, True])
@pytest.mark.parametrize("match", [None, matcher_for("a.*")])
def test_handle_plain_builds_what_handle_init_builds(is_async: bool, match: Any) -> None:
    bus = EventBus()
    fast = Handle.plain(bus, "event", "a.b", print, is_async, match)
    slow = Handle(bus, "event", "a.b", print, 0, 0, False, None, False, is_async, match)
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
