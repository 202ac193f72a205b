"""docs/migrating/pyee.md: each pyee program and its hookbus port print the same,
or the page lists the difference under "What still differs"."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

import pytest
from hypothesis import given
from hypothesis import strategies as st
from side_by_side import Pair, check, pairs, peer_code, require

import hookbus

require("pyee", "13")

from pyee import EventEmitter  # noqa: E402  (after require: skipped where pyee is missing)


@pytest.mark.parametrize("pair", pairs("pyee"), ids=lambda pair: pair.name)
def test_the_port_prints_what_pyee_prints_or_the_page_says_why(pair: Pair) -> None:
    check(pair, "pyee")


def test_the_page_maps_every_pyee_idiom() -> None:
    """What pyee's users rely on is each run by a section, next to its port."""
    code = peer_code("pyee")
    idioms = [
        ".on(",
        ".once(",
        ".emit(",
        ".remove_listener(",
        ".remove_all_listeners(",
        ".listeners(",
        '.emit("error"',
        "AsyncIOEventEmitter",
        "enum.Enum",
        "pickle.dumps(",
        "ExecutorEventEmitter",
        '"new_listener"',
    ]
    missing = [idiom for idiom in idioms if idiom not in code]
    assert not missing, f"the pyee page runs no {missing}"


# A program of pyee calls: add a handler (on or once), remove it, emit. Handlers are
# added only while not attached and removed only while attached: pyee ignores a second
# add and raises removing one it lacks, where hookbus refuses the add and ignores the
# removal (the page says so).
_STEPS = st.lists(
    st.tuples(st.sampled_from(["on", "once", "remove", "emit"]), st.integers(0, 3)),
    max_size=30,
)


@given(steps=_STEPS)
def test_on_once_remove_and_emit_call_what_pyee_calls_in_its_order(
    steps: List[Tuple[str, int]],
) -> None:
    calls: Dict[str, List[Tuple[int, int]]] = {"pyee": [], "hookbus": []}

    def handlers(log: List[Tuple[int, int]]) -> List[Callable[[int], None]]:
        return [lambda n, i=i: log.append((i, n)) for i in range(4)]

    pyee_handlers, bus_handlers = handlers(calls["pyee"]), handlers(calls["hookbus"])
    emitter, bus = EventEmitter(), hookbus.EventBus()
    handles: Dict[int, Any] = {}
    for number, (step, i) in enumerate(steps):
        attached = pyee_handlers[i] in emitter.listeners("data")
        assert attached == (i in handles and handles[i].active)
        if step in ("on", "once") and not attached:
            getattr(emitter, step)("data", pyee_handlers[i])
            handles[i] = bus.on("data", bus_handlers[i], once=step == "once")
        elif step == "remove" and attached:
            emitter.remove_listener("data", pyee_handlers[i])
            for handle in bus.handles_of(bus_handlers[i], "data"):
                handle.remove()
        elif step == "emit":
            emitter.emit("data", number)
            bus.emit("data", number)
    assert calls["hookbus"] == calls["pyee"]
