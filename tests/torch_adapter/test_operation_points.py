"""Operation points (``net.operations``): names that exist, and calls counted right.

An operation point is named by the call index of its operation within one forward of
the selected module. Only names that a forward calls are hook points, and only the
forward's own calls are counted: a hook that calls the same torch function must not
shift the numbering, or an ablation would edit the wrong tensor.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any, Iterator, List

import pytest
import torch
from torch import nn

import hookbus
import hookbus.torch
from hookbus import CallContext

pytestmark = pytest.mark.torch


class TwoTanh(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(2):
            x = torch.tanh(x)
        return x


def test_a_hook_on_a_call_index_the_forward_never_reached_is_refused() -> None:
    """After the discovery forward the points are known: ``tanh.3`` of a forward that calls
    ``tanh`` twice is a typo, refused with the names that exist, as a module typo is."""
    model = nn.Sequential()
    model.add_module("loop", TwoTanh())
    net = hookbus.torch.attach(model, hookbus.EventBus())
    selection = net.operations("loop", torch.tanh)
    model(torch.ones(2))  # the discovery forward
    assert selection.names == ["loop:tanh.0", "loop:tanh.1"]
    with pytest.raises(ValueError, match=r"loop:tanh\.1"):
        net.pre("loop:tanh.3", lambda ctx: None)
    net.detach()


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.inner(x))


def test_torch_calls_of_a_module_hook_do_not_renumber_the_forward_s_operations() -> None:
    """A logging hook on a submodule that calls ``torch.tanh`` must not become ``tanh.0``:
    the ablation registered on ``tanh.0`` edits the forward's own tanh, whatever the
    hooks of its submodules compute."""
    torch.manual_seed(0)
    model = nn.Sequential(Block())
    net = hookbus.torch.attach(model, hookbus.EventBus())
    net.operations("0", torch.tanh)
    x = torch.ones(1, 2)
    model(x)  # the discovery forward

    def ablate(ctx: CallContext) -> None:
        ctx.args = (torch.zeros_like(ctx.args[0]), *ctx.args[1:])

    logged: List[Any] = []
    net.pre("0:tanh.0", ablate)
    net.post("0.inner", lambda ctx: logged.append(torch.tanh(ctx.result).sum().item()))
    out = model(x)
    assert torch.equal(out, torch.zeros(1, 2))  # tanh(0): the forward's tanh was ablated
    assert len(logged) == 1
    net.detach()


class Nested(nn.Module):
    """tanh twice in one forward: once in a submodule's forward, once in its own."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(2, 2), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.inner(x))


def test_only_the_forward_s_own_calls_are_numbered_whatever_hooks_call() -> None:
    """Hooks of every kind that call ``torch.tanh`` inside the selected module's call (a
    pre hook on the module itself, post hooks on its submodules, an ``every_module`` hook,
    a capture) leave the numbering alone: the forward's two calls stay ``tanh.0`` and
    ``tanh.1``, and an edit of ``tanh.1`` matches the same edit written in raw torch."""
    torch.manual_seed(0)
    model = nn.Sequential(Nested())
    net = hookbus.torch.attach(model, hookbus.EventBus())
    selection = net.operations("0", torch.tanh)
    x = torch.randn(3, 2)
    calls: List[str] = []

    def noisy(ctx: CallContext) -> None:
        torch.tanh(torch.ones(1))
        calls.append(ctx.name)

    net.pre("0", noisy)
    net.post("0.inner", noisy)
    net.post("0.inner.1", noisy)
    with hookbus.torch.every_module(hookbus.EventBus()) as every:
        every.post(noisy)
        with hookbus.torch.capture(model, "0.inner"):
            model(x)  # the discovery forward
            assert selection.names == ["0:tanh.0", "0:tanh.1"]

            def halve(ctx: CallContext) -> None:
                ctx.args = (ctx.args[0] * 0.5, *ctx.args[1:])

            net.pre("0:tanh.1", halve)
            out = model(x)
    linear = model[0].inner[0]
    expected = torch.tanh(0.5 * torch.tanh(linear(x)))
    assert torch.allclose(out, expected, atol=1e-6, rtol=0)
    assert selection.names == ["0:tanh.0", "0:tanh.1"]
    assert {"0", "0.inner", "0.inner.1", "<modules>"} <= set(calls)  # every hook ran
    net.detach()


