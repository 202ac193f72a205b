"""Thread safety under stress: emitters racing registration, removal, once-hooks and scopes.

The stress test stamps every registration, removal and emission with a shared
logical clock, and every hook records which emission called it. Afterwards the
records are checked against the guarantees of ``docs/guarantees.md``:

* no thread raised;
* a hook registered before an emission began, and not removed before it ended,
  was called exactly once by that emission;
* no emission that began after a ``remove()`` returned called the removed hook;
* a ``once`` hook ran at most once in all (and exactly once when some emission
  surely saw it).

``HOOKBUS_STRESS_SECONDS`` sets how long the threads run (default 3).
"""

from __future__ import annotations

import bisect
import fnmatch
import os
import random
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

from hookbus import CallContext, EventBus, Handle
from hookbus._plan import PointPlan

DURATION = float(os.environ.get("HOOKBUS_STRESS_SECONDS", "3"))
EMITTERS = 8
MUTATORS = 4

EVENTS = ("job.start", "job.end", "tick")
EVENT_PATTERNS = ("job.*", "*", "t?ck", "*.end")
POINT = "work.step"
POINT_PATTERNS = ("work.*", "*")


class Clock:
    """A logical clock: every tick is unique and ordered across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._now = 0

    def tick(self) -> int:
        with self._lock:
            self._now += 1
            return self._now


class HookRecord:
    """One registration: what it was registered for, and when it came and went."""

    def __init__(self, hook_id: int, kind: str, name: str, priority: int, once: bool) -> None:
        self.hook_id = hook_id
        self.kind = kind  # "event", "pre" or "post"
        self.name = name
        self.priority = priority
        self.once = once
        self.target: Optional[object] = None
        self.reg_begin = 0
        self.reg_end = 0
        self.rm_begin: Optional[int] = None
        self.rm_end: Optional[int] = None
        self.handle: Optional[Handle] = None

    def matches(self, emission: Emission) -> bool:
        if emission.via == "call":
            if self.kind not in ("pre", "post"):
                return False
        elif self.kind != "event":
            return False
        if self.target is not None and self.target is not emission.sender:
            return False
        return fnmatch.fnmatchcase(emission.name, self.name)

    def surely_live_during(self, emission: Emission) -> bool:
        """Registered before it began, and not removed before it ended."""
        return self.reg_end < emission.begin and (
            self.rm_begin is None or self.rm_begin > emission.end
        )


class Emission:
    """One emit, collect or hook-point call, and the hooks it called."""

    def __init__(self, via: str, name: str, sender: object) -> None:
        self.via = via  # "emit", "collect" or "call"
        self.name = name
        self.sender = sender
        self.begin = 0
        self.end = 0
        self.called: List[int] = []  # hook ids, in call order
        self.results: Optional[List[Any]] = None


class Stress:
    """The shared state of one stress run."""

    def __init__(self, bus: EventBus) -> None:
        self.bus = bus
        self.clock = Clock()
        self.hooks: List[HookRecord] = []
        self.emissions: List[Emission] = []
        self.errors: List[BaseException] = []
        self.senders = (object(), object())
        self._ids = iter(range(10**9))
        self._ids_lock = threading.Lock()
        self.stop = threading.Event()

    def new_record(self, kind: str, name: str, priority: int, once: bool) -> HookRecord:
        with self._ids_lock:
            record = HookRecord(next(self._ids), kind, name, priority, once)
            self.hooks.append(record)
        return record


def make_event_hook(hook_id: int) -> Callable[[object, Emission], int]:
    def hook(sender: object, emission: Emission) -> int:
        emission.called.append(hook_id)  # only this emission's thread appends here
        return hook_id

    return hook


def make_point_hook(hook_id: int) -> Callable[[CallContext], None]:
    def hook(ctx: CallContext) -> None:
        ctx.args[1].called.append(hook_id)

    return hook


def emitter(stress: Stress, seed: int) -> None:
    rng = random.Random(seed)
    bus = stress.bus

    @bus.hookable(POINT)
    def step(sender: object, emission: Emission) -> int:
        return len(emission.called)

    try:
        while not stress.stop.is_set():
            via = rng.choice(("emit", "emit", "collect", "call"))
            name = POINT if via == "call" else rng.choice(EVENTS)
            emission = Emission(via, name, rng.choice(stress.senders))
            emission.begin = stress.clock.tick()
            if via == "emit":
                bus.emit(name, emission.sender, emission)
            elif via == "collect":
                emission.results = bus.collect(name, emission.sender, emission)
            else:
                step(emission.sender, emission)
            emission.end = stress.clock.tick()
            stress.emissions.append(emission)
            time.sleep(0)  # 8 emitters would otherwise starve the 4 mutators
    except BaseException as error:
        stress.errors.append(error)
        stress.stop.set()


def register(stress: Stress, rng: random.Random, *, once: bool = False) -> HookRecord:
    """Register one random hook (event, or pre/post on the hook point), stamped."""
    bus = stress.bus
    kind = rng.choice(("event", "event", "event", "pre", "post"))
    if kind == "event":
        name = rng.choice(EVENTS + EVENT_PATTERNS)
    else:
        name = rng.choice((POINT, *POINT_PATTERNS))
    record = stress.new_record(kind, name, rng.choice((-5, 0, 0, 5)), once)
    target = rng.choice(stress.senders) if kind == "event" and rng.random() < 0.2 else None
    record.target = target
    if kind == "event":
        hook: Any = make_event_hook(record.hook_id)
    else:
        hook = make_point_hook(record.hook_id)
    record.reg_begin = stress.clock.tick()
    if kind == "event":
        record.handle = bus.on(name, hook, priority=record.priority, once=once, target=target)
    else:
        method = bus.pre if kind == "pre" else bus.post
        record.handle = method(name, hook, priority=record.priority, once=once)
    record.reg_end = stress.clock.tick()
    return record


def remove(stress: Stress, record: HookRecord) -> None:
    assert record.handle is not None
    record.rm_begin = stress.clock.tick()
    record.handle.remove()
    record.rm_end = stress.clock.tick()


def mutator(stress: Stress, seed: int) -> None:
    rng = random.Random(seed)
    live: List[HookRecord] = []
    try:
        while not stress.stop.is_set():
            action = rng.random()
            if action < 0.45 or not live:
                live.append(register(stress, rng, once=rng.random() < 0.25))
            elif action < 0.85:
                remove(stress, live.pop(rng.randrange(len(live))))
            else:
                with stress.bus.scope():
                    scoped = [register(stress, rng, once=rng.random() < 0.25) for _ in range(3)]
                    time.sleep(0)  # let the emitters see them
                    begin = stress.clock.tick()
                for record in scoped:
                    record.rm_begin = begin
                    record.rm_end = stress.clock.tick()
            while len(live) > 8:
                remove(stress, live.pop(0))
        for record in live:
            remove(stress, record)
    except BaseException as error:
        stress.errors.append(error)
        stress.stop.set()


def run_threads(targets: List[Callable[[], None]], stop: threading.Event) -> None:
    threads = [threading.Thread(target=target, daemon=True) for target in targets]
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, to make races likely
    try:
        for thread in threads:
            thread.start()
        time.sleep(DURATION)
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        stop.set()
        sys.setswitchinterval(old_interval)
    assert not [thread for thread in threads if thread.is_alive()], "a thread hung"


def surely_live(stress: Stress) -> Iterator[Tuple[Emission, List[HookRecord]]]:
    """Each emission, with the hooks that were surely live throughout it (a sweep)."""
    by_reg = sorted(stress.hooks, key=lambda record: record.reg_end)
    live: Dict[int, HookRecord] = {}
    i = 0
    for emission in sorted(stress.emissions, key=lambda e: e.begin):
        while i < len(by_reg) and by_reg[i].reg_end < emission.begin:
            live[by_reg[i].hook_id] = by_reg[i]
            i += 1
        for hook_id in [h for h, r in live.items() if r.rm_begin is not None]:
            if live[hook_id].rm_begin < emission.begin:  # type: ignore[operator]
                del live[hook_id]
        yield emission, [r for r in live.values() if r.surely_live_during(emission)]


def check_guarantees(stress: Stress) -> Dict[str, int]:
    hooks = {record.hook_id: record for record in stress.hooks}
    once_calls: Dict[int, int] = {}
    once_surely_seen = set()
    checked = 0
    for emission, live in surely_live(stress):
        called = emission.called
        # each hook at most once per emission, and only hooks that apply to it
        assert len(called) == len(set(called)), (emission.name, called)
        for hook_id in called:
            record = hooks[hook_id]
            assert record.matches(emission), (record.name, record.kind, emission.name)
            assert record.reg_begin < emission.end, "called before it was registered"
            if record.rm_end is not None:
                assert record.rm_end > emission.begin, (
                    f"hook {record.name!r} ran in an emission that began after remove() returned"
                )
            if record.once:
                once_calls[hook_id] = once_calls.get(hook_id, 0) + 1
        # every surely-live hook exactly once (a once hook: by this or another emission)
        for record in live:
            if record.matches(emission):
                if record.once:
                    once_surely_seen.add(record.hook_id)
                    continue
                checked += 1
                assert called.count(record.hook_id) == 1, (
                    f"hook {record.hook_id} on {record.name!r} ({record.kind}) missed by "
                    f"{emission.via} of {emission.name!r}"
                )
        # in order: higher priority first (pre before post at a hook point)
        if emission.via != "call":
            priorities = [hooks[h].priority for h in called]
            assert priorities == sorted(priorities, reverse=True), priorities
        if emission.results is not None:
            assert emission.results == called
    # a once hook at most once in all; exactly once if some emission surely saw it
    assert all(count == 1 for count in once_calls.values()), once_calls
    missed = [h for h in once_surely_seen if h not in once_calls]
    assert not missed, f"once hooks never run although surely live: {missed}"
    return {
        "emissions": len(stress.emissions),
        "registrations": len(stress.hooks),
        "exactly-once checks": checked,
        "once hooks run": len(once_calls),
    }


def test_stress_emitters_against_registration_removal_once_and_scopes() -> None:
    bus = EventBus("stress")
    stress = Stress(bus)
    seeds = random.Random().randrange(10**6)
    targets: List[Callable[[], None]] = [
        lambda i=i: emitter(stress, seeds + i) for i in range(EMITTERS)
    ]
    targets += [lambda i=i: mutator(stress, seeds + 100 + i) for i in range(MUTATORS)]
    started = time.perf_counter()
    run_threads(targets, stress.stop)
    elapsed = time.perf_counter() - started
    assert not stress.errors, stress.errors
    figures = check_guarantees(stress)
    print(f"\nstress: {elapsed:.1f} s, seed {seeds}, {figures}")
    assert figures["emissions"] > 100 * EMITTERS  # the run did real work
    assert figures["exactly-once checks"] > 0
    # every mutator removed what it registered: the bus is empty and still works
    assert bus.hooks() == []
    assert bus.events() == []
    bus.on("tick", lambda sender, emission: emission.called.append(-1))
    last = Emission("emit", "tick", None)
    bus.emit("tick", None, last)
    assert last.called == [-1]


def test_traces_opened_and_closed_in_many_threads_each_record_their_own_window() -> None:
    """Each thread opens and closes traces while the others do: overlap in every order.

    A trace must record its own thread's emissions made while it was open, exactly
    once each, and none of those made before it opened or after it closed (other
    threads' emissions may fall in its window). After the last one closes, nothing
    records.
    """
    bus = EventBus()
    bus.on("t.*", lambda: None)
    stop = threading.Event()
    errors: List[BaseException] = []
    traces: List[Tuple[int, int, Any]] = []

    def tracer(thread_id: int) -> None:
        try:
            round_ = 0
            while not stop.is_set():
                round_ += 1
                bus.emit(f"t.{thread_id}.{round_}.before")
                with bus.trace() as trace:
                    bus.emit(f"t.{thread_id}.{round_}.inside")
                    bus.emit(f"t.{thread_id}.{round_}.inside-again")
                bus.emit(f"t.{thread_id}.{round_}.after")
                traces.append((thread_id, round_, trace))
        except BaseException as error:
            errors.append(error)
            stop.set()

    run_threads([lambda i=i: tracer(i) for i in range(6)], stop)
    assert not errors, errors
    assert len(traces) > 60, f"only {len(traces)} traces"
    for thread_id, round_, trace in traces:
        own = [r.name for r in trace.records if r.name.startswith(f"t.{thread_id}.")]
        assert own == [f"t.{thread_id}.{round_}.inside", f"t.{thread_id}.{round_}.inside-again"]
    counts = [len(trace.records) for _, _, trace in traces]
    bus.emit("t.final")
    assert [len(trace.records) for _, _, trace in traces] == counts
    assert bus.registry.event_plans["t.final"].__class__ is tuple  # back on the fast path


def test_a_plan_followed_by_hooks_added_and_removed_in_many_threads_ends_as_the_hooks_are() -> (
    None
):
    # Each thread adds and removes its own plain hooks at one point while others call
    # it: each change takes the plan that follows from the last (under the bus lock),
    # racing the calls that work a plan out. Once all stop, the plan kept is the one the
    # registry works out, and a call runs exactly the hooks left.
    bus = EventBus()
    step = bus.wrap(lambda: None, "step")
    point = step.__hookbus_point__  # type: ignore[attr-defined]
    ran: List[int] = []
    left = [bus.post("step", lambda ctx: ran.append(-1))]
    stop = time.monotonic() + min(DURATION, 1.0)
    errors: List[BaseException] = []

    def mutate(thread_id: int) -> None:
        try:
            hooks = [
                lambda ctx, i=thread_id * 10 + n: ran.append(i) for n in range(3)
            ]  # one per slot, kept for the thread's life
            while time.monotonic() < stop:
                handles = [
                    getattr(bus, kind)("step", hook)
                    for kind, hook in zip(("pre", "post", "pre"), hooks)
                ]
                step()
                for handle in random.sample(handles, len(handles)):
                    handle.remove()
            left.append(bus.pre("step", hooks[0]))  # one hook each, left registered
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    def call() -> None:
        try:
            while time.monotonic() < stop:
                step()
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=mutate, args=(i,)) for i in range(4)]
    threads += [threading.Thread(target=call) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    kept = point.plan
    if kept is not None and kept.__class__ is PointPlan:
        expected = bus.registry.plan(point)
        assert expected is not None
        assert (kept.pre, kept.post, kept.pre_hooks, kept.post_hooks) == (
            expected.pre,
            expected.post,
            expected.pre_hooks,
            expected.post_hooks,
        )
    del ran[:]
    step()
    assert sorted(ran) == sorted([-1, *(thread_id * 10 for thread_id in range(4))])
    assert len(left) == 5


@pytest.mark.parametrize("kind", ["event", "pre"])
def test_once_hook_races_across_threads_and_runs_at_most_once(kind: str) -> None:
    bus = EventBus()

    @bus.hookable("point")
    def point() -> None:
        pass

    threads_n = 8
    rounds = 200
    for _ in range(rounds):
        calls: List[object] = []
        hook: Any = (lambda c=calls: c.append("called")) if kind == "event" else calls.append
        handle = (
            bus.on("e", hook, once=True) if kind == "event" else bus.pre("point", hook, once=True)
        )
        barrier = threading.Barrier(threads_n)

        def race(barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            if kind == "event":
                bus.emit("e")
            else:
                point()

        threads = [threading.Thread(target=race) for _ in range(threads_n)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert len(calls) == 1  # registered before all began, never removed: exactly once
        assert not handle.active
    assert bus.hooks() == []


@pytest.mark.torch
@pytest.mark.parametrize(
    "kinds",
    [
        pytest.param(("pre",), id="pre"),
        pytest.param(("post",), id="post"),
        pytest.param(("pre", "post"), id="pre+post"),
    ],
)
def test_torch_two_threads_forward_separate_models_on_one_bus(kinds: Tuple[str, ...]) -> None:
    torch = pytest.importorskip("torch")
    import hookbus.torch

    bus = EventBus("torch-stress")
    clock = Clock()
    models = []
    for i in range(2):
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))
        hookbus.torch.attach(model, bus, prefix=f"m{i}")
        models.append(model)
    module_names = [[f"m{i}", f"m{i}.0", f"m{i}.1", f"m{i}.2"] for i in range(2)]
    selectors = ("m0", "m1.0", "m0.2", "m0.*", "m1.*", "*.0", "m?.[12]", "*")
    hooks: List[HookRecord] = []
    forwards: List[Tuple[int, int, int, List[Tuple[int, str, str]]]] = []
    errors: List[BaseException] = []
    stop = threading.Event()
    current = threading.local()
    ids_lock = threading.Lock()

    def forward(model_index: int) -> None:
        try:
            x = torch.ones(2, 4)
            while not stop.is_set():
                current.calls = []
                begin = clock.tick()
                with torch.no_grad():
                    models[model_index](x)
                forwards.append((model_index, begin, clock.tick(), current.calls))
                time.sleep(0)
        except BaseException as error:
            errors.append(error)
            stop.set()

    def mutate(seed: int) -> None:
        rng = random.Random(seed)
        live: List[HookRecord] = []
        try:
            while not stop.is_set():
                if rng.random() < 0.5 or not live:
                    kind = rng.choice(kinds)
                    with ids_lock:
                        record = HookRecord(len(hooks), kind, rng.choice(selectors), 0, False)
                        record.once = rng.random() < 0.2
                        hooks.append(record)

                    def hook(ctx: CallContext, hook_id: int = record.hook_id) -> None:
                        current.calls.append((hook_id, ctx.name, ctx.phase))

                    record.reg_begin = clock.tick()
                    record.handle = getattr(bus, kind)(record.name, hook, once=record.once)
                    record.reg_end = clock.tick()
                    live.append(record)
                else:
                    remove_record(live.pop(rng.randrange(len(live))))
                while len(live) > 8:
                    remove_record(live.pop(0))
                time.sleep(0)
            for record in live:
                remove_record(record)
        except BaseException as error:
            errors.append(error)
            stop.set()

    def remove_record(record: HookRecord) -> None:
        assert record.handle is not None
        record.rm_begin = clock.tick()
        record.handle.remove()
        record.rm_end = clock.tick()

    targets: List[Callable[[], None]] = [lambda i=i: forward(i) for i in range(2)]
    targets += [lambda i=i: mutate(i) for i in range(2)]
    run_threads(targets, stop)
    assert not errors, errors
    # Hooks are numbered in registration order, and each mutator keeps at most a few
    # live: those surely live at a time t lie past the last removed before t.
    removed_by = sorted((r.rm_begin or 0, r.hook_id) for r in hooks)
    ends = [t for t, _ in removed_by]

    def first_live(t: int) -> int:
        i = bisect.bisect_left(ends, t)
        return max(0, min((h for _, h in removed_by[i:]), default=len(hooks)) - 1)

    once_calls: Dict[int, int] = {}
    checked = 0
    for model_index, begin, end, calls in forwards:
        names = module_names[model_index]
        for hook_id, name, phase in calls:
            record = hooks[hook_id]
            assert name in names
            assert phase == record.kind
            assert fnmatch.fnmatchcase(name, record.name)
            assert record.reg_begin < end
            assert record.rm_end is None or record.rm_end > begin
            if record.once:
                once_calls[hook_id] = once_calls.get(hook_id, 0) + 1
        for record in hooks[first_live(begin) :]:
            if record.reg_begin > end:
                break  # numbered in registration order: the rest came later still
            surely_live = record.reg_end < begin and (
                record.rm_begin is None or record.rm_begin > end
            )
            if not surely_live or record.once:
                continue
            for name in names:
                if fnmatch.fnmatchcase(name, record.name):
                    checked += 1
                    assert calls.count((record.hook_id, name, record.kind)) == 1
    assert all(count == 1 for count in once_calls.values())
    print(f"\ntorch stress: {len(forwards)} forwards, {len(hooks)} hooks, {checked} checks")
    assert len(forwards) > 20
    assert checked > 0
    assert bus.hooks() == []
