"""Generation steps (``hookbus.torch.steps``): the index of the model's forward.

``steps(model)`` counts the model's top-level forwards with a forward pre hook. Every hook
of a step reads that step's index, whenever it was made: hooks that torch runs before the
counting one (the model's own pre hooks registered before the block, and every global
module pre hook) read the index of the call they are in.
"""

from __future__ import annotations

import copy
from typing import Any, List, Tuple

import pytest
import torch
from torch import nn
from torch_helpers import tiny_gpt2

import hookbus
import hookbus.torch
from hookbus import CallContext


@pytest.fixture(scope="module")
def gpt2() -> Any:
    return tiny_gpt2()


def _generate(model: Any, ids: torch.Tensor) -> Any:
    return model.generate(
        ids,
        max_new_tokens=4,
        do_sample=False,
        pad_token_id=0,
        return_dict_in_generate=True,
        output_logits=True,
    )


def test_steering_from_step_1_equals_a_hand_written_hook_on_new_tokens(gpt2: Any) -> None:
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    torch.manual_seed(1)
    direction = torch.randn(32) * 5
    block = gpt2.transformer.h[0]

    def by_hand(module: nn.Module, args: Any, output: torch.Tensor) -> Any:
        # The bookkeeping users wrote: under the KV cache a new token's step has length 1.
        return output + direction if output.shape[1] == 1 else None

    handle = block.register_forward_hook(by_hand)
    expected = _generate(gpt2, ids)
    handle.remove()
    plain = _generate(gpt2, ids)

    def steer(ctx: CallContext) -> None:
        ctx.result = ctx.result + direction

    bus = hookbus.EventBus()
    with hookbus.torch.attach(gpt2, bus), hookbus.torch.steps(gpt2) as step:
        bus.post("transformer.h.0", step.only(steer, start=1))
        got = _generate(gpt2, ids)
    assert torch.equal(got.sequences, expected.sequences)
    for mine, theirs in zip(got.logits, expected.logits):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-6)
    # step 0 (the prompt) was not steered: the first new token's logits are the plain ones
    torch.testing.assert_close(got.logits[0], plain.logits[0], rtol=0, atol=1e-6)
    assert not torch.allclose(got.logits[1], plain.logits[1])


def test_the_index_restarts_at_each_generate_and_generate_is_put_back(gpt2: Any) -> None:
    ids = torch.tensor([[1, 2, 3]])
    seen: List[Tuple[int, int]] = []
    bus = hookbus.EventBus()
    with hookbus.torch.attach(gpt2, bus), hookbus.torch.steps(gpt2) as step:
        bus.post("transformer.h.1", lambda ctx: seen.append((step.index, ctx.result.shape[1])))
        gpt2.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0)
        gpt2.generate(ids, max_new_tokens=2, do_sample=False, pad_token_id=0)
    assert seen == [(0, 3), (1, 1), (2, 1), (0, 3), (1, 1)]
    assert "generate" not in vars(gpt2)
    assert len(gpt2._forward_pre_hooks) == 0


def test_steps_count_a_hand_written_models_forwards_and_end_on_error() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    seen: List[int] = []
    counting = hookbus.torch.steps(model)
    handle = model[0].register_forward_hook(lambda m, a, o: seen.append(counting.index))

    def run() -> None:
        with counting as step:
            assert step.index == -1
            for _ in range(3):
                model(torch.ones(1, 2))
            model[0](torch.ones(1, 2))  # a submodule's call is no step
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        run()
    handle.remove()
    assert seen == [0, 1, 2, 2]
    assert len(model._forward_pre_hooks) == 0


def test_only_takes_a_window_of_steps() -> None:
    model = nn.Linear(1, 1)
    ran: List[int] = []
    with hookbus.torch.steps(model) as step:
        hook = step.only(lambda ctx: ran.append(step.index), start=1, stop=3)
        handle = model.register_forward_hook(lambda m, a, o: hook(None))  # type: ignore[arg-type]
        for _ in range(5):
            model(torch.ones(1))
        handle.remove()
        with pytest.raises(TypeError, match="start= takes an int"):
            step.only(lambda ctx: None, start="1")  # type: ignore[arg-type]
    assert ran == [1, 2]


def test_a_copy_made_in_the_block_generates_without_the_stand_in(gpt2: Any) -> None:
    ids = torch.tensor([[1, 2]])
    with hookbus.torch.steps(gpt2) as step:
        twin = copy.deepcopy(gpt2)
        out = twin.generate(ids, max_new_tokens=2, do_sample=False, pad_token_id=0)
        assert step.index == -1  # the copy's generate counted nothing here
    assert out.shape == (1, 4)
    assert "generate" not in vars(twin)
    assert len(twin._forward_pre_hooks) == 0  # the counting hook's copy removed itself


