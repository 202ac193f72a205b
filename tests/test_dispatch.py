"""Dispatch: the order and rules by which hooks run.

A hooked call runs its pre hooks, the call, its exception hooks if anything raised,
then its post hooks; an error anywhere on the way reaches the exception hooks, which
observe, replace or recover it. An emission runs every hook once, in order; hooks
added or removed while it runs, and emissions nested in a hook, follow set rules.
"""

from __future__ import annotations

from typing import Any, List, Tuple

import pytest

from hookbus import CallContext, EventBus, Handle

# --- a hooked call: pre hooks, the call, exception hooks, post hooks -----------------------


def test_pre_hook_replaces_args_and_kwargs() -> None:
    bus = EventBus()

    @bus.hookable("scale")
    def scale(x: int, factor: int = 2) -> int:
        return x * factor

    def rewrite(ctx: CallContext) -> None:
        assert (ctx.args, ctx.kwargs, ctx.phase) == ((5,), {}, "pre")
        ctx.args = (10,)
        ctx.kwargs = {"factor": 3}

    bus.pre("scale", rewrite)
    assert scale(5) == 30


def test_post_hook_replaces_result_including_with_none() -> None:
    bus = EventBus()

    @bus.hookable("get")
    def get() -> Any:
        return "value"

    seen: List[Any] = []

    def to_none(ctx: CallContext) -> None:
        seen.append(ctx.result)
        ctx.result = None

    bus.post("get", to_none)
    assert get() is None
    assert seen == ["value"]


def test_post_hooks_chain_in_priority_order() -> None:
    bus = EventBus()

    @bus.hookable("v")
    def v() -> str:
        return "x"

    bus.post("v", lambda ctx: setattr(ctx, "result", ctx.result + "-low"), priority=-1)
    bus.post("v", lambda ctx: setattr(ctx, "result", ctx.result + "-high"), priority=1)
    assert v() == "x-high-low"


def test_exception_hook_observes_and_error_propagates_unchanged() -> None:
    bus = EventBus()
    error = ValueError("bad")
    seen: List[Any] = []

    @bus.hookable("f")
    def f() -> None:
        raise error

    bus.exception("f", lambda ctx: seen.append((ctx.phase, ctx.exception)))
    with pytest.raises(ValueError, match="bad") as info:
        f()
    assert info.value is error
    assert seen == [("exception", error)]


def test_exception_hook_replaces_the_error_by_raising() -> None:
    bus = EventBus()

    @bus.hookable("f")
    def f() -> None:
        raise KeyError("k")

    def translate(ctx: CallContext) -> None:
        raise LookupError("translated") from ctx.exception

    bus.exception("f", translate)
    with pytest.raises(LookupError, match="translated") as info:
        f()
    assert isinstance(info.value.__cause__, KeyError)


def test_exception_hook_recovers_and_post_hooks_see_the_value() -> None:
    bus = EventBus()
    log: List[Any] = []

    @bus.hookable("f")
    def f(x: int) -> int:
        return 10 // x

    bus.exception("f", lambda ctx: ctx.recover(-1))
    bus.exception("f", lambda ctx: log.append("never: the first recovered"), priority=-5)
    bus.post("f", lambda ctx: log.append((ctx.result, ctx.recovered)))
    assert f(2) == 5
    assert f(0) == -1
    assert log == [(5, False), (-1, True)]


def test_pre_hook_error_stops_the_call_and_reaches_the_exception_hooks() -> None:
    bus = EventBus()
    ran: List[str] = []

    @bus.hookable("f")
    def f() -> None:
        ran.append("f")

    def refuse(ctx: CallContext) -> None:
        raise PermissionError("no")

    bus.pre("f", refuse)
    bus.exception("f", lambda ctx: ran.append("exception hook"))
    with pytest.raises(PermissionError) as info:
        f()
    # Not the callable; the exception hooks, which see every error of the call's
    # inside (a pre hook's too), so that what a pre hook opened can be closed.
    assert ran == ["exception hook"]
    assert "pre hook point 'f'" in info.value.__notes__[0]


# --- an error anywhere reaches the exception hooks, which all run --------------------------


def test_an_error_in_a_later_pre_hook_still_reaches_the_exception_hooks() -> None:
    bus = EventBus()
    spans: List[str] = []

    @bus.hookable("load")
    def load() -> str:
        return "data"

    bus.pre("load", lambda ctx: spans.append("open"), priority=10)

    @bus.pre("load")
    def refuse(ctx: CallContext) -> None:
        raise PermissionError("denied")

    bus.post("load", lambda ctx: spans.append("close"))
    bus.exception("load", lambda ctx: spans.append("close"))
    with pytest.raises(PermissionError):
        load()
    assert spans == ["open", "close"]


def test_an_error_in_a_post_hook_reaches_the_exception_hooks() -> None:
    bus = EventBus()
    seen: List[str] = []

    @bus.hookable("load")
    def load() -> str:
        return "data"

    @bus.post("load")
    def broken(ctx: CallContext) -> None:
        raise ValueError("bad result")

    @bus.exception("load")
    def cleanup(ctx: CallContext) -> None:
        seen.append(type(ctx.exception).__name__)

    with pytest.raises(ValueError, match="bad result"):
        load()
    assert seen == ["ValueError"]


