"""Around hooks: a generator that spans the call, its pre and post hooks, and their errors.

How around hooks nest, replace, translate and recover; their bad shapes; on events and
async points; a property: whatever raises where, every around hook that started
finishes exactly once, innermost first. And their teardown: the guarantees of
``contextlib.contextmanager`` and pluggy's wrappers hold whatever an inner hook does
(ignore ``GeneratorExit``, return a value, or yield again under a ``BaseException``), and
the dispatch that starts an around hook resumes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any, AsyncGenerator, Callable, Dict, Generator, Iterator, List, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hookbus
from hookbus import CallContext, EventBus, Handle

Around = Generator[None, None, Any]  # Any: the teardown tests return values, to be refused


# --- around hooks ---------------------------------------------------------------------


def _point(bus: EventBus, log: List[str], fail: Optional[BaseException] = None) -> Any:
    @bus.hookable("job")
    def job(x: int) -> int:
        log.append(f"call {x}")
        if fail is not None:
            raise fail
        return x * 10

    return job


def test_around_hooks_nest_by_priority_around_pre_and_post_hooks() -> None:
    bus, log = EventBus(), []
    job = _point(bus, log)

    def named(name: str) -> Callable[[CallContext], Around]:
        def around(ctx: CallContext) -> Around:
            log.append(f"{name} before")
            yield
            log.append(f"{name} after {ctx.result}")

        return around

    bus.around("job", named("inner"))
    bus.around("job", named("outer"), priority=5)
    bus.pre("job", lambda ctx: log.append("pre"), priority=100)
    bus.post("job", lambda ctx: log.append("post"), priority=-100)
    assert job(1) == 10
    assert log == [
        "outer before", "inner before", "pre", "call 1", "post",
        "inner after 10", "outer after 10",
    ]  # fmt: skip


def test_an_around_hook_replaces_arguments_and_result() -> None:
    bus, log = EventBus(), []
    job = _point(bus, log)

    @bus.around("job")
    def double_in_add_out(ctx: CallContext) -> Around:
        ctx.args = (ctx.args[0] * 2,)
        yield
        ctx.result = ctx.result + 1

    assert job(3) == 61
    assert log == ["call 6"]


def test_an_around_hook_translates_an_error() -> None:
    bus = EventBus()
    job = _point(bus, [], fail=ConnectionError("down"))

    @bus.around("job")
    def translate(ctx: CallContext) -> Around:
        try:
            yield
        except ConnectionError as error:
            raise TimeoutError("retry later") from error

    with pytest.raises(TimeoutError) as info:
        job(1)
    assert isinstance(info.value.__cause__, ConnectionError)
    assert any("around hook" in note for note in info.value.__notes__)


def test_an_around_hook_recovers_and_outer_ones_see_the_result() -> None:
    bus, seen = EventBus(), []
    job = _point(bus, [], fail=ConnectionError("down"))

    @bus.around("job", priority=1)
    def outer(ctx: CallContext) -> Around:
        yield
        seen.append(ctx.result)

    @bus.around("job")
    def inner(ctx: CallContext) -> Around:
        try:
            yield
        except ConnectionError:
            ctx.recover("cached")

    assert job(1) == "cached"
    assert seen == ["cached"]


def test_catching_the_error_without_recover_does_not_swallow_it() -> None:
    bus = EventBus()
    job = _point(bus, [], fail=ValueError("bad"))

    @bus.around("job")
    def careless(ctx: CallContext) -> Around:
        with contextlib.suppress(ValueError):  # no ctx.recover(value): the error goes on
            yield

    with pytest.raises(ValueError, match="bad"):
        job(1)


def test_teardown_runs_after_a_skip() -> None:
    bus, log = EventBus(), []
    job = _point(bus, log)

    @bus.around("job")
    def span(ctx: CallContext) -> Around:
        yield
        log.append(f"after, skipped={ctx.skipped} result={ctx.result}")

    bus.pre("job", lambda ctx: ctx.skip(-1))
    assert job(1) == -1
    assert log == ["after, skipped=True result=-1"]


def test_an_around_hook_sees_keyboard_interrupt_and_lets_it_go_on() -> None:
    bus = EventBus()
    log: List[str] = []

    @bus.hookable("work")
    def work() -> None:
        raise KeyboardInterrupt

    @bus.around("work")
    def span(ctx: CallContext) -> Around:
        log.append("open")
        try:
            yield
        except BaseException as error:
            log.append(type(error).__name__)
            ctx.recover("ignored")  # a BaseException always goes on
            raise
        finally:
            log.append("close")

    bus.exception("work", lambda ctx: log.append("exception hook"))
    with pytest.raises(KeyboardInterrupt):
        work()
    assert log == ["open", "KeyboardInterrupt", "close"]  # exception hooks: Exception only


def test_an_around_hook_that_yields_twice_is_closed_and_named() -> None:
    bus, log = EventBus(), []
    job = _point(bus, [], fail=KeyError("k"))

    @bus.around("job")
    def greedy(ctx: CallContext) -> Around:
        try:
            yield
        except KeyError:
            yield
        finally:
            log.append("closed")

    with pytest.raises(RuntimeError, match=r"greedy.*yielded a second time") as info:
        job(1)
    assert isinstance(info.value.__cause__, KeyError)
    assert log == ["closed"]


def test_an_around_hook_that_never_yields_is_named_and_outer_ones_finish() -> None:
    bus, log = EventBus(), []
    job = _point(bus, log)

    @bus.around("job", priority=1)
    def outer(ctx: CallContext) -> Around:
        try:
            yield
        finally:
            log.append("outer closed")

    @bus.around("job")
    def lazy(ctx: CallContext) -> Around:
        if ctx.args[0] > 0:
            return
        yield

    with pytest.raises(RuntimeError, match=r"lazy.*returned without yielding"):
        job(1)
    assert log == ["outer closed"]  # and the call never ran


@pytest.mark.parametrize("hook", [lambda ctx: None, print, 3])
def test_an_around_hook_that_is_not_a_generator_is_refused_at_registration(hook: Any) -> None:
    bus = EventBus()
    with pytest.raises(TypeError, match=r"around\(\) needs a (generator function|callable)"):
        bus.around("job", hook)
    assert bus.hooks() == []


def test_an_async_around_hook_is_refused_on_a_sync_point() -> None:
    bus = EventBus()
    job = _point(bus, [])  # kept: the registry holds points weakly

    async def span(ctx: CallContext) -> Any:
        yield

    with pytest.raises(TypeError, match="async"):
        bus.around("job", span)
    assert bus.hooks() == []
    assert job(1) == 10


def test_around_hooks_on_an_async_point_may_be_async_or_sync() -> None:
    bus, log = EventBus(), []

    @bus.hookable("fetch")
    async def fetch(url: str) -> str:
        await asyncio.sleep(0)
        log.append("fetch")
        return url.upper()

    @bus.around("fetch", priority=1)
    async def timed(ctx: CallContext) -> Any:
        log.append("async before")
        yield
        log.append("async after")
        ctx.result = ctx.result + "!"

    @bus.around("fetch")
    def plain(ctx: CallContext) -> Around:
        log.append("sync before")
        yield
        log.append("sync after")

    assert asyncio.run(fetch("a")) == "A!"
    assert log == ["async before", "sync before", "fetch", "sync after", "async after"]


def test_options_once_target_and_a_handle() -> None:
    bus, log = EventBus(), []
    job = _point(bus, log)

    def span(ctx: CallContext) -> Around:
        log.append("span")
        yield

    handle = bus.around("job", span, once=True)
    job(1)
    job(2)
    assert log == ["span", "call 1", "call 2"]
    assert not handle.active
    with bus.scope() as scope:
        scope.around("job", span)
        job(3)
    job(4)
    assert log[-3:] == ["span", "call 3", "call 4"]


def test_around_hooks_wrap_a_whole_emission() -> None:
    bus, log = EventBus(), []
    bus.on("plugins", lambda: "csv")
    bus.on("plugins", lambda: "json")

    @bus.around("plugins")
    def sort_them(ctx: CallContext) -> Around:
        log.append("before")
        yield
        if isinstance(ctx.result, list):
            ctx.result = sorted(ctx.result, reverse=True)

    assert bus.collect("plugins") == ["json", "csv"]
    assert bus.first("plugins") == "csv"
    assert bus.emit("plugins") is None
    assert log == ["before"] * 3


def test_an_around_hook_on_an_event_sees_an_event_hooks_error() -> None:
    bus, log = EventBus(), []

    @bus.on("save")
    def broken(path: str) -> None:
        raise OSError("disk full")

    @bus.around("save")
    def span(ctx: CallContext) -> Around:
        try:
            yield
        except OSError as error:
            log.append(f"{ctx.name} {ctx.args} {error}")
            raise

    with pytest.raises(OSError, match="disk full"):
        bus.emit("save", "a.txt")
    assert log == ["save ('a.txt',) disk full"]


def test_a_declared_events_around_hook_and_emit_async() -> None:
    bus, log = EventBus(), []

    @bus.event
    def saved(path: str) -> None: ...

    async def timed(ctx: CallContext) -> Any:
        log.append("before")
        yield
        log.append("after")

    saved.around(timed)
    saved.on(lambda path: log.append(path))
    asyncio.run(saved.emit_async("a.txt"))
    assert log == ["before", "a.txt", "after"]
    with pytest.raises(TypeError):
        saved.emit(3, 4)  # the arguments are checked before any hook, around ones too


def test_the_module_level_around_is_the_default_bus() -> None:
    assert hookbus.around == hookbus.default_bus.around


# --- the property: every started around hook finishes once, innermost first -------

# Where an error is raised: the call, an around hook's set-up or teardown, a pre,
# post or exception hook; and of which kind.
PLACES = st.sampled_from(
    ["none", "call", "pre", "post", "exception", "around-setup", "around-teardown"]
)
KINDS = st.sampled_from([ValueError, KeyboardInterrupt])


@settings(max_examples=150, deadline=None)
@given(
    arounds=st.integers(min_value=0, max_value=4),
    pres=st.integers(min_value=0, max_value=2),
    posts=st.integers(min_value=0, max_value=2),
    exceptions=st.integers(min_value=0, max_value=2),
    place=PLACES,
    which=st.integers(min_value=0, max_value=3),
    kind=KINDS,
    recover=st.booleans(),
)
def test_every_started_around_hook_finishes_once_in_reverse_order(
    arounds: int,
    pres: int,
    posts: int,
    exceptions: int,
    place: str,
    which: int,
    kind: type,
    recover: bool,
) -> None:
    bus = EventBus()
    started: List[int] = []
    finished: List[int] = []

    def boom() -> None:
        raise kind("boom")

    @bus.hookable("f")
    def f() -> str:
        if place == "call":
            boom()
        return "ok"

    def make_around(index: int) -> Callable[[CallContext], Around]:
        def around(ctx: CallContext) -> Around:
            if place == "around-setup" and index == which:
                boom()
            started.append(index)
            try:
                yield
            finally:
                finished.append(index)
                if place == "around-teardown" and index == which:
                    boom()

        return around

    def make_hook(kind_name: str, index: int) -> Callable[[CallContext], None]:
        def hook(ctx: CallContext) -> None:
            if place == kind_name and index == which:
                boom()
            if kind_name == "exception" and recover:
                ctx.recover("recovered")

        return hook

    for index in range(arounds):
        bus.around("f", make_around(index), priority=-index)  # 0 is outermost
    for index in range(pres):
        bus.pre("f", make_hook("pre", index))
    for index in range(posts):
        bus.post("f", make_hook("post", index))
    for index in range(exceptions):
        bus.exception("f", make_hook("exception", index))

    with contextlib.suppress(ValueError, KeyboardInterrupt, RuntimeError):
        f()
    assert finished == list(reversed(started))  # each once, innermost first
    assert started == sorted(started)


def test_a_pluggy_style_wrapper_around_every_implementation() -> None:
    # pluggy: @hookimpl(wrapper=True) def hook(): result = yield; return result
    bus = EventBus()
    calls: List[str] = []
    bus.on("setup", lambda: calls.append("impl 1") or 1)
    bus.on("setup", lambda: calls.append("impl 2") or 2)

    @bus.around("setup")
    def wrapper(ctx: CallContext) -> Iterator[None]:
        calls.append("wrapper before")
        try:
            yield
            ctx.result = [r * 10 for r in ctx.result]
        finally:
            calls.append("wrapper after")

    assert bus.collect("setup") == [10, 20]
    assert calls == ["wrapper before", "impl 1", "impl 2", "wrapper after"]


# --- teardown: every started hook finishes, and nothing it does is dropped ----------------


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
