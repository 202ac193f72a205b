"""Where the time of ``bus.on(...)`` + ``handle.remove()`` goes, step by step.

A line profiler adds more per line (~80 ns) than most of these lines cost, so
this times each step on its own instead, interleaved in rounds like run.py, as a
ratio to the same list floor. The steps are the irreducible work of any design
that returns a removable handle and is thread-safe: two Python calls, one
object, a lock taken twice, a bucket updated and a cached plan dropped, twice.

A second table times, the same way, what hookbus does beyond those steps on
the common path of ``Registry.register`` and ``Registry.unregister``: the checks
a user relies on, and the facade (``EventBus.on`` over the registry).

    python benchmarks/register_breakdown.py
"""

from __future__ import annotations

import contextvars
import itertools
import os
import sys
import threading
from inspect import CO_COROUTINE
from types import FunctionType
from typing import List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness
from _harness import Case, absolute, ratio, run_rounds

import hookbus
from hookbus._handle import Handle
from hookbus._mutex import Mutex


def listener(x: object) -> None:
    return None


class Minimal:
    """Only the irreducible steps, in one register and one remove: the design's floor.

    No checks at all (name, callable, sync or async, options, open scopes,
    ordering): what any thread-safe registry returning a removable handle does.
    """

    def __init__(self, bus: hookbus.EventBus) -> None:
        self.bus = bus
        self.lock = threading.Lock()
        self.buckets: dict = {}
        self.plans: dict = {}

    def on(self, event: str, hook: object, /) -> Handle:
        handle = Handle.plain(self.bus.registry, "event", event, hook)  # type: ignore[arg-type]
        lock = self.lock
        lock.acquire()
        try:
            bucket = self.buckets.get(event)
            if bucket is None:
                self.buckets[event] = [handle]
            else:
                bucket.append(handle)
            handle._registered = True
            self.plans.pop(event, None)
        finally:
            lock.release()
        return handle

    def remove(self, handle: Handle) -> None:
        lock = self.lock
        lock.acquire()
        try:
            if handle._registered:
                handle._registered = False
                bucket = self.buckets[handle.name]
                bucket.remove(handle)
                if not bucket:
                    del self.buckets[handle.name]
                self.plans.pop(handle.name, None)
        finally:
            lock.release()


class Entry:
    """A method with hookbus.on's signature that does nothing."""

    def on(self, event: str, hook: object = None, /, **options: object) -> None:
        return None

    def remove(self) -> None:
        return None


def main() -> None:
    bus = hookbus.EventBus()
    bus.on("e", listener).remove()  # the name is checked and cached once
    lock = threading.Lock()
    mutex = Mutex()
    buckets: dict = {}
    plans = {"e": ()}
    handle = bus.on("e", listener)
    handle.remove()
    pops = "p.pop('e', None); p.pop('e', None)"
    steps = [
        ("floor: list.append + list.remove", "items.append(f); items.remove(f)", {"items": []}),
        ("2 calls: on(event, hook) + remove()", "entry.on('e', f); entry.remove()",
         {"entry": Entry()}),
        ("the handle object (Handle.plain)", "new(bus, 'event', 'e', f, False, None)",
         {"new": Handle.plain, "bus": bus.registry}),
        ("lock acquire + release, twice", "acquire(); release(); acquire(); release()",
         {"acquire": lock.acquire, "release": lock.release}),
        ("  hookbus's bus lock (a Mutex), its token taken + given back inline, twice",
         "free.pop(); free.append(True); m.waiting; free.pop(); free.append(True); m.waiting",
         {"free": mutex.free, "m": mutex}),
        ("bucket: insert list, then remove + delete", "b[k] = [f]; b[k].remove(f); del b[k]",
         {"b": buckets, "k": ("event", "e")}),
        ("plan cache dropped, twice (2 dict pops)", pops, {"p": plans}),
        ("remove() of a removed handle (call + check)", "handle.remove()", {"handle": handle}),
        ("all of the above in one on() + remove(), no checks",
         "minimal.remove(minimal.on('e', f))",
         {"minimal": Minimal(bus)}),
        ("hookbus: bus.on(...) + handle.remove()", "bus.on('e', f).remove()", {"bus": bus}),
    ]  # fmt: skip
    registry = bus.registry
    scopes: contextvars.ContextVar[tuple] = contextvars.ContextVar("scopes", default=())
    checks = [
        ("facade: bus.on -> registry.register, handle.remove -> registry.unregister",
         "bus.on('e', f).remove()", {"bus": bus}),
        ("  the same, registry.register + registry.unregister called directly",
         "registry.unregister(registry.register('event', 'e', f, o))",
         {"registry": registry, "o": {}}),
        ("name checked (its cached matcher looked up)", "names['e']", {"names": {"e": None}}),
        ("sync or async, from a function's code flags",
         "f.__class__ is FT and f.__code__.co_flags & CC != 0",
         {"FT": FunctionType, "CC": CO_COROUTINE}),
        ("rare cases ruled out: kind, pattern, specs, scope given or open",
         "k != 'event' or m is not None or c or s is not None or g()",
         {"k": "event", "m": None, "c": False, "s": None, "g": scopes.get}),
        ("registration order (a sequence number)", "next(seq)", {"seq": itertools.count()}),
        ("collect's handle cache dropped too (2 more pops)", pops, {"p": plans}),
    ]  # fmt: skip
    cases = [Case(label, stmt, dict(ns, f=listener)) for label, stmt, ns in steps + checks]
    _harness.clock = _harness.CLOCKS["cpu"]  # as run.py does by default
    run_rounds(cases, rounds=31, sample_s=0.005)
    floor = cases[0]
    design = cases[: len(steps)]
    table(design, floor, "sum of the steps above the floor", design[1:-2])
    print()
    print("What hookbus adds to the design's floor, each on its own:")
    print()
    whole, direct = cases[len(steps)], cases[len(steps) + 1]
    facade = ratio(whole, floor).median - ratio(direct, floor).median
    added = table(cases[len(steps) :], floor, "design floor + facade + the checks", [])
    added += facade + ratio(design[-2], floor).median
    print(f"| design floor + facade ({facade:.1f}x) + the checks | | {added:.1f}x |")


def table(cases: List[Case], floor: Case, total: str, summed: List[Case]) -> float:
    """Print the cases as a table; return the sum of the ratios of ``summed``, or of
    every case after the first two when ``summed`` is empty."""
    print("| Step | Median | Ratio to list floor |")
    print("|---|---:|---:|")
    parts = 0.0
    for case in cases:
        stat = ratio(case, floor)
        print(f"| {case.key} | {absolute(case).median:.1f} ns | {stat.median:.1f}x |")
    for case in summed or cases[2:]:
        parts += ratio(case, floor).median
    if summed:
        print(f"| {total} | | {parts:.1f}x |")
    return parts


if __name__ == "__main__":
    main()
