"""Capture lifetimes and trees (issue 20, items 10, 11, 12 and 14).

10: a capture that is never entered installs nothing and records nothing.
11: a detached capture of a Hugging Face block's inputs holds no tensor in the graph and
    does not change after the call (its ``DynamicCache`` is a snapshot).
12: ``record.grad`` of an RNN fed a ``PackedSequence`` is a ``PackedSequence`` of gradients.
14: in backward hooks, ``ctx.arguments`` holds the gradients under their own names.
"""

from __future__ import annotations

import collections
import gc
import weakref
from typing import Any, List, Tuple

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence
from torch_helpers import TutorialNet, hook_state, tiny_gpt2

import hookbus
import hookbus.torch
from hookbus.torch._tree import iter_tensors


def _gpt2() -> Any:
    return tiny_gpt2()


# --- 10: a capture never entered ------------------------------------------------------


def test_a_capture_never_entered_installs_nothing_and_records_nothing() -> None:
    net = TutorialNet()
    before = hook_state(net)
    cache = hookbus.torch.capture(net, "*", inputs=True).cache  # the idiom of the issue
    assert hook_state(net) == before
    net(torch.ones(1, 2))
    assert len(cache) == 0


def test_a_capture_never_entered_keeps_no_activation_alive() -> None:
    net = TutorialNet()
    capture = hookbus.torch.capture(net, "fc1")
    x = torch.ones(1, 2)
    out = net.fc1(x)
    out_ref = weakref.ref(out)
    del out
    gc.collect()
    assert out_ref() is None
    assert len(capture.cache) == 0
    with capture as cache:  # entering later records from then on
        net(x)
    assert len(cache["fc1"]) == 1
    assert hook_state(net) == hook_state(TutorialNet())


@pytest.mark.filterwarnings("ignore:hookbus.torch. capture:RuntimeWarning")  # ran nothing
def test_a_gpt2_capture_never_entered_installs_nothing() -> None:
    model = _gpt2()
    before = hook_state(model)
    capture = hookbus.torch.capture(model, "transformer.h.*", inputs=True, grads=True)
    model(torch.randint(0, 100, (1, 4)))
    assert hook_state(model) == before
    assert len(capture.cache) == 0
    with capture as cache:
        assert hook_state(model) != before
    assert hook_state(model) == before
    assert len(cache) == 0


def test_a_capture_records_between_enter_and_exit_only_and_cannot_be_reentered() -> None:
    net = TutorialNet()
    capture = hookbus.torch.capture(net, "fc1")
    net(torch.ones(1, 2))
    with capture as cache:
        net(torch.ones(1, 2))
        with pytest.raises(RuntimeError, match="already running"):
            capture.__enter__()
    net(torch.ones(1, 2))
    assert len(cache["fc1"]) == 1
    with pytest.raises(RuntimeError, match="has ended"):
        capture.__enter__()


# --- 11: Hugging Face inputs ----------------------------------------------------------


def test_a_detached_capture_of_gpt2_block_inputs_is_a_snapshot_out_of_the_graph() -> None:
    model = _gpt2()
    ids = torch.randint(0, 100, (1, 5))
    with hookbus.torch.capture(model, "transformer.h.0", inputs=True) as cache:
        out = model(ids, use_cache=True)
    record = cache["transformer.h.0"]
    stored = [t for _, t in iter_tensors((record.args, record.kwargs, record.output))]
    assert stored
    assert not any(t.requires_grad for t in stored)  # detach=True: nothing in the graph
    kept = record.args[1]  # GPT2Block.forward(hidden_states, cache, ...)
    assert type(kept).__name__ == "DynamicCache"
    assert kept is not out.past_key_values  # a copy, not the live cache
    layers = [t for _, t in iter_tensors(kept)]
    assert layers  # block 0's keys and values are there
    # A snapshot taken after block 0 holds block 0's layer, not block 1's (which ran later).
    live_keys = out.past_key_values.layers[1].keys
    assert all(t.data_ptr() != live_keys.data_ptr() for t in layers)
    # And it does not change when the live cache grows (one generation step more).
    before = [(p, t.clone()) for p, t in iter_tensors(kept)]
    model(ids[:, -1:], out.past_key_values, use_cache=True)  # its cache, by position
    after = list(iter_tensors(kept))
    assert [p for p, _ in after] == [p for p, _ in before]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(after, before))


