"""docs/migrating/psygnal.md: each psygnal program and its hookbus port print the same,
or the page lists the difference under "What still differs"."""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Tuple

import pytest
from hypothesis import given
from hypothesis import strategies as st
from side_by_side import Pair, check, pairs, peer_code, require

import hookbus

require("psygnal", "0.16")

from psygnal import Signal  # noqa: E402  (after require: skipped where psygnal is missing)


@pytest.mark.parametrize("pair", pairs("psygnal"), ids=lambda pair: pair.name)
def test_the_port_prints_what_psygnal_prints_or_the_page_says_why(pair: Pair) -> None:
    check(pair, "psygnal")


def test_the_page_maps_every_psygnal_idiom() -> None:
    """What psygnal's users rely on is each run by a section, next to its port."""
    code = peer_code("psygnal")
    idioms = [
        "Signal(float)",
        ".connect(",
        "priority=",
        ".disconnect(",
        "@kitchen.changed.connect",
        ".blocked(",
        "gc.collect()",
        "SignalGroup",
        ".all.connect(",
    ]
    missing = [idiom for idiom in idioms if idiom not in code]
    assert not missing, f"the psygnal page runs no {missing}"


class _Thermometer:
    changed = Signal(float)


# A program of psygnal calls: connect a slot at a priority, disconnect it, emit. A slot is
# connected only while not connected: psygnal would connect it twice, hookbus refuses.
_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["connect", "disconnect", "emit"]),
        st.integers(0, 3),
        st.integers(-2, 2),
    ),
    max_size=30,
)


@given(steps=_STEPS)
def test_priorities_and_disconnects_call_what_psygnal_calls_in_its_order(
    steps: List[Tuple[str, int, int]],
) -> None:
    calls: Dict[str, List[Tuple[int, float]]] = {"psygnal": [], "hookbus": []}
    kitchen, garage = _Thermometer(), _Thermometer()
    bus = hookbus.EventBus()

    @bus.event
    def changed(thermometer: Any, value: float, /) -> None: ...

    def slots(log: List[Tuple[int, float]]) -> List[Any]:
        return [lambda value, i=i: log.append((i, value)) for i in range(4)]

    psygnal_slots, bus_slots = slots(calls["psygnal"]), slots(calls["hookbus"])
    handles: Dict[int, hookbus.Handle] = {}
    for number, (step, i, priority) in enumerate(steps):
        if step == "connect" and i not in handles:
            kitchen.changed.connect(psygnal_slots[i], priority=priority)
            handles[i] = bus.on("changed", bus_slots[i], target=kitchen, priority=priority)
        elif step == "disconnect" and i in handles:
            kitchen.changed.disconnect(psygnal_slots[i])
            handles.pop(i).remove()
        elif step == "emit":
            kitchen.changed.emit(float(number))
            garage.changed.emit(-1.0)  # another instance: no slot
            changed.emit(kitchen, float(number))
            changed.emit(garage, -1.0)
    assert calls["hookbus"] == calls["psygnal"]


def test_emissions_from_threads_reach_each_slot_once_each_in_its_thread() -> None:
    kitchen = _Thermometer()
    bus = hookbus.EventBus()

    @bus.event
    def changed(thermometer: Any, value: float, /) -> None: ...

    seen: Dict[str, List[Tuple[str, float]]] = {"psygnal": [], "hookbus": []}

    def slot(log: List[Tuple[str, float]]) -> Any:
        return lambda value: log.append((threading.current_thread().name, value))

    kitchen.changed.connect(slot(seen["psygnal"]))
    bus.on("changed", slot(seen["hookbus"]), target=kitchen)

    def emit_both(index: int) -> None:
        for _ in range(50):
            kitchen.changed.emit(float(index))
            changed.emit(kitchen, float(index))

    threads = [threading.Thread(target=emit_both, args=(i,), name=f"t{i}") for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    assert sorted(seen["hookbus"]) == sorted(seen["psygnal"])
    assert sorted(seen["hookbus"]) == sorted(
        (f"t{i}", float(i)) for i in range(4) for _ in range(50)
    )
