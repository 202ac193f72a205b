"""Skipping a module's forward (``ctx.skip``): while a module has pre hooks, its forward is
swapped for one that can return a value instead of running.

Each result is checked against the hand-written torch way: an instance ``forward``
replacement. Under ``torch.jit.trace`` the trace records what the eager call does.
"""

from __future__ import annotations

import copy
import threading
import warnings
from typing import Any, List

import pytest
import torch
from torch import nn
from torch_helpers import CountedNet, Scaled, hand_skipped, tiny_gpt2

import hookbus
import hookbus.torch
from hookbus import CallContext


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


# --- ctx.skip on a module --------------------------------------------------------------


def test_skip_on_a_module_returns_the_value_without_running_forward() -> None:
    # It once raised: torch runs forward whatever its hooks do.
    bus = hookbus.EventBus()
    model = nn.Sequential(Scaled())
    hookbus.torch.attach(model, bus)
    value = torch.zeros(1)
    bus.pre("0", lambda ctx: ctx.skip(value))
    assert model[0](torch.ones(1)) is value
    assert model[0].calls == 0


def test_skip_around_a_wrapped_model_works() -> None:
    bus = hookbus.EventBus()
    model = Scaled()
    cached = torch.full((1,), 7.0)
    run = bus.wrap(model, "model")
    bus.pre("model", lambda ctx: ctx.skip(cached))
    seen: List[Any] = []
    bus.post("model", lambda ctx: seen.append(ctx.skipped))
    assert run(torch.ones(1)) is cached
    assert model.calls == 0
    assert seen == [True]


def test_assigning_result_in_a_module_pre_hook_is_refused() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(Scaled())
    hookbus.torch.attach(model, bus)
    bus.pre("0", lambda ctx: setattr(ctx, "result", torch.zeros(1)))
    with pytest.raises(RuntimeError, match="skip"):
        model(torch.ones(1))


def test_skipped_is_false_in_module_post_hooks() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(Scaled())
    hookbus.torch.attach(model, bus)
    seen: List[bool] = []
    bus.post("0", lambda ctx: seen.append(ctx.skipped))
    model(torch.ones(1))
    assert seen == [False]


def test_skipped_is_true_in_the_post_hooks_of_a_skipped_call() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(Scaled())
    hookbus.torch.attach(model, bus)
    seen: List[Any] = []
    bus.pre("0", lambda ctx: ctx.skip(torch.full((1,), 3.0)))
    bus.post("0", lambda ctx: seen.append((ctx.skipped, float(ctx.result))))
    model(torch.ones(1))
    assert seen == [(True, 3.0)]


def test_skip_equals_a_hand_written_forward_replacement(
    net: CountedNet, bus: hookbus.EventBus
) -> None:
    x = torch.randn(4, 2)
    stored = torch.randn(4, 3)
    expected = hand_skipped(net, net.block, stored, x)
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
        expected = hand_skipped(gpt2, block, lambda hidden, *rest: hidden, ids).logits
    with hookbus.torch.attach(gpt2, bus) as net:
        net.pre("transformer.h.1", lambda ctx: ctx.skip(ctx.args[0]))
        with torch.no_grad():
            got = gpt2(ids).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    assert "forward" not in vars(block)


def test_a_skipped_module_runs_no_child_and_its_parameters_get_no_gradient(
    net: CountedNet, bus: hookbus.EventBus
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
    net: CountedNet, bus: hookbus.EventBus
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
    net: CountedNet, bus: hookbus.EventBus
) -> None:
    def own(x: torch.Tensor) -> torch.Tensor:
        return x * 10

    net.block.forward = own  # type: ignore[method-assign]
    hookbus.torch.attach(net, bus)
    x = torch.ones(1, 3)
    with bus.pre("block", lambda ctx: None):
        assert torch.equal(net.block(x), x * 10)  # not skipped: the user's forward runs
    assert vars(net.block)["forward"] is own