def test_a_gpt2_block_input_capture_keeps_no_later_layer_alive() -> None:
    model = _gpt2()
    ids = torch.randint(0, 100, (1, 5))
    with hookbus.torch.capture(model, "transformer.h.0", inputs=True) as cache:
        out = model(ids, use_cache=True)
    live_layer = out.past_key_values.layers[1]
    layer_keys = weakref.ref(live_layer.keys)
    del out, live_layer
    gc.collect()
    assert layer_keys() is None  # the cache kept no live layer of block 1
    assert len(cache["transformer.h.0"]) == 1


def test_a_hand_written_cache_object_is_a_snapshot() -> None:
    class Layer:
        def __init__(self) -> None:
            self.keys: Any = None

    class Cache:
        def __init__(self) -> None:
            self.layers = [Layer(), Layer()]

    class Block(nn.Module):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index
            self.lin = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor, cache: Cache) -> torch.Tensor:
            y = self.lin(x)
            cache.layers[self.index].keys = y
            return y

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = nn.ModuleList([Block(0), Block(1)])

        def forward(self, x: torch.Tensor, cache: Cache) -> torch.Tensor:
            for block in self.blocks:
                x = block(x, cache)
            return x

    model = Model()
    live = Cache()
    with hookbus.torch.capture(model, "blocks.0", inputs=True) as cache:
        model(torch.ones(1, 2, requires_grad=True), live)
    kept = cache["blocks.0"].args[1]
    assert kept is not live
    assert kept.layers[1].keys is None  # as it was when block 0 returned
    assert not kept.layers[0].keys.requires_grad
    assert torch.equal(kept.layers[0].keys, live.layers[0].keys.detach())


# --- 12: PackedSequence ---------------------------------------------------------------


@pytest.mark.parametrize("kind", [nn.GRU, nn.LSTM])
def test_grads_of_an_rnn_fed_a_packed_sequence(kind: Any) -> None:
    torch.manual_seed(0)
    rnn = kind(3, 4, batch_first=True)
    model = nn.ModuleDict({"rnn": rnn})
    x = torch.randn(2, 5, 3)
    packed = pack_padded_sequence(x, torch.tensor([5, 3]), batch_first=True)
    # Hand-written torch: the gradient of the packed output's data.
    output, _ = rnn(packed)
    data = output.data
    data.retain_grad()
    (data * torch.arange(data.numel()).view_as(data)).sum().backward()
    expected = data.grad
    rnn.zero_grad()
    with hookbus.torch.capture(model, "rnn", grads=True) as cache:
        output, _ = rnn(packed)
        (output.data * torch.arange(data.numel()).view_as(data)).sum().backward()
    grad = cache["rnn"].grad
    assert isinstance(grad[0], PackedSequence)
    assert torch.allclose(grad[0].data, expected, atol=1e-6)
    assert torch.equal(grad[0].batch_sizes, output.batch_sizes)  # the structure, kept
    assert isinstance(cache["rnn"].output[0], PackedSequence)
    assert torch.equal(cache["rnn"].output[0].data, output.data.detach())


# --- 14: backward hooks' arguments ----------------------------------------------------


def test_backward_hooks_see_the_gradients_under_their_own_names() -> None:
    net = TutorialNet()
    bus = hookbus.EventBus()
    seen: List[Any] = []

    def pre(ctx: hookbus.CallContext) -> None:
        seen.append(("backward_pre", list(ctx.arguments), ctx.arguments["grad_output"]))
        with pytest.raises(KeyError, match="grad_output"):
            ctx.arguments["input"]

    def post(ctx: hookbus.CallContext) -> None:
        seen.append(("backward", list(ctx.arguments), ctx.arguments["grad_output"]))
        with pytest.raises(KeyError, match="grad_output"):
            ctx.arguments["input"]

    with hookbus.torch.attach(net, bus) as attached:
        attached.backward_pre("fc2", pre)
        attached.backward("fc2", post)
        x = torch.full((1, 2), 0.1, requires_grad=True)
        (net(x) * 3).sum().backward()
    assert [(phase, names) for phase, names, _ in seen] == [
        ("backward_pre", ["grad_output"]),
        ("backward", ["grad_output"]),
    ]
    for _, _, grads in seen:
        assert isinstance(grads, tuple)
        assert len(grads) == 1
        assert torch.allclose(grads[0], torch.tensor([[3.0]]))  # d(3 * relu6(fc2)) / d fc2


