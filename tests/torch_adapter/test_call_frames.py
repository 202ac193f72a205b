"""Call frames: a module call's pre and post hooks share one context, whatever else runs
between them (a plain torch hook, a second bus, the module calling itself)."""

from __future__ import annotations

from typing import Any, List, Tuple

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


def _shared_contexts(model: nn.Module, bus: hookbus.EventBus, name: str) -> List[Tuple[Any, ...]]:
    seen: List[Tuple[Any, ...]] = []

    def pre(ctx: CallContext) -> None:
        ctx.data["pre_index"] = ctx.call_index

    def post(ctx: CallContext) -> None:
        seen.append((ctx.data.get("pre_index"), ctx.call_index))

    bus.pre(name, pre)
    bus.post(name, post)
    return seen


def test_pre_and_post_share_a_context_when_a_plain_torch_hook_replaces_the_args() -> None:
    net = TutorialNet()
    bus = hookbus.EventBus()
    hookbus.torch.attach(net, bus)
    seen = _shared_contexts(net, bus, "fc1")
    net.fc1.register_forward_pre_hook(lambda m, args: (args[0] * 1,))  # new args tuple
    net(torch.ones(1, 2))
    net(torch.ones(1, 2))
    assert seen == [(0, 0), (1, 1)]


def test_pre_and_post_share_a_context_with_a_second_bus_on_the_same_model() -> None:
    net = TutorialNet()
    first, second = hookbus.EventBus("first"), hookbus.EventBus("second")
    hookbus.torch.attach(net, first)
    hookbus.torch.attach(net, second)
    seen_first = _shared_contexts(net, first, "fc1")
    seen_second = _shared_contexts(net, second, "fc1")

    def replace(ctx: CallContext) -> None:
        ctx.args = (ctx.args[0] + 0,)

    first.pre("fc1", replace)
    second.pre("fc1", replace)
    net(torch.ones(1, 2))
    assert seen_first == [(0, 0)]
    assert seen_second == [(0, 0)]


def test_a_module_calling_itself_shares_each_call_s_own_context() -> None:
    class Recursive(nn.Module):
        def forward(self, x: torch.Tensor, depth: int = 2) -> torch.Tensor:
            return x if depth == 0 else self(x + 1, depth - 1)

    model = Recursive()
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)
    seen = _shared_contexts(model, bus, "<root>")
    model(torch.zeros(1))
    assert seen == [(2, 2), (1, 1), (0, 0)]
