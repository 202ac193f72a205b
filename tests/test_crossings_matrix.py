"""The crossings matrix: every hook kind and option, on every point kind, against one model.

Hypothesis draws a *scenario*: a point kind (an event, a declared event, a function
point sync or async, a method point), a plain or strict bus, a stack of one to five
hooks of any kind (event, around, pre, post, exception) with options (``once``,
``weak``, ``target``, ``priority``, ``with_name``, a name given as a string, an Enum
member or a pattern, an event hook taking the spec's arguments by name), what each
hook does (nothing, raise, recover, recover and then raise, raise in an around hook's
set-up or teardown), whether the call itself raises, how an event is dispatched
(``emit``, ``collect``, ``emit_async``, ``collect_async``, ``gather``), and a lifecycle
event (none, a trace open over the call, every hook removed by the first hook that runs).

It registers the hooks, dispatches twice, and checks the bus against :class:`Model`,
which is the table of what is valid where, and the documented dispatch rules, written
plainly. The invariants:

1. registration accepts a hook exactly when the table says (``with_name`` is for event
   hooks; a strict bus takes only the kinds that run at the name);
2. the hooks that run, in order, and what the call returns or raises, are the model's;
   an error raised by a hook carries a note naming it;
3. every started around hook finishes exactly once, innermost first;
4. a ``once`` hook runs at most once, and a removed hook never runs again;
5. a trace records every hook that ran;
6. ``check_pending()`` reports exactly the hooks whose kind never runs where they are;
7. once the handles are removed, nothing keeps a hook or a call's argument alive.

``test_crossings_hold_outside_the_known_broken_ones`` runs with documented waivers for
crossings that are broken today (:data:`WAIVERS`); ``test_crossings_hold_everywhere``
runs with none and is an expected failure, pinned by one ``@example`` per waiver so that
it fails deterministically. A fix removes its waiver; the last removes the ``xfail`` mark.

Profiles (the environment variable ``HOOKBUS_HYPOTHESIS_PROFILE``, as for the state
machine): ``dev`` runs 200 examples, ``ci`` 1,000 (about 1 s and 4 s of CPU: no full
garbage collection runs unless a check needs one).
The torch point kinds (a module, an operation point, ``every_module``) are the next rows
to add: the model is the same, only how a point is made and called differs.
"""

from __future__ import annotations

import asyncio
import enum
import gc
import os
import weakref
from typing import Any, Callable, Dict, FrozenSet, Generator, List, NamedTuple, Optional, Tuple

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hookbus import CallContext, EventBus, Handle, Trace, UnknownNameError

