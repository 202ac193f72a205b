"""``capture()`` and its cache: what a capture records (options, repeated calls, nested
outputs, gradients), in which window, as a snapshot out of the graph, within bounded
memory, and what it keeps once dropped."""

from __future__ import annotations

import collections
import gc
import threading
import warnings
import weakref
from collections import namedtuple
from typing import Any, Dict, List, Tuple

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence
from torch_helpers import TutorialNet, hook_state, tiny_gpt2

import hookbus
import hookbus.torch
from hookbus.torch._tree import iter_tensors

Pair = namedtuple("Pair", ["first", "second"])


class Multi(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.tup = nn.Identity()

    def forward(self, x: torch.Tensor) -> Dict[str, Any]:
        h = self.lin(x)
        return {"pair": Pair(h, h * 2), "list": [h + 1], "n": 3, "unused": h * 0}


# --- what a capture records ---------------------------------------------------------------


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


# --- a capture records between its enter and its exit only --------------------------------


def _gpt2() -> Any:
    return tiny_gpt2()


@pytest.mark.filterwarnings("ignore:hookbus.torch. capture:RuntimeWarning")  # ran nothing
def test_a_call_under_way_when_the_capture_ends_records_nothing() -> None:
    net = TutorialNet()
    with hookbus.torch.capture(net, "fc1") as cache:
        (hook,) = net.fc1._forward_hooks.values()  # what torch's forward already holds
    hook(net.fc1, (torch.ones(1, 2),), torch.ones(1, 3))
    assert len(cache) == 0
    assert not net.fc1._forward_hooks


def test_a_capture_never_entered_installs_nothing_and_records_nothing() -> None:
    net = TutorialNet()
    before = hook_state(net)
    cache = hookbus.torch.capture(net, "*", inputs=True).cache  # .cache, never entered
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


# --- a detached record is a snapshot out of the graph -------------------------------------


def _tensors_reachable_from(root: Any) -> List[torch.Tensor]:
    """Every tensor the object graph of ``root`` holds, found without hookbus's traversal."""
    found: List[torch.Tensor] = []
    seen = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, nn.Module)):
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            found.append(obj)
        else:
            stack.extend(gc.get_referents(obj))
    return found


def test_a_detached_capture_of_gpt2_stores_no_tensor_that_requires_grad() -> None:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64
    )
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 100, (2, 8))
    with hookbus.torch.capture(model, ["<root>", "transformer", "transformer.h.*"]) as cache:
        out = model(ids, use_cache=True)
    cached = cache["<root>"].output.past_key_values
    assert type(cached).__name__ == "DynamicCache"
    assert cached is not out.past_key_values  # a snapshot, not the live cache
    stored = _tensors_reachable_from(cache)
    assert len(stored) > 10
    assert not [t for t in stored if t.requires_grad]
    assert torch.equal(cached.layers[0].keys, out.past_key_values.layers[0].keys)


def test_a_detached_capture_cuts_tensors_in_plain_objects_and_keeps_cycles() -> None:
    class Holder:
        def __init__(self, tensor: torch.Tensor) -> None:
            self.tensor = tensor
            self.me = self
            self.label = "kept"

    class Out(nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return Holder(x * 2)

    model = nn.Sequential(Out())
    x = torch.ones(2, requires_grad=True)
    with hookbus.torch.capture(model, "0") as cache:
        live = model(x)
    stored = cache["0"].output
    assert live.tensor.requires_grad
    assert not stored.tensor.requires_grad
    assert stored.me is stored
    assert stored.label == "kept"


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


# --- trees: model outputs, PackedSequence, pytree nodes -----------------------------------


def test_a_captured_model_output_is_a_working_copy_of_its_own_class() -> None:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=16)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 50, (1, 4))
    with hookbus.torch.capture(model, ["<root>", "transformer"], grads=True) as cache:
        live = model(ids, labels=ids, use_cache=False)
        live.loss.backward()
    stored = cache["<root>"].output
    assert type(stored) is type(live)
    assert list(stored.keys()) == list(live.keys()) == ["loss", "logits"]
    assert stored.logits is stored["logits"] is stored[1]  # attribute and item: one tensor
    assert stored.to_tuple()[0] is stored.loss
    assert stored.past_key_values is None
    assert stored.hidden_states is None
    assert torch.equal(stored.logits, live.logits)
    assert not stored.logits.requires_grad
    assert not stored.loss.requires_grad
    assert stored is not live
    assert stored.logits is not live.logits
    stored.logits = torch.zeros(1)  # the copy keeps ModelOutput's own attribute/item sync
    assert stored["logits"] is stored.logits
    grad = cache["transformer"].grad  # a ModelOutput of gradients, in the output's shape
    assert type(grad) is type(cache["transformer"].output)
    assert grad.last_hidden_state.shape == cache["transformer"].output.last_hidden_state.shape
    assert torch.equal(cache["<root>"].grad.loss, torch.tensor(1.0))
    with hookbus.torch.capture(model, "<root>", grads=True) as cache:
        model(ids, labels=ids, use_cache=False)  # no backward: no gradient arrives
    missing = cache["<root>"].grad
    assert type(missing) is type(stored)
    assert list(missing.keys()) == []
    assert missing.loss is None
    assert missing.logits is None


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


