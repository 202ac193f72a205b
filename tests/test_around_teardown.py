"""Around hooks' teardown: every started hook finishes, and nothing it does is dropped.

Each test states a guarantee of ``contextlib.contextmanager`` and pluggy's wrappers
that hookbus's around hooks must keep whatever an inner hook does: ignore
``GeneratorExit``, return a value, or yield again under a ``BaseException``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any, AsyncGenerator, Callable, Dict, Generator, List

import pytest

from hookbus import CallContext, EventBus, Handle

Around = Generator[None, None, Any]


def test_outer_around_hooks_finish_when_an_inner_one_ignores_generator_exit() -> None:
    """An inner hook that yields twice and then ignores ``close()`` is its own fault; the
    outer hooks still get the error at their ``yield``, as nested ``with`` blocks would."""
    bus = EventBus()
    log: List[Any] = []

    @bus.hookable("load")
    def load() -> int:
        return 1

    def outer(ctx: CallContext) -> Around:
        try:
            yield
        except BaseException as error:
            log.append(("outer got", type(error).__name__))
            raise
        finally:
            log.append("outer finished")

    def stubborn(ctx: CallContext) -> Around:
        yield
        with contextlib.suppress(GeneratorExit):
            yield  # a second yield: hookbus closes the hook...
        yield  # ...which ignores it once (the garbage collector's close then ends it)

    bus.around("load", outer, priority=1)
    bus.around("load", stubborn)
    with pytest.raises(RuntimeError):
        load()
    # Resumed during the call, with the error: not closed later by the garbage collector.
    assert log == [("outer got", "RuntimeError"), "outer finished"]


def test_an_around_hook_that_returns_a_value_is_refused() -> None:
    """Every other hook kind refuses a returned value (``ctx.result = ...`` changes the
    result). A pluggy user writes ``return transformed`` in a wrapper: silently dropping
    it would return the untransformed result, so it is refused, naming the hook."""
    bus = EventBus()

    @bus.hookable("load")
    def load() -> int:
        return 1

    def transform(ctx: CallContext) -> Generator[None, None, int]:
        yield
        return 2  # pluggy's habit; hookbus's is ctx.result = 2

    bus.around("load", transform)
    with pytest.raises(TypeError, match="transform"):
        load()


def test_a_keyboard_interrupt_goes_on_unchanged_past_a_hook_that_yields_twice() -> None:
    """A ``BaseException`` always goes on, unchanged: Ctrl-C must stop the program as
    Ctrl-C, whatever a hook in its way did wrong."""
    bus = EventBus()
    finished: List[str] = []

    @bus.hookable("load")
    def load() -> int:
        raise KeyboardInterrupt

    def catches_everything(ctx: CallContext) -> Around:
        try:
            yield
        except BaseException:
            yield  # a second yield: the hook is closed, and that is its error
        finally:
            finished.append("closed")

    bus.around("load", catches_everything)
    with pytest.raises(KeyboardInterrupt):
        load()
    assert finished == ["closed"]


# --- the same rules on an async point -------------------------------------------------


class Stop(BaseException):
    """A BaseException that is no Exception, as KeyboardInterrupt is (asyncio hands a
    task's own KeyboardInterrupt to the loop, not to the caller: this one comes back)."""


@pytest.mark.parametrize("inner_kind", ["generator", "async generator"])
def test_on_an_async_point_outer_hooks_finish_when_an_inner_one_ignores_generator_exit(
    inner_kind: str,
) -> None:
    bus = EventBus()
    log: List[Any] = []

    @bus.hookable("fetch")
    async def fetch() -> int:
        return 1

    async def outer(ctx: CallContext) -> AsyncGenerator[None, None]:
        try:
            yield
        except BaseException as error:
            log.append(("outer got", type(error).__name__))
            raise
        finally:
            log.append("outer finished")

    def stubborn(ctx: CallContext) -> Around:
        yield
        with contextlib.suppress(GeneratorExit):
            yield
        yield

    async def stubborn_async(ctx: CallContext) -> AsyncGenerator[None, None]:
        yield
        with contextlib.suppress(GeneratorExit):
            yield
        yield

    bus.around("fetch", outer, priority=1)
    bus.around("fetch", stubborn if inner_kind == "generator" else stubborn_async)
    with pytest.raises(RuntimeError, match="yielded a second time"):
        asyncio.run(fetch())
    assert log == [("outer got", "RuntimeError"), "outer finished"]


def test_an_around_hook_that_returns_a_value_on_an_async_point_is_refused() -> None:
    """An async generator cannot return a value (Python refuses it); a plain generator on an
    async point can, and is refused as on a sync one."""
    bus = EventBus()

    @bus.hookable("fetch")
    async def fetch() -> int:
        return 1

    def transform(ctx: CallContext) -> Generator[None, None, int]:
        yield
        return 2

    bus.around("fetch", transform)
    with pytest.raises(TypeError, match=r"transform.*returned int"):
        asyncio.run(fetch())


def test_an_around_hook_that_returns_a_value_after_catching_the_error_is_refused() -> None:
    """pluggy's wrapper swallows an error by returning a value; in hookbus that would drop
    the error silently, so it is refused too (``ctx.recover(value)`` swallows it)."""
    bus = EventBus()

    @bus.hookable("load")
    def load() -> int:
        raise KeyError("missing")

    def fallback(ctx: CallContext) -> Generator[None, None, int]:
        try:
            yield
        except KeyError:
            return 0

    bus.around("load", fallback)
    with pytest.raises(TypeError, match=r"fallback.*ctx\.recover"):
        load()


def test_an_around_hook_that_returns_none_is_fine() -> None:
    """A bare ``return`` (or one that returns None at run time) is no value."""
    bus = EventBus()
    nothing: Any = None

    @bus.hookable("load")
    def load() -> int:
        return 1

    def early(ctx: CallContext) -> Around:
        yield
        if ctx.result == 1:
            return
        ctx.result = 3

    def returns_a_name(ctx: CallContext) -> Generator[None, None, Any]:
        yield
        return nothing  # may be a value: checked at run time, and it is None

    bus.around("load", early)
    bus.around("load", returns_a_name)
    assert load() == 1


@pytest.mark.parametrize("hook_kind", ["generator", "async generator"])
def test_on_an_async_point_a_base_exception_goes_on_unchanged_past_a_hook_that_yields_twice(
    hook_kind: str,
) -> None:
    bus = EventBus()
    finished: List[str] = []

    @bus.hookable("fetch")
    async def fetch() -> int:
        raise Stop

    def catches_everything(ctx: CallContext) -> Around:
        try:
            yield
        except BaseException:
            yield
        finally:
            finished.append("closed")

    async def catches_everything_async(ctx: CallContext) -> AsyncGenerator[None, None]:
        try:
            yield
        except BaseException:
            yield
        finally:
            finished.append("closed")

    hook = catches_everything if hook_kind == "generator" else catches_everything_async
    bus.around("fetch", hook)
    with pytest.raises(Stop) as raised:
        asyncio.run(fetch())
    assert finished == ["closed"]
    notes: List[str] = getattr(raised.value, "__notes__", [])
    assert any("yielded a second time" in note for note in notes), notes


# --- one owner: the dispatch that starts an around hook resumes it ------------------------


def _calls(bus: EventBus) -> Dict[str, Callable[[], Any]]:
    """One dispatch per path of the core that runs around hooks on the name ``"job"``."""

    @bus.hookable("job")
    def job() -> int:
        return 1

    @bus.hookable("job_async")
    async def job_async() -> int:
        return 1

    return {
        "point": job,
        "async point": lambda: asyncio.run(job_async()),
        "emit": lambda: bus.emit("job_event"),
        "emit_async": lambda: asyncio.run(bus.emit_async("job_event")),
        "collect_async": lambda: asyncio.run(bus.collect_async("job_event")),
        "gather": lambda: asyncio.run(bus.gather("job_event")),
    }


PATHS = ["point", "async point", "emit", "emit_async", "collect_async", "gather"]


def _name_of(path: str) -> str:
    return {"point": "job", "async point": "job_async"}.get(path, "job_event")


def _inside(bus: EventBus, path: str, action: Callable[[], None]) -> Handle:
    """Run ``action`` inside the call, as a hook of it (a pre hook, or an event hook)."""
    name = _name_of(path)
    if name == "job_event":
        return bus.on(name, lambda: action())
    return bus.pre(name, lambda ctx: action())


def _span(log: List[str]) -> Callable[[CallContext], Around]:
    def span(ctx: CallContext) -> Around:
        log.append("set-up")
        try:
            yield
        finally:
            log.append("teardown")

    return span


@pytest.mark.parametrize("path", PATHS)
def test_a_once_around_hook_finishes_in_the_call_that_claimed_it(path: str) -> None:
    bus = EventBus()
    call = _calls(bus)[path]
    log: List[str] = []
    bus.around(_name_of(path), _span(log), once=True)
    _inside(bus, path, lambda: log.append("call"))
    call()
    assert log == ["set-up", "call", "teardown"]
    call()
    assert log == ["set-up", "call", "teardown", "call"]


@pytest.mark.parametrize("remover", ["in the call", "another thread"])
@pytest.mark.parametrize("path", PATHS)
def test_an_around_hook_removed_during_the_call_finishes_in_that_call(
    path: str, remover: str
) -> None:
    """A removal stops a hook from starting again; it never ends one that started."""
    bus = EventBus()
    call = _calls(bus)[path]
    log: List[str] = []
    handle = bus.around(_name_of(path), _span(log))

    def remove() -> None:
        if remover == "in the call":
            handle.remove()
        else:
            thread = threading.Thread(target=handle.remove)
            thread.start()
            thread.join(10)
        log.append("removed")

    _inside(bus, path, remove)
    call()
    assert log == ["set-up", "removed", "teardown"]
    assert not handle.active


def _returns_a_constant(ctx: CallContext) -> Generator[None, None, Any]:
    yield
    return 2


def _returns_through_or(ctx: CallContext) -> Generator[None, None, Any]:
    yield
    return ctx.result or None  # a jump to the return: the value is not the None before it


def _returns_a_conditional(ctx: CallContext) -> Generator[None, None, Any]:
    yield
    return 2 if ctx.result else None


def _returns_what_was_sent(ctx: CallContext) -> Generator[None, None, Any]:
    return (yield)  # hookbus sends None: returns None, fine


class _CallableSpan:
    def __call__(self, ctx: CallContext) -> Generator[None, None, Any]:
        yield
        return ctx.result


@pytest.mark.parametrize(
    ("hook", "refused"),
    [
        (_returns_a_constant, True),
        (_returns_through_or, True),
        (_returns_a_conditional, True),
        (_returns_what_was_sent, False),
        (_CallableSpan(), True),
    ],
    ids=["constant", "x or None", "conditional", "the sent None", "callable object"],
)
def test_a_value_returned_after_the_yield_is_refused_whatever_the_return_looks_like(
    hook: Callable[[CallContext], Any], refused: bool
) -> None:
    """The check is read from the hook's code once; every way to return a value is caught,
    on every Python version the code is compiled by (CI runs this on each)."""
    bus = EventBus()

    @bus.hookable("load")
    def load() -> int:
        return 1

    bus.around("load", hook)
    if refused:
        with pytest.raises(TypeError, match="returned int after its yield"):
            load()
    else:
        assert load() == 1
