"""A hook point's compiled call: the same outcomes as the reference sequence, for any plan.

``hookbus._compiled_call`` generates straight-line code for a plan of plain sync around,
pre and post hooks; ``call_with_hooks`` is the reference. The property test draws a plan
(hook kinds, their options, what each hook and the call do, the error policy, a
trace) and runs the same calls twice, once as hookbus runs them and once with the
compiler switched off (every plan on the reference), then compares what a user sees:
what each hook saw, in order, the result, the error and its notes.
"""

from __future__ import annotations

import inspect
import pickle
import sys
import threading
import time
import traceback
import types
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple
from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import hookbus
from hookbus import CallContext, EventBus, _compiled_call, _hookpoint
from hookbus._hookpoint import HookPoint

PRE = ("none", "value", "raise", "skip", "args", "kwargs", "result", "data", "interrupt")
POST = ("none", "value", "raise", "replace", "interrupt")
EXCEPTION = ("none", "recover", "raise")
# What an around hook does: yield once; change the result or the data after its yield;
# skip the call (before its yield); recover from the error thrown in, or catch it and
# let it go on; raise or interrupt before or after its yield; never yield; yield twice
# (and ignore being closed); return a value after its yield (refused).
AROUND = (
    "none", "none", "replace", "data", "skip", "recover", "swallow", "setup_raise",
    "teardown_raise", "setup_interrupt", "teardown_interrupt", "no_yield", "twice",
    "stubborn", "return",
)  # fmt: skip
# Plain hooks most often: those are the plans that compile.
# (with_name is for event hooks: a point's hook reads ctx.name.)
OPTIONS = ("plain",) * 6 + ("priority", "priority", "once", "weak", "target", "other")


class Interrupt(KeyboardInterrupt):
    """A BaseException that no hook policy catches."""


class Hook(NamedTuple):
    kind: str  # around, pre, post, exception
    behaviour: str
    option: str


class Plan(NamedTuple):
    method: bool  # a method point (self is the target) or a function point
    hooks: Tuple[Hook, ...]
    policy: str
    traced: bool
    call_raises: bool


def _hooks(kind: str, behaviours: Tuple[str, ...], most: int) -> Any:
    hook = st.builds(Hook, st.just(kind), st.sampled_from(behaviours), st.sampled_from(OPTIONS))
    return st.lists(hook, max_size=most)


plans = st.builds(
    lambda method, around, pre, post, exception, policy, traced, raises: Plan(
        method, (*around, *pre, *post, *exception), policy, traced, raises
    ),
    st.booleans(),
    _hooks("around", AROUND, 3),
    _hooks("pre", PRE, 3),
    _hooks("post", POST, 3),
    _hooks("exception", EXCEPTION, 2),
    st.sampled_from(("raise", "raise", "raise", "collect", "log")),
    st.sampled_from((False, False, False, True)),
    st.booleans(),
)


def _plain_hooks(kind: str, behaviours: Tuple[str, ...], least: int, most: int) -> Any:
    option = st.sampled_from(("plain", "plain", "priority"))
    hook = st.builds(Hook, st.just(kind), st.sampled_from(behaviours), option)
    return st.lists(hook, min_size=least, max_size=most)


# Plans with around hooks that compile: plain hooks, errors raised, no trace.
around_plans = st.builds(
    lambda method, around, pre, post, exception, raises: Plan(
        method, (*around, *pre, *post, *exception), "raise", False, raises
    ),
    st.booleans(),
    _plain_hooks("around", AROUND, 1, 3),
    _plain_hooks("pre", PRE, 0, 2),
    _plain_hooks("post", POST, 0, 2),
    _plain_hooks("exception", EXCEPTION, 0, 2),
    st.booleans(),
)


@contextmanager
def compiled_from_the_first_call() -> Iterator[None]:
    """A plan compiles at its first call (not its second): every call runs compiled code."""
    with mock.patch.object(HookPoint, "_run_first", HookPoint._run_compiling):
        yield


@contextmanager
def reference_only() -> Iterator[None]:
    """Every plan worked out meanwhile runs ``call_with_hooks`` (the compiler is off, and
    so is the generated code of a plan's first call)."""

    def reference(plan: Any, **point: Any) -> Any:
        return point["reference"]

    def no_first_call(plan: Any, bound: bool) -> None:
        return None

    with (
        mock.patch.object(_hookpoint, "compile_call", reference),
        mock.patch.object(_hookpoint, "first_call_of", no_first_call),
    ):
        yield