# --- bounded memory: keep=, dtype=, positions=, sink= -------------------------------------


class SeqNet(nn.Module):
    """A hand-written sequence model: (batch, seq, features) in, the same shape out."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inp = nn.Linear(8, 16)
        self.act = nn.ReLU()
        self.out = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.inp(x)))


def _native_outputs(model: nn.Module, names: List[str], run: Any) -> Dict[str, List[Any]]:
    """What hand-written torch forward hooks see: every call's output, detached."""
    seen: Dict[str, List[Any]] = {name: [] for name in names}
    modules = dict(model.named_modules())
    handles = [
        modules[name].register_forward_hook(
            lambda m, a, o, name=name: seen[name].append(o.detach().clone())
        )
        for name in names
    ]
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    return seen


def _held_bytes_after(forwards: int, **options: Any) -> int:
    model = SeqNet()
    with hookbus.torch.capture(model, "*", inputs=True, **options) as cache, torch.no_grad():
        for step in range(forwards):
            model(torch.full((2, 6, 8), float(step)))
    return cache.nbytes()


def test_memory_after_1000_forwards_with_keep_last_equals_memory_after_10() -> None:
    after_10 = _held_bytes_after(10, keep="last")
    after_1000 = _held_bytes_after(1000, keep="last")
    assert after_10 == after_1000
    # One forward's tensors, counted by hand (float32, batch 2, 6 positions): x, the
    # output of inp, of act and of out; each module's input is its caller's output.
    assert after_10 == sum(2 * 6 * width * 4 for width in (8, 16, 16, 8))
    # The measurement sees growth where there is some.
    assert _held_bytes_after(20) == 2 * _held_bytes_after(10)


def test_memory_of_a_gpt2_capture_with_keep_last_stays_flat() -> None:
    model = _gpt2()
    ids = torch.randint(0, 100, (1, 8))
    sizes = []
    with hookbus.torch.capture(model, "transformer.h.*", keep="last") as cache, torch.no_grad():
        for step in range(40):
            model(ids, use_cache=False)
            if step in (9, 39):
                sizes.append(cache.nbytes())
    assert sizes[0] == sizes[1] > 0
    assert cache["transformer.h.0"].count == 40
    assert len(cache["transformer.h.0"]) == 1


def test_keep_an_int_keeps_the_last_calls_with_their_indices() -> None:
    model = SeqNet()
    xs = [torch.randn(2, 3, 8) for _ in range(5)]

    def run() -> None:
        for x in xs:
            model(x)

    native = _native_outputs(model, ["inp", "out"], run)
    with hookbus.torch.capture(model, ["inp", "out"], keep=2) as cache:
        run()
    record = cache["inp"]
    assert len(record) == 2
    assert record.count == 5
    assert [call.index for call in record.calls] == [3, 4]
    for got, expected in zip(record.outputs, native["inp"][-2:]):
        assert torch.allclose(got, expected, atol=1e-6)
    assert torch.allclose(cache["out"].output, native["out"][-1], atol=1e-6)


def test_dtype_stores_floating_tensors_in_that_dtype() -> None:
    model = nn.ModuleDict({"emb": nn.Embedding(10, 4), "lin": nn.Linear(4, 4)})
    ids = torch.tensor([[1, 2, 3]])
    with hookbus.torch.capture(model, "*", inputs=True, dtype=torch.float16) as cache:
        hidden = model["emb"](ids)
        out = model["lin"](hidden)
    assert cache["emb"].args[0].dtype == torch.int64  # not floating: stored as it is
    assert torch.equal(cache["emb"].args[0], ids)
    assert cache["lin"].output.dtype == torch.float16
    assert torch.allclose(cache["lin"].output.float(), out.detach(), atol=1e-3)
    assert torch.equal(cache["lin"].output, out.detach().half())


def test_positions_store_a_copy_of_the_chosen_positions_only() -> None:
    model = SeqNet()
    x = torch.randn(2, 7, 8)
    native = _native_outputs(model, ["inp"], lambda: model(x))["inp"][0]
    with hookbus.torch.capture(model, "inp", positions=-1) as last:
        model(x)
    stored = last["inp"].output
    assert stored.shape == (2, 1, 16)  # an index keeps the dimension
    assert torch.allclose(stored, native[:, -1:], atol=1e-6)
    assert last.nbytes() == 2 * 16 * 4  # a copy: the whole output is not kept alive
    with hookbus.torch.capture(model, "inp", positions=[0, 2], dim=1) as some:
        model(x)
    assert torch.allclose(some["inp"].output, native[:, [0, 2]], atol=1e-6)
    with hookbus.torch.capture(model, "inp", positions=slice(0, 1), dim=0) as first:
        model(x)
    assert torch.allclose(first["inp"].output, native[:1], atol=1e-6)
    with (
        pytest.raises(IndexError, match="positions= selects past a dimension 1 of size 7"),
        hookbus.torch.capture(model, "inp", positions=[9]),
    ):
        model(x)


