"""capture(): options, repeated calls, nested outputs, the cache mapping, gradients."""

from __future__ import annotations

import gc
import threading
import warnings
import weakref
from collections import namedtuple
from typing import Any, Dict

import pytest
import torch
from torch import nn
from torch_helpers import TutorialNet, hook_state

import hookbus
import hookbus.torch

Pair = namedtuple("Pair", ["first", "second"])


class Multi(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.tup = nn.Identity()

    def forward(self, x: torch.Tensor) -> Dict[str, Any]:
        h = self.lin(x)
        return {"pair": Pair(h, h * 2), "list": [h + 1], "n": 3, "unused": h * 0}


def test_capture_defaults_detach_and_the_mapping() -> None:
    net = TutorialNet()
    x = torch.full((2, 2), 0.1, requires_grad=True)
    with hookbus.torch.capture(net, ["fc1", "fc2"]) as cache:
        out = net(x)
    assert list(cache) == ["fc1", "fc2"]
    assert len(cache) == 2
    assert not cache["fc1"].output.requires_grad  # detached by default
    assert torch.equal(cache["fc2"].output, out.detach())
    assert cache["fc1"].args is None  # inputs not asked for
    with pytest.raises(KeyError, match="'relu' was not captured"):
        cache["relu"]


def test_selected_but_not_called_says_so() -> None:
    model = nn.ModuleDict({"a": nn.Linear(1, 1), "b": nn.Linear(1, 1)})
    with hookbus.torch.capture(model, "*") as cache:
        model["a"](torch.ones(1, 1))
    with pytest.raises(KeyError, match="'b' was selected but not called"):
        cache["b"]


def test_detach_false_keeps_the_graph_and_clone_copies() -> None:
    net = TutorialNet()
    x = torch.full((2, 2), 0.1, requires_grad=True)
    with hookbus.torch.capture(net, "fc1", detach=False) as cache:
        net(x)
    assert cache["fc1"].output.requires_grad
    with hookbus.torch.capture(net, "fc1", clone=True) as cloned:
        out = net.fc1(x)
    assert cloned["fc1"].output.data_ptr() != out.data_ptr()
    assert torch.equal(cloned["fc1"].output, out.detach())


def test_device_option_moves_tensors() -> None:
    net = TutorialNet()
    with hookbus.torch.capture(net, "fc2", device="cpu", inputs=True) as cache:
        net(torch.ones(1, 2))
    assert cache["fc2"].output.device == torch.device("cpu")
    assert cache["fc2"].args[0].device == torch.device("cpu")
    with pytest.raises(RuntimeError):
        hookbus.torch.capture(net, "fc2", device="no-such-device")


def test_repeated_calls_are_kept_in_order() -> None:
    net = TutorialNet()
    with hookbus.torch.capture(net, "fc1", inputs=True) as cache:
        for value in (1.0, 2.0, 3.0):
            net(torch.full((1, 2), value))
    record = cache["fc1"]
    assert len(record) == 3
    assert [a[0][0, 0].item() for a in (c.args for c in record.calls)] == [1.0, 2.0, 3.0]
    assert torch.equal(record.output, record.outputs[-1])
    assert [c.index for c in record.calls] == [0, 1, 2]


def test_nested_outputs_keep_their_shape_and_types() -> None:
    model = Multi()
    with hookbus.torch.capture(model, "<root>", grads=True) as cache:
        out = model(torch.ones(1, 2))
        (out["pair"].second.sum() + out["list"][0].sum()).backward()
    stored = cache["<root>"].output
    assert isinstance(stored["pair"], Pair)
    assert stored["n"] == 3
    assert torch.equal(stored["pair"].second, out["pair"].second.detach())
    assert not stored["list"][0].requires_grad
    grad = cache["<root>"].grad
    assert grad["pair"].first.tolist() == [[3.0, 3.0]]  # h: 2 through second, 1 through list
    assert grad["pair"].second.tolist() == [[1.0, 1.0]]
    assert grad["list"][0].tolist() == [[1.0, 1.0]]
    assert grad["unused"] is None  # no gradient reached that tensor


def test_gradients_per_call_of_a_reused_module() -> None:
    lin = nn.Linear(2, 2, bias=False)
    model = nn.ModuleDict({"lin": lin})
    with hookbus.torch.capture(model, "lin", grads=True) as cache:
        a = lin(torch.ones(1, 2))
        b = lin(a)
        (a.sum() * 0 + b.sum() * 2).backward()
    first, second = cache["lin"].grads
    assert second.tolist() == [[2.0, 2.0]]
    assert torch.allclose(first, torch.full((1, 2), 2.0) @ lin.weight.detach())


def test_kwargs_inputs_are_captured() -> None:
    class Kw(nn.Module):
        def forward(self, *, hidden_states: torch.Tensor) -> torch.Tensor:
            return hidden_states + 1

    model = nn.ModuleDict({"kw": Kw()})
    with hookbus.torch.capture(model, "kw", inputs=True) as cache:
        model["kw"](hidden_states=torch.zeros(2))
    assert cache["kw"].args == ()
    assert cache["kw"].kwargs["hidden_states"].tolist() == [0.0, 0.0]


def test_capture_cleans_up_even_when_forward_raises() -> None:
    net = TutorialNet()
    before = hook_state(net)
    with pytest.raises(RuntimeError), hookbus.torch.capture(net, "*", inputs=True, grads=True):
        net(torch.ones(3, 5))
    assert hook_state(net) == before


def test_capture_rejects_bad_options_and_selectors_without_leaving_hooks() -> None:
    net = TutorialNet()
    before = hook_state(net)
    with pytest.raises(TypeError, match="detach= takes True or False"):
        hookbus.torch.capture(net, "fc1", detach="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no module named 'fc'; close names: 'fc2', 'fc1'"):
        hookbus.torch.capture(net, "fc")
    assert hook_state(net) == before


def test_a_compiled_wrapper_is_unwrapped_to_eager_names() -> None:
    net = TutorialNet()
    compiled = torch.compile(net)
    attached = hookbus.torch.attach(compiled, hookbus.EventBus())
    assert attached.names[:2] == ["<root>", "fc1"]
    assert attached.model is net
    attached.detach()


@pytest.mark.parametrize("inputs", [False, True])
def test_a_capture_installs_one_plain_native_forward_hook_per_selected_module(
    inputs: bool,
) -> None:
    net = TutorialNet()
    before = hook_state(net)
    with hookbus.torch.capture(net, nn.Linear, inputs=inputs) as cache:
        assert [len(m._forward_hooks) for m in (net, net.fc1, net.relu, net.fc2)] == [0, 1, 0, 1]
        assert not net.fc1._forward_pre_hooks
        assert not net.fc1._forward_hooks_always_called  # a raising forward records nothing
        assert len(net.fc1._forward_hooks_with_kwargs) == int(inputs)
        net(torch.ones(1, 2))
    assert list(cache) == ["fc1", "fc2"]
    assert (cache["fc1"].args is not None) is inputs
    assert hook_state(net) == before


@pytest.mark.filterwarnings("ignore:hookbus.torch. capture:RuntimeWarning")  # ran nothing
def test_a_call_under_way_when_the_capture_ends_records_nothing() -> None:
    net = TutorialNet()
    with hookbus.torch.capture(net, "fc1") as cache:
        (hook,) = net.fc1._forward_hooks.values()  # what torch's forward already holds
    hook(net.fc1, (torch.ones(1, 2),), torch.ones(1, 3))
    assert len(cache) == 0
    assert not net.fc1._forward_hooks


def test_record_calls_are_indexed_by_position_even_after_racing_threads() -> None:
    net = TutorialNet()
    with hookbus.torch.capture(net, "fc1") as cache:
        net(torch.ones(1, 2))
        net(torch.ones(1, 2))
    record = cache["fc1"]
    # Two threads that appended at once took the same provisional index.
    record._calls[1].index = 0
    assert [call.index for call in record.calls] == [0, 1]
    # And counted one call for two: the kept calls are a floor for the count.
    record._count = 1
    assert record.count == 2
    assert [call.index for call in record.calls] == [0, 1]


def test_a_capture_on_a_compiled_model_warns_nothing_and_leaves_no_hook() -> None:
    # Its hooks take effect (a forward swap makes torch recompile): nothing to warn.
    net = TutorialNet()
    before = hook_state(net)
    compiled = torch.compile(net, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with hookbus.torch.capture(compiled, nn.Linear) as cache:
            compiled(torch.ones(1, 2))
    assert list(cache) == ["fc1", "fc2"]
    assert hook_state(net) == before
    assert "forward" not in vars(net.fc1)


@pytest.mark.parametrize("inputs", [False, True])
def test_a_capture_keeps_neither_the_model_nor_activations_once_dropped(inputs: bool) -> None:
    net = TutorialNet()
    x = torch.ones(1, 2)
    capture = hookbus.torch.capture(net, inputs=inputs)
    with capture as cache:
        out = net(x)
    stored = weakref.ref(cache["fc1"].output)
    model_ref, x_ref = weakref.ref(net), weakref.ref(x)
    gc.disable()  # freed by reference counting alone: no cycle holds them
    try:
        del net, out
        assert model_ref() is None  # the ended capture holds no module
        del cache, capture, x
        assert stored() is None
        assert x_ref() is None
    finally:
        gc.enable()


def test_a_graph_kept_after_a_grads_capture_holds_no_record_and_records_no_grad() -> None:
    net = TutorialNet()
    with hookbus.torch.capture(net, "fc1", grads=True) as cache:
        out = net(torch.ones(1, 2, requires_grad=True))
    stored = weakref.ref(cache["fc1"].output)
    out.sum().backward(retain_graph=True)  # after the capture ended
    assert cache["fc1"].grad is None
    gc.disable()
    try:
        del cache
        assert stored() is None  # the graph, still alive, kept none of the capture's records
    finally:
        gc.enable()
    assert out.grad_fn is not None


def test_threads_capture_one_model_concurrently_like_dataparallel_replicas() -> None:
    net = TutorialNet()
    with hookbus.torch.capture(net, "fc2") as cache:
        threads = [
            threading.Thread(target=lambda: [net(torch.ones(1, 2)) for _ in range(100)])
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert len(cache["fc2"]) == 200
    assert [call.index for call in cache["fc2"].calls] == list(range(200))