def _loop_after_discovery() -> Any:
    model = nn.Sequential()
    model.add_module("loop", TwoTanh())
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    net.operations("loop", torch.tanh)
    model(torch.ones(2))  # the discovery forward
    return model, bus, net


def test_a_call_index_the_forward_never_reached_is_refused_on_the_bus_too() -> None:
    _, bus, net = _loop_after_discovery()

    def span(ctx: CallContext) -> Iterator[None]:
        yield

    for kind, hook in (("pre", print), ("post", print), ("exception", print), ("around", span)):
        with pytest.raises(ValueError, match=r"'loop:tanh\.0', 'loop:tanh\.1'"):
            getattr(bus, kind)("loop:tanh.2", hook)
    assert bus.hooks() == []
    bus.post("loop:tanh.1", lambda ctx: None)  # one that exists
    net.detach()


def test_optional_accepts_a_call_index_a_later_forward_may_reach() -> None:
    """A forward whose loop length depends on its input may call an operation more often
    later; ``optional=True`` registers a hook for that call before it exists."""
    model, bus, net = _loop_after_discovery()
    seen: List[str] = []
    net.post("loop:tanh.2", lambda ctx: seen.append(ctx.name), optional=True)
    bus.post("loop:tanh.3", lambda ctx: seen.append(ctx.name), optional=True)
    model(torch.ones(2))
    assert seen == []
    net.detach()


def test_a_call_index_is_accepted_before_the_discovery_forward() -> None:
    """Before the discovery forward the calls are not known: any index is accepted."""
    model = nn.Sequential()
    model.add_module("loop", TwoTanh())
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    net.operations("loop", torch.tanh)
    handle = net.pre("loop:tanh.3", lambda ctx: None)
    assert handle.active
    net.detach()


@pytest.mark.parametrize("strict", [False, True])
def test_an_event_hook_on_an_operation_point_s_name_is_refused_on_any_bus(strict: bool) -> None:
    """An operation point runs pre, post, exception and around hooks only, and its name is
    no event's: as for a declared event's name, a hook that could never run there is
    refused at registration, on a plain bus too, saying which kinds run there."""
    model = nn.Sequential()
    model.add_module("loop", TwoTanh())
    bus = hookbus.EventBus(strict=strict)
    net = hookbus.torch.attach(model, bus)
    net.operations("loop", torch.tanh)
    model(torch.ones(2))  # the discovery forward: the points exist
    with pytest.raises(hookbus.UnknownNameError, match=r"use pre, post, exception or around"):
        bus.on("loop:tanh.1", print)
    assert bus.hooks() == []
    bus.on("loop:tanh.*", print)  # a pattern names no place: check_pending() reports it
    net.detach()


class TanhThenInterrupted(nn.Module):
    def forward(self, x: object) -> None:
        torch.tanh(torch.ones(1))
        raise KeyboardInterrupt


class TwoTanhOfOnes(nn.Module):
    def forward(self, x: object) -> torch.Tensor:
        return torch.tanh(torch.tanh(torch.ones(1)))


def _interrupts(ctx: CallContext) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("where", ["forward", "a once hook"])
def test_a_keyboard_interrupt_in_a_forward_with_operation_points_leaves_no_mode_behind(
    where: str,
) -> None:
    """torch runs no hook for a ``KeyboardInterrupt``, so the post hook that pops the
    operation mode never runs: the module's forward swap pops it instead, also when the
    interrupt comes from a ``once`` hook whose claim left no hook to run. Nothing is left
    on the thread's torch function stack, and the call's argument is let go of at once,
    even when no hook is left to run at the module's next forward (the collector is off)."""

    class Argument:
        pass

    model = nn.Sequential()
    model.add_module("loop", TanhThenInterrupted() if where == "forward" else TwoTanhOfOnes())
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    net.operations("loop", torch.tanh)
    if where == "forward":
        handle = bus.pre("loop:tanh.0", lambda ctx: None)
    else:
        model(None)  # the discovery forward
        handle = bus.pre("loop:tanh.1", _interrupts, once=True)
    argument = Argument()
    alive = weakref.ref(argument)
    depth = torch._C._len_torch_function_stack()
    gc.disable()
    try:
        with pytest.raises(KeyboardInterrupt):
            model(argument)
        del argument
        assert torch._C._len_torch_function_stack() == depth, "a mode was left behind"
        assert alive() is None, "the argument of an interrupted call outlived it"
    finally:
        gc.enable()
        handle.remove()
        net.detach()