def _seen(ctx: CallContext, label: str, target: Any) -> Tuple[Any, ...]:
    return (
        label,
        ctx.name,
        ctx.phase,
        ctx.args,
        dict(ctx.kwargs),
        None if ctx.phase == "pre" else ctx.result,
        ctx.skipped,
        ctx.recovered,
        type(ctx.exception).__name__ if ctx.exception is not None else None,
        ctx.call_index,
        ctx.target is target,
        dict(ctx.data),
    )


def _make_around(spec: Hook, index: int, log: List[Any], target: Any) -> Callable[..., Any]:
    label = f"around{index}"
    behaviour = spec.behaviour

    def around(ctx: CallContext) -> Iterator[None]:
        log.append(_seen(ctx, label, target))
        if behaviour == "setup_raise":
            raise ValueError(label)
        if behaviour == "setup_interrupt":
            raise Interrupt(label)
        if behaviour == "no_yield":
            return
        if behaviour == "skip":
            ctx.skip(("skipped", label))
        try:
            yield
        except Exception:
            log.append(_seen(ctx, label + " caught", target))
            if behaviour == "recover":
                ctx.recover(("recovered", label))
            elif behaviour != "swallow":
                raise
        log.append(_seen(ctx, label + " resumed", target))
        if behaviour == "replace":
            ctx.result = (ctx.result, label)
        elif behaviour == "data":
            ctx.data[label] = "set"
        elif behaviour == "teardown_raise":
            raise ValueError(label + " teardown")
        elif behaviour == "teardown_interrupt":
            raise Interrupt(label + " teardown")
        elif behaviour == "twice":
            yield
        elif behaviour == "stubborn":  # ignores the close once (and ends at the next)
            try:
                yield
            except GeneratorExit:
                log.append((label, "ignored the close"))
            yield

    def returning(ctx: CallContext) -> Iterator[None]:  # its code returns a value
        log.append(_seen(ctx, label, target))
        yield
        log.append(_seen(ctx, label + " resumed", target))
        return index  # type: ignore[misc]  # what the check refuses

    hook = returning if behaviour == "return" else around
    hook.__qualname__ = label
    return hook


def _make_hook(spec: Hook, index: int, log: List[Any], target: Any) -> Callable[..., Any]:
    if spec.kind == "around":
        return _make_around(spec, index, log, target)
    label = f"{spec.kind}{index}"

    def run(ctx: CallContext) -> Any:
        log.append(_seen(ctx, label, target))
        behaviour = spec.behaviour
        if behaviour == "value":
            return index
        if behaviour == "raise":
            raise ValueError(label)
        if behaviour == "interrupt":
            raise Interrupt(label)
        if behaviour == "skip":
            ctx.skip(("skipped", index))
        elif behaviour == "args":
            ctx.args = (ctx.args[0] + 1,)
        elif behaviour == "kwargs":
            ctx.kwargs = {**ctx.kwargs, "tag": label}
        elif behaviour == "result":
            ctx.data[label] = "set"
        elif behaviour == "data":
            ctx.data.setdefault("seen", []).append(label)
        elif behaviour == "replace":
            ctx.result = (ctx.result, index)
        elif behaviour == "recover":
            ctx.recover(("recovered", index))
        return None

    run.__qualname__ = label
    return run


def _outcome(plan: Plan, added: Optional[Hook] = None) -> Tuple[List[Any], List[Any]]:
    """Register the plan's hooks on a fresh bus, call its point twice; what a user sees.

    With ``added``, a plain hook: call it once more, then three times with that hook
    added before the call and removed after it."""
    bus = EventBus()
    log: List[Any] = []

    def work(x: int, tag: str = "") -> Any:
        log.append(("call", x, tag))
        if plan.call_raises:
            raise KeyError(x)
        return x * 10

    if plan.method:

        class Owner:
            @bus.hookable("work")
            def job(self, x: int, tag: str = "") -> Any:
                return work(x, tag)

        owner = Owner()
        target: Any = owner
        call: Callable[..., Any] = owner.job
    else:
        call = bus.hookable("work")(work)
        target = work
    hooks = [_make_hook(spec, index, log, target) for index, spec in enumerate(plan.hooks)]
    for index, (spec, hook) in enumerate(zip(plan.hooks, hooks)):
        options: Dict[str, Any] = {
            "priority": {"priority": index % 3 - 1},
            "once": {"once": True},
            "weak": {"weak": True},
            "target": {"target": target},
            "other": {"target": object()},
        }.get(spec.option, {})
        getattr(bus, spec.kind)("work", hook, **options)
    bus.errors = plan.policy  # type: ignore[assignment]
    results: List[Any] = []
    extra = None if added is None else _make_hook(added, len(hooks), log, target)
    for round in range(2 if added is None else 6):
        handle = None if extra is None or round < 3 else getattr(bus, added.kind)("work", extra)
        try:
            if plan.traced:
                with bus.trace():
                    results.append(("returned", call(1)))
            else:
                results.append(("returned", call(1)))
        except (Exception, Interrupt) as error:
            notes = getattr(error, "__notes__", [])
            nested = [
                (type(e).__name__, str(e), getattr(e, "__notes__", []))
                for e in getattr(error, "exceptions", ())
            ]
            results.append(("raised", type(error).__name__, str(error), notes, nested))
        if handle is not None:
            handle.remove()
    return log, results


