"""Timing: every case measured in rounds, interleaved with all the others, in one process.

A case is a statement (timeit style) and the names it uses. Each case is compiled
into its own loop that binds those names as locals and repeats the statement
``UNROLL`` times per iteration, so loop overhead is a fraction of a nanosecond.
Each round runs every case once, for about ``sample_s`` seconds, with the
garbage collector off (as ``timeit`` does), in a shuffled order that keeps the
cases of one group (those compared with each other) together. A ratio is taken
within a round (case time / its floor's time in the same round) and the table
reports the median and the min-max of those per-round ratios: on a noisy machine
that pairs measurements taken a few milliseconds apart.
"""

from __future__ import annotations

import gc
import itertools
import random
import statistics
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

UNROLL = 10

# The clock: this thread's CPU time by default, so that time spent descheduled
# while other processes run (the main noise on a shared machine) is not counted;
# wall time with --clock wall. Torch runs on this thread (set_num_threads(1)).
CLOCKS: Dict[str, Callable[[], float]] = {"cpu": time.thread_time, "wall": time.perf_counter}
clock: Callable[[], float] = CLOCKS["cpu"]


class Case:
    """One timed statement: ``stmt`` run with the names in ``ns`` as locals."""

    def __init__(
        self,
        key: str,
        stmt: str,
        ns: Dict[str, Any],
        *,
        setup: Optional[Callable[[], None]] = None,
    ) -> None:
        self.key = key
        self.stmt = stmt
        self.ns = ns
        self.setup = setup
        self.number = 1
        self.samples: List[float] = []  # seconds per statement, one per round
        self._loop = _compile(stmt, ns)

    def run(self, number: int) -> float:
        """Seconds per statement over ``number`` x UNROLL executions."""
        if self.setup is not None:
            self.setup()
        enabled = gc.isenabled()
        gc.disable()
        try:
            elapsed = self._loop(itertools.repeat(None, number), clock)
        finally:
            if enabled:
                gc.enable()
        return float(elapsed) / (number * UNROLL)


def _compile(stmt: str, ns: Dict[str, Any]) -> Callable[..., float]:
    names = sorted(ns)
    for name in names:
        if not name.isidentifier() or name.startswith("_"):
            raise ValueError(f"bad local name {name!r} for statement {stmt!r}")
    bind = "".join(f"    {name} = _ns[{name!r}]\n" for name in names)
    body = "".join(f"        {stmt}\n" for _ in range(UNROLL))
    source = (
        "def _make(_ns):\n"
        "  def _loop(_it, _timer):\n"
        f"{bind}"
        "    _t0 = _timer()\n"
        "    for _ in _it:\n"
        f"{body}"
        "    return _timer() - _t0\n"
        "  return _loop\n"
    )
    # The names are bound as locals of _loop, so the statement reads fast locals,
    # as a user's own function would.
    space: Dict[str, Any] = {}
    exec(compile(source, f"<case {stmt!r}>", "exec"), space)
    return space["_make"](ns)  # type: ignore[no-any-return]


def calibrate(case: Case, sample_s: float) -> None:
    """Pick ``case.number`` so that one sample lasts about ``sample_s``."""
    number = 1
    while True:
        elapsed = case.run(number) * number * UNROLL
        if elapsed >= sample_s / 4 or number >= 1 << 24:
            break
        number *= 4
    case.number = max(1, int(number * sample_s / max(elapsed, 1e-9)))


def run_rounds(
    cases: Sequence[Case],
    *,
    rounds: int,
    sample_s: float,
    seed: int = 0,
    progress: Optional[Callable[[int], None]] = None,
) -> None:
    """Calibrate every case, then run ``rounds`` rounds, each case once per round."""
    for case in cases:
        case.run(1)  # warm up (specialisation, caches) before calibrating
        calibrate(case, sample_s)
    by_key = {case.key: case for case in cases}
    for index, order in enumerate(schedule(list(by_key), rounds=rounds, seed=seed)):
        for key in order:
            case = by_key[key]
            case.samples.append(case.run(case.number))
        if progress is not None:
            progress(index + 1)


def schedule(keys: Sequence[str], *, rounds: int, seed: int = 0) -> Iterator[List[str]]:
    """The order of the case keys in each of ``rounds`` rounds.

    Cases compared with each other (one group: the part of the key before "/") run
    next to each other, so that their ratio pairs samples taken within a few tens of
    milliseconds; groups, and cases within a group, run in a new random order each
    round.
    """
    shuffler = random.Random(seed)
    groups: Dict[str, List[str]] = {}
    for key in keys:
        groups.setdefault(key.split("/", 1)[0], []).append(key)
    order = list(groups.values())
    for _ in range(rounds):
        shuffler.shuffle(order)
        for group in order:
            shuffler.shuffle(group)
        yield [key for group in order for key in group]


class Stat:
    """Median and min-max of a list of values."""

    def __init__(self, values: Sequence[float]) -> None:
        self.median = statistics.median(values)
        self.low = min(values)
        self.high = max(values)


def ratio(case: Case, floor: Case) -> Stat:
    """The per-round ratios of ``case`` to ``floor``."""
    return Stat([a / b for a, b in zip(case.samples, floor.samples)])


def absolute(case: Case) -> Stat:
    """The per-round times of ``case``, in nanoseconds."""
    return Stat([value * 1e9 for value in case.samples])
