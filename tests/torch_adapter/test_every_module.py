"""``every_module()``: hooks on every module call of every model (torch's global hooks).

Each use is compared with the same hand-written global torch hook
(``torch.nn.modules.module.register_module_forward_hook``), to 1e-6. A point that nothing
holds any more lets go of its bus once its last hook goes.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any, Dict, List, Tuple

import pytest
import torch
from torch import nn
from torch.nn.modules import module as torch_module
from torch_helpers import SmallNet, tiny_gpt2

import hookbus
import hookbus.torch
from hookbus import CallContext


class Log(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)


def _net() -> nn.Module:
    torch.manual_seed(0)
    return SmallNet().eval()


def _gpt2() -> Any:
    return tiny_gpt2()


def _no_global_hooks() -> bool:
    return not torch_module._has_any_global_hook()


@pytest.fixture(autouse=True)
def _clean_globals() -> Any:
    assert _no_global_hooks()
    yield
    assert _no_global_hooks(), "a test left torch global hooks behind"


def test_tracing_every_module_call_of_gpt2_matches_a_raw_global_hook() -> None:
    model = _gpt2()
    ids = torch.randint(0, 100, (1, 5))
    names = {module: name for name, module in model.named_modules()}
    raw: List[Tuple[str, str]] = []
    handle = torch_module.register_module_forward_hook(
        lambda m, a, o: raw.append((names.get(m, "?"), type(m).__name__))
    )
    with torch.no_grad():
        expected = model(ids).logits
    handle.remove()
    seen: List[Tuple[str, str]] = []
    with hookbus.torch.every_module(hookbus.EventBus()) as every:
        every.post(
            lambda ctx: seen.append((names.get(ctx.target, "?"), type(ctx.target).__name__))
        )
        with torch.no_grad():
            out = model(ids).logits
    assert seen == raw
    assert len(seen) > 20
    assert torch.allclose(out, expected, atol=1e-6)


def test_replacing_every_relu_output_matches_a_raw_global_hook() -> None:
    model = _net()
    x = torch.randn(3, 4)

    def raw_hook(m: nn.Module, a: Any, o: Any) -> Any:
        return o * 0.5 if isinstance(m, nn.ReLU) else None

    handle = torch_module.register_module_forward_hook(raw_hook)
    expected = model(x)
    handle.remove()

    def halve(ctx: CallContext) -> None:
        if isinstance(ctx.target, nn.ReLU):
            ctx.result = ctx.result * 0.5

    bus = hookbus.EventBus()
    with hookbus.torch.every_module(bus) as every:
        every.post(halve)
        out = model(x)
    assert torch.allclose(out, expected, atol=1e-6)
    assert not torch.allclose(model(x), expected, atol=1e-3)  # removed: back to plain


def test_finding_the_first_module_whose_output_holds_a_nan() -> None:
    model = nn.Sequential(nn.Linear(4, 4), Log(), nn.Linear(4, 2))
    names = {module: name for name, module in model.named_modules()}
    first: List[str] = []

    def check(ctx: CallContext) -> None:
        if not first and torch.isnan(ctx.result).any():
            first.append(names[ctx.target])

    with hookbus.torch.every_module(hookbus.EventBus()) as every:
        every.post(check)
        model(torch.randn(8, 4))
    assert first == ["1"]


def test_pre_hooks_see_and_replace_args_and_around_hooks_nest() -> None:
    model = _net()
    x = torch.randn(3, 4)
    events: List[str] = []

    def zero_linear_input(ctx: CallContext) -> None:
        if isinstance(ctx.target, nn.Linear):
            ctx.args = (torch.zeros_like(ctx.args[0]),)

    def nested(ctx: CallContext) -> Any:
        events.append(f"enter {type(ctx.target).__name__}")
        yield
        events.append(f"exit {type(ctx.target).__name__}")

    with hookbus.torch.every_module(hookbus.EventBus()) as every:
        every.pre(zero_linear_input)
        every.around(nested)
        out = model(x)
    assert torch.allclose(out, model.out.bias.expand(3, 2), atol=1e-6)
    assert events == [
        "enter SmallNet", "enter Linear", "exit Linear", "enter ReLU", "exit ReLU",
        "enter Linear", "exit Linear", "exit SmallNet",
    ]  # fmt: skip


def test_exception_hooks_see_each_failing_module_and_the_error_propagates() -> None:
    model = _net()
    failing: List[str] = []
    with hookbus.torch.every_module(hookbus.EventBus()) as every:
        every.exception(lambda ctx: failing.append(type(ctx.target).__name__))
        every.post(lambda ctx: None)  # torch calls it with the wrong arity on errors
        with pytest.raises(RuntimeError, match=r"shapes|size"):
            model(torch.randn(3, 5))
    assert failing == ["Linear", "SmallNet"]  # innermost first, as the error leaves them


def test_priorities_handles_and_hooks_registered_by_name_before() -> None:
    bus = hookbus.EventBus()
    order: List[str] = []
    bus.post("<modules>", lambda ctx: order.append("by name"))  # before the point exists
    every = hookbus.torch.every_module(bus)
    first = every.post(lambda ctx: order.append("first"), priority=10)
    nn.ReLU()(torch.ones(1))
    assert order == ["first", "by name"]
    first.remove()
    every.remove()
    nn.ReLU()(torch.ones(1))
    assert order == ["first", "by name"]  # the point is gone: the bus hook stays, inert
    assert len(bus.hooks("<modules>")) == 1
    assert not first.active


def test_costs_nothing_while_no_hook_matches_and_leaves_no_torch_global_hook() -> None:
    bus = hookbus.EventBus()
    every = hookbus.torch.every_module(bus)
    assert _no_global_hooks()  # made, no hook yet: torch has nothing to call
    handle = every.post(lambda ctx: None)
    pre = every.pre(lambda ctx: None)
    assert len(torch_module._global_forward_hooks) == 1
    assert len(torch_module._global_forward_pre_hooks) == 1
    handle.remove()
    pre.remove()
    assert _no_global_hooks()  # torch's stale with_kwargs mark is gone too
    every.post(lambda ctx: None)
    every.remove()
    assert _no_global_hooks()
    every.remove()  # idempotent


def test_a_second_point_of_the_same_name_on_one_bus_is_refused() -> None:
    bus = hookbus.EventBus()
    with hookbus.torch.every_module(bus):
        with pytest.raises(ValueError, match=r"already a hook point '<modules>'"):
            hookbus.torch.every_module(bus)
        other = hookbus.torch.every_module(bus, name="calls")
        other.remove()
    hookbus.torch.every_module(bus).remove()  # free again once removed


def test_skip_is_refused_clearly() -> None:
    with hookbus.torch.every_module(hookbus.EventBus()) as every:
        every.pre(lambda ctx: ctx.skip(None))
        with pytest.raises(Exception, match="own hook point"):
            nn.ReLU()(torch.ones(1))


def test_counting_calls_per_class_matches_a_raw_global_pre_hook() -> None:
    model = _gpt2()
    ids = torch.randint(0, 100, (2, 4))
    raw: Dict[str, int] = {}

    def count_raw(m: nn.Module, a: Any) -> None:
        raw[type(m).__name__] = raw.get(type(m).__name__, 0) + 1

    handle = torch_module.register_module_forward_pre_hook(count_raw)
    with torch.no_grad():
        model(ids)
    handle.remove()
    counts: Dict[str, int] = {}

    def count(ctx: CallContext) -> None:
        counts[type(ctx.target).__name__] = counts.get(type(ctx.target).__name__, 0) + 1

    with hookbus.torch.every_module(hookbus.EventBus()) as every, torch.no_grad():
        every.pre(count)
        model(ids)
    assert counts == raw
    assert counts["GPT2Block"] == 2


def test_a_name_that_is_already_a_modules_point_is_refused() -> None:
    # It used to be accepted: hooks on "0" then ran for every module, and twice for 0.
    bus = hookbus.EventBus()
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    net = hookbus.torch.attach(model, bus)
    with pytest.raises(ValueError, match=r"'0' is already a hook point .* a name of its own"):
        hookbus.torch.every_module(bus, name="0")
    assert [point.name for point in bus.registry.points("0")] == ["0"]
    net.detach()
    with hookbus.torch.every_module(bus, name="0") as every:  # no module named so now
        assert every.active


@pytest.mark.parametrize("make", ["attach", "every_module"])
def test_a_bus_that_is_not_an_event_bus_is_refused_naming_what_is_accepted(make: str) -> None:
    model = nn.Linear(1, 1)
    calls = {
        "attach": lambda: hookbus.torch.attach(model, "bus"),  # type: ignore[arg-type]
        "every_module": lambda: hookbus.torch.every_module("bus"),  # type: ignore[arg-type]
    }
    with pytest.raises(TypeError, match=r"takes a hookbus.EventBus as bus .*got str"):
        calls[make]()
    assert not model._forward_hooks
    assert not model._forward_pre_hooks


# --- a point nothing holds lets go of its bus ---------------------------------------------


def test_a_dropped_every_module_point_lets_its_bus_be_collected() -> None:
    """A bus made for one job (a test, a request) and given to ``every_module`` must go
    when the job drops it, as a bus with an attached model does."""
    bus = hookbus.EventBus()
    bus_alive = weakref.ref(bus)
    every = hookbus.torch.every_module(bus)
    handle = every.post(lambda ctx: None)
    handle.remove()  # no hook left: torch's global hooks are out
    del every, handle, bus
    gc.collect()
    assert bus_alive() is None


def test_a_dropped_every_module_point_with_a_hook_runs_it_until_the_hook_goes() -> None:
    """Dropped while a hook matches it, the point lives on (torch's global hooks hold it)
    and runs the hook; with the last hook removed, it lets go of its bus."""
    bus = hookbus.EventBus()
    bus_alive = weakref.ref(bus)
    calls: List[str] = []
    every = hookbus.torch.every_module(bus)
    handle = every.post(lambda ctx: calls.append(type(ctx.target).__name__))
    del every
    gc.collect()
    nn.ReLU()(torch.ones(1))
    assert calls == ["ReLU"]
    handle.remove()
    del handle, bus
    gc.collect()
    assert bus_alive() is None


def test_every_module_takes_over_a_dropped_point_that_still_has_hooks() -> None:
    """A second point of one name would run each hook twice: ``every_module(bus)`` takes
    the live one over, and its ``remove()`` takes torch's global hooks out."""
    bus = hookbus.EventBus()
    calls: List[str] = []
    hookbus.torch.every_module(bus).post(lambda ctx: calls.append("bus hook"))
    gc.collect()
    every = hookbus.torch.every_module(bus)
    nn.ReLU()(torch.ones(1))
    assert calls == ["bus hook"]
    every.remove()
    nn.ReLU()(torch.ones(1))
    assert calls == ["bus hook"]
