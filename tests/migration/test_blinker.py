"""docs/migrating/blinker.md: each blinker program and its hookbus port print the same,
or the page lists the difference under "What still differs"."""

from __future__ import annotations

import enum
from typing import Any, List

import pytest
from hypothesis import given
from hypothesis import strategies as st
from side_by_side import Pair, check, pairs, peer_code, require

import hookbus

require("blinker", "1.9")

import blinker  # noqa: E402  (after require: skipped whole where blinker is missing)


class _Mode(str, enum.Enum):
    TRAIN = "train"
    EVAL = "a"


class _Level(enum.IntEnum):
    ONE = 1
    TWO = 2


@pytest.mark.parametrize("pair", pairs("blinker"), ids=lambda pair: pair.name)
def test_the_port_prints_what_blinker_prints_or_the_page_says_why(pair: Pair) -> None:
    check(pair, "blinker")


def test_the_page_maps_every_blinker_idiom() -> None:
    """What blinker's users rely on is each run by a section, next to its port."""
    code = peer_code("blinker")
    idioms = [
        ".signal(",
        ".connect(",
        ".send(",
        ".disconnect(",
        "sender=",
        ".connected_to(",
        ".muted(",
        ".has_receivers_for(",
        ".receivers_for(",
        ".send_async(",
        "gc.collect()",
    ]
    missing = [idiom for idiom in idioms if idiom not in code]
    assert not missing, f"the blinker page runs no {missing}"


# Senders blinker keys by value (str and int, bool and enum members among them), and
# objects it keys by identity: a receiver for one hears another exactly when blinker's does.
_VALUE_SENDERS = st.one_of(
    st.text(max_size=3),
    st.integers(min_value=-3, max_value=3),
    st.integers(min_value=2**62, max_value=2**62 + 2),  # not cached: equal, other objects
    st.booleans(),
    st.sampled_from([*_Mode, *_Level]),
)


# blinker can't connect for sender 0 (or False): its id for "any sender" is 0.
@given(connected=_VALUE_SENDERS.filter(lambda sender: sender != 0), sent=_VALUE_SENDERS)
def test_a_str_or_int_target_hears_what_blinker_hears(connected: Any, sent: Any) -> None:
    signal = blinker.Signal()
    blinker_heard: List[Any] = []
    signal.connect(blinker_heard.append, sender=connected, weak=False)
    signal.send(sent)
    bus = hookbus.EventBus()
    heard: List[Any] = []
    handle = bus.on("sent", heard.append, target=connected)
    bus.emit("sent", sent)
    assert heard == blinker_heard
    assert handle.fires_for(sent) == bool(blinker_heard)


def test_an_object_target_hears_that_object_alone_as_blinker_does() -> None:
    class Editor:
        def __eq__(self, other: object) -> bool:  # equal to every Editor: never asked
            return isinstance(other, Editor)

        __hash__ = object.__hash__

    editor, other = Editor(), Editor()
    for sender in (editor, other, [1], (1,)):
        signal = blinker.Signal()
        blinker_heard: List[Any] = []
        signal.connect(blinker_heard.append, sender=editor, weak=False)
        signal.send(sender)
        bus = hookbus.EventBus()
        heard: List[Any] = []
        bus.on("sent", heard.append, target=editor)
        bus.emit("sent", sender)
        assert heard == blinker_heard == ([editor] if sender is editor else [])


def test_a_bound_method_target_hears_that_method_of_that_object_as_blinker_does() -> None:
    class Job:
        def run(self) -> None: ...

        def stop(self) -> None: ...

    job, other = Job(), Job()
    for sender in (job.run, other.run, job.stop, job):
        signal = blinker.Signal()
        blinker_heard: List[Any] = []
        signal.connect(blinker_heard.append, sender=job.run, weak=False)
        signal.send(sender)
        bus = hookbus.EventBus()
        heard: List[Any] = []
        bus.on("sent", heard.append, target=job.run)
        bus.emit("sent", sender)
        assert heard == blinker_heard == ([sender] if sender == job.run else [])
