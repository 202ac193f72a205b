"""The module dispatchers under checkpointing, interrupts, foreign hooks and warnings.

Issue 10, items 1, 2, 3 and 6 (the ``None`` result). Each test failed on the code
before the fix.
"""

from __future__ import annotations

import gc
import threading
import warnings
import weakref
from typing import Any, Dict, List, Tuple

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch_helpers import TutorialNet, hook_state

import hookbus
import hookbus.torch
from hookbus import CallContext

# --- item 1: checkpointing fires no false exception hook ------------------------------


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_checkpointing_fires_no_exception_hook(reentrant: bool) -> None:
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU())
    x = torch.randn(2, 4, requires_grad=True)
    seen: List[Any] = []
    with hookbus.torch.attach(model, hookbus.EventBus()) as net:
        net.exception("*", lambda ctx: seen.append((ctx.name, type(ctx.exception).__name__)))
        checkpoint(model, x, use_reentrant=reentrant).sum().backward()
    assert seen == []
    assert x.grad is not None


def test_an_error_during_recomputation_still_reaches_exception_hooks() -> None:
    calls = {"n": 0}

    class FailsSecondTime(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            calls["n"] += 1
            if calls["n"] == 2:
                raise ValueError("boom in recomputation")
            return x * x  # saves x for backward, so the recomputation reaches it

    model = nn.Sequential(nn.Linear(2, 2), FailsSecondTime())
    seen: List[str] = []
    with hookbus.torch.attach(model, hookbus.EventBus()) as net:
        net.exception("1", lambda ctx: seen.append(str(ctx.exception)))
        out = checkpoint(model, torch.ones(1, 2, requires_grad=True), use_reentrant=False)
        with pytest.raises(ValueError, match="boom"):
            out.sum().backward()
    assert seen == ["boom in recomputation"]


# --- item 2: nothing keeps a module's input after its call ----------------------------


def _input_is_freed(run: Any) -> bool:
    x = torch.randn(3, 2)
    ref = weakref.ref(x)
    run(x)
    del x
    gc.collect()
    gc.disable()
    try:
        return ref() is None
    finally:
        gc.enable()


def test_a_once_pre_hook_next_to_a_post_hook_leaves_no_input_behind() -> None:
    net = TutorialNet()
    data: List[Any] = []
    with hookbus.torch.attach(net, hookbus.EventBus()) as attached:
        attached.pre("fc1", lambda ctx: ctx.data.update(mark=1), once=True)
        attached.post("fc1", lambda ctx: data.append(dict(ctx.data)))
        assert _input_is_freed(net)
        net(torch.ones(1, 2))
    assert data == [{"mark": 1}, {}]  # the once hook's call shared its context


def test_a_keyboard_interrupt_in_forward_leaves_no_input_behind() -> None:
    class Interrupted(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise KeyboardInterrupt

    model = nn.Sequential(nn.Linear(2, 2), Interrupted())
    seen: List[str] = []
    with hookbus.torch.attach(model, hookbus.EventBus()) as net:
        net.pre("*", lambda ctx: None)
        net.post("*", lambda ctx: seen.append(ctx.name))

        def run(x: torch.Tensor) -> None:
            with pytest.raises(KeyboardInterrupt):
                model(x)

        assert _input_is_freed(run)
        model[0](torch.ones(1, 2))  # the next calls share contexts as usual
    assert seen == ["0", "0"]


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


# --- item 3: no user code, warning or torch call under the bus lock ---------------------


def _compiled() -> Any:
    return torch.compile(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), backend="eager")


def test_a_warning_handler_that_uses_the_bus_does_not_deadlock() -> None:
    compiled = _compiled()
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(compiled, bus)
    handled: List[str] = []

    def showwarning(message: Any, *args: Any, **kwargs: Any) -> None:
        handled.append(repr(bus))  # takes the bus lock

    outcome: Dict[str, Any] = {}

    def register() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = showwarning
            outcome["handle"] = net.exception("0", lambda ctx: None)

    thread = threading.Thread(target=register, daemon=True)
    thread.start()
    thread.join(timeout=20)
    assert not thread.is_alive(), "registering deadlocked: a warning was issued under the lock"
    assert len(handled) == 1
    assert outcome["handle"].active
    net.detach()


@pytest.mark.filterwarnings("error")
def test_registration_on_a_compiled_model_is_all_or_nothing_under_warnings_as_errors() -> None:
    compiled = _compiled()
    before = hook_state(compiled._orig_mod)
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(compiled, bus)
    with pytest.raises(hookbus.torch.CompiledModelWarning):
        net.exception("0", lambda ctx: None)  # torch skips them under compile: warned
    assert bus.hooks() == []
    assert hook_state(compiled._orig_mod) == before
    with pytest.raises(hookbus.torch.CompiledModelWarning):
        bus.exception("1", lambda ctx: None)  # on the bus directly, by name: the same
    assert bus.hooks() == []
    assert hook_state(compiled._orig_mod) == before
    net.detach()


# --- item 6: a None result is refused, not dropped -------------------------------------


def test_a_post_hook_setting_the_result_to_none_is_refused_not_dropped() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())

    def drop(ctx: CallContext) -> None:
        ctx.result = None

    with net.post("0", drop), pytest.raises(TypeError, match=r"ctx\.result = None.*'0'"):
        model(torch.ones(1, 2))
    with net.pre("0", lambda ctx: None), net.post("0", drop), pytest.raises(TypeError):
        model(torch.ones(1, 2))  # the other dispatch path too
    # A module whose output is None keeps it: nothing was replaced.
    none_module = nn.Module()
    none_module.forward = lambda x: None  # type: ignore[method-assign]
    with hookbus.torch.attach(none_module, hookbus.EventBus()) as other:
        other.post("<root>", lambda ctx: None)
        assert none_module(1) is None
    net.detach()