@settings(max_examples=300)
@given(plans)
def test_a_compiled_call_does_what_call_with_hooks_does(plan: Plan) -> None:
    with reference_only():
        expected = _outcome(plan)
    with compiled_from_the_first_call():
        assert _outcome(plan) == expected


@settings(max_examples=300)
@given(around_plans)
def test_a_compiled_call_with_around_hooks_does_what_call_with_hooks_does(plan: Plan) -> None:
    with reference_only():
        expected = _outcome(plan)
    compiled: List[bool] = []
    compile_call = _hookpoint.compile_call

    def recording(plan: Any, **point: Any) -> Any:
        run = compile_call(plan, **point)
        compiled.append(run is not point["reference"])
        return run

    with compiled_from_the_first_call(), mock.patch.object(_hookpoint, "compile_call", recording):
        assert _outcome(plan) == expected
    assert compiled
    assert all(compiled)


@contextmanager
def reference_from_the_first_call() -> Iterator[None]:
    """No generated code at all: a plan's first call runs the reference, and so do the
    calls after it (the compiler is off)."""
    with reference_only(), mock.patch.object(_hookpoint, "first_call_of", return_value=None):
        yield


@settings(max_examples=300)
@given(st.one_of(plans, around_plans))
def test_a_plans_first_call_does_what_call_with_hooks_does(plan: Plan) -> None:
    # The first call runs the shape's first_call (the plan's hooks read from the plan),
    # the second the compiled call: both against the reference alone.
    with reference_from_the_first_call():
        expected = _outcome(plan)
    assert _outcome(plan) == expected


added_hooks = st.builds(
    Hook,
    st.sampled_from(("pre", "post", "exception")),
    st.sampled_from(tuple(dict.fromkeys(PRE + POST + EXCEPTION))),
    st.just("plain"),
)


@settings(max_examples=300)
@given(st.one_of(plans, around_plans), added_hooks)
@example(  # the first exception hook: a shape of its own, though its counts are the same
    Plan(False, (Hook("post", "none", "plain"),), "raise", False, True),
    Hook("exception", "recover", "plain"),
)
def test_a_plan_followed_per_call_does_what_call_with_hooks_does(plan: Plan, added: Hook) -> None:
    # A plain hook added before each call and removed after it: the point follows each
    # change (HookPoint.follow), and the plan made by the addition runs its shape's first
    # call, kept by the point from the first such plan on (HookPoint._keep_first).
    with reference_from_the_first_call():
        expected = _outcome(plan, added)
    assert _outcome(plan, added) == expected


def test_a_plan_followed_per_call_runs_the_first_call_its_point_kept() -> None:
    # Guards the test above: from the second addition on, the plan made runs the kept
    # first call directly (plan.run), and a removal gives the compiled plan back.
    bus = EventBus()
    seen: List[str] = []
    work = bus.hookable("work")(lambda x: x)
    point: HookPoint = work.__hookbus_point__  # type: ignore[attr-defined]
    work.post(lambda ctx: seen.append("post"))
    work(1)
    work(1)
    compiled = point.plan
    runs = []
    for round in range(3):
        handle = bus.pre("work", lambda ctx: seen.append("pre"))
        runs.append(point.plan.run.__name__)  # type: ignore[union-attr]
        assert work(round) == round
        handle.remove()
        assert point.plan is compiled
    assert runs == ["_run_first", "added_first_call", "added_first_call"]
    assert seen == ["post", "post"] + ["pre", "post"] * 3


def _load_failing_in_its_post_hook() -> Callable[[str], str]:
    """A hook point ``load`` whose one post hook raises ``ValueError("bad file")``."""
    bus = EventBus()

    @bus.hookable("load")
    def load(path: str) -> str:
        return path

    @load.post
    def check(ctx: CallContext) -> None:
        raise ValueError("bad file")

    return load


