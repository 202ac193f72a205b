"""Historic events: names given as enum members work wherever a name is taken."""

from __future__ import annotations

import enum
from typing import List

from hookbus import EventBus


class Topic(enum.Enum):
    CONFIGURED = "app.configured"


def test_forget_accepts_an_enum_member_as_the_event_name() -> None:
    """An application that names its events by an Enum uses the member everywhere; forget
    must take it as emit, on and event do, and drop the history."""
    bus = EventBus()

    @bus.event(Topic.CONFIGURED, historic=True)
    def configured(config: str, /) -> None: ...

    bus.emit(Topic.CONFIGURED, "first")
    bus.forget(Topic.CONFIGURED)
    late: List[str] = []
    bus.on(Topic.CONFIGURED, late.append)
    assert late == []
