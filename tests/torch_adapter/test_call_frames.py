"""Call frames: a module call's pre and post hooks share one context, whatever else runs
between them (a plain torch hook, a second bus, the module calling itself)."""

from __future__ import annotations

from typing import Any, List

import torch
from torch import nn
from torch_helpers import TutorialNet

import hookbus
import hookbus.torch
from hookbus import CallContext


def test_pre_and_post_share_one_context_per_call() -> None:
    model = TutorialNet()
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)
    indices: List[Any] = []

    def start(ctx: CallContext) -> None:
        ctx.data["mark"] = ctx.call_index

    def finish(ctx: CallContext) -> None:
        indices.append((ctx.data.get("mark"), ctx.call_index))

    bus.pre("fc1", start)
    bus.post("fc1", finish)
    model(torch.ones(1, 2))
    model(torch.ones(1, 2))
    assert indices == [(0, 0), (1, 1)]


def test_a_reused_module_fires_once_per_call_with_its_one_name() -> None:
    shared = nn.Linear(2, 2)

    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.shared = shared

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.shared(self.shared(x))

    model = Twice()
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)
    calls: List[Any] = []
    bus.post("shared", lambda ctx: calls.append((ctx.name, ctx.call_index)))
    model(torch.ones(1, 2))
    assert calls == [("shared", 0), ("shared", 1)]
    with hookbus.torch.capture(model, "shared") as cache:
        y = model(torch.ones(1, 2))
    assert len(cache["shared"]) == 2
    assert torch.equal(cache["shared"].outputs[1], y)