def test_a_plans_first_call_runs_its_shapes_code_and_compiles_nothing() -> None:
    load = _load_failing_in_its_post_hook()
    compile_call = _hookpoint.compile_call
    with mock.patch.object(_hookpoint, "compile_call", wraps=compile_call) as compiling:
        with pytest.raises(ValueError, match="bad file") as raised:
            load("a.txt")  # the plan's first call
        assert compiling.call_count == 0
    text = "".join(traceback.format_exception(raised.type, raised.value, raised.tb))
    assert '<hookbus compiled call: 0 pre, 1 post>", line' in text
    assert "returned = post_0(ctx)" in text


@given(plans)
def test_plans_of_plain_pre_and_post_hooks_run_compiled_and_the_rest_the_reference(
    plan: Plan,
) -> None:
    bus = EventBus()

    @bus.hookable("work")
    def work(x: int) -> int:
        return x

    hooks = [
        _make_hook(spec._replace(behaviour="none"), index, [], work)
        for index, spec in enumerate(plan.hooks)
    ]
    for spec, hook in zip(plan.hooks, hooks):
        options = {
            "once": {"once": True},
            "weak": {"weak": True},
            "target": {"target": work},
            "other": {"target": work},
        }.get(spec.option, {})
        getattr(bus, spec.kind)("work", hook, **options)
    bus.errors = plan.policy  # type: ignore[assignment]
    point: HookPoint = work.__hookbus_point__  # type: ignore[attr-defined]
    with bus.trace() if plan.traced else _nothing():
        current = point.current_plan()
    if current is None:
        assert not plan.hooks
        return
    compiled = point._compile(current) is not HookPoint._run_reference
    plain = not plan.traced and plan.policy == "raise"
    # An exception hook's options are read by the reference phase the compiled code calls.
    rare = any(
        spec.option in ("once", "weak", "target", "other") and spec.kind != "exception"
        for spec in plan.hooks
    )
    assert compiled == (plain and not rare)
    if compiled:
        work(1)  # the first call under the plan: the reference
        work(1)  # the second: compiled, and kept with the plan
        assert current.run.__code__.co_filename.startswith("<hookbus compiled call")


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def test_a_traceback_through_a_compiled_call_shows_its_lines() -> None:
    load = _load_failing_in_its_post_hook()
    with pytest.raises(ValueError, match="bad file"):
        load("a.txt")  # the plan's first call: the reference runs it
    with pytest.raises(ValueError, match="bad file") as raised:
        load("a.txt")  # compiled
    text = "".join(traceback.format_exception(raised.type, raised.value, raised.tb))
    assert '<hookbus compiled call: 0 pre, 1 post>", line' in text
    assert "returned = post_0(ctx)" in text  # the line, read through linecache


def test_explain_shows_the_code_a_call_runs_and_why_not_when_it_falls_back() -> None:
    bus = EventBus()

    @bus.hookable("scale")
    def scale(x: int) -> int:
        return 2 * x

    assert "no hooks" in bus.explain("scale")
    first = bus.pre("scale", lambda ctx: None)
    bus.exception("scale", lambda ctx: ctx.recover(0))
    text = bus.explain("scale")
    assert "def hooked_call(point, plan, args, kwargs):" in text
    assert f"#   pre_0 = {first!r}" in text
    assert "recover_or_raise(registry, plan, ctx, error)" in text
    once = bus.post("scale", lambda ctx: None, once=True)
    assert "call_with_hooks runs the plan (a hook with an option" in bus.explain("scale")
    once.remove()
    with bus.trace():
        assert "call_with_hooks runs the plan" in bus.explain("scale")
    assert "a compiled call" in bus.explain("scale")
    bus.on("ready", print)
    assert "an event; emit runs its hooks" in bus.explain("ready")
    with pytest.raises(LookupError, match="'missing'"):
        bus.explain("missing")
    assert hookbus.explain == hookbus.default_bus.explain


def test_explain_shows_the_code_of_a_call_with_around_hooks() -> None:
    bus = EventBus()

    @bus.hookable("scale")
    def scale(x: int) -> int:
        return 2 * x

    def timed(ctx: CallContext) -> Iterator[None]:
        yield

    def checked(ctx: CallContext) -> Iterator[None]:
        yield
        return 1  # type: ignore[misc]  # its code may return a value: refused at the call

    outer = bus.around("scale", timed)
    inner = bus.around("scale", checked)
    post = bus.post("scale", lambda ctx: None)
    text = bus.explain("scale")
    assert text.startswith("# 'scale': a compiled call\n")
    assert f"#   around_0 = {outer!r}" in text
    assert f"#   around_1 = {inner!r}" in text
    assert f"#   post_0 = {post!r}" in text
    assert "gen_0 = around_0(ctx)" in text
    assert "gen_1 = refusing_a_returned_value(around_1(ctx), around_1_handle, ctx)" in text
    assert "resumed = next(gen_1, FINISHED)" in text
    assert "resume_arounds([(around_0_handle, gen_0, None, 0), (around_1_handle" in text
    for _ in range(2):  # the reference, then the compiled call: both refuse the value
        with pytest.raises(TypeError, match="returned int after its yield"):
            scale(1)
    assert scale.__hookbus_point__.plan.run.__code__.co_filename.startswith(  # type: ignore[attr-defined]
        "<hookbus compiled call: 2 around (returns refused: 1), 0 pre, 1 post>"
    )
    # An around hook with an option: the reference runs the plan.
    bus.around("scale", lambda ctx: (yield), once=True)
    assert "call_with_hooks runs the plan (a hook with an option" in bus.explain("scale")