def test_positions_on_gpt2_blocks_equal_hand_written_hooks() -> None:
    model = _gpt2()
    ids = torch.randint(0, 100, (2, 6))
    names = ["transformer.h.0", "transformer.h.1"]
    native = _native_outputs(model, names, lambda: model(ids))
    with hookbus.torch.capture(
        model, "transformer.h.*", keep="last", positions=-1, dtype=torch.float64
    ) as cache:
        model(ids)
    for name in names:
        expected = native[name][0][:, -1:].double()
        assert cache[name].output.dtype == torch.float64
        assert torch.allclose(cache[name].output, expected, atol=1e-6)


def test_a_sink_receives_each_call_and_the_cache_stores_none() -> None:
    model = SeqNet()
    received: List[Tuple[str, int, torch.Tensor]] = []

    def sink(name: str, call: hookbus.torch.Call) -> None:
        received.append((name, call.index, call.output))

    xs = [torch.randn(1, 2, 8) for _ in range(3)]
    native = _native_outputs(model, ["out"], lambda: [model(x) for x in xs])["out"]
    with hookbus.torch.capture(model, "out", sink=sink, dtype=torch.float64) as cache:
        for x in xs:
            model(x)
    assert [(name, index) for name, index, _ in received] == [("out", 0), ("out", 1), ("out", 2)]
    for (_, _, got), expected in zip(received, native):
        assert got.dtype == torch.float64
        assert torch.allclose(got, expected.double(), atol=1e-6)
    assert len(cache) == 0
    assert cache.nbytes() == 0
    with pytest.raises(KeyError, match="sends its calls to its sink"):
        cache["out"]


def test_a_sink_that_keeps_the_call_gets_its_gradient_at_backward() -> None:
    model = SeqNet()
    calls: List[hookbus.torch.Call] = []
    x = torch.randn(1, 2, 8)
    out = model(x)
    weights = torch.randn_like(out)
    expected = weights  # d(sum(out * weights)) / d out
    with hookbus.torch.capture(model, "out", grads=True, sink=lambda _, c: calls.append(c)):
        (model(x) * weights).sum().backward()
    (call,) = calls
    assert torch.allclose(call.grad, expected, atol=1e-6)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"keep": 0}, ValueError, "keep= takes 'all', 'last' or a positive int"),
        ({"keep": "first"}, ValueError, "keep= takes 'all', 'last' or a positive int"),
        ({"keep": True}, ValueError, "keep= takes 'all', 'last' or a positive int"),
        ({"dtype": torch.int8}, TypeError, "dtype= takes a floating-point torch.dtype"),
        ({"dtype": "half"}, TypeError, "dtype= takes a floating-point torch.dtype"),
        ({"positions": "last"}, TypeError, "positions= takes an int, a slice or a list"),
        ({"positions": []}, TypeError, "positions= takes a non-empty list of ints"),
        ({"positions": 0, "dim": -1}, TypeError, "dim= takes an int >= 0"),
        ({"sink": "file.pt"}, TypeError, "sink= takes a callable sink"),
    ],
)
def test_bad_bounding_options_are_refused_at_capture(
    options: Dict[str, Any], error: type, message: str
) -> None:
    model = SeqNet()
    with pytest.raises(error, match=message):
        hookbus.torch.capture(model, **options)
    assert not model.inp._forward_hooks


def test_a_sink_on_gpt2_receives_what_hand_written_hooks_see_and_their_gradients() -> None:
    model = _gpt2()
    names = ["transformer.h.0", "transformer.h.1"]
    batches = [torch.randint(0, 100, (1, 6)) for _ in range(3)]
    native: Dict[str, List[torch.Tensor]] = {name: [] for name in names}
    native_grads: Dict[str, List[torch.Tensor]] = {name: [] for name in names}
    modules = dict(model.named_modules())

    def keep(name: str) -> Any:
        def hook(module: nn.Module, args: Any, output: torch.Tensor) -> None:
            native[name].append(output.detach()[:, -1:])
            output.register_hook(lambda grad: native_grads[name].append(grad[:, -1:]))

        return hook

    handles = [modules[name].register_forward_hook(keep(name)) for name in names]
    for ids in batches:
        model(ids).logits.pow(2).sum().backward()
    for handle in handles:
        handle.remove()
    received: List[Tuple[str, hookbus.torch.Call]] = []
    with hookbus.torch.capture(
        model, names, sink=lambda name, call: received.append((name, call)),
        positions=-1, grads=True,
    ) as cache:  # fmt: skip
        for ids in batches:
            model(ids).logits.pow(2).sum().backward()
    assert len(cache) == 0
    assert [name for name, _ in received] == names * 3
    for name in names:
        calls = [call for got, call in received if got == name]
        for call, output, grad in zip(calls, native[name], native_grads[name]):
            torch.testing.assert_close(call.output, output, rtol=0, atol=1e-6)
            torch.testing.assert_close(call.grad, grad, rtol=0, atol=1e-6)


# --- threads, and what a capture keeps once dropped ---------------------------------------


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