def test_skip_works_through_a_forward_that_wraps_the_swapped_one(
    net: CountedNet, bus: hookbus.EventBus
) -> None:
    # accelerate's prepare(mixed_precision=...) sets such a wrapper on the instance over
    # whatever forward is there: the skip once went unseen and the forward ran.
    hookbus.torch.attach(net, bus)
    value = torch.zeros(1, 3)
    handle = bus.pre("block", lambda ctx: ctx.skip(value))
    swapped = net.block.forward
    wrapped: List[str] = []

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        wrapped.append("called")
        return swapped(*args, **kwargs)

    net.block.forward = wrapper  # type: ignore[method-assign]
    assert net.block(torch.ones(1, 3)) is value
    assert net.block.calls == 0
    assert wrapped == ["called"]  # the wrapper still runs around the skipped forward
    handle.remove()
    x = torch.ones(1, 3)
    assert torch.equal(net.block(x), torch.tanh(net.block.inner(x)) + x)
    assert net.block.calls == 1


def test_a_skip_left_by_a_failed_call_never_skips_a_later_call(
    net: CountedNet, bus: hookbus.EventBus
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
    net: CountedNet, bus: hookbus.EventBus
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


def test_a_copy_of_a_skipping_module_runs_its_own_forward(
    net: CountedNet, bus: hookbus.EventBus
) -> None:
    hookbus.torch.attach(net, bus)
    bus.pre("block", lambda ctx: ctx.skip(torch.zeros(1, 3)))
    twin = copy.deepcopy(net)
    x = torch.ones(1, 3)
    assert torch.equal(twin.block(x), torch.tanh(twin.block.inner(x)) + x)
    assert twin.block.calls == 1
    assert "forward" not in vars(twin.block)  # the stand-in removed itself
    assert torch.equal(net.block(x), torch.zeros(1, 3))  # the original still skips


def test_skips_in_two_threads_each_get_their_own_value(
    net: CountedNet, bus: hookbus.EventBus
) -> None:
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


# --- the swapped forward: replicas, once hooks, lifetimes, signature, copies, DDP ---------


def test_a_data_parallel_replica_of_a_module_with_pre_hooks_runs_as_itself(
    net: CountedNet, bus: hookbus.EventBus
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
    net: CountedNet, bus: hookbus.EventBus
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

    model = CountedNet()
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


def test_a_model_and_its_bus_dropped_with_a_pre_hook_holding_the_module_are_collected() -> None:
    # The swap lives as long as its module and tells the bus's point of an interrupted
    # call: held strongly, the point would keep the bus, whose hook keeps the module.
    import gc
    import weakref

    def hook_and_drop() -> List[Any]:
        model, bus = CountedNet(), hookbus.EventBus()
        hookbus.torch.attach(model, bus)
        block = model.block

        def holding_the_module(ctx: CallContext) -> None:
            assert ctx.target is block

        bus.pre("block", holding_the_module)
        assert "forward" in vars(model.block)
        return [weakref.ref(model), weakref.ref(block), weakref.ref(bus)]

    refs = hook_and_drop()
    gc.collect()
    assert [ref() for ref in refs] == [None, None, None]


def test_the_swapped_forward_shows_the_modules_signature(net: CountedNet, gpt2: Any) -> None:
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
    net: CountedNet, bus: hookbus.EventBus
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


# --- skip under activation checkpointing --------------------------------------------------


def test_skip_under_checkpointing_gives_the_gradients_of_a_hand_written_replacement(
    bus: hookbus.EventBus,
) -> None:
    # docs/torch.md: a checkpointed segment's pre hooks run again in backward and skip
    # again, and the gradients equal those of a hand-written replacement.
    from torch.utils.checkpoint import checkpoint

    def run(model: CountedNet, x: torch.Tensor) -> None:
        hidden = checkpoint(lambda h: model.block(h), model.embed(x), use_reentrant=False)
        model.head(hidden).pow(2).sum().backward()

    x = torch.randn(4, 2)
    torch.manual_seed(0)
    hooked, by_hand = CountedNet(), CountedNet()
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
    transformers = pytest.importorskip("transformers")

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


# --- a skip under torch.jit.trace ---------------------------------------------------------


def test_a_skip_in_a_pre_hook_is_what_a_traced_module_does() -> None:
    """Decided: traced correctly, not refused. torch bakes every forward hook's effect into
    a trace (a post hook's replaced output included); a skip is such an effect, so the
    traced module returns the skip's value, as the eager call does. (A module after the
    skipped one: torch refuses to trace a model whose output is a bare constant, a plain
    forward hook's as well.)"""
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    net = hookbus.torch.attach(model, hookbus.EventBus())
    value = torch.full((1, 2), 7.0)
    net.pre("0", lambda ctx: ctx.skip(value))
    x = torch.ones(1, 2)
    assert torch.equal(model(x), value)  # eager: skipped
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the trace warns that the output is a constant
        traced = torch.jit.trace(model, x, check_trace=False)
    net.detach()
    assert torch.equal(traced(x), value)


def test_a_skip_computed_from_the_input_is_traced_as_that_computation() -> None:
    """A skip whose value is computed from the module's input (``x * 3`` instead of the
    layer) traces as that computation: the traced model applies it to new inputs, as raw
    torch code doing the same computes it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())
    net.pre("0", lambda ctx: ctx.skip(ctx.args[0] * 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(model, torch.ones(1, 2))
    net.detach()
    y = torch.randn(4, 2)
    assert torch.allclose(traced(y), model[1](y * 3), atol=1e-6, rtol=0)
    assert not torch.allclose(model(y), model[1](y * 3))  # the hook is gone: not skipped


def test_brackets_run_around_the_forward_however_it_ends_and_go_when_removed() -> None:
    from hookbus.torch._forward_swap import ForwardSwap

    log: List[str] = []

    class Stops(nn.Module):
        def forward(self, x: Any) -> Any:
            log.append("forward")
            if x == "interrupt":
                raise KeyboardInterrupt
            return x

    def bracket(tag: str) -> Any:
        def around(run: Any, module: nn.Module, *args: Any, **kwargs: Any) -> Any:
            log.append(f"{tag} in")
            try:
                return run(module, *args, **kwargs)
            finally:
                log.append(f"{tag} out")

        return around

    module = Stops()
    inner, outer = bracket("inner"), bracket("outer")
    swap = ForwardSwap.acquire(module)
    swap.add_bracket(inner)
    swap.add_bracket(outer)  # added later: runs outside the first
    assert module("x") == "x"
    assert log == ["outer in", "inner in", "forward", "inner out", "outer out"]
    log.clear()
    with pytest.raises(KeyboardInterrupt):  # torch runs no hook for it; brackets see it go
        module("interrupt")
    assert log == ["outer in", "inner in", "forward", "inner out", "outer out"]
    log.clear()
    swap.remove_bracket(outer)
    module("x")
    assert log == ["inner in", "forward", "inner out"]
    log.clear()
    swap.remove_bracket(inner)
    swap.release()
    module("x")
    assert log == ["forward"]
    assert "forward" not in vars(module)


def test_brackets_run_around_a_forward_that_runs_not_a_skip_or_a_replacement() -> None:
    # A bracket sees the module's own forward body: an operation site learns from the
    # calls it sees which operations exist, and a skipped or replaced call makes none.
    from hookbus.torch._forward_swap import ForwardSwap

    log: List[str] = []

    def bracket(run: Any, module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        log.append("bracket")
        return run(module, *args, **kwargs)

    model = nn.Sequential(nn.Identity())
    module = model[0]
    net = hookbus.torch.attach(model, hookbus.EventBus())
    swap = ForwardSwap.acquire(module)
    swap.add_bracket(bracket)
    skip = net.pre("0", lambda ctx: ctx.skip(torch.zeros(1)), once=True)
    assert model(torch.ones(1)).tolist() == [0.0]
    assert log == []
    assert not skip.active

    def replacement(module: nn.Module, args: Any, kwargs: Any) -> torch.Tensor:
        return torch.full((1,), 2.0)

    swap.add_replacement(replacement)
    assert model(torch.ones(1)).tolist() == [2.0]
    assert log == []
    swap.remove_replacement(replacement)
    assert model(torch.ones(1)).tolist() == [1.0]
    assert log == ["bracket"]
    swap.remove_bracket(bracket)
    swap.release()
    net.detach()
    assert "forward" not in vars(module)