def test_a_traceback_through_a_compiled_around_hook_shows_its_lines() -> None:
    bus = EventBus()

    @bus.hookable("load")
    def load(path: str) -> str:
        return path

    @load.around
    def check(ctx: CallContext) -> Iterator[None]:
        yield
        raise ValueError("bad file")

    with compiled_from_the_first_call(), pytest.raises(ValueError, match="bad file") as raised:
        load("a.txt")
    text = "".join(traceback.format_exception(raised.type, raised.value, raised.tb))
    assert '<hookbus compiled call: 1 around, 0 pre, 0 post>", line' in text
    assert "resumed = next(gen_0, FINISHED)" in text


def test_a_plan_that_lives_for_one_call_compiles_nothing_and_a_kept_one_compiles_once() -> None:
    bus = EventBus()

    @bus.hookable("step")
    def step(x: int) -> int:
        return x

    def observe(ctx: CallContext) -> None:
        return None

    compile_call = _hookpoint.compile_call
    with mock.patch.object(_hookpoint, "compile_call", wraps=compile_call) as compiling:
        for i in range(50):
            with bus.pre("step", observe):
                assert step(i) == i
        assert compiling.call_count == 0
        bus.pre("step", observe)
        for i in range(50):
            assert step(i) == i
        assert compiling.call_count == 1
    # A shape compiles once, whatever point and hooks: the same factory serves again.
    with mock.patch.object(_compiled_call, "compile", side_effect=AssertionError, create=True):
        again = bus.wrap(lambda x: x, "again")
        bus.pre("again", observe)
        assert [again(1), again(2)] == [1, 2]


def _run_against_swaps(
    swap: Callable[[], None],
    work: Callable[[int], Any],
    stop: threading.Event,
    errors: List[BaseException],
) -> None:
    """Run ``swap`` in one thread and two callers of ``work`` until ``stop`` is set, the
    threads taking turns often (so that swaps land between calls); none may hang or fail."""

    def call() -> None:
        try:
            while not stop.is_set():
                work(1)
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=swap), *(threading.Thread(target=call) for _ in range(2))]
    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        sys.setswitchinterval(switching)
    assert not any(thread.is_alive() for thread in threads)
    assert not errors


def test_a_concurrent_caller_sees_the_old_plan_or_the_new_one_whole() -> None:
    bus = EventBus()

    @bus.hookable("work")
    def work(x: int) -> int:
        return x

    def tagger(tag: str) -> Tuple[Callable[..., None], Callable[..., None]]:
        def pre(ctx: CallContext) -> None:
            ctx.data["pre"] = tag

        def post(ctx: CallContext) -> None:
            ctx.data["post"] = tag
            seen.append((ctx.data["pre"], tag))

        return pre, post

    seen: List[Tuple[str, str]] = []
    snapshots = []
    for tag in ("a", "b"):
        pre, post = tagger(tag)
        bus.pre("work", pre)
        bus.post("work", post)
        snapshots.append(bus.registry.snapshot())
        bus.clear()
    stop = threading.Event()
    errors: List[BaseException] = []

    def swap() -> None:
        swaps, deadline = 0, time.monotonic() + 30
        try:
            while swaps < 400 and time.monotonic() < deadline:
                bus.registry.restore(snapshots[swaps % 2])
                swaps += 1
                calls = len(seen)
                while len(seen) < calls + 3 and time.monotonic() < deadline:
                    time.sleep(0)  # some calls run under this plan, some across the swap
        finally:
            stop.set()

    _run_against_swaps(swap, work, stop, errors)
    assert len(seen) >= 1_200, "the callers made too few calls in 30 s"
    assert {tag for tag, _ in seen} == {"a", "b"}  # calls ran under both plans
    assert all(pre == post for pre, post in seen), {p for p in seen if p[0] != p[1]}


