"""Activation patching (``patch``): a module returns a captured output instead of running,
checked against the hand-written torch way (an instance ``forward`` replacement, or a
native forward hook for positions). ``patch(positions=...)`` keeps every output shape a
capture takes (a namedtuple, a torch return type)."""

from __future__ import annotations

import collections
import copy
from typing import Any

import pytest
import torch
from torch import nn
from torch_helpers import CountedNet, hand_skipped, tiny_gpt2

import hookbus
import hookbus.torch


@pytest.fixture
def net() -> CountedNet:
    torch.manual_seed(0)
    return CountedNet()


@pytest.fixture(scope="module")
def gpt2() -> Any:
    return tiny_gpt2()


@pytest.fixture
def bus() -> hookbus.EventBus:
    return hookbus.EventBus()


def test_a_copy_made_while_patched_runs_its_own_forward_and_drops_the_swap(
    net: CountedNet,
) -> None:
    x = torch.ones(1, 3)
    with hookbus.torch.patch(net, {"block": torch.zeros(1, 3)}):
        twin = copy.deepcopy(net)
        assert torch.equal(twin.block(x), torch.tanh(twin.block.inner(x)) + x)
        assert "forward" not in vars(twin.block)
        assert torch.equal(net.block(x), torch.zeros(1, 3))


def _fail() -> None:
    raise ZeroDivisionError("the block failed")


def test_patch_returns_the_cached_output_without_running_forward(net: CountedNet) -> None:
    clean, corrupt = torch.randn(2, 2), torch.randn(2, 2)
    with hookbus.torch.capture(net, "block") as cache:
        net(clean)
    calls = net.block.calls
    expected = hand_skipped(net, net.block, cache["block"].output, corrupt)
    with hookbus.torch.patch(net, cache) as patched:
        got = net(corrupt)
    assert isinstance(patched, hookbus.torch.Patch)
    assert net.block.calls == calls
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    assert "forward" not in vars(net.block)