def test_gpt2_backward_hooks_arguments_equal_hand_written_full_backward_hooks() -> None:
    model = _gpt2().train()
    model.config.use_cache = False
    for module in model.modules():  # dropout off, so both passes are the same function
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    ids = torch.randint(0, 100, (1, 6))
    mlp = model.transformer.h[1].mlp
    native: List[Any] = []
    handle = mlp.register_full_backward_pre_hook(lambda m, g: native.append(g[0].clone()))
    model(ids, labels=ids).loss.backward()
    handle.remove()
    model.zero_grad()
    ours: List[Any] = []

    def read(ctx: hookbus.CallContext) -> None:
        ours.append(ctx.arguments["grad_output"][0].clone())

    with hookbus.torch.attach(model, hookbus.EventBus()) as net:
        net.backward_pre("transformer.h.1.mlp", read)
        net.backward("transformer.h.1.mlp", read)
        model(ids, labels=ids).loss.backward()
    assert len(ours) == 2
    for grad in ours:
        assert torch.allclose(grad, native[0], atol=1e-6)


def test_a_backward_pre_hook_replaces_the_gradient_through_arguments() -> None:
    lin = nn.Linear(2, 1)
    model = nn.Sequential(lin)
    bus = hookbus.EventBus()

    def double(ctx: hookbus.CallContext) -> None:
        (grad,) = ctx.arguments["grad_output"]
        ctx.arguments["grad_output"] = (grad * 2,)

    x = torch.ones(1, 2, requires_grad=True)
    with hookbus.torch.attach(model, bus) as attached:
        attached.backward_pre("0", double)
        model(x).sum().backward()
    assert x.grad is not None
    assert torch.allclose(x.grad, 2 * lin.weight.detach(), atol=1e-6)


# --- the traversal: torch's pytree registry before the heuristic ----------------------


class Registered:
    """A user type registered with torch.utils._pytree: rebuilt by its node, not copied."""

    built_by_node = 0

    def __init__(self, hidden: torch.Tensor, note: str) -> None:
        self.hidden = hidden
        self.note = note


def _flatten_registered(value: Registered) -> Tuple[List[Any], Any]:
    return [value.hidden], value.note


def _unflatten_registered(children: List[Any], note: Any) -> Registered:
    Registered.built_by_node += 1
    return Registered(children[0], note)


def test_pytree_nodes_and_dict_kinds_are_rebuilt_by_torch_s_registry() -> None:
    from torch.utils import _pytree

    if Registered not in _pytree.SUPPORTED_NODES:
        _pytree.register_pytree_node(Registered, _flatten_registered, _unflatten_registered)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x: torch.Tensor) -> Any:
            h = self.lin(x)
            counts: Any = collections.defaultdict(list, {"h": h + 1})
            return {"node": Registered(h, "kept"), "counts": counts}

    model = Net()
    built = Registered.built_by_node
    with hookbus.torch.capture(model, "<root>", grads=True) as cache:
        out = model(torch.ones(1, 2))
        (out["node"].hidden.sum() * 2 + out["counts"]["h"].sum()).backward()
    stored = cache["<root>"].output
    assert Registered.built_by_node > built  # the node's own unflatten rebuilt it
    assert stored["node"] is not out["node"]
    assert stored["node"].note == "kept"
    assert not stored["node"].hidden.requires_grad
    assert isinstance(stored["counts"], collections.defaultdict)
    assert stored["counts"].default_factory is list
    assert [path for path, _ in iter_tensors(stored)] == [("node", 0), ("counts", "h")]
    grad = cache["<root>"].grad
    assert torch.allclose(grad["node"].hidden, torch.full((1, 2), 3.0))  # 2 here, 1 via h + 1
    assert torch.allclose(grad["counts"]["h"], torch.ones(1, 2))