def test_a_concurrent_caller_sees_one_plan_whole_when_plans_of_other_shapes_swap_in() -> None:
    # The point's function takes the code of each plan's shape as the plan compiles:
    # a caller may run one shape's code while another shape's plan is current.
    bus = EventBus()

    @bus.hookable("work")
    def work(x: int) -> int:
        return x

    seen: List[Tuple[str, ...]] = []

    def adds(label: str) -> Callable[[CallContext], None]:
        def hook(ctx: CallContext) -> None:
            ctx.data.setdefault("ran", []).append(label)

        return hook

    def last(label: str) -> Callable[[CallContext], None]:
        def hook(ctx: CallContext) -> None:
            ctx.data.setdefault("ran", []).append(label)
            seen.append(tuple(ctx.data["ran"]))

        return hook

    def around(ctx: CallContext) -> Iterator[None]:
        ctx.data.setdefault("ran", []).append("d")
        yield

    plans = {  # what a call under each plan runs, whole
        ("a", "A"): lambda: (bus.pre("work", adds("a")), bus.post("work", last("A"))),
        ("b1", "b2"): lambda: (bus.post("work", adds("b1")), bus.post("work", last("b2"))),
        ("c1", "c2", "C"): lambda: (
            bus.pre("work", adds("c1")),
            bus.pre("work", adds("c2")),
            bus.post("work", last("C")),
            bus.exception("work", lambda ctx: None),
        ),
        ("d", "D"): lambda: (bus.around("work", around), bus.post("work", last("D"))),
    }
    snapshots = []
    for register in plans.values():
        register()
        snapshots.append(bus.registry.snapshot())
        bus.clear()
    stop = threading.Event()
    errors: List[BaseException] = []
    shapes = set()

    def swap() -> None:
        swaps, deadline = 0, time.monotonic() + 30
        try:
            while swaps < 400 and time.monotonic() < deadline:
                bus.registry.restore(snapshots[swaps % len(snapshots)])
                swaps += 1
                calls = len(seen)
                while len(seen) < calls + 3 and time.monotonic() < deadline:
                    time.sleep(0)  # some calls run under this plan, some across the swap
                shapes.add(work.__code__.co_filename)
        finally:
            stop.set()

    _run_against_swaps(swap, work, stop, errors)
    assert len(seen) >= 1_200, "the callers made too few calls in 30 s"
    assert set(seen) == set(plans), set(seen) - set(plans)  # each call ran one plan, whole
    compiled = {name for name in shapes if name.startswith("<hookbus compiled call")}
    assert len(compiled) >= 2, shapes  # the function ran the code of several shapes


def test_a_kept_plan_runs_in_the_function_the_user_holds() -> None:
    bus = EventBus()

    @bus.hookable("load")
    def load(path: str, mode: str = "r") -> str:
        return path

    held = load
    signature = inspect.signature(load)

    @load.post
    def check(ctx: CallContext) -> None:
        if ctx.args == ("bad",):
            raise ValueError("bad file")

    assert [load("a"), load("b")] == ["a", "b"]  # the reference, then compiled
    point: HookPoint = load.__hookbus_point__  # type: ignore[attr-defined]
    plan = point.plan
    assert plan is not None
    with mock.patch.object(plan, "run", side_effect=AssertionError("a second frame ran")):
        assert load("c") == "c"  # the function held runs the call itself
        with pytest.raises(ValueError, match="bad file") as raised:
            load("bad")
    frames = [frame.f_code for frame, _ in traceback.walk_tb(raised.tb)]
    assert [code.co_name for code in frames[1:]] == ["call_point", "check"]
    assert frames[1].co_filename == "<hookbus compiled call: 0 pre, 1 post>"
    assert "returned = post_0(ctx)" in "".join(traceback.format_tb(raised.tb))
    # Still the same object, with what functools.wraps gave it.
    assert load is held
    assert load.__name__ == "load"
    assert load.__wrapped__ is not None  # type: ignore[attr-defined]
    assert inspect.signature(load) == signature
    assert load.__hookbus_point__ is point  # type: ignore[attr-defined]
    assert "def make_wrapper(call, point):" in point.explain()
    # No hooks left: the function gets its small first code back (a frame of three
    # locals, not the shape's dozen), and calls straight through.
    bus.clear()
    assert load("d") == "d"
    assert point.plan is None
    assert load.__code__.co_nlocals == 3  # type: ignore[attr-defined]