class TinyLM(nn.Module):
    """A hand-written language model with its own greedy ``generate`` (no key-value cache:
    each step runs the whole sequence, so the sequence length can't tell steps apart)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(10, 8)
        self.block = nn.Linear(8, 8)
        self.head = nn.Linear(8, 10)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.block(self.embed(ids))))

    def generate(self, ids: torch.Tensor, steps: int) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        logits = []
        for _ in range(steps):
            logits.append(self(ids)[:, -1])
            ids = torch.cat([ids, logits[-1].argmax(-1, keepdim=True)], dim=1)
        return ids, logits


def test_steering_a_hand_written_generate_from_step_1_equals_hand_written_counting() -> None:
    model = TinyLM()
    ids = torch.tensor([[1, 2, 3]])
    direction = torch.randn(8, generator=torch.Generator().manual_seed(1)) * 3

    # Hand-written torch: count the model's forwards, reset by hand before each generate.
    count = [0]
    counting = model.register_forward_pre_hook(lambda m, a: count.__setitem__(0, count[0] + 1))

    def by_hand(module: nn.Module, args: Any, output: torch.Tensor) -> Any:
        return output + direction if count[0] >= 2 else None  # from the second forward on

    steering = model.block.register_forward_hook(by_hand)
    expected = []
    for _ in range(2):
        count[0] = 0
        expected.append(model.generate(ids, steps=4))
    counting.remove()
    steering.remove()

    def steer(ctx: CallContext) -> None:
        ctx.result = ctx.result + direction

    bus = hookbus.EventBus()
    with hookbus.torch.attach(model, bus), hookbus.torch.steps(model) as step:
        bus.post("block", step.only(steer, start=1))
        got = [model.generate(ids, steps=4) for _ in range(2)]  # the index restarts
    assert "generate" not in vars(model)
    _, plain_logits = model.generate(ids, steps=4)
    for (got_ids, got_logits), (want_ids, want_logits) in zip(got, expected):
        assert torch.equal(got_ids, want_ids)
        for mine, theirs in zip(got_logits, want_logits):
            torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-6)
        torch.testing.assert_close(got_logits[0], plain_logits[0], rtol=0, atol=1e-6)
        assert not torch.allclose(got_logits[1], plain_logits[1])


def test_a_hook_of_only_refuses_to_run_after_its_block_ended(gpt2: Any) -> None:
    # It used to keep firing with the last index frozen: steering the prompt too.
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(gpt2, bus)
    prompt = torch.tensor([[1, 2, 3, 4]])
    with hookbus.torch.steps(gpt2) as step:
        gpt2.generate(prompt, max_new_tokens=3, do_sample=False, pad_token_id=0)
    seen: List[int] = []
    late = step.only(lambda ctx: seen.append(1), start=1)
    with (
        net.post("transformer.h.0", late),
        pytest.raises(RuntimeError, match=r"ran after its steps\(\) block had ended"),
    ):
        gpt2(prompt)
    assert seen == []
    net.detach()


def test_a_finished_steps_block_cannot_be_entered_again() -> None:
    model = nn.Linear(1, 1)
    counter = hookbus.torch.steps(model)
    with counter:
        model(torch.ones(1, 1))
    with pytest.raises(RuntimeError, match="has ended; open a new one"), counter:
        pass  # pragma: no cover - never entered


@pytest.mark.parametrize(
    ("hook", "options", "error", "words"),
    [
        ("steer", {}, TypeError, "takes a callable hook, got str"),
        (None, {"start": -1}, ValueError, "start= takes an int >= 0, got -1"),
        (None, {"start": 0, "stop": -2}, ValueError, "stop= takes an int >= 0"),
    ],
)
def test_only_checks_its_arguments_when_called(
    hook: Any, options: Any, error: type, words: str
) -> None:
    with hookbus.torch.steps(nn.Linear(1, 1)) as step, pytest.raises(error, match=words):
        step.only(hook if hook is not None else (lambda ctx: None), **options)


def test_steps_of_a_peft_model_count_the_steps_of_the_model_it_adapts() -> None:
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    config = peft.LoraConfig(  # GPT-2's c_attn is a Conv1D, whose weight is transposed
        target_modules=["c_attn"], r=2, init_lora_weights=False, fan_in_fan_out=True
    )
    wrapped = peft.get_peft_model(tiny_gpt2(), config).eval()
    bus = hookbus.EventBus()
    hookbus.torch.attach(wrapped, bus)
    seen: List[int] = []
    with hookbus.torch.steps(wrapped) as step, torch.no_grad():
        bus.post("transformer.h.0", step.only(lambda ctx: seen.append(step.index), start=1))
        wrapped.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=3, do_sample=False,
                         pad_token_id=0)  # fmt: skip
        wrapped(torch.tensor([[1, 2, 3]]))  # a forward through the PEFT model counts too
    assert seen == [1, 2, 3]
    assert "generate" not in vars(wrapped.get_base_model())  # put back


# --- every hook of a call reads its step, whatever runs first -----------------------------


def test_a_pre_hook_registered_before_the_block_reads_the_step_of_its_call() -> None:
    """``only(start=1)`` means "from the first generated token": a pre hook of the model that
    existed before the block must see step 0 on the first forward, not -1."""
    model = nn.Sequential(nn.Linear(2, 2))
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    seen: List[int] = []
    holder: List[hookbus.torch.steps] = []
    net.pre("<root>", lambda ctx: seen.append(holder[0].index))
    with hookbus.torch.steps(model) as step:
        holder.append(step)
        for _ in range(3):
            model(torch.ones(1, 2))
    assert seen == [0, 1, 2]
    net.detach()


def test_only_from_step_one_fires_from_step_one_in_every_module_pre_hooks() -> None:
    """torch runs global pre hooks before a module's own: they must read the same index."""
    model = nn.Sequential(nn.Linear(2, 2))
    fired: List[int] = []
    every = hookbus.torch.every_module(hookbus.EventBus())
    with every, hookbus.torch.steps(model) as step:

        def on_model(ctx: CallContext) -> None:
            if ctx.target is model:
                fired.append(step.index)

        every.pre(step.only(on_model, start=1))
        for _ in range(3):
            model(torch.ones(1, 2))
    assert fired == [1, 2]