def test_a_post_hook_error_can_be_recovered_once() -> None:
    bus = EventBus()

    @bus.hookable("load")
    def load() -> str:
        return "data"

    bus.post("load", lambda ctx: (_ for _ in ()).throw(ValueError("bad")))
    bus.exception("load", lambda ctx: ctx.recover("fallback"))
    assert load() == "fallback"


def test_every_exception_hook_runs_and_sees_the_replacement_error() -> None:
    bus = EventBus()
    seen: List[Tuple[str, str]] = []

    @bus.hookable("fetch")
    def fetch() -> None:
        raise ConnectionError("offline")

    @bus.exception("fetch", priority=10)
    def translate(ctx: CallContext) -> None:
        seen.append(("translate", type(ctx.exception).__name__))
        raise LookupError("not found") from ctx.exception

    @bus.exception("fetch")
    def cleanup(ctx: CallContext) -> None:
        seen.append(("cleanup", type(ctx.exception).__name__))

    with pytest.raises(LookupError) as info:
        fetch()
    assert seen == [("translate", "ConnectionError"), ("cleanup", "LookupError")]
    assert isinstance(info.value.__cause__, ConnectionError)


@pytest.mark.parametrize("errors", ["raise", "collect", "log"])
def test_a_cleanup_exception_hook_after_a_failing_one_runs_under_every_policy(
    errors: Any,
) -> None:
    bus = EventBus(errors=errors)
    ran: List[str] = []

    @bus.hookable("f")
    def f() -> None:
        raise KeyError("k")

    bus.exception("f", lambda ctx: (_ for _ in ()).throw(RuntimeError("hook")), priority=1)
    bus.exception("f", lambda ctx: ran.append("cleanup"))
    with pytest.raises(RuntimeError):
        f()
    assert ran == ["cleanup"]


# --- an emission, and changes while it runs ------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 3, 10])
def test_every_hook_called_once_per_emit(n: int) -> None:
    bus = EventBus()
    counts = [0] * n

    def make(i: int) -> Any:
        def hook() -> None:
            counts[i] += 1

        return hook

    for i in range(n):
        bus.on("e", make(i))
    bus.emit("e")
    bus.emit("e")
    assert counts == [2] * n


def test_hook_removing_itself_skips_no_other_hook() -> None:
    # zope.event's bug: removing yourself from the live list skips the next subscriber.
    bus = EventBus()
    log: List[str] = []
    handles: List[Handle] = []

    def remove_self() -> None:
        log.append("self-removing")
        handles[0].remove()

    handles.append(bus.on("e", remove_self))
    bus.on("e", lambda: log.append("next"))
    bus.emit("e")
    bus.emit("e")
    assert log == ["self-removing", "next", "next"]


def test_hook_added_during_emission_first_runs_at_the_next() -> None:
    # SQLAlchemy's bug: adding a listener during dispatch raises "deque mutated".
    bus = EventBus()
    log: List[str] = []

    def add_another() -> None:
        log.append("adder")
        bus.on("e", lambda: log.append("added"), priority=100)

    bus.on("e", add_another, once=True)
    bus.emit("e")
    assert log == ["adder"]
    bus.emit("e")
    assert log == ["adder", "added"]


def test_hook_removed_during_emission_still_gets_that_emission() -> None:
    bus = EventBus()
    log: List[str] = []
    later = bus.on("e", lambda: log.append("later"), priority=-1)
    bus.on("e", later.remove, priority=1)
    bus.emit("e")
    assert log == ["later"]  # the snapshot taken when the emission began
    bus.emit("e")
    assert log == ["later"]


def test_an_emission_nested_in_a_hook_runs_before_the_next_hook() -> None:
    bus = EventBus()
    log: List[str] = []
    bus.on("outer", lambda: (log.append("outer"), bus.emit("inner")))
    bus.on("inner", lambda: log.append("inner"))
    bus.on("outer", lambda: log.append("outer-2"), priority=-1)
    bus.emit("outer")
    assert log == ["outer", "inner", "outer-2"]


def test_recursive_once_hook_runs_once() -> None:
    bus = EventBus()
    calls: List[int] = []

    def again() -> None:
        calls.append(1)
        bus.emit("e")

    bus.on("e", again, once=True)
    bus.emit("e")
    assert calls == [1]


@pytest.mark.parametrize(
    "options", [{"once": True}, {"target": "db"}, {"with_name": True}], ids=str
)
def test_an_error_of_the_full_emit_loop_names_the_hook_once(options: Any) -> None:
    bus = EventBus()

    def broken(*args: Any) -> None:
        raise ValueError("broken")

    bus.on("saved", broken, **options)
    with pytest.raises(ValueError, match="broken") as info:
        bus.emit("saved", "db")
    notes = getattr(info.value, "__notes__", [])
    assert len(notes) == 1
    assert "broken" in notes[0]


@pytest.mark.parametrize("kwargs", [{}, {"tag": "x"}], ids=["positional", "with kwargs"])
def test_an_error_of_a_hook_that_removed_itself_while_emitted_still_names_it(
    kwargs: Any,
) -> None:
    bus = EventBus()
    handles: List[Handle] = []

    def leaving(*args: Any, **kwargs: Any) -> None:
        handles[0].remove()
        raise ValueError("leaving")

    handles.append(bus.on("saved", leaving))
    with pytest.raises(ValueError, match="leaving") as info:
        bus.emit("saved", "db", **kwargs)
    notes = getattr(info.value, "__notes__", [])
    assert len(notes) == 1
    assert "leaving" in notes[0]
    assert "'saved'" in notes[0]