def test_the_compiled_context_is_the_one_call_context_init_builds() -> None:
    bus = EventBus()
    contexts: List[CallContext] = []

    @bus.hookable("work")
    def work(x: int, *, tag: str = "") -> int:
        return x

    slots = [s for s in CallContext.__slots__ if s != "__weakref__"]
    fields: List[Dict[str, Any]] = []

    def pre(ctx: CallContext) -> None:
        fields.append({s: getattr(ctx, s) for s in slots})
        contexts.append(ctx)

    bus.pre("work", pre)
    with compiled_from_the_first_call():
        work(3, tag="t")
    (ctx,) = contexts
    target = work.__wrapped__  # type: ignore[attr-defined]
    built = CallContext("work", target, (3,), {"tag": "t"}, 0, "pre", ctx._point)
    assert fields == [{s: getattr(built, s) for s in slots}]
    assert type(ctx) is CallContext


# --- the post phase alone, as an adapter runs it after its framework's call ------------

post_phases = st.lists(
    st.sampled_from(("none", "value", "raise", "replace", "interrupt")), max_size=10
)


def _post_outcome(
    behaviours: List[str], compiled: bool, native: bool = False
) -> Tuple[List[Any], Any, Any]:
    """Run one post phase, generated (as ``compile_post_phase`` or ``native_post_hook``
    make it) or by ``run_phase``: what the hooks saw, the result left, and the error
    raised with its notes."""
    import itertools

    from hookbus import adapter

    bus = EventBus()
    log: List[Any] = []

    def make(index: int, behaviour: str) -> Callable[..., Any]:
        def hook(ctx: CallContext) -> Any:
            log.append(
                (index, ctx.name, ctx.phase, ctx.args, ctx.kwargs, ctx.result, ctx.call_index)
            )
            if behaviour == "value":
                return index
            if behaviour == "raise":
                raise ValueError(f"hook {index}")
            if behaviour == "replace":
                ctx.result = [*ctx.result, index]
            if behaviour == "interrupt":
                raise Interrupt(f"hook {index}")
            return None

        hook.__qualname__ = f"hook{index}"
        return hook

    hooks = tuple(make(i, b) for i, b in enumerate(behaviours))
    handles = tuple(adapter.Handle.plain(bus.registry, "post", "job", h) for h in hooks)
    counter = itertools.count(5)
    output: List[int] = []
    result: Any = None
    error: Any = None
    try:
        run = adapter.compile_post_phase(hooks, handles, name="job", counter=counter)
        native_hook = adapter.native_post_hook(len(hooks))
        if native and native_hook is not None:
            owner = _NativeOwner(
                adapter.native_post_plan(hooks, handles, name="job", counter=counter)
            )
            returned = types.MethodType(native_hook, owner)("target", (1,), {"k": 2}, output)
            result = output if returned is None else returned
            assert owner.replaced == ([] if returned is None else [(output, returned)])
        elif compiled and run is not None:
            result = run(None, "target", (1,), {"k": 2}, output)
        else:
            ctx = CallContext.for_call("job", "target", (1,), {"k": 2}, next(counter), "post")
            ctx.result = output
            adapter.run_phase(bus.registry, handles, ctx)
            result = ctx.result
    except (ValueError, TypeError, Interrupt) as raised:
        error = (type(raised), str(raised), getattr(raised, "__notes__", []))
    return log, result, error


@settings(max_examples=200)
@given(post_phases)
def test_a_compiled_post_phase_does_what_run_phase_does(behaviours: List[str]) -> None:
    assert _post_outcome(behaviours, compiled=True) == _post_outcome(behaviours, compiled=False)


def test_a_compiled_post_phase_numbers_calls_from_its_counter_and_raises_when_it_ends() -> None:
    from hookbus import adapter

    bus = EventBus()
    seen: List[int] = []

    def hook(ctx: CallContext) -> None:
        seen.append(ctx.call_index)

    handle = adapter.Handle.plain(bus.registry, "post", "job", hook)
    run = adapter.compile_post_phase((hook,), (handle,), name="job", counter=iter([5, 6]))
    assert run is not None
    assert [run(None, None, (), {}, 0) for _ in range(2)] == [0, 0]
    assert seen == [5, 6]
    with pytest.raises(StopIteration):  # as next(counter) raises: no hook runs
        run(None, None, (), {}, 0)
    assert seen == [5, 6]


class _NativeOwner:
    """What a generated native post hook is bound to (``adapter.NativePostOwner``)."""

    def __init__(self, plan: Any) -> None:
        self.native_post = plan
        self.otherwise: List[Any] = []
        self.replaced: List[Any] = []

    def post_otherwise(self, target: Any, args: Any, kwargs: Any, result: Any) -> Any:
        self.otherwise.append((target, args, kwargs, result))
        return "otherwise"

    def post_replaced(self, result: Any, replaced: Any) -> Any:
        self.replaced.append((result, replaced))
        return replaced


@settings(max_examples=200)
@given(post_phases)
def test_a_native_post_hook_does_what_run_phase_does(behaviours: List[str]) -> None:
    assert _post_outcome(behaviours, compiled=True, native=True) == _post_outcome(
        behaviours, compiled=False
    )


