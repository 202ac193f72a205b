"""The documented pitfalls: module.forward, DataParallel replicas, checkpointing, compile."""

from __future__ import annotations

import threading
import warnings
from typing import Any, List

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch_helpers import TutorialNet, hook_state

import hookbus
import hookbus.torch
from hookbus import CallContext


@pytest.mark.filterwarnings("ignore:hookbus.torch. capture:RuntimeWarning")  # ran nothing
def test_calling_module_forward_directly_bypasses_hooks() -> None:
    net = TutorialNet()
    with hookbus.torch.capture(net, "fc1") as cache:
        net.fc1.forward(torch.ones(1, 2))
    assert len(cache) == 0
    with hookbus.torch.capture(net, "fc1") as cache:
        net.fc1(torch.ones(1, 2))
    assert len(cache) == 1


def test_dataparallel_style_replicas_fire_under_the_name_bound_at_registration() -> None:
    # DataParallel replicas share the original's hook dicts and run on worker threads;
    # torch passes the replica to the hook. Replicate as DataParallel does (CPU here).
    net = TutorialNet()
    bus = hookbus.EventBus()
    hookbus.torch.attach(net, bus)
    seen: List[Any] = []
    lock = threading.Lock()

    def record(ctx: CallContext) -> None:
        with lock:
            seen.append((ctx.name, ctx.target))

    bus.post("fc1", record)
    replica_fc1 = net.fc1._replicate_for_data_parallel()
    # replicate() then sets each parameter on the replica, as a plain tensor:
    replica_fc1.weight = net.fc1.weight.detach().clone()
    replica_fc1.bias = net.fc1.bias.detach().clone()
    thread = threading.Thread(target=lambda: replica_fc1(torch.ones(1, 2)))
    thread.start()
    thread.join(timeout=60)
    assert seen == [("fc1", replica_fc1)]
    assert replica_fc1 is not net.fc1


def test_activation_checkpointing_fires_forward_hooks_again_in_backward() -> None:
    block = nn.Sequential(nn.Linear(2, 2), nn.Tanh())
    model = nn.ModuleDict({"block": block})
    x = torch.ones(1, 2, requires_grad=True)
    with hookbus.torch.capture(model, "block.0") as cache:
        out = checkpoint(block, x, use_reentrant=False)
        assert len(cache["block.0"]) == 1
        out.sum().backward()
    # The recomputation in backward is a second call, with the same values.
    assert len(cache["block.0"]) == 2
    first, again = cache["block.0"].outputs
    assert torch.equal(first, again)


def _compiled_model() -> Any:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))


@pytest.mark.timeout(240)
def test_capture_on_a_compiled_model_gives_the_eager_values() -> None:
    torch._dynamo.reset()
    model = _compiled_model()
    compiled = torch.compile(model)  # the default backend (inductor)
    x = torch.randn(3, 4)
    with hookbus.torch.capture(model, nn.Linear) as eager:
        expected = model(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the hooks take effect: no warning
        with hookbus.torch.capture(compiled, nn.Linear) as cache:
            out = compiled(x)
    assert torch.allclose(out, expected, atol=1e-6)
    assert list(cache) == ["0", "2"]
    for name in cache:
        assert torch.allclose(cache[name].output, eager[name].output, atol=1e-6)
    assert hook_state(model) == hook_state(_compiled_model())


@pytest.mark.timeout(240)
def test_compiled_model_runs_hooks_added_after_a_hookless_first_call() -> None:
    # torch alone ignores them (it skips its guards on empty hook dicts); hookbus
    # makes the code that calls the module compile again (ModulePoint.recompile_on_change).
    torch._dynamo.reset()
    model = _compiled_model()
    compiled = torch.compile(model, backend="eager")
    x = torch.randn(3, 4)
    plain = compiled(x)  # the first compiled call, with no hook anywhere
    attached = hookbus.torch.attach(compiled, hookbus.EventBus())
    seen: List[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        handle = attached.post("2", lambda ctx: seen.append(ctx.name))
    compiled(x)
    assert seen == ["2"]
    handle.remove()
    attached.detach()
    assert torch.equal(compiled(x), plain)
    assert seen == ["2"]
    assert hook_state(model) == hook_state(_compiled_model())


@pytest.mark.timeout(240)
def test_compiled_model_that_had_hooks_recompiles_when_they_change() -> None:
    torch._dynamo.reset()
    model = _compiled_model()
    compiled = torch.compile(model, backend="eager")
    x = torch.randn(3, 4)
    attached = hookbus.torch.attach(compiled, hookbus.EventBus())
    seen: List[str] = []
    attached.post("0", lambda ctx: seen.append(ctx.name))
    compiled(x)
    assert seen == ["0"]

    def double(ctx: CallContext) -> None:
        ctx.result = ctx.result * 2

    with attached.post("2", double):
        doubled = compiled(x)
    plain = compiled(x)
    assert torch.allclose(doubled, 2 * plain, atol=1e-6)
    attached.detach()


@pytest.mark.timeout(240)
def test_exception_hooks_do_not_run_under_compile() -> None:
    torch._dynamo.reset()
    model = _compiled_model()
    compiled = torch.compile(model, backend="eager")
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(compiled, bus)
    seen: List[Any] = []
    with pytest.warns(hookbus.torch.CompiledModelWarning):
        attached.exception("0", lambda ctx: seen.append(ctx.exception))
    with pytest.raises(Exception, match=r"shape|size|mat"):
        compiled(torch.randn(3, 5))
    assert seen == []  # torch skips always_call hooks while compiling
    attached.detach()
    assert hook_state(model) == hook_state(_compiled_model())
