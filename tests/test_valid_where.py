"""What is valid where: which hook kinds each kind of name takes, decided alike everywhere.

Registration, a strict bus, ``check_pending()``, ``@listens`` and ``subscribe`` must
agree with dispatch on which hook kinds apply to which names: what one accepts and
runs, no other may refuse or report, and what can never run is refused when it is
registered.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any, AsyncGenerator, Generator, Iterator, List, Tuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

import hookbus
from hookbus import CallContext, EventBus, UnknownNameError
from hookbus._kinds import (
    PLAIN,
    HookKind,
    PointKind,
    add_hook_kind,
    add_point_kind,
    point_kind,
    render_markdown,
)


def _span(ctx: CallContext) -> Generator[None, None, None]:
    yield


def test_check_pending_accepts_around_hooks_on_declared_events() -> None:
    """The docs say an around hook wraps an event's emission, and emit runs it: the
    start-up check must not call it a typo."""
    bus = EventBus()

    @bus.event
    def saved(path: str) -> None: ...

    bus.around("saved", _span)
    bus.check_pending()


def test_check_pending_accepts_around_hooks_on_emitted_events() -> None:
    """An emitted name is known to ``check_pending()`` for event hooks; an around hook on
    it runs at each emission, so it is known for around hooks too."""
    bus = EventBus()
    ran: List[str] = []

    def span(ctx: CallContext) -> Generator[None, None, None]:
        ran.append(ctx.name)
        yield

    bus.around("saved", span)
    bus.emit("saved")
    assert ran == ["saved"]
    bus.check_pending()


def test_a_strict_bus_accepts_around_hooks_on_declared_events() -> None:
    """Strict mode refuses unknown names, not known names with a hook kind they run."""
    bus = EventBus(strict=True)
    ran: List[str] = []

    @bus.event
    def saved(path: str) -> None: ...

    def span(ctx: CallContext) -> Generator[None, None, None]:
        ran.append(ctx.name)
        yield

    bus.around("saved", span)
    saved.emit("a.txt")
    assert ran == ["saved"]


def test_listens_marks_an_around_hook_that_subscribe_registers() -> None:
    """pluggy's ``wrapper=True`` lives in the plugin class beside the plain hooks; a hook
    class here must be able to hold its around hook too."""
    bus = EventBus()
    log: List[str] = []

    @bus.hookable("load")
    def load() -> str:
        log.append("call")
        return "data"

    class Tracing:
        @hookbus.listens("load", kind="around")
        def span(self, ctx: CallContext) -> Iterator[None]:
            log.append("enter")
            yield
            log.append("exit")

    group = bus.subscribe(Tracing())
    assert load() == "data"
    assert log == ["enter", "call", "exit"]
    assert [handle.kind for handle in group] == ["around"]


def test_on_refuses_a_generator_function_and_points_to_around() -> None:
    """Calling a generator function runs none of its body: as an event hook it can never
    do anything, so registering it is refused, saying to use ``around``."""
    bus = EventBus()

    def span(*args: Any) -> Generator[None, None, None]:
        yield

    with pytest.raises(TypeError, match="around"):
        bus.on("saved", span)
    assert bus.hooks() == []


# --- the table, and everything that reads it --------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


def test_the_docs_tables_are_the_table_rendered() -> None:
    """docs/concepts.md's "What is valid where" is rendered from the rows, torch's
    included: what the docs say is what registration and dispatch read."""
    pytest.importorskip("torch")
    import hookbus.torch  # noqa: F401 - declares the torch rows

    page = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    start = page.index("<!-- valid-where:")
    start = page.index("\n", start) + 1
    end = page.index("<!-- /valid-where -->")
    assert page[start:end] == render_markdown(), (
        "docs/concepts.md is out of date: paste hookbus._kinds.render_markdown() "
        "(with hookbus.torch imported) between its valid-where markers"
    )


def test_the_registry_refuses_a_hook_kind_the_table_does_not_know() -> None:
    bus = EventBus()
    with pytest.raises(ValueError, match=r"unknown hook kind 'bogus'; accepted: 'event', 'pre'"):
        bus.registry.register("bogus", "saved", print, {})
    with pytest.raises(ValueError, match="unknown hook kind"):
        bus.registry.register("bogus", "saved", _span, {"priority": 1})
    assert bus.hooks() == []


@pytest.mark.parametrize(
    "make",
    [
        lambda: _span,
        lambda: functools.partial(_span),
        lambda: _Spans().span,
        lambda: _Spans(),
        lambda: _async_span,
    ],
    ids=["function", "partial", "bound method", "callable object", "async generator"],
)
@pytest.mark.parametrize("kind", ["on", "pre", "post", "exception"])
def test_a_generator_function_is_refused_as_any_hook_but_around(kind: str, make: Any) -> None:
    """Calling a generator function runs none of its body: as any hook but an around hook
    it could never do anything. The message says where it belongs, and how to hand out a
    generator on purpose."""
    bus = EventBus()
    with pytest.raises(TypeError, match=r"register it with around\(\)") as raised:
        getattr(bus, kind)("saved", make())
    assert "a plain function that returns one" in str(raised.value)
    assert bus.hooks() == []


def test_a_plain_function_returning_a_generator_hands_it_out() -> None:
    """The way the refusal names: collect() then returns the generator, as pluggy's
    caller would."""
    bus = EventBus()
    bus.on("rows", lambda: (n for n in range(3)))
    (rows,) = bus.collect("rows")
    assert list(rows) == [0, 1, 2]


class _Spans:
    def span(self, ctx: CallContext) -> Generator[None, None, None]:
        yield

    def __call__(self, *args: Any) -> Generator[None, None, None]:
        yield


async def _async_span(*args: Any) -> AsyncGenerator[None, None]:
    yield


def test_a_subscribed_generator_method_is_refused_as_an_event_hook() -> None:
    bus = EventBus()

    class Tracing:
        @hookbus.listens("load")
        def span(self, *args: Any) -> Iterator[None]:
            yield

    with pytest.raises(TypeError, match=r"around\(\)"):
        bus.subscribe(Tracing())
    assert bus.hooks() == []


@pytest.mark.parametrize("strict", [False, True], ids=["plain bus", "strict bus"])
@pytest.mark.parametrize("kind", ["pre", "post", "exception"])
def test_a_hook_that_never_runs_at_a_declared_event_is_refused(kind: str, strict: bool) -> None:
    """A declared name is an event: a pre, post or exception hook there could never run.
    Every bus refuses it alike, naming what an event takes."""
    bus = EventBus(strict=strict)

    @bus.event
    def saved(path: str) -> None: ...

    with pytest.raises(UnknownNameError, match="'saved' is an event: use on or around"):
        getattr(bus, kind)("saved", lambda ctx: None)
    assert bus.hooks() == []
    bus.check_pending()


def test_declaring_a_name_refuses_hooks_that_would_then_never_run() -> None:
    bus = EventBus()
    handle = bus.pre("saved", lambda ctx: None)
    with pytest.raises(UnknownNameError, match="cannot declare event 'saved'") as raised:
        bus.event("saved")(lambda path: None)
    assert raised.value.handles == [handle]
    assert "saved" not in bus.events()
    handle.remove()
    bus.event("saved")(lambda path: None)


def test_a_point_of_a_declared_name_takes_the_kinds_it_runs() -> None:
    """The refusal is of hooks that can never run: a hook point of the same name runs them."""
    bus = EventBus(strict=True)
    forward = bus.hookable("forward")(lambda x: x)
    bus.event("forward")(lambda x: None)
    seen: List[str] = []
    bus.pre("forward", lambda ctx: seen.append("pre"))
    assert forward(1) == 1
    assert seen == ["pre"]
    bus.check_pending()


@given(
    kind=st.sampled_from(["event", "around", "pre", "post", "exception"]),
    place=st.sampled_from(["declared", "emitted", "point", "nothing"]),
)
def test_a_strict_bus_and_check_pending_never_disagree(kind: str, place: str) -> None:
    """One rule decides both: a hook a strict bus accepts for an exact name is never
    reported by check_pending() (and what a plain bus's check_pending() reports, a strict
    bus would have refused)."""
    plain, strict = EventBus(), EventBus(strict=True)
    points = []
    for bus in (plain, strict):
        if place == "declared":
            bus.event("x")(lambda value, /: None)
        elif place == "point":
            points.append(bus.hookable("x")(lambda value: value))
        elif place == "emitted" and bus is plain:
            bus.emit("x", 1)
    hook: Any = _span if kind == "around" else (lambda *args: None)
    try:
        getattr(strict, "on" if kind == "event" else kind)("x", hook)
    except UnknownNameError:
        accepted = False
    else:
        accepted = True
    try:
        getattr(plain, "on" if kind == "event" else kind)("x", hook)
    except UnknownNameError:  # a declared name refuses what never runs there, on any bus
        assert not accepted
        return
    try:
        plain.check_pending()
    except UnknownNameError:
        reported = True
    else:
        reported = False
    if place != "emitted":  # a strict bus knows no emitted name: it can't emit one
        assert accepted is not reported
    assert reported == (kind not in _runs_at(place))


def _runs_at(place: str) -> Tuple[str, ...]:
    rows = {"declared": "declared event", "emitted": "event", "point": "function"}
    return point_kind(rows[place]).runs if place in rows else ()


def test_listens_takes_an_around_hook_of_a_declared_event() -> None:
    bus = EventBus()

    @bus.event
    def saved(path: str) -> None: ...

    log: List[str] = []

    class Tracing:
        @hookbus.listens(saved, kind="around")
        def span(self, ctx: CallContext) -> Iterator[None]:
            log.append("enter")
            yield
            log.append("exit")

        @hookbus.listens(saved)
        def record(self, path: str) -> None:
            log.append(path)

    bus.subscribe(Tracing())
    saved.emit("a.txt")
    assert log == ["enter", "a.txt", "exit"]


def test_with_name_is_refused_for_a_hook_kind_that_does_not_take_it() -> None:
    bus = EventBus()
    with pytest.raises(TypeError, match=r"an around hook gets the name as ctx\.name"):
        bus.around("load", _span, with_name=True)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"a pre hook gets the name as ctx\.name"):
        bus.pre("load", lambda ctx: None, with_name=True)  # type: ignore[call-arg]


def test_an_adapter_row_is_declared_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module imported again declares its rows again: harmless when they are equal, a
    ValueError when a different row would take the name."""
    from hookbus import _kinds

    for table in ("_hook_kinds", "_point_kinds", "_at_points"):  # this test's rows go after it
        monkeypatch.setattr(_kinds, table, copy.copy(getattr(_kinds, table)))
    row = HookKind("tick", "tick", PLAIN, True, frozenset({"priority"}), "`hook(ctx)`")
    assert add_hook_kind(row) is row
    assert add_hook_kind(row) is row
    with pytest.raises(ValueError, match="declared already, differently"):
        add_hook_kind(row._replace(method="on_tick"))
    with pytest.raises(ValueError, match="not declared: 'tock'"):
        add_point_kind(PointKind("clock", ("tock",), "", "", None, "", "", False))