@pytest.mark.parametrize("count", [1, 3])
def test_a_native_post_hook_leaves_what_it_cannot_run_to_its_owner_unrun(count: int) -> None:
    import itertools

    from hookbus import adapter

    bus = EventBus()
    ran: List[int] = []
    hooks = tuple((lambda ctx, i=i: ran.append(i)) for i in range(count))
    handles = tuple(adapter.Handle.plain(bus.registry, "post", "job", h) for h in hooks)
    native_hook = adapter.native_post_hook(count)
    assert native_hook is not None
    owner = _NativeOwner(None)  # no plan
    hook = types.MethodType(native_hook, owner)
    assert hook("target", (1,), {}, "out") == "otherwise"
    # A plan of another shape (it changed since the framework read the function).
    owner.native_post = adapter.native_post_plan(
        hooks + hooks, handles + handles, name="job", counter=itertools.count()
    )
    assert hook("target", (1,), {}, "out") == "otherwise"
    owner.native_post = adapter.native_post_plan(
        hooks, handles, name="job", counter=itertools.count()
    )
    try:
        raise RuntimeError("being handled")
    except RuntimeError:  # the framework calling from its error path, say
        assert hook("target", (2,), {}, "out") == "otherwise"
    assert ran == []
    assert owner.otherwise == [("target", (1,), {}, "out")] * 2 + [("target", (2,), {}, "out")]
    assert hook("target", (3,), {}, "out") is None  # the result left as it was
    assert ran == list(range(count))
    assert adapter.native_post_hook(count) is native_hook  # one function per shape
    assert adapter.native_post_hook(_compiled_call.MAX_HOOKS + 1) is None


def test_a_pickled_native_post_hook_comes_back_as_its_owners_post_otherwise() -> None:
    from hookbus import adapter

    native_hook = adapter.native_post_hook(1)
    assert native_hook is not None
    owner = _PicklableOwner()
    copied = pickle.loads(pickle.dumps(types.MethodType(native_hook, owner)))
    assert copied.__func__ is _PicklableOwner.post_otherwise
    assert copied("target", (), {}, "out") == "otherwise"


class _PicklableOwner:
    native_post = None

    def post_otherwise(self, target: Any, args: Any, kwargs: Any, result: Any) -> Any:
        return "otherwise"

    def post_replaced(self, result: Any, replaced: Any) -> Any:
        return replaced


def test_a_post_phase_longer_than_the_generated_ones_is_left_to_run_phase() -> None:
    from hookbus import adapter

    bus = EventBus()
    hooks = tuple((lambda ctx: None) for _ in range(_compiled_call.MAX_HOOKS + 1))
    handles = tuple(adapter.Handle.plain(bus.registry, "post", "job", h) for h in hooks)
    assert adapter.compile_post_phase(hooks, handles, name="job", counter=iter(())) is None
    run = adapter.compile_post_phase(hooks[:-1], handles[:-1], name="job", counter=iter((0,)))
    assert run is not None
    assert run(None, None, (), {}, "out") == "out"


def test_a_traceback_through_a_compiled_post_phase_shows_its_lines() -> None:
    import itertools

    from hookbus import adapter

    bus = EventBus()

    def fails(ctx: CallContext) -> None:
        raise ValueError("boom")

    handle = adapter.Handle.plain(bus.registry, "post", "job", fails)
    run = adapter.compile_post_phase((fails,), (handle,), name="job", counter=itertools.count())
    assert run is not None
    with pytest.raises(ValueError, match="boom") as raised:
        run(None, None, (), {}, 1)
    text = "".join(traceback.format_exception(raised.type, raised.value, raised.tb))
    assert "<hookbus compiled post phase: 1 post>" in text
    assert "returned = post_0(ctx)" in text


def test_the_compiled_post_context_is_the_one_call_context_init_builds() -> None:
    import itertools

    from hookbus import adapter

    bus = EventBus()
    slots = [s for s in CallContext.__slots__ if s != "__weakref__"]
    fields: List[Dict[str, Any]] = []

    def post(ctx: CallContext) -> None:
        fields.append({s: getattr(ctx, s) for s in slots})

    point = object()
    handle = adapter.Handle.plain(bus.registry, "post", "job", post)
    run = adapter.compile_post_phase((post,), (handle,), name="job", counter=itertools.count(3))
    assert run is not None
    run(point, "target", (1,), {"k": 2}, "out")
    built = CallContext("job", "target", (1,), {"k": 2}, 3, "post", point)
    built.result = "out"
    assert fields == [{s: getattr(built, s) for s in slots}]