def test_every_hook_of_a_call_reads_its_step_whatever_runs_first() -> None:
    """A plain torch pre hook and a bus pre hook registered before the block, two
    ``every_module`` points (made after the block began) and a post hook: all read the
    step of the call they are in, and the call is counted once."""
    model = nn.Sequential(nn.Linear(2, 2))
    bus, other_bus = hookbus.EventBus(), hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    seen: List[tuple] = []
    holder: List[hookbus.torch.Steps] = []
    plain = model.register_forward_pre_hook(lambda m, a: seen.append(("plain", holder[0].index)))
    net.pre("<root>", lambda ctx: seen.append(("pre", holder[0].index)))
    with hookbus.torch.steps(model) as step:
        holder.append(step)
        every = hookbus.torch.every_module(bus)
        other = hookbus.torch.every_module(other_bus)
        for name, point in (("every", every), ("other", other)):

            def read(ctx: CallContext, name: str = name) -> None:
                if ctx.target is model:
                    seen.append((name, step.index))

            point.pre(read)
        net.post("<root>", lambda ctx: seen.append(("post", step.index)))
        for _ in range(2):
            model(torch.ones(1, 2))
        every.remove()
        other.remove()
        model(torch.ones(1, 2))
    plain.remove()
    net.detach()
    order = ["every", "other", "plain", "pre", "post"]
    assert seen == [(name, i) for i in range(2) for name in order] + [
        ("plain", 2),
        ("pre", 2),
        ("post", 2),
    ]


def test_a_call_stopped_by_an_every_module_pre_hook_counts_once() -> None:
    """A call that an ``every_module`` pre hook stopped still started: it counts, as a call
    stopped by the model's own pre hook does; the next calls count one each, whether or
    not the every-module point is still there."""
    model = nn.Sequential(nn.Linear(2, 2))
    seen: List[int] = []
    with hookbus.torch.steps(model) as step:
        every = hookbus.torch.every_module(hookbus.EventBus())

        def stop_the_first(ctx: CallContext) -> None:
            if ctx.target is model and step.index == 0:
                raise ValueError("stopped")

        every.pre(stop_the_first)
        with pytest.raises(ValueError, match="stopped"):
            model(torch.ones(1, 2))
        model(torch.ones(1, 2))
        seen.append(step.index)
        step.index = -1  # as at a generate(): the next call is step 0, stopped again
        with pytest.raises(ValueError, match="stopped"):
            model(torch.ones(1, 2))
        every.remove()
        model(torch.ones(1, 2))
        seen.append(step.index)
    assert seen == [1, 1]
