"""docs/guarantees.md promises that messages, notes and reprs show names and shapes, never
the values of a call: a secret passed to emit or to a hook point must appear in none.

Every test feeds the sentinel through one error path and gathers every text that path
produces (the error's message and notes, the reprs a hook can see, the log).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, List

import pytest

from hookbus import CallContext, EventBus, HookError

SECRET = "hunter2-do-not-print"


class Secret:
    """A value whose repr and str both give the secret away."""

    def __repr__(self) -> str:
        return f"Secret({SECRET!r})"

    __str__ = __repr__


def texts_of(error: BaseException) -> List[str]:
    """Everything an error shows: its message, its notes, and those of a group's members."""
    found = [str(error), repr(error), *getattr(error, "__notes__", ())]
    for member in getattr(error, "exceptions", ()):
        found += texts_of(member)
    if error.__cause__ is not None:
        found += texts_of(error.__cause__)
    return found


def assert_no_secret(texts: List[str]) -> None:
    leaked = [text for text in texts if SECRET in text]
    assert not leaked, leaked


def raised_by(call: Callable[[], Any]) -> Exception:
    try:
        call()
    except Exception as error:
        return error
    raise AssertionError("nothing was raised")


@pytest.fixture
def declared() -> Any:
    bus = EventBus()

    @bus.event
    def user_created(user: str, *, password: str = "") -> None: ...

    return user_created


@pytest.mark.parametrize(
    "emit",
    [
        lambda event: event.emit(Secret(), Secret()),
        lambda event: event.emit(Secret(), pasword=Secret()),
        lambda event: event.bus.emit(event.name, Secret(), pasword=Secret()),
        lambda event: event.bus.collect(event.name, Secret(), Secret()),
        lambda event: event.bus.first(event.name, user=Secret(), pasword=Secret()),
        lambda event: asyncio.run(event.bus.emit_async(event.name, Secret(), Secret())),
    ],
    ids=["emit", "emit-keyword", "bus.emit", "collect", "first", "emit_async"],
)
@pytest.mark.parametrize("hooks", ["none", "spec-shaped", "kwargs"])
def test_a_declared_event_emitted_wrongly_names_the_shape_not_the_values(
    declared: Any, emit: Callable[[Any], Any], hooks: str
) -> None:
    if hooks == "spec-shaped":  # the hook's own binding is the check (no binder)
        declared.on(lambda user, *, password="": None)
    elif hooks == "kwargs":
        declared.on(lambda *args, **kwargs: None)
    error = raised_by(lambda: emit(declared))
    assert isinstance(error, TypeError)
    assert "emitted with arguments that don't match" in str(error)
    assert "Secret" in str(error)  # the type is shown: a shape, not a value
    assert_no_secret(texts_of(error))


def test_hook_errors_and_the_reprs_a_hook_sees_show_no_argument_value(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = EventBus(errors="log")
    seen: List[str] = []
    sender = Secret()

    @bus.hookable("login")
    def login(user: Any, password: Any = None) -> Any:
        return password

    def look(ctx: CallContext) -> None:
        seen.extend([repr(ctx), repr(ctx.arguments), str(ctx)])
        raise ValueError("hook failed")

    bus.pre("login", look)
    bus.on("signal", lambda *args, **kwargs: 1 / 0, target=sender)
    handles = bus.hooks()
    with caplog.at_level(logging.ERROR, logger="hookbus"):
        login(Secret(), password=Secret())
        bus.emit("signal", sender, password=Secret())
    assert len(caplog.records) == 2
    logged = [record.getMessage() for record in caplog.records]
    logged += [caplog.text, repr(bus), *map(repr, handles)]
    assert_no_secret(seen + logged)


@pytest.mark.parametrize("policy", ["raise", "collect"])
@pytest.mark.parametrize("phase", ["pre", "post", "exception"])
def test_hook_point_errors_carry_no_argument_value(policy: Any, phase: str) -> None:
    bus = EventBus(errors=policy)

    @bus.hookable("login")
    def login(user: Any, password: Any = None) -> Any:
        if phase == "exception":
            raise KeyError("no such user")
        return password

    def fail(ctx: CallContext) -> None:
        raise ValueError("hook failed")

    getattr(bus, phase)("login", fail)
    assert_no_secret(texts_of(raised_by(lambda: login(Secret(), password=Secret()))))


@pytest.mark.parametrize("phase", ["pre", "post", "exception"])
def test_a_hook_returning_a_secret_is_refused_naming_its_type(phase: str) -> None:
    bus = EventBus()

    @bus.hookable("login")
    def login(user: Any) -> Any:
        if phase == "exception":
            raise KeyError("no such user")
        return user

    getattr(bus, phase)("login", lambda ctx: ctx.args[0])
    error = raised_by(lambda: login(Secret()))
    assert isinstance(error, TypeError)
    assert "returned Secret" in str(error)
    assert_no_secret(texts_of(error))


def test_bad_assignments_from_a_hook_name_types_not_values() -> None:
    bus = EventBus()

    @bus.hookable("login")
    def login(user: Any) -> Any:
        return user

    attempts: List[Callable[[CallContext], None]] = [
        lambda ctx: setattr(ctx, "args", Secret()),
        lambda ctx: setattr(ctx, "kwargs", Secret()),
        lambda ctx: setattr(ctx, "kwargs", {Secret(): 1}),
        lambda ctx: setattr(ctx, "result", ctx.args[0]),
        lambda ctx: ctx.recover(ctx.args[0]),
        lambda ctx: ctx.arguments.__delitem__("user"),
        lambda ctx: ctx.arguments["passwrd"],
        lambda ctx: pickle_context(ctx),
    ]
    for attempt in attempts:
        with bus.scope():
            bus.pre("login", attempt)
            assert_no_secret(texts_of(raised_by(lambda: login(Secret()))))


def pickle_context(ctx: CallContext) -> None:
    import pickle

    pickle.dumps(ctx)


def test_async_hooks_on_a_sync_emit_and_a_historic_replay_show_no_value() -> None:
    bus = EventBus()

    async def notify(user: Any) -> None: ...

    bus.on("signup", notify)
    assert_no_secret(texts_of(raised_by(lambda: bus.emit("signup", Secret()))))

    @bus.event(historic=True)
    def configured(config: Any) -> None: ...

    configured.emit(Secret())

    def fail(config: Any) -> None:
        raise ValueError("bad config")

    assert_no_secret(texts_of(raised_by(lambda: configured.on(fail))))


def test_the_collect_policy_group_shows_no_value() -> None:
    bus = EventBus(errors="collect")
    bus.on("e", lambda secret: 1 / 0)
    bus.on("e", lambda secret: [][0])
    error = raised_by(lambda: bus.emit("e", Secret()))
    assert isinstance(error, HookError)
    assert_no_secret(texts_of(error))
