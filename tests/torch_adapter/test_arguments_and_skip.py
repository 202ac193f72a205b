"""``ctx.arguments`` and ``ctx.skip`` on modules: forward's signature; skipping a forward."""

from __future__ import annotations

from typing import Any, List

import pytest
import torch
from torch import nn

import hookbus
import hookbus.torch
from hookbus import CallContext


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor, scale: float = 1.0, *, shift: float = 0.0) -> torch.Tensor:
        self.calls += 1
        return x * scale + shift


def test_arguments_bind_against_forward_however_they_were_passed() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(Scaled())
    hookbus.torch.attach(model, bus)
    seen: List[Any] = []

    def read(ctx: CallContext) -> None:
        seen.append(
            (float(ctx.arguments["x"].sum()), ctx.arguments["scale"], ctx.arguments["shift"])
        )

    bus.pre("0", read)
    inner = model[0]
    x = torch.ones(2)
    inner(x)
    inner(x, 2.0)
    inner(x=x, scale=3.0, shift=1.0)
    assert seen == [(2.0, 1.0, 0.0), (2.0, 2.0, 0.0), (2.0, 3.0, 1.0)]


def test_writing_an_argument_changes_the_forward() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(Scaled())
    hookbus.torch.attach(model, bus)
    bus.pre("0", lambda ctx: ctx.arguments.__setitem__("scale", 10.0))
    assert torch.equal(model[0](torch.ones(1)), torch.full((1,), 10.0))
    assert torch.equal(model[0](torch.ones(1), 2.0), torch.full((1,), 10.0))


def test_builtin_modules_bind_their_forward_parameter_names() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(nn.Linear(2, 2))
    hookbus.torch.attach(model, bus)
    seen: List[Any] = []
    bus.pre("0", lambda ctx: seen.append((list(ctx.arguments), ctx.target is model[0])))
    model(torch.ones(1, 2))
    assert seen == [(["input"], True)]


def test_module_args_leave_out_the_module() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(Scaled())
    hookbus.torch.attach(model, bus)
    seen: List[Any] = []

    def unpack(ctx: CallContext) -> None:
        (_x,) = ctx.args
        seen.append(ctx.target)

    bus.pre("0", unpack)
    model(torch.ones(1))
    assert seen == [model[0]]


def test_skip_on_a_module_returns_the_value_without_running_forward() -> None:
    # Issue 22, section 2: it raised (torch runs forward whatever its hooks do).
    bus = hookbus.EventBus()
    model = nn.Sequential(Scaled())
    hookbus.torch.attach(model, bus)
    value = torch.zeros(1)
    bus.pre("0", lambda ctx: ctx.skip(value))
    assert model[0](torch.ones(1)) is value
    assert model[0].calls == 0


def test_skip_around_a_wrapped_model_works() -> None:
    bus = hookbus.EventBus()
    model = Scaled()
    cached = torch.full((1,), 7.0)
    run = bus.wrap(model, "model")
    bus.pre("model", lambda ctx: ctx.skip(cached))
    seen: List[Any] = []
    bus.post("model", lambda ctx: seen.append(ctx.skipped))
    assert run(torch.ones(1)) is cached
    assert model.calls == 0
    assert seen == [True]


def test_assigning_result_in_a_module_pre_hook_is_refused() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(Scaled())
    hookbus.torch.attach(model, bus)
    bus.pre("0", lambda ctx: setattr(ctx, "result", torch.zeros(1)))
    with pytest.raises(RuntimeError, match="skip"):
        model(torch.ones(1))


def test_skipped_is_false_in_module_post_hooks() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(Scaled())
    hookbus.torch.attach(model, bus)
    seen: List[bool] = []
    bus.post("0", lambda ctx: seen.append(ctx.skipped))
    model(torch.ones(1))
    assert seen == [False]


def test_skipped_is_true_in_the_post_hooks_of_a_skipped_call() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(Scaled())
    hookbus.torch.attach(model, bus)
    seen: List[Any] = []
    bus.pre("0", lambda ctx: ctx.skip(torch.full((1,), 3.0)))
    bus.post("0", lambda ctx: seen.append((ctx.skipped, float(ctx.result))))
    model(torch.ones(1))
    assert seen == [(True, 3.0)]