def test_patch_positions_on_gpt2_equals_a_hand_written_hook(gpt2: Any) -> None:
    clean, corrupt = torch.tensor([[1, 2, 3, 4, 5]]), torch.tensor([[9, 8, 7, 6, 5]])
    block = gpt2.transformer.h[0]
    with torch.no_grad():
        with hookbus.torch.capture(gpt2, "transformer.h.0") as cache:
            gpt2(clean)
        stored = cache["transformer.h.0"].output

        def by_hand(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
            output = output.clone()
            output[:, [1, 3]] = stored[:, [1, 3]]
            return output

        handle = block.register_forward_hook(by_hand)
        expected = gpt2(corrupt).logits
        handle.remove()
        with hookbus.torch.patch(gpt2, cache, "transformer.h.0", positions=[1, 3]):
            got = gpt2(corrupt).logits
        unpatched = gpt2(corrupt).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    assert not torch.allclose(got, unpatched)
    assert len(block._forward_hooks) == 0


def test_patch_of_every_block_reproduces_the_clean_run(gpt2: Any) -> None:
    clean, corrupt = torch.tensor([[1, 2, 3, 4]]), torch.tensor([[4, 3, 2, 1]])
    with torch.no_grad():
        with hookbus.torch.capture(gpt2, "transformer.h.*") as cache:
            expected = gpt2(clean).logits
        with hookbus.torch.patch(gpt2, cache, "transformer.h.1"):
            got = gpt2(corrupt).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_patch_is_undone_when_the_block_raises(net: CountedNet) -> None:
    with hookbus.torch.capture(net, "*") as cache:
        net(torch.ones(1, 2))
    for positions in (None, 0):
        patching = hookbus.torch.patch(net, cache, ["block", "head"], positions=positions, dim=0)
        with pytest.raises(ZeroDivisionError), patching:
            _fail()
    assert all("forward" not in vars(m) for m in net.modules())
    assert all(len(m._forward_hooks) == 0 for m in net.modules())


def test_patches_nest_and_share_the_swap_with_skipping_pre_hooks(
    net: CountedNet, bus: hookbus.EventBus
) -> None:
    outer, inner = torch.full((1, 3), 1.0), torch.full((1, 3), 2.0)
    hookbus.torch.attach(net, bus)
    pre = bus.pre("block", lambda ctx: None)
    x = torch.ones(1, 3)
    with hookbus.torch.patch(net, {"block": outer}):
        with hookbus.torch.patch(net, {"block": inner}):
            assert torch.equal(net.block(x), inner)
        assert torch.equal(net.block(x), outer)
        pre.remove()  # the patch still holds the swap
        assert torch.equal(net.block(x), outer)
    assert "forward" not in vars(net.block)
    assert net.block.calls == 0


def test_patch_takes_the_call_asked_for(net: CountedNet) -> None:
    with hookbus.torch.capture(net, "block") as cache:
        net(torch.zeros(1, 2))
        net(torch.ones(1, 2))
    first = cache["block"].calls[0].output
    with hookbus.torch.patch(net, cache, call=0):
        assert torch.equal(net.block(torch.randn(1, 3)), first)
    with pytest.raises(IndexError, match=r"call=2 .* 'block', which has 2 recorded calls"):
        hookbus.torch.patch(net, cache, call=2)


def test_patch_errors_name_the_module_and_shapes(net: CountedNet) -> None:
    with pytest.raises(ValueError, match="no module named 'blok'"):
        hookbus.torch.patch(net, {"block": torch.zeros(1)}, "blok")
    with pytest.raises(KeyError, match="'head'"):
        hookbus.torch.patch(net, {"block": torch.zeros(1)}, "head")
    with pytest.raises(ValueError, match="holds no module of this model"):
        hookbus.torch.patch(net, {"nope": torch.zeros(1)})
    with pytest.raises(TypeError, match="needs a cache"):
        hookbus.torch.patch(net, [torch.zeros(1)])  # type: ignore[arg-type]
    with (
        hookbus.torch.patch(net, {"block": torch.zeros(1, 4)}, positions=0),
        pytest.raises(
            ValueError,
            match=r"'block': the output has shape \(2, 3\) and the "
            r"stored one \(1, 4\)",
        ),
    ):
        net.block(torch.ones(2, 3))
    assert all("forward" not in vars(m) for m in net.modules())


def test_patch_names_the_captured_modules_quoted_not_as_a_count() -> None:
    """A module named "0" read as a count: 'captured: 0' said no module was captured."""
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))
    with hookbus.torch.capture(model, "0") as cache:
        model(torch.ones(1, 2))
    with pytest.raises(KeyError) as refused, hookbus.torch.patch(model, cache, "2"):
        pass
    assert "module '2' was not captured; captured: '0'" in str(refused.value)
    with hookbus.torch.capture(model, ["0", "2"]) as both:
        model(torch.ones(1, 2))
    with pytest.raises(KeyError, match=r"captured: '0', '2'"):
        both["1"]


def test_patch_without_positions_on_gpt2_equals_a_hand_written_forward_replacement(
    gpt2: Any,
) -> None:
    clean, corrupt = torch.tensor([[1, 2, 3, 4, 5]]), torch.tensor([[9, 8, 7, 6, 5]])
    block = gpt2.transformer.h[0]
    with torch.no_grad():
        with hookbus.torch.capture(gpt2, "transformer.h.0") as cache:
            gpt2(clean)
        stored = cache["transformer.h.0"].output
        expected = hand_skipped(gpt2, block, stored, corrupt).logits
        with hookbus.torch.patch(gpt2, cache, "transformer.h.0"):
            got = gpt2(corrupt).logits
        unpatched = gpt2(corrupt).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    assert not torch.allclose(got, unpatched)
    assert "forward" not in vars(block)


