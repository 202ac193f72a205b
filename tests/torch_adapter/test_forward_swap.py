"""Skipping a module's forward (``ctx.skip``) and activation patching (``patch``), issue 22 §2.

Each result is checked against the hand-written torch way: an instance
``forward`` replacement for a skip, a native forward hook for positions.
"""

from __future__ import annotations

import copy
import threading
from typing import Any, List

import pytest
import torch
from torch import nn
from torch_helpers import tiny_gpt2

import hookbus
import hookbus.torch
from hookbus import CallContext

transformers = pytest.importorskip("transformers")


class Counted(nn.Module):
    """A block that counts its forward calls (a child too, to see that it doesn't run)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(3, 3)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return torch.tanh(self.inner(x)) + x


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(2, 3)
        self.block = Counted()
        self.head = nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.embed(x)))


@pytest.fixture
def net() -> Net:
    torch.manual_seed(0)
    return Net()


@pytest.fixture(scope="module")
def gpt2() -> Any:
    return tiny_gpt2()


@pytest.fixture
def bus() -> hookbus.EventBus:
    return hookbus.EventBus()


def _hand_skipped(model: nn.Module, module: nn.Module, value: Any, x: Any) -> Any:
    """The hand-written way: replace the instance's forward, call, restore."""
    module.forward = lambda *args, **kwargs: value(*args) if callable(value) else value
    try:
        return model(x)
    finally:
        del module.forward


# --- ctx.skip on a module --------------------------------------------------------------


def test_skip_equals_a_hand_written_forward_replacement(net: Net, bus: hookbus.EventBus) -> None:
    x = torch.randn(4, 2)
    stored = torch.randn(4, 3)
    expected = _hand_skipped(net, net.block, stored, x)
    hookbus.torch.attach(net, bus)
    with bus.pre("block", lambda ctx: ctx.skip(stored)):
        got = net(x)
    assert net.block.calls == 0  # neither the hand-written run nor ours ran it
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


def test_skip_with_the_input_on_gpt2_equals_removing_the_block(
    gpt2: Any, bus: hookbus.EventBus
) -> None:
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    block = gpt2.transformer.h[1]
    with torch.no_grad():
        expected = _hand_skipped(gpt2, block, lambda hidden, *rest: hidden, ids).logits
    with hookbus.torch.attach(gpt2, bus) as net:
        net.pre("transformer.h.1", lambda ctx: ctx.skip(ctx.args[0]))
        with torch.no_grad():
            got = gpt2(ids).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    assert "forward" not in vars(block)


def test_a_skipped_module_runs_no_child_and_its_parameters_get_no_gradient(
    net: Net, bus: hookbus.EventBus
) -> None:
    hookbus.torch.attach(net, bus)
    ran: List[str] = []
    bus.post("block.inner", lambda ctx: ran.append(ctx.name))
    bus.pre("block", lambda ctx: ctx.skip(ctx.args[0] * 2))
    net(torch.randn(2, 2)).sum().backward()
    assert ran == []
    assert net.block.inner.weight.grad is None  # why DDP needs find_unused_parameters
    assert net.embed.weight.grad is not None  # the skip value stays in the graph


def test_the_forward_is_swapped_only_while_pre_hooks_are_registered(
    net: Net, bus: hookbus.EventBus
) -> None:
    net_attached = hookbus.torch.attach(net, bus)
    post = bus.post("block", lambda ctx: None)
    assert "forward" not in vars(net.block)  # post hooks need no swap
    pre = bus.pre("block", lambda ctx: None)
    assert "forward" in vars(net.block)
    pre.remove()
    assert "forward" not in vars(net.block)
    bus.pre("block", lambda ctx: None)
    net_attached.detach()
    assert "forward" not in vars(net.block)
    post.remove()


def test_a_forward_the_user_set_on_the_instance_is_kept_and_put_back(
    net: Net, bus: hookbus.EventBus
) -> None:
    def own(x: torch.Tensor) -> torch.Tensor:
        return x * 10

    net.block.forward = own  # type: ignore[method-assign]
    hookbus.torch.attach(net, bus)
    x = torch.ones(1, 3)
    with bus.pre("block", lambda ctx: None):
        assert torch.equal(net.block(x), x * 10)  # not skipped: the user's forward runs
    assert vars(net.block)["forward"] is own


