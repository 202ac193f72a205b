"""Captures with bounded memory (issue 22, section 3): keep=, dtype=, positions=, sink=."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import pytest
import torch
from torch import nn
from torch_helpers import tiny_gpt2

import hookbus.torch


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


def _gpt2() -> Any:
    return tiny_gpt2()


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