def test_patch_positions_on_a_hand_written_model_equals_a_hand_written_hook(
    net: CountedNet,
) -> None:
    clean, corrupt = torch.randn(2, 5, 2), torch.randn(2, 5, 2)  # (batch, seq, features)
    with torch.no_grad(), hookbus.torch.capture(net, "block") as cache:
        net(clean)
    stored = cache["block"].output

    def by_hand(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        output = output.clone()
        output[:, [0, 3]] = stored[:, [0, 3]]
        return output

    handle = net.block.register_forward_hook(by_hand)
    expected = net(corrupt)
    handle.remove()
    with hookbus.torch.patch(net, cache, positions=[0, 3]):
        got = net(corrupt)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    assert not torch.allclose(got, net(corrupt))
    assert len(net.block._forward_hooks) == 0


# --- patch(positions=...) keeps the output's type -----------------------------------------


Output = collections.namedtuple("Output", "hidden attention")


class ReturnsNamedTuple(nn.Module):
    def forward(self, x: torch.Tensor) -> Output:
        return Output(x * 2, x * 3)


def test_patching_positions_keeps_a_namedtuple_output() -> None:
    """Many models return namedtuples; patching some positions must return the same
    namedtuple type with those positions replaced, as for a tuple."""
    model = nn.Sequential(ReturnsNamedTuple())
    with hookbus.torch.capture(model, "0") as cache:
        model(torch.ones(1, 3, 2))
    with hookbus.torch.patch(model, cache, "0", positions=[0]):
        out = model(torch.zeros(1, 3, 2))
    assert type(out) is Output
    assert out.hidden[0, :, 0].tolist() == [2.0, 0.0, 0.0]
    assert out.attention[0, :, 0].tolist() == [3.0, 0.0, 0.0]


class ReturnsMax(nn.Module):
    def forward(self, x: torch.Tensor) -> Any:
        return torch.max(x, dim=-1)  # a torch.return_types.max: values and indices


def test_patching_positions_keeps_a_torch_return_type_output() -> None:
    """A structseq output (``torch.max(..., dim=)``) keeps its type and its field names, with
    the positions patched in each of its tensors as in raw torch indexing."""
    model = nn.Sequential(ReturnsMax())
    clean = torch.arange(12.0).reshape(1, 3, 4)
    corrupt = -clean
    with hookbus.torch.capture(model, "0") as cache:
        clean_out = model(clean)
    with hookbus.torch.patch(model, cache, "0", positions=[1]):
        out = model(corrupt)
    expected_values = torch.max(corrupt, dim=-1).values.clone()
    expected_values[:, 1] = clean_out.values[:, 1]
    expected_indices = torch.max(corrupt, dim=-1).indices.clone()
    expected_indices[:, 1] = clean_out.indices[:, 1]
    assert type(out) is type(clean_out)
    assert torch.allclose(out.values, expected_values, atol=1e-6, rtol=0)
    assert torch.equal(out.indices, expected_indices)


@pytest.mark.parametrize("positions", [7, [1, 7], slice(None), -4])
def test_patch_positions_out_of_range_name_the_module_dim_and_size(
    positions: Any, gpt2: Any
) -> None:
    """A position past the sequence was torch's bare ``IndexError`` from inside the hook,
    naming dimension 0; the error names the module, the dimension patched and its size."""
    tokens = torch.tensor([[1, 2, 3]])
    with torch.no_grad(), hookbus.torch.capture(gpt2, "transformer.h.0") as cache:
        gpt2(tokens)
    patching = hookbus.torch.patch(gpt2, cache, "transformer.h.0", positions=positions)
    if positions == slice(None):  # every position: in range, the whole output patched
        with torch.no_grad(), patching:
            gpt2(tokens)
        return
    with (
        torch.no_grad(),
        patching,
        pytest.raises(
            IndexError,
            match=r"patch\(positions=\.\.\.\) on module 'transformer\.h\.0': a position is "
            r"out of range for dim 1 of the output, of size 3 \(shape \(1, 3, 32\)\)",
        ),
    ):
        gpt2(tokens)
    assert all("forward" not in vars(m) for m in gpt2.modules())


def test_patch_positions_along_a_dim_the_output_lacks_is_refused_not_wrapped() -> None:
    """``dim=1`` (the default) on a 1-d output used to wrap round to dim 0 and patch
    positions of another dimension without a word; it is refused, naming dim and shape."""
    model = nn.Sequential(nn.Flatten(0), nn.Identity())  # (2, 3) -> (6,)
    x = torch.arange(6.0).reshape(2, 3)
    with hookbus.torch.capture(model, "1") as cache:
        model(x)
    with (
        hookbus.torch.patch(model, cache, "1", positions=0),
        pytest.raises(
            IndexError,
            match=r"patch\(positions=\.\.\.\) on module '1': dim=1 is out of range for "
            r"an output of shape \(6,\)",
        ),
    ):
        model(x + 1)
    with hookbus.torch.patch(model, cache, "1", positions=0, dim=-1):
        assert model(x + 1)[0].item() == 0.0  # the last dim of a 1-d output is dim 0