def test_a_skip_left_by_a_failed_call_never_skips_a_later_call(
    net: Net, bus: hookbus.EventBus
) -> None:
    hookbus.torch.attach(net, bus)
    first = [True]

    def skip_once(ctx: CallContext) -> None:
        if first[0]:
            ctx.skip(torch.zeros(1, 3))

    def fail_once(module: nn.Module, args: Any) -> None:
        if first[0]:
            first[0] = False
            raise ValueError("a torch pre hook after ours")

    bus.pre("block", skip_once)
    handle = net.block.register_forward_pre_hook(fail_once)
    x = torch.ones(1, 3)
    with pytest.raises(ValueError, match="after ours"):
        net.block(x)
    assert torch.equal(net.block(x), torch.tanh(net.block.inner(x)) + x)
    handle.remove()


def test_a_hook_error_after_skip_leaves_the_next_call_unskipped(
    net: Net, bus: hookbus.EventBus
) -> None:
    hookbus.torch.attach(net, bus)
    calls = [0]

    def skip_then_fail(ctx: CallContext) -> None:
        calls[0] += 1
        if calls[0] == 1:
            ctx.skip(torch.zeros(1, 3))
            raise KeyError("after skipping")

    bus.pre("block", skip_then_fail)
    with pytest.raises(KeyError):
        net.block(torch.ones(1, 3))
    assert net.block(torch.ones(1, 3)).abs().sum() > 0
    assert net.block.calls == 1


def test_a_copy_of_a_skipping_module_runs_its_own_forward(net: Net, bus: hookbus.EventBus) -> None:
    hookbus.torch.attach(net, bus)
    bus.pre("block", lambda ctx: ctx.skip(torch.zeros(1, 3)))
    twin = copy.deepcopy(net)
    x = torch.ones(1, 3)
    assert torch.equal(twin.block(x), torch.tanh(twin.block.inner(x)) + x)
    assert twin.block.calls == 1
    assert "forward" not in vars(twin.block)  # the stand-in removed itself
    assert torch.equal(net.block(x), torch.zeros(1, 3))  # the original still skips


def test_a_copy_made_while_patched_runs_its_own_forward_and_drops_the_swap(net: Net) -> None:
    x = torch.ones(1, 3)
    with hookbus.torch.patch(net, {"block": torch.zeros(1, 3)}):
        twin = copy.deepcopy(net)
        assert torch.equal(twin.block(x), torch.tanh(twin.block.inner(x)) + x)
        assert "forward" not in vars(twin.block)
        assert torch.equal(net.block(x), torch.zeros(1, 3))


