"""``torch.jit.script`` on a model with hookbus hooks: a clear refusal, not an error in hookbus.

TorchScript compiles a module's forward hooks; hookbus's native hooks are Python
it cannot compile. Before, scripting failed with "try blocks aren't supported",
pointing into hookbus's source; now ``__prepare_scriptable__`` (which
``torch.jit.script`` calls on every module first) says what to do.
"""

from __future__ import annotations

import copy
from typing import Any, Iterator, Tuple

import pytest
import torch
from torch import nn
from torch_helpers import SmallNet, hook_state

import hookbus
import hookbus.torch
from hookbus import CallContext


def _net() -> SmallNet:
    torch.manual_seed(0)
    return SmallNet().eval()


def _typed_pre_hook(module: nn.Module, inputs: Tuple[torch.Tensor]) -> None:
    return None


def test_raw_torch_scripts_a_model_with_a_typed_hook() -> None:
    model = _net()
    handle = model.inp.register_forward_pre_hook(_typed_pre_hook)
    x = torch.randn(3, 4)
    assert torch.allclose(torch.jit.script(model)(x), model(x), atol=1e-6)
    handle.remove()


def test_script_with_hookbus_hooks_is_refused_naming_hookbus_the_modules_and_the_fix() -> None:
    model = _net()
    net = hookbus.torch.attach(model, hookbus.EventBus())
    net.post("out", lambda ctx: None)
    net.pre("inp", lambda ctx: None)
    with pytest.raises(RuntimeError, match="hookbus hooks") as caught:
        torch.jit.script(model)
    message = str(caught.value)
    assert "'inp', 'out'" in message
    assert "detach()" in message
    assert "try blocks" not in message
    with pytest.raises(RuntimeError, match="'out'"):
        torch.jit.script(model.out)  # a submodule alone: the same
    net.detach()
    x = torch.randn(3, 4)
    assert torch.allclose(torch.jit.script(model)(x), model(x), atol=1e-6)
    assert hook_state(model) == hook_state(_net())
    assert all("__prepare_scriptable__" not in vars(m) for m in model.modules())


def test_script_during_a_capture_is_refused_and_works_after_it() -> None:
    model = _net()
    x = torch.randn(3, 4)
    with hookbus.torch.capture(model, nn.Linear) as cache:
        with pytest.raises(RuntimeError, match=r"hookbus hooks.*'inp', 'out'"):
            torch.jit.script(model)
        model(x)
    scripted = torch.jit.script(model)
    assert torch.allclose(scripted(x), model(x), atol=1e-6)
    assert torch.allclose(cache["out"].output, model(x), atol=1e-6)
    assert all("__prepare_scriptable__" not in vars(m) for m in model.modules())


def test_a_copy_of_a_hooked_model_scripts_it_carries_no_hook() -> None:
    model = _net()
    net = hookbus.torch.attach(model, hookbus.EventBus())
    net.post("out", lambda ctx: None)
    twin = copy.deepcopy(model)
    x = torch.randn(3, 4)
    assert torch.allclose(torch.jit.script(twin)(x), model(x), atol=1e-6)
    assert hook_state(twin) == hook_state(_net())
    with pytest.raises(RuntimeError, match="hookbus hooks"):
        torch.jit.script(model)  # the original still has its hooks
    net.detach()


@pytest.mark.parametrize("kind", ["pre", "around", "post"])
def test_a_copy_scripts_whatever_kind_of_hook_the_original_has(kind: str) -> None:
    # A pre hook gives the module a swappable forward; its copy holds a stand-in,
    # which TorchScript cannot compile: the copy must drop it too.
    model = _net()
    net = hookbus.torch.attach(model, hookbus.EventBus())
    getattr(net, kind)("inp", _around if kind == "around" else (lambda ctx: None))
    twin = copy.deepcopy(model)
    x = torch.randn(3, 4)
    assert torch.allclose(torch.jit.script(twin)(x), model(x), atol=1e-6)
    assert all("forward" not in vars(m) for m in twin.modules())
    assert hook_state(twin) == hook_state(_net())
    net.detach()


def _around(ctx: CallContext) -> Iterator[None]:
    yield


def test_a_modules_own_prepare_scriptable_still_runs() -> None:
    class Prepared(nn.Linear):
        def __prepare_scriptable__(self) -> Any:
            self.prepared = True
            return self

    model = nn.Sequential(Prepared(2, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())
    with net.post("0", lambda ctx: None):
        pass
    net.detach()
    torch.jit.script(model)
    assert model[0].prepared


@pytest.mark.filterwarnings("ignore:hookbus.torch. capture:RuntimeWarning")  # ran nothing
def test_gpt2_with_hookbus_hooks_gets_the_same_refusal() -> None:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    with (
        hookbus.torch.capture(model, "transformer.h.1.mlp"),
        pytest.raises(RuntimeError, match=r"hookbus hooks.*'transformer\.h\.1\.mlp'"),
    ):
        torch.jit.script(model)
    assert all("__prepare_scriptable__" not in vars(m) for m in model.modules())


def test_operation_points_get_the_same_refusal() -> None:
    model = nn.Sequential(nn.Softmax(dim=-1))
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    net.operations("0", torch.softmax)
    with (
        bus.pre("0:softmax.0", lambda ctx: None),
        pytest.raises(RuntimeError, match=r"hookbus hooks.*'0'"),
    ):
        torch.jit.script(model)
    model(torch.ones(1, 2))  # the operations found: no hook, so nothing armed
    net.detach()
    x = torch.randn(2, 3)
    assert torch.allclose(torch.jit.script(model)(x), model(x), atol=1e-6)
    assert "__prepare_scriptable__" not in vars(model[0])
