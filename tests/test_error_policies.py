"""Error policies: raise (the first error, with a note naming the hook), collect (every
hook runs, then one group) and log; the note that names a failing hook, on every dispatch
path (a hook taking arguments by name, an around hook's set-up included) and added once;
and what collect and log let go of."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import inspect
import logging
import sys
import weakref
from typing import Any, Callable, Dict, Generator, Iterator, List, Tuple

import pytest

from hookbus import CallContext, EventBus, HookError

# --- raise, collect, log ------------------------------------------------------------------


def test_raise_policy_propagates_with_a_note_naming_hook_and_event() -> None:
    bus = EventBus()

    def broken(x: int) -> None:
        raise KeyError("missing")

    bus.on("load", broken)
    with pytest.raises(KeyError) as info:
        bus.emit("load", 1)
    notes = getattr(info.value, "__notes__", [])
    assert len(notes) == 1
    assert "broken" in notes[0]
    assert "'load'" in notes[0]
    assert "test_error_policies.py" in notes[0]


def test_an_error_raised_in_emit_before_its_first_hook_propagates_unchanged() -> None:
    # A signal handler may raise between any two bytecodes; here a trace function raises
    # where emit's loop begins, before it has taken a hook: no hook ran, none is named.
    bus = EventBus()
    ran: List[int] = []
    bus.on("load", ran.append)
    bus.emit("load", 0)  # the plan cached: the next emit goes straight to its loop
    lines, start = inspect.getsourcelines(EventBus.emit)
    loop_line = start + next(i for i, text in enumerate(lines) if "if kwargs:" in text)

    def interrupt(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code is EventBus.emit.__code__:
            if event == "line" and frame.f_lineno == loop_line:
                raise TimeoutError("alarm")
            return interrupt
        return None

    previous = sys.gettrace()
    sys.settrace(interrupt)
    try:
        with pytest.raises(TimeoutError) as info:
            bus.emit("load", 1)
    finally:
        sys.settrace(previous)
    assert ran == [0]
    assert getattr(info.value, "__notes__", []) == []


def test_raise_policy_note_never_prints_argument_values() -> None:
    bus = EventBus()
    bus.on("login", lambda password: 1 / 0)
    with pytest.raises(ZeroDivisionError) as info:
        bus.emit("login", "hunter2")
    assert "hunter2" not in "".join(info.value.__notes__)


def test_raise_policy_stops_at_the_first_error() -> None:
    bus = EventBus()
    log: List[str] = []
    bus.on("e", lambda: 1 / 0)
    bus.on("e", lambda: log.append("after"))
    with pytest.raises(ZeroDivisionError):
        bus.emit("e")
    assert log == []


def test_collect_policy_runs_every_hook_then_raises_a_group() -> None:
    bus = EventBus(errors="collect")
    log: List[str] = []
    bus.on("e", lambda: 1 / 0)
    bus.on("e", lambda: log.append("ran"))
    bus.on("e", lambda: [][1])
    with pytest.raises(HookError) as info:
        bus.emit("e")
    assert log == ["ran"]
    group = info.value
    assert [type(error) for error in group.exceptions] == [ZeroDivisionError, IndexError]
    assert all("on event 'e'" in error.__notes__[0] for error in group.exceptions)
    if sys.version_info >= (3, 11):
        assert isinstance(group, ExceptionGroup)  # noqa: F821 - builtin from 3.11


def test_collect_policy_with_no_error_returns_normally() -> None:
    bus = EventBus(errors="collect")
    bus.on("e", lambda: 1)
    assert bus.collect("e") == [1]


def test_log_policy_logs_and_continues(caplog: pytest.LogCaptureFixture) -> None:
    bus = EventBus(errors="log")
    log: List[str] = []
    bus.on("e", lambda: 1 / 0)
    bus.on("e", lambda: log.append("ran"))
    with caplog.at_level(logging.ERROR, logger="hookbus"):
        bus.emit("e")
    assert log == ["ran"]
    (record,) = caplog.records
    assert record.exc_info is not None
    assert record.exc_info[0] is ZeroDivisionError
    assert "'e'" in record.getMessage()


def test_policy_can_change_at_runtime() -> None:
    bus = EventBus()
    bus.on("e", lambda: 1 / 0)
    bus.errors = "log"
    bus.emit("e")  # no exception now
    bus.errors = "raise"
    with pytest.raises(ZeroDivisionError):
        bus.emit("e")


def test_base_exceptions_are_never_collected() -> None:
    bus = EventBus(errors="collect")

    def interrupt() -> None:
        raise KeyboardInterrupt

    bus.on("e", interrupt)
    with pytest.raises(KeyboardInterrupt):
        bus.emit("e")


def test_error_policies_apply_to_pre_and_post_hooks() -> None:
    bus = EventBus(errors="collect")
    ran: List[str] = []

    @bus.hookable("f")
    def f() -> str:
        ran.append("f")
        return "ok"

    def broken(ctx: Any) -> None:
        raise RuntimeError("post broke")

    bus.post("f", broken)
    bus.post("f", lambda ctx: ran.append("post-2"), priority=-1)
    with pytest.raises(HookError) as info:
        f()
    assert ran == ["f", "post-2"]
    assert isinstance(info.value.exceptions[0], RuntimeError)


# --- a note names the failing hook, on every path, once -----------------------------------


def test_an_error_re_raised_through_a_hook_gets_its_note_once() -> None:
    # Sentinel errors, retry loops and future.result() re-raise one object again and again.
    bus = EventBus()
    failure = ConnectionError("offline")

    def hook() -> None:
        raise failure

    bus.on("e", hook)
    for _ in range(1000):
        with pytest.raises(ConnectionError):
            bus.emit("e")
    assert len(failure.__notes__) == 1


@pytest.mark.parametrize("path", ["emit", "collect", "emit_async", "point", "log"])
def test_the_note_once_holds_on_every_dispatch_path(path: str) -> None:
    bus = EventBus(errors="log" if path == "log" else "raise")
    failure = ConnectionError("offline")

    def hook(*args: Any) -> None:
        raise failure

    @bus.hookable("fetch")
    def fetch() -> None: ...

    bus.on("e", hook)
    bus.pre("fetch", hook)
    calls = {
        "emit": lambda: bus.emit("e"),
        "collect": lambda: bus.collect("e"),
        "emit_async": lambda: asyncio.run(bus.emit_async("e")),
        "point": fetch,
        "log": lambda: bus.emit("e"),
    }
    for _ in range(3):
        with contextlib.suppress(ConnectionError):
            calls[path]()
    assert len(failure.__notes__) == 1, failure.__notes__


def test_distinct_hooks_still_each_add_their_note() -> None:
    bus = EventBus()
    failure = ConnectionError("offline")

    def first() -> None:
        raise failure

    def second() -> None:
        raise failure

    with bus.scope():
        bus.on("a", first)
        with pytest.raises(ConnectionError):
            bus.emit("a")
    bus.on("a", second)
    with pytest.raises(ConnectionError):
        bus.emit("a")
    assert [("first" in note, "second" in note) for note in failure.__notes__] == [
        (True, False),
        (False, True),
    ]


def test_the_error_of_a_hook_taking_arguments_by_name_names_the_hook() -> None:
    """The note is how a user finds which of many hooks failed; a hook that takes part of
    the spec by name (pluggy's habit) is as much a hook as one that takes all of it."""
    bus = EventBus()

    @bus.event
    def moved(x: int, y: int) -> None: ...

    def only_y(y: int) -> None:
        raise ValueError("bad y")

    bus.on("moved", only_y)
    with pytest.raises(ValueError, match="bad y") as raised:
        moved.emit(1, 2)
    notes: List[str] = getattr(raised.value, "__notes__", [])
    assert any("only_y" in note for note in notes), notes


def _fails_at_set_up(ctx: CallContext) -> Generator[None, None, None]:
    raise ValueError("set-up failed")
    yield  # a generator function: an around hook


@pytest.mark.parametrize("where", ["point", "async point", "event"])
def test_the_error_of_an_around_hook_s_set_up_names_the_hook(where: str) -> None:
    """Every other hook's error, an around hook's teardown included, carries a note naming
    the hook; its set-up is the same hook's code."""
    bus = EventBus()

    @bus.hookable("load")
    def load() -> int:
        return 1

    @bus.hookable("fetch")
    async def fetch() -> int:
        return 1

    calls: Dict[str, Tuple[str, Callable[[], Any]]] = {
        "point": ("load", load),
        "async point": ("fetch", lambda: asyncio.run(fetch())),
        "event": ("saved", lambda: bus.emit("saved")),
    }
    name, call = calls[where]
    bus.around(name, _fails_at_set_up)
    with pytest.raises(ValueError, match="set-up failed") as raised:
        call()
    notes: List[str] = getattr(raised.value, "__notes__", [])
    assert any("_fails_at_set_up" in note for note in notes), notes


# --- what collect and log keep, and what they let go of ------------------------------------


class _Argument:
    pass


@pytest.fixture
def no_collector() -> Iterator[None]:
    """A reference cycle must not be broken by a collection that happens to run."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _fails(*args: Any) -> None:
    raise ValueError("collected")


def _stops(*args: Any) -> None:
    raise KeyboardInterrupt


def _emit(bus: EventBus, argument: _Argument) -> None:
    bus.on("saved", _fails)
    bus.on("saved", _stops)
    bus.emit("saved", argument)


def _pre_phase(bus: EventBus, argument: _Argument) -> None:
    @bus.hookable("load")
    def load(argument: _Argument) -> None: ...

    bus.pre("load", lambda ctx: _fails(ctx))
    bus.pre("load", lambda ctx: _stops(ctx))
    load(argument)


@pytest.mark.usefixtures("no_collector")
@pytest.mark.parametrize("dispatch", [_emit, _pre_phase], ids=["emit", "pre hooks"])
def test_errors_collected_before_a_keyboard_interrupt_keep_nothing_of_the_arguments(
    dispatch: Callable[[EventBus, _Argument], None],
) -> None:
    """Under ``"collect"`` a hook's error waits for the end of the loop; a
    ``KeyboardInterrupt`` that ends the loop first goes on unchanged, and the errors
    collected so far must not keep the call's arguments (a batch, a request) alive."""
    bus = EventBus(errors="collect")
    argument = _Argument()
    alive = weakref.ref(argument)
    with pytest.raises(KeyboardInterrupt):
        dispatch(bus, argument)
    del argument
    assert alive() is None


def test_gather_under_collect_runs_every_hook_and_keeps_the_hook_order_of_errors() -> None:
    """gather awaits together; ``"collect"`` then reports every error, sync or async, in
    the order of the hooks, as ``collect_async`` does."""
    bus = EventBus(errors="collect")
    ran = []

    async def late() -> None:
        ran.append("late")
        raise LookupError("async")

    def early() -> None:
        ran.append("early")
        raise ValueError("sync")

    bus.on("refresh", late, priority=1)
    bus.on("refresh", early)
    bus.on("refresh", lambda: ran.append("last"))
    with pytest.raises(HookError) as raised:
        asyncio.run(bus.gather("refresh"))
    assert [type(e) for e in raised.value.exceptions] == [LookupError, ValueError]
    assert sorted(ran) == ["early", "last", "late"]


def test_every_post_hook_runs_after_a_recovery_under_log(caplog: pytest.LogCaptureFixture) -> None:
    """After a recovery the post hooks run on the value, all of them, each under the
    bus's policy."""
    bus = EventBus(errors="log")
    seen = []

    @bus.hookable("parse")
    def parse(text: str) -> int:
        return int(text)

    def broken(ctx: CallContext) -> None:
        raise ValueError("post")

    bus.exception("parse", lambda ctx: ctx.recover(0))
    bus.post("parse", broken)
    bus.post("parse", lambda ctx: seen.append(ctx.result))
    assert parse("x") == 0
    assert seen == [0]