def test_skips_in_two_threads_each_get_their_own_value(net: Net, bus: hookbus.EventBus) -> None:
    hookbus.torch.attach(net, bus)
    bus.pre("block", lambda ctx: ctx.skip(ctx.args[0] + 1))
    results: List[bool] = []

    def run(value: float) -> None:
        for _ in range(50):
            x = torch.full((1, 3), value)
            results.append(torch.equal(net.block(x), x + 1))

    threads = [threading.Thread(target=run, args=(float(i),)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert results == [True] * 100


def _fail() -> None:
    raise ZeroDivisionError("the block failed")


# --- patch -----------------------------------------------------------------------------


def test_patch_returns_the_cached_output_without_running_forward(net: Net) -> None:
    clean, corrupt = torch.randn(2, 2), torch.randn(2, 2)
    with hookbus.torch.capture(net, "block") as cache:
        net(clean)
    calls = net.block.calls
    expected = _hand_skipped(net, net.block, cache["block"].output, corrupt)
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


def test_patch_is_undone_when_the_block_raises(net: Net) -> None:
    with hookbus.torch.capture(net, "*") as cache:
        net(torch.ones(1, 2))
    for positions in (None, 0):
        patching = hookbus.torch.patch(net, cache, ["block", "head"], positions=positions, dim=0)
        with pytest.raises(ZeroDivisionError), patching:
            _fail()
    assert all("forward" not in vars(m) for m in net.modules())
    assert all(len(m._forward_hooks) == 0 for m in net.modules())


def test_patches_nest_and_share_the_swap_with_skipping_pre_hooks(
    net: Net, bus: hookbus.EventBus
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


def test_patch_takes_the_call_asked_for(net: Net) -> None:
    with hookbus.torch.capture(net, "block") as cache:
        net(torch.zeros(1, 2))
        net(torch.ones(1, 2))
    first = cache["block"].calls[0].output
    with hookbus.torch.patch(net, cache, call=0):
        assert torch.equal(net.block(torch.randn(1, 3)), first)
    with pytest.raises(IndexError, match=r"call=2 .* 'block', which has 2 recorded calls"):
        hookbus.torch.patch(net, cache, call=2)


def test_patch_errors_name_the_module_and_shapes(net: Net) -> None:
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


def test_a_data_parallel_replica_of_a_module_with_pre_hooks_runs_as_itself(
    net: Net, bus: hookbus.EventBus
) -> None:
    # DataParallel's replicas copy the module's __dict__, the swapped forward (bound to
    # the original) included, and share its hook dicts: the replica must run with its
    # own parameters. Replicated on CPU here, as torch's replicate() does per device.
    hookbus.torch.attach(net, bus)
    bus.pre("block", lambda ctx: None)
    replica = net.block._replicate_for_data_parallel()
    replica._modules["inner"] = nn.Linear(3, 3)  # the replica's own weights
    x = torch.ones(1, 3)
    assert torch.equal(replica(x), torch.tanh(replica.inner(x)) + x)
    bus.pre("block", lambda ctx: ctx.skip(ctx.args[0] * 5))
    assert torch.equal(replica(x), x * 5)


def test_a_once_pre_hook_skips_its_call_and_then_the_forward_is_put_back(
    net: Net, bus: hookbus.EventBus
) -> None:
    hookbus.torch.attach(net, bus)
    bus.pre("block", lambda ctx: ctx.skip(torch.zeros(1, 3)), once=True)
    x = torch.ones(1, 3)
    assert torch.equal(net.block(x), torch.zeros(1, 3))
    assert "forward" not in vars(net.block)  # its only pre hook went after the call
    assert torch.equal(net.block(x), torch.tanh(net.block.inner(x)) + x)


def test_a_model_with_pre_hooks_is_freed_when_dropped_without_the_collector(
    bus: hookbus.EventBus,
) -> None:
    # The swapped forward holds its module weakly: no cycle through the module's __dict__.
    import gc
    import weakref

    model = Net()
    hookbus.torch.attach(model, bus)
    bus.pre("block", lambda ctx: None)
    assert "forward" in vars(model.block)
    block = weakref.ref(model.block)
    enabled = gc.isenabled()
    gc.disable()
    try:
        del model
        assert block() is None
    finally:
        if enabled:
            gc.enable()


def test_the_swapped_forward_shows_the_modules_signature(net: Net, gpt2: Any) -> None:
    import inspect

    bus = hookbus.EventBus()
    hookbus.torch.attach(gpt2, bus)
    with bus.pre("<root>", lambda ctx: None):
        assert "forward" in vars(gpt2)
        assert "input_ids" in inspect.signature(gpt2.forward).parameters
        ids = torch.tensor([[1, 2]])
        out = gpt2.generate(ids, max_new_tokens=2, do_sample=False, pad_token_id=0)
    assert out.shape == (1, 4)
    assert "forward" not in vars(gpt2)


def test_a_pickled_copy_of_a_skipping_module_runs_its_own_forward(
    net: Net, bus: hookbus.EventBus
) -> None:
    import io

    hookbus.torch.attach(net, bus)
    bus.pre("block", lambda ctx: ctx.skip(torch.zeros(1, 3)))
    buffer = io.BytesIO()
    torch.save(net, buffer)
    buffer.seek(0)
    twin = torch.load(buffer, weights_only=False)
    x = torch.ones(1, 3)
    assert torch.equal(twin.block(x), torch.tanh(twin.block.inner(x)) + x)
    assert "forward" not in vars(twin.block)
    assert len(twin.block._forward_pre_hooks) == 0


def test_under_ddp_a_skipped_layer_needs_find_unused_parameters() -> None:
    # What docs/torch.md says: the skipped layer's parameters get no gradient, which
    # DDP refuses at the next step unless find_unused_parameters=True.
    import datetime
    import socket

    import torch.distributed as dist

    if not dist.is_available() or dist.is_initialized():
        pytest.skip("needs torch.distributed, with no process group in this process")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=0,
        world_size=1,
        timeout=datetime.timedelta(seconds=30),
    )
    try:
        outcomes: List[str] = []
        for unused in (False, True):
            model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 1))
            ddp = nn.parallel.DistributedDataParallel(model, find_unused_parameters=unused)
            with hookbus.torch.attach(ddp, hookbus.EventBus()) as net:
                net.pre("1", lambda ctx: ctx.skip(ctx.args[0]))
                try:
                    for _ in range(2):
                        ddp(torch.randn(2, 3)).sum().backward()
                except RuntimeError as error:
                    refused = "Expected to have finished reduction" in str(error)
                    outcomes.append("refused" if refused else f"raised {error}")
                else:
                    assert model[1].weight.grad is None
                    assert model[0].weight.grad is not None
                    outcomes.append("trained")
        assert outcomes == ["refused", "trained"]
    finally:
        dist.destroy_process_group()


