"""Event names: glob patterns and their rules, and names as pyee users write them: any
string, glob characters included, and enum members."""

from __future__ import annotations

import enum
from typing import Any, List

import pytest
from hook_helpers import labels, recorder

import hookbus
from hookbus import EventBus


def test_patterns_match_with_glob_rules() -> None:
    bus = EventBus()
    log: List[Any] = []
    bus.on("train.*", recorder(log, "train.*"))
    bus.on("*", recorder(log, "*"))
    bus.on("train.step", recorder(log, "exact"))
    bus.on("layer.[0-1]", recorder(log, "set"))
    bus.emit("train.step")
    bus.emit("eval.step")
    bus.emit("layer.1")
    bus.emit("layer.2")
    assert labels(log) == ["train.*", "*", "exact", "*", "*", "set", "*"]


def test_pattern_registered_after_an_emit_is_seen_by_the_next_emit() -> None:
    bus = EventBus()
    log: List[Any] = []
    bus.emit("late.event")  # caches an empty plan
    bus.on("late.*", recorder(log, "late"))
    bus.emit("late.event")
    assert labels(log) == ["late"]


def test_pattern_match_is_case_sensitive() -> None:
    bus = EventBus()
    log: List[Any] = []
    bus.on("Train.*", recorder(log, "x"))
    bus.emit("train.step")
    assert log == []


@pytest.mark.parametrize("name", ["data[0]", "a*b", "why?", "[", "x[!y]"])
def test_any_string_can_be_emitted_and_heard_through_its_literal_spelling(name: str) -> None:
    bus = EventBus()
    seen: List[Any] = []
    bus.on(hookbus.literal(name), lambda x: seen.append(x))
    bus.emit(name, 1)
    assert bus.collect(name, 2) == [None]
    assert bus.first(name, 3) is None
    assert seen == [1, 2, 3]


def test_the_literal_spelling_matches_only_that_name() -> None:
    bus = EventBus()
    seen: List[str] = []
    bus.on(hookbus.literal("why?"), lambda: seen.append("literal"))
    bus.on("why?", lambda: seen.append("pattern"))  # a pattern: "why" and one character
    bus.emit("why?")
    bus.emit("whys")
    assert seen == ["literal", "pattern", "pattern"]
    assert hookbus.literal("train.step") == "train.step"


def test_a_declared_event_and_a_hook_point_may_hold_glob_characters() -> None:
    bus = EventBus()

    @bus.event("cache[hit]")
    def hit(key: str) -> None: ...

    seen: List[Any] = []
    hit.on(lambda key: seen.append(key))
    hit.emit("k")

    @bus.hookable("load[v2]")
    def load() -> int:
        return 1

    bus.post(hookbus.literal("load[v2]"), lambda ctx: seen.append(ctx.result))
    assert load() == 1
    assert seen == ["k", 1]
    bus.check_pending()


class Topic(enum.Enum):
    PAID = "order.paid"
    SHIPPED = 2


class Phase(str, enum.Enum):  # StrEnum's shape, on every Python version
    TRAIN = "train"


def test_enum_members_are_event_names() -> None:
    bus = EventBus()
    seen: List[Any] = []
    bus.on(Topic.PAID, lambda order: seen.append(("paid", order)))
    bus.on(Topic.SHIPPED, lambda order: seen.append(("shipped", order)))
    bus.on(Phase.TRAIN, lambda step: seen.append(("train", step)))
    bus.emit(Topic.PAID, "o-1")
    bus.emit("order.paid", "o-2")  # a str value is the name
    bus.emit(Topic.SHIPPED, "o-3")
    bus.emit("Topic.SHIPPED", "o-4")  # other values: the member's qualified name
    bus.emit(Phase.TRAIN, 5)
    assert seen == [
        ("paid", "o-1"),
        ("paid", "o-2"),
        ("shipped", "o-3"),
        ("shipped", "o-4"),
        ("train", 5),
    ]
    names = sorted(h.name for h in bus.hooks())
    assert names == ["Topic.SHIPPED", "order.paid", "train"]
    assert all(type(h.name) is str for h in bus.hooks())


def test_enum_members_name_hook_points_and_declared_events() -> None:
    bus = EventBus()

    @bus.hookable(Topic.PAID)
    def pay() -> str:
        return "done"

    results: List[Any] = []
    bus.post(Topic.PAID, lambda ctx: results.append((ctx.name, ctx.result)))
    assert pay() == "done"
    assert results == [("order.paid", "done")]

    @bus.event(Phase.TRAIN)
    def train(step: int) -> None: ...

    assert train.name == "train"
    assert type(train.name) is str