settings.register_profile(
    "crossings-dev", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "crossings-ci",
    max_examples=1000,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
PROFILE = "crossings-" + os.environ.get("HOOKBUS_HYPOTHESIS_PROFILE", "dev")

# --- the table: what runs where ---------------------------------------------------------

EVENT_KINDS = ("event", "declared_event")
POINT_KINDS = (*EVENT_KINDS, "function", "async_function", "method")
HOOK_KINDS = ("event", "around", "pre", "post", "exception")

RUNS: Dict[str, FrozenSet[str]] = {
    "event": frozenset({"event", "around"}),
    "declared_event": frozenset({"event", "around"}),
    "function": frozenset({"around", "pre", "post", "exception"}),
    "async_function": frozenset({"around", "pre", "post", "exception"}),
    "method": frozenset({"around", "pre", "post", "exception"}),
}
"""Which hook kinds a dispatch of each point kind runs: the table as it should be."""

BEHAVIOURS: Dict[str, Tuple[str, ...]] = {
    "event": ("ok", "raise"),
    "pre": ("ok", "raise"),
    "post": ("ok", "raise"),
    "exception": ("ok", "raise", "recover", "recover_then_raise"),
    "around": ("ok", "setup_raise", "teardown_raise"),
}

NAME = "job"


class Topic(enum.Enum):
    JOB = NAME


NAMES: Dict[str, Any] = {"plain": NAME, "enum": Topic.JOB, "pattern": "jo?"}

# --- scenarios ---------------------------------------------------------------------------


class HookSpec(NamedTuple):
    """One registration, and what the hook does when it runs."""

    kind: str
    behaviour: str
    priority: int
    once: bool
    weak: bool
    target: str  # "none", "match" (the sender or call target) or "other"
    with_name: bool
    name_form: str  # a key of NAMES
    by_name: bool  # an event hook that takes only the spec's ``value``, by name


class Scenario(NamedTuple):
    point_kind: str
    strict: bool
    hooks: Tuple[HookSpec, ...]
    call_raises: bool
    dispatch: str  # for events: emit, collect, emit_async, collect_async or gather
    lifecycle: str  # "none", "trace" or "remove_during"


@st.composite
def hook_specs(draw: Any) -> HookSpec:
    kind = draw(st.sampled_from(HOOK_KINDS))
    return HookSpec(
        kind=kind,
        behaviour=draw(st.sampled_from(BEHAVIOURS[kind])),
        priority=draw(st.integers(-1, 1)),
        once=draw(st.booleans()),
        weak=draw(st.booleans()),
        target=draw(st.sampled_from(("none", "match", "other"))),
        with_name=draw(st.booleans()),
        name_form=draw(st.sampled_from(tuple(NAMES))),
        by_name=draw(st.booleans()),
    )


@st.composite
def scenarios(draw: Any) -> Scenario:
    point_kind = draw(st.sampled_from(POINT_KINDS))
    return Scenario(
        point_kind=point_kind,
        # A strict bus needs the name declared (or defined): not for a plain event.
        strict=point_kind != "event" and draw(st.booleans()),
        hooks=tuple(draw(st.lists(hook_specs(), min_size=1, max_size=5))),
        call_raises=draw(st.booleans()),
        dispatch=draw(
            st.sampled_from(("emit", "collect", "emit_async", "collect_async", "gather"))
            if point_kind in EVENT_KINDS
            else st.just("call")
        ),
        lifecycle=draw(st.sampled_from(("none", "trace", "remove_during"))),
    )


# --- the model -----------------------------------------------------------------------------


class Boom(Exception):
    """What hook ``index`` raises (``-1``: the call itself)."""

    def __init__(self, index: int) -> None:
        super().__init__(f"boom {index}")
        self.index = index


CALL = -1
RESULT = "result"
RECOVERED = "recovered"


def accepted(scenario: Scenario, spec: HookSpec) -> bool:
    """Invariant 1: whether registration takes ``spec`` (else it raises, registering nothing)."""
    if spec.with_name and spec.kind != "event":
        return False  # with_name= is for event hooks: a point's hooks get ctx.name
    if scenario.strict and spec.name_form != "pattern":
        return spec.kind in RUNS[scenario.point_kind]  # a strict bus knows its names
    return True


def runs_here(scenario: Scenario, spec: HookSpec) -> bool:
    """Invariant 6: whether ``spec``'s kind ever runs at this name (else check_pending says so)."""
    return spec.kind in RUNS[scenario.point_kind]


class Outcome(NamedTuple):
    ran: List[int]  # hook indices in the order they were called
    error: Optional[int]  # the index of the Boom that comes out, or None
    result: Any  # what the call returns (points), or the collected results (collect)


class Model:
    """The documented dispatch rules, written plainly (errors raise: the default policy)."""

    def __init__(
        self, scenario: Scenario, registered: List[int], waive: FrozenSet[str] = frozenset()
    ) -> None:
        self.scenario = scenario
        self.waive = waive
        self.specs = scenario.hooks
        self.registered = registered  # indices, in registration order
        self.removed = False  # the lifecycle's removal happened

    def dispatch(self) -> Outcome:
        scenario = self.scenario
        runs = RUNS[scenario.point_kind]
        live = [
            i
            for i in self.registered
            if self.specs[i].kind in runs and self.specs[i].target != "other"
        ]
        live.sort(key=lambda i: (-self.specs[i].priority, self.registered.index(i)))
        self.ran: List[int] = []
        self.removed = False
        by_kind = {kind: [i for i in live if self.specs[i].kind == kind] for kind in HOOK_KINDS}
        started: List[int] = []
        error: Optional[int] = None
        result: Any = None
        for i in by_kind["around"]:
            if not self._call(i):
                continue
            if self.specs[i].behaviour == "setup_raise":
                error = i
                break
            started.append(i)
        if error is None:
            if scenario.point_kind in EVENT_KINDS:
                error, result = self._event_hooks(by_kind["event"])
            else:
                error, result = self._point_hooks(by_kind)
        for i in reversed(started):
            if self.specs[i].behaviour == "teardown_raise":
                error = i
        return Outcome(self.ran, error, None if error is not None else result)

    def _call(self, i: int) -> bool:
        """Call hook ``i``: False if it is skipped (a once hook removed before its turn)."""
        if self.removed and self.specs[i].once:
            return False
        self.ran.append(i)
        if self.scenario.lifecycle == "remove_during":
            self.removed = True
        return True

    def _event_hooks(self, hooks: List[int]) -> Tuple[Optional[int], Any]:
        results: List[int] = []
        for i in hooks:
            if not self._call(i):
                continue
            if self.specs[i].behaviour == "raise":
                return i, None
            results.append(i)
        return None, results if self.scenario.dispatch.startswith(("collect", "gather")) else None

    def _point_hooks(self, by_kind: Dict[str, List[int]]) -> Tuple[Optional[int], Any]:
        error: Optional[int] = self._phase(by_kind["pre"])
        if error is None and self.scenario.call_raises:
            error = CALL
        if error is not None:
            return self._exception_phase(by_kind, error, posts_ran=False)
        error = self._phase(by_kind["post"])
        if error is not None:
            return self._exception_phase(by_kind, error, posts_ran=True)
        return None, RESULT

    def _phase(self, hooks: List[int], after_recovery: bool = False) -> Optional[int]:
        for i in hooks:
            if not self._call(i):
                continue
            if self.specs[i].behaviour == "raise":
                return i
            if after_recovery and "posts_after_recover" in self.waive:
                break  # today's bug, waived: the loop stops after one post hook
        return None

    def _exception_phase(
        self, by_kind: Dict[str, List[int]], error: int, posts_ran: bool
    ) -> Tuple[Optional[int], Any]:
        for i in by_kind["exception"]:
            if not self._call(i):
                continue
            behaviour = self.specs[i].behaviour
            if behaviour in ("raise", "recover_then_raise"):
                error = i  # raising replaces the error; a recovery before it is void
            elif behaviour == "recover":
                if not posts_ran:
                    late = self._phase(by_kind["post"], after_recovery=True)
                    if late is not None:
                        return late, None
                return None, RECOVERED
        return error, None


# --- the real thing ----------------------------------------------------------------------


class Payload:
    """The call's argument: nothing may keep it alive after the call."""


def _collect_young_then_all(alive: Callable[[], Any]) -> None:
    """Collect the young generations, and all of them only if ``alive()`` still is (rare):
    a full collection costs tens of milliseconds in a process that imported torch."""
    gc.collect(1)
    if alive() is not None:
        gc.collect()


class Bench:
    """One scenario on a real bus: the point, the hooks, and what they saw."""

    def __init__(self, scenario: Scenario, waive: FrozenSet[str] = frozenset()) -> None:
        self.scenario = scenario
        self.waive = waive
        self.bus = EventBus(strict=scenario.strict)
        self.log: List[int] = []
        self.started: List[int] = []
        self.finished: List[int] = []
        self.handles: List[Handle] = []
        self.hooks: List[Callable[..., Any]] = []  # holds the weak ones alive
        self.targets: List[Any] = []  # and the weakly held targets
        self.declared = scenario.point_kind == "declared_event"
        self.call, self.subject = self._make_point()
        self.is_async = scenario.point_kind == "async_function" or scenario.dispatch in (
            "emit_async",
            "collect_async",
            "gather",
        )

    def _make_point(self) -> Tuple[Callable[[Any], Any], Any]:
        kind, bus = self.scenario.point_kind, self.bus
        raises = self.scenario.call_raises

        def body(sender: Any, value: Any) -> Any:
            if raises:
                raise Boom(CALL)
            return RESULT

        if kind in EVENT_KINDS:
            if kind == "declared_event":

                @bus.event(NAME)
                def declared(sender: Any, value: Any) -> None: ...

            sender = object()
            return self._emitter(sender), sender
        if kind == "function":
            point = bus.hookable(NAME)(body)
            return lambda value: point(None, value), body
        if kind == "async_function":

            async def async_body(sender: Any, value: Any) -> Any:
                return body(sender, value)

            async_point = bus.hookable(NAME)(async_body)
            return lambda value: asyncio.run(async_point(None, value)), async_body

        class Owner:
            @bus.hookable(NAME)
            def job(self, value: Any) -> Any:
                return body(self, value)

        owner = Owner()
        return lambda value: owner.job(value), owner

    def _emitter(self, sender: Any) -> Callable[[Any], Any]:
        bus, how = self.bus, self.scenario.dispatch
        if how == "emit":
            return lambda value: bus.emit(NAME, sender, value)
        if how == "collect":
            return lambda value: bus.collect(NAME, sender, value)
        if how == "emit_async":
            return lambda value: asyncio.run(bus.emit_async(NAME, sender, value))
        if how == "collect_async":
            return lambda value: asyncio.run(bus.collect_async(NAME, sender, value))
        return lambda value: asyncio.run(bus.gather(NAME, sender, value))

    def hook_for(self, index: int, spec: HookSpec) -> Callable[..., Any]:
        log, lifecycle = self.log, self.scenario.lifecycle
        handles = self.handles

        def ran() -> None:
            log.append(index)
            if lifecycle == "remove_during":
                for handle in list(handles):
                    handle.remove()

        if spec.kind == "around":

            def around(ctx: CallContext) -> Generator[None, None, None]:
                ran()
                if spec.behaviour == "setup_raise":
                    raise Boom(index)
                self.started.append(index)
                try:
                    yield
                finally:
                    self.finished.append(index)
                    if spec.behaviour == "teardown_raise":
                        raise Boom(index)

            hook: Callable[..., Any] = around
        elif spec.kind == "event" and spec.by_name and self.declared:

            def takes_value(value: Any) -> Any:
                ran()
                if spec.behaviour == "raise":
                    raise Boom(index)
                return index

            hook = takes_value
        elif spec.kind == "event":

            def on_event(*args: Any, **kwargs: Any) -> Any:
                ran()
                if spec.behaviour == "raise":
                    raise Boom(index)
                return index

            hook = on_event
        else:

            def on_call(ctx: CallContext) -> None:
                ran()
                if spec.behaviour in ("recover", "recover_then_raise"):
                    ctx.recover(RECOVERED)
                if spec.behaviour in ("raise", "recover_then_raise"):
                    raise Boom(index)

            hook = on_call
        hook.__name__ = hook.__qualname__ = f"hook_{index}"
        return hook

    def register(self) -> List[int]:
        """Register every hook; return the indices registered (invariant 1 checked)."""
        registered: List[int] = []
        register = {
            "event": self.bus.on,
            "around": self.bus.around,
            "pre": self.bus.pre,
            "post": self.bus.post,
            "exception": self.bus.exception,
        }
        for index, spec in enumerate(self.scenario.hooks):
            hook = self.hook_for(index, spec)
            self.hooks.append(hook)
            options: Dict[str, Any] = {"priority": spec.priority, "once": spec.once}
            if spec.weak:
                options["weak"] = True
            if spec.with_name:
                options["with_name"] = True
            if spec.target != "none":
                options["target"] = self.subject if spec.target == "match" else Payload()
                self.targets.append(options["target"])  # a weakly held target stays alive
            refusal: Optional[str] = None  # the message only: the error holds this frame
            try:
                handle = register[spec.kind](NAMES[spec.name_form], hook, **options)
            except (TypeError, ValueError, UnknownNameError) as error:
                refusal = str(error)
            assert (refusal is None) == accepted(self.scenario, spec), (
                f"hook {index}: {'refused: ' + refusal if refusal else 'accepted'}"
            )
            if refusal is not None:
                continue
            self.handles.append(handle)
            registered.append(index)
        return registered

    def remove_all(self) -> List[weakref.ref[Any]]:
        """Remove every handle and drop the hooks; return weak references to the hooks."""
        alive = [weakref.ref(hook) for hook in self.hooks]
        for handle in self.handles:
            handle.remove()
        del self.handles[:], self.hooks[:]
        return alive

    def dispatch(self) -> Outcome:
        del self.log[:]
        del self.started[:]
        del self.finished[:]
        payload = Payload()
        payload_alive = weakref.ref(payload)
        error: Optional[int] = None
        notes: List[str] = []
        result: Any = None
        try:
            result = self.call(payload)
        except Boom as boom:
            error, notes = boom.index, list(getattr(boom, "__notes__", []))
            del boom  # its traceback holds the frames that held the payload
        del payload
        if self.scenario.dispatch in ("emit", "emit_async"):
            result = None
        self.notes = notes
        handlers = {spec.behaviour for spec in self.scenario.hooks if spec.kind == "exception"}
        if payload_alive() is not None and (
            self.is_async  # asyncio keeps a failed task's error in a cycle with the frames
            # that held the argument: not hookbus's to break
            or ("recovered_cycle" in self.waive and {"raise", "recover"} <= handlers)
        ):
            _collect_young_then_all(payload_alive)
        assert payload_alive() is None, "a call's argument outlived the call"
        return Outcome(list(self.log), error, result)


# --- the invariants ----------------------------------------------------------------------

WAIVERS: Dict[str, str] = {
    "trace_gather": "bus.trace() never records the hooks that bus.gather runs",
    "check_pending_around_event": "check_pending() reports around hooks on events",
    "strict_around_event": "a strict bus refuses around hooks on declared events",
    "recover_then_raise": "an exception hook that recovers and then raises swallows the error",
    "by_name_note": "a by-name hook's error on emit's fast path gets no note naming it",
    "posts_after_recover": "after ctx.recover(), only the first post hook runs",
    "recovered_cycle": "an exception hook's error before a recovery keeps the call's "
    "arguments in a reference cycle",
}
"""Crossings broken today, each waived narrowly by the test that runs green; a fix removes
its entry (and the code that reads it)."""


def check(scenario: Scenario, waive: FrozenSet[str]) -> None:
    """Run ``scenario`` and check every invariant, except the waived ones."""
    if "recover_then_raise" in waive and any(
        h.behaviour == "recover_then_raise" for h in scenario.hooks
    ):
        return  # the model's rule (the raise wins) is not today's: nothing to compare
    if "strict_around_event" in waive and scenario.strict and scenario.point_kind in EVENT_KINDS:
        scenario = scenario._replace(hooks=tuple(h for h in scenario.hooks if h.kind != "around"))
        if not scenario.hooks:
            return
    bench = Bench(scenario, waive)
    registered = bench.register()
    model = Model(scenario, registered, waive)
    trace: Optional[Trace] = bench.bus.trace() if scenario.lifecycle == "trace" else None

    # The first dispatch: invariants 2, 3, 5.
    if trace is not None:
        with trace:
            got = bench.dispatch()
    else:
        got = bench.dispatch()
    expected = model.dispatch()
    assert got == expected, f"ran/error/result {got} != model {expected}"
    assert bench.finished == list(reversed(bench.started)), "around hooks finished out of order"
    if got.error is not None and got.error != CALL:
        spec = scenario.hooks[got.error]
        waived = "by_name_note" in waive and spec.by_name and bench.declared
        if not waived:
            assert any(f"hook_{got.error}" in note for note in bench.notes), bench.notes
    if trace is not None:
        recorded = sorted(bench.handles.index(r.handle) for r in trace.records)
        waived_kinds = set()
        if "trace_gather" in waive and scenario.dispatch == "gather":
            waived_kinds.add("event")
        ran = sorted(
            registered.index(i) for i in got.ran if scenario.hooks[i].kind not in waived_kinds
        )
        assert recorded == ran, "the trace missed hooks that ran"
        del trace

    # The second dispatch: invariant 4 (once hooks and removals).
    claimed = {i for i in got.ran if scenario.hooks[i].once}
    if scenario.lifecycle == "remove_during" and got.ran:
        model.registered = []
    else:
        model.registered = [i for i in registered if i not in claimed]
    again = bench.dispatch()
    assert again == model.dispatch(), "the second dispatch differs from the model's"

    # check_pending: invariant 6.
    reported = set()
    try:
        bench.bus.check_pending()
    except UnknownNameError as error:
        reported = {id(handle) for handle in error.handles}
    for i, active in zip(registered, [handle.active for handle in bench.handles]):
        spec = scenario.hooks[i]
        if not active or (
            "check_pending_around_event" in waive
            and spec.kind == "around"
            and scenario.point_kind in EVENT_KINDS
        ):
            continue
        should = not runs_here(scenario, spec)
        found = id(bench.handles[registered.index(i)]) in reported
        assert found == should, f"check_pending on hook {i}: reported {found}"

    # Lifetimes: invariant 7.
    hooks_alive = bench.remove_all()
    assert bench.bus.hooks() == []
    for ref in hooks_alive:
        if ref() is not None and bench.is_async:
            _collect_young_then_all(ref)  # the cycles of asyncio's failed tasks
    assert all(ref() is None for ref in hooks_alive), "a removed hook is still referenced"


# --- the tests -----------------------------------------------------------------------------


@settings(settings.get_profile(PROFILE))
@given(scenarios())
def test_crossings_hold_outside_the_known_broken_ones(scenario: Scenario) -> None:
    check(scenario, frozenset(WAIVERS))


def _one(kind: str, behaviour: str, **options: Any) -> HookSpec:
    fields: Dict[str, Any] = dict(
        kind=kind,
        behaviour=behaviour,
        priority=0,
        once=False,
        weak=False,
        target="none",
        with_name=False,
        name_form="plain",
        by_name=False,
    )
    fields.update(options)
    return HookSpec(**fields)


def _pinned(point_kind: str, hooks: Tuple[HookSpec, ...], **options: Any) -> Scenario:
    fields: Dict[str, Any] = dict(
        point_kind=point_kind,
        strict=False,
        hooks=hooks,
        call_raises=False,
        dispatch="emit" if point_kind in EVENT_KINDS else "call",
        lifecycle="none",
    )
    fields.update(options)
    return Scenario(**fields)


@pytest.mark.xfail(
    strict=True,
    reason="the crossings in WAIVERS are broken today: traces (gather), around hooks on "
    "events (check_pending, strict), recovery (recover-then-raise, post hooks after it, a "
    "cycle) and an error without a note (a by-name hook's)",
)
@settings(settings.get_profile(PROFILE))
@given(scenarios())
@example(_pinned("event", (_one("event", "ok"),), dispatch="gather", lifecycle="trace"))
@example(_pinned("event", (_one("around", "ok"),)))
@example(_pinned("declared_event", (_one("around", "ok"),), strict=True))
@example(_pinned("function", (_one("exception", "recover_then_raise"),), call_raises=True))
@example(_pinned("declared_event", (_one("event", "raise", by_name=True),)))
@example(
    _pinned(
        "function",
        (_one("exception", "recover"), _one("post", "ok"), _one("post", "ok")),
        call_raises=True,
    )
)
@example(
    _pinned(
        "function",
        (_one("exception", "raise", priority=1), _one("exception", "recover")),
        call_raises=True,
    )
)
def test_crossings_hold_everywhere(scenario: Scenario) -> None:
    """The whole matrix, no waiver. Each ``@example`` pins one waived crossing."""
    check(scenario, frozenset())