# --- the counterparts on the other model (issue 22: GPT-2 and a hand-written model) ------


def test_patch_without_positions_on_gpt2_equals_a_hand_written_forward_replacement(
    gpt2: Any,
) -> None:
    clean, corrupt = torch.tensor([[1, 2, 3, 4, 5]]), torch.tensor([[9, 8, 7, 6, 5]])
    block = gpt2.transformer.h[0]
    with torch.no_grad():
        with hookbus.torch.capture(gpt2, "transformer.h.0") as cache:
            gpt2(clean)
        stored = cache["transformer.h.0"].output
        expected = _hand_skipped(gpt2, block, stored, corrupt).logits
        with hookbus.torch.patch(gpt2, cache, "transformer.h.0"):
            got = gpt2(corrupt).logits
        unpatched = gpt2(corrupt).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    assert not torch.allclose(got, unpatched)
    assert "forward" not in vars(block)


def test_patch_positions_on_a_hand_written_model_equals_a_hand_written_hook(net: Net) -> None:
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


def test_skip_under_checkpointing_gives_the_gradients_of_a_hand_written_replacement(
    bus: hookbus.EventBus,
) -> None:
    # docs/torch.md: a checkpointed segment's pre hooks run again in backward and skip
    # again, and the gradients equal those of a hand-written replacement.
    from torch.utils.checkpoint import checkpoint

    def run(model: Net, x: torch.Tensor) -> None:
        hidden = checkpoint(lambda h: model.block(h), model.embed(x), use_reentrant=False)
        model.head(hidden).pow(2).sum().backward()

    x = torch.randn(4, 2)
    torch.manual_seed(0)
    hooked, by_hand = Net(), Net()
    by_hand.load_state_dict(hooked.state_dict())
    by_hand.block.forward = lambda h: h * 3  # type: ignore[method-assign]
    run(by_hand, x)
    with hookbus.torch.attach(hooked, bus) as attached:
        attached.pre("block", lambda ctx: ctx.skip(ctx.args[0] * 3))
        run(hooked, x)
    for (name, got), want in zip(hooked.named_parameters(), by_hand.parameters()):
        if want.grad is None:
            assert got.grad is None, name  # the skipped block's parameters
        else:
            torch.testing.assert_close(got.grad, want.grad, rtol=0, atol=1e-6, msg=name)
    assert hooked.block.calls == 0
    assert hooked.embed.weight.grad is not None


def test_skip_on_gpt2_with_gradient_checkpointing_gives_the_hand_written_gradients(
    bus: hookbus.EventBus,
) -> None:
    def model() -> Any:
        torch.manual_seed(0)
        config = transformers.GPT2Config(
            n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
        )  # fmt: skip
        built = transformers.GPT2LMHeadModel(config).train()  # checkpointing needs train()
        # transformers 5 renamed it (the old name warns); 4.x has only the old one
        enable = getattr(built, "activation_checkpointing_enable", None)
        (enable or built.gradient_checkpointing_enable)()
        return built

    ids = torch.tensor([[1, 2, 3, 4, 5]])
    hooked, by_hand = model(), model()
    by_hand.transformer.h[0].forward = lambda hidden, *args, **kwargs: hidden * 2
    by_hand(ids).logits.pow(2).sum().backward()
    with hookbus.torch.attach(hooked, bus) as net:
        net.pre("transformer.h.0", lambda ctx: ctx.skip(ctx.args[0] * 2))
        hooked(ids).logits.pow(2).sum().backward()
    for (name, got), want in zip(hooked.named_parameters(), by_hand.parameters()):
        if want.grad is None:
            assert got.grad is None, name
        else:
            torch.testing.assert_close(got.grad, want.grad, rtol=0, atol=1e-6, msg=name)
    assert hooked.transformer.h[0].attn.c_attn.weight.grad is None
    assert hooked.transformer.wte.weight.grad is not None
