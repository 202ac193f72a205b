"""Wrappers are see-through: a selector written for the bare model works on the wrapped one.

DDP and FSDP1 are checked in 2 processes in test_training_stacks.py;
DataParallel (the same ``module.`` level as DDP), ``torch.compile`` and the checkpoint
wrapper are checked here, in one process.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any, Callable, List

import pytest
import torch
from torch import nn
from torch_helpers import TutorialNet, hook_state

import hookbus
import hookbus.torch
from hookbus import CallContext

BARE = ["<root>", "fc1", "relu", "fc2", "relu6"]


def _checkpoint_wrapped() -> nn.Module:
    if not torch.distributed.is_available():
        pytest.skip("the checkpoint wrapper lives in torch.distributed, absent from this build")
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        checkpoint_wrapper,
    )

    net = TutorialNet()
    net.fc1 = checkpoint_wrapper(net.fc1, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
    return net


WRAPPED: List[Any] = [
    pytest.param(lambda: nn.DataParallel(TutorialNet()), id="DataParallel"),
    pytest.param(lambda: torch.compile(TutorialNet(), backend="eager"), id="compile"),
    pytest.param(_checkpoint_wrapped, id="checkpoint_wrapper"),
    pytest.param(
        lambda: nn.DataParallel(torch.compile(_checkpoint_wrapped(), backend="eager")),
        id="all-three",
    ),
]


@pytest.mark.parametrize("wrap", WRAPPED)
def test_names_are_those_of_the_bare_model(wrap: Callable[[], nn.Module]) -> None:
    wrapped = wrap()
    with hookbus.torch.attach(wrapped, hookbus.EventBus()) as net:
        assert net.names == BARE
        assert set(hookbus.torch.bare_names(wrapped).values()) == {"", *BARE[1:]}


@pytest.mark.parametrize("wrap", WRAPPED[:1] + WRAPPED[2:3])
def test_a_selector_for_the_bare_model_hooks_the_wrapped_one_once_per_call(
    wrap: Callable[[], nn.Module],
) -> None:
    wrapped = wrap()
    x = torch.tensor([[0.1, -0.05]], requires_grad=True)
    expected = TutorialNet()(x)
    seen: List[str] = []

    def double(ctx: CallContext) -> None:
        seen.append(ctx.name)
        ctx.result = ctx.result * 2

    with hookbus.torch.attach(wrapped, hookbus.EventBus()) as net:
        net.post("fc1", double)
        net.post(nn.ReLU, lambda ctx: seen.append(ctx.name))
        out = wrapped(x)
        out.sum().backward()
    assert seen[:2] == ["fc1", "relu"]
    assert seen.count("relu") == 1  # the wrapper is no hook point of its own
    plain = TutorialNet()
    plain.fc1.register_forward_hook(lambda m, a, o: o * 2)
    assert torch.equal(out, plain(x))
    assert not torch.equal(out, expected)


def test_capture_under_a_checkpoint_wrapper_records_each_module_once_in_forward() -> None:
    wrapped = _checkpoint_wrapped()
    with hookbus.torch.capture(wrapped) as cache:
        wrapped(torch.ones(1, 2))
    assert list(cache) == BARE
    assert [len(cache[name]) for name in BARE] == [1] * 5


def test_selecting_a_wrapper_object_selects_what_it_wraps() -> None:
    wrapped = _checkpoint_wrapped()
    net = hookbus.torch.attach(wrapped, hookbus.EventBus())
    assert net.select(wrapped.fc1) == ["fc1"]
    assert net.name_of(wrapped.fc1) == net.name_of(wrapped.fc1._checkpoint_wrapped_module)
    assert net.module("fc1") is wrapped.fc1._checkpoint_wrapped_module
    assert net.raw_name("fc1") == "fc1._checkpoint_wrapped_module"
    net.detach()


def test_raw_names_keep_every_level_and_bare_names_maps_them() -> None:
    dp = nn.DataParallel(_checkpoint_wrapped())
    raw = hookbus.torch.attach(dp, hookbus.EventBus(), raw_names=True)
    assert raw.names == ["<root>", *(name for name, _ in dp.named_modules() if name)]
    assert "module.fc1._checkpoint_wrapped_module" in raw.names
    raw.detach()
    assert hookbus.torch.bare_names(dp) == {
        "": "",
        "module": "",
        "module.fc1": "fc1",
        "module.fc1._checkpoint_wrapped_module": "fc1",
        "module.relu": "relu",
        "module.fc2": "fc2",
        "module.relu6": "relu6",
    }
    with hookbus.torch.attach(dp, hookbus.EventBus(), prefix="net") as net:
        assert net.names == ["net", "net.fc1", "net.relu", "net.fc2", "net.relu6"]
        assert net.raw_name("net.fc2") == "module.fc2"
    with pytest.raises(TypeError, match="raw_names= takes True or False"):
        hookbus.torch.attach(dp, hookbus.EventBus(), raw_names="yes")  # type: ignore[arg-type]


def test_detaching_a_wrapped_model_leaves_every_module_as_before() -> None:
    wrapped = nn.DataParallel(_checkpoint_wrapped())
    before = hook_state(wrapped)
    with hookbus.torch.attach(wrapped, hookbus.EventBus()) as net:
        net.pre("*", lambda ctx: None)
        net.post("*", lambda ctx: None)
        net.backward("fc2", lambda ctx: None)
        wrapped(torch.ones(1, 2, requires_grad=True)).sum().backward()
    assert hook_state(wrapped) == before


def _lora(model: nn.Module, targets: List[str]) -> nn.Module:
    peft = pytest.importorskip("peft")
    config = peft.LoraConfig(target_modules=targets, r=2, init_lora_weights=False)
    return peft.get_peft_model(model, config)


def test_a_peft_model_has_the_names_of_the_model_it_adapts() -> None:
    torch.manual_seed(0)
    wrapped = _lora(TutorialNet(), ["fc1"])
    assert "base_model.model.fc1" in dict(wrapped.named_modules())
    with hookbus.torch.attach(wrapped, hookbus.EventBus()) as net:
        assert net.names[:2] == ["<root>", "fc1"]
        assert [n for n in net.names if "." not in n] == BARE
        assert "fc1.base_layer" in net.names  # the adapter's own modules keep their names
        assert net.raw_name("fc1") == "base_model.model.fc1"
    assert hookbus.torch.bare_names(wrapped)["base_model.model.fc2"] == "fc2"


def test_a_hook_on_an_adapted_module_of_a_peft_model_sees_the_adapted_output() -> None:
    torch.manual_seed(0)
    wrapped = _lora(TutorialNet(), ["fc1"]).eval()
    x = torch.tensor([[0.1, -0.05]])
    seen: List[Any] = []
    raw: List[Any] = []
    adapted = wrapped.get_submodule("base_model.model.fc1")
    with (
        hookbus.torch.attach(wrapped, hookbus.EventBus()) as net,
        adapted.register_forward_hook(lambda m, a, o: raw.append(o)),
    ):
        net.post("fc1", lambda ctx: seen.append(ctx.result))
        net.post("<root>", lambda ctx: seen.append("root"))
        wrapped(x)
    assert len(seen) == 2  # each once: the wrapper levels are no hook points
    assert seen[1] == "root"
    assert torch.equal(seen[0], raw[0])
    assert not torch.equal(raw[0], adapted.base_layer(x))  # the adapter changed it


def test_a_model_class_made_in_a_function_is_collected_once_its_models_are() -> None:
    # Telling wrappers apart caches each module class: a class made in a function must
    # not be kept by it, nor what its methods hold (here, a module shared by its models).
    def made() -> weakref.ref[type]:
        shared = nn.Linear(1, 1)

        class Local(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.shared = shared

        model = Local()
        hookbus.torch.attach(nn.DataParallel(model), hookbus.EventBus()).post("shared", print)
        assert hookbus.torch.bare_names(nn.Sequential(model)) == {
            "": "",
            "0": "0",
            "0.shared": "0.shared",
        }
        return weakref.ref(Local)

    local = made()
    gc.collect()
    assert local() is None
