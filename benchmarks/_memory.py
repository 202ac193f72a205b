"""Row 4, memory: bytes per registered hook, and growth over register/remove cycles.

Measured with tracemalloc (which slows everything down, so it runs before the
timed rounds and is stopped after). The hook function itself is shared, so what
is counted is what the bus keeps per registration: the handle, its slot in the
name's list, and its share of the dispatch plan built at the first emit.
"""

from __future__ import annotations

import gc
import tracemalloc
from typing import Callable, Dict

import hookbus


def _traced(work: Callable[[], object]) -> int:
    """Bytes still allocated after ``work`` ran (its result kept alive), vs before."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = work()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        del kept
    finally:
        tracemalloc.stop()
    return after - before


def per_hook(count: int, *, distinct_events: bool) -> float:
    """Bytes per hook for ``count`` hooks, on one event or one event each."""

    def make() -> Callable[[object], None]:
        def listener(x: object) -> None:
            return None

        return listener

    # The names and hooks are the user's (made before tracing), not the bus's: one
    # listener each, since a callable is registered once per name.
    names = [f"event.{i}" if distinct_events else "event" for i in range(count)]
    listeners = [make() for _ in range(count)]

    def work() -> object:
        bus = hookbus.EventBus()
        handles = [bus.on(name, listener) for name, listener in zip(names, listeners)]
        for name in names if distinct_events else names[:1]:
            bus.emit(name, 1)  # build the dispatch plans
        return bus, handles

    empty = _traced(lambda: (hookbus.EventBus(), []))
    return (_traced(work) - empty) / count


def growth_after_cycles(cycles: int) -> int:
    """Bytes the bus holds after ``cycles`` register/remove cycles, beyond after 1,000."""

    def listener(x: object) -> None:
        return None

    bus = hookbus.EventBus()
    bus.on("other", listener)
    for _ in range(1_000):  # warm up: caches, plans, interned names
        bus.on("e", listener).remove()
        bus.emit("e", 1)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(cycles):
            bus.on("e", listener).remove()
            bus.emit("e", 1)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return after - before


def measure(*, quick: bool) -> Dict[str, float]:
    count = 1_000 if quick else 10_000
    cycles = 10_000 if quick else 100_000
    return {
        "memory/per hook, one event": per_hook(count, distinct_events=False),
        "memory/per hook, one event each": per_hook(count, distinct_events=True),
        "memory/cycles": float(growth_after_cycles(cycles)),
        "memory/cycle count": float(cycles),
    }
