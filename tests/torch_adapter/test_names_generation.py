"""Names of the vocabulary during generate(): each step, with and without a key-value cache."""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, List

import pytest
import torch
from torch import nn
from transformer_models import (
    CASES,
    TOLERANCE,
    block_module,
    dims,
    layout,
    named,
    replacing,
    scaled_softmax,
    tokens,
)

import hookbus
import hookbus.torch

pytestmark = pytest.mark.torch

# --- generation with a key-value cache -----------------------------------------------------

PER_POSITION = (
    "hook_embed", "hook_pos_embed", "blocks.1.hook_resid_pre", "blocks.1.ln1.hook_normalized",
    "blocks.1.attn.hook_q", "blocks.1.attn.hook_k", "blocks.1.attn.hook_v",
    "blocks.1.attn.hook_rot_q", "blocks.1.attn.hook_rot_k", "blocks.1.attn.hook_z",
    "blocks.1.attn.hook_result", "blocks.1.hook_attn_out", "blocks.1.hook_resid_mid",
    "blocks.1.ln2.hook_scale", "blocks.1.mlp.hook_pre", "blocks.1.mlp.hook_post",
    "blocks.1.hook_mlp_out", "blocks.1.hook_resid_post", "ln_final.hook_normalized",
)  # fmt: skip
"""Names of ``[batch, pos, ...]`` values: a step holds the positions it computes."""
ATTENTION = ("blocks.1.attn.hook_attn_scores", "blocks.1.attn.hook_pattern")
"""``[batch, head, query, key]``: a step's query rows against every key it attends."""


def _recorder(into: Dict[int, Dict[str, torch.Tensor]], step: Any) -> Any:
    def keep(ctx: Any) -> None:
        into.setdefault(step.index, {})[ctx.name] = ctx.result.detach().clone()

    return keep


@pytest.mark.parametrize(("arch", "impl"), CASES)
@pytest.mark.parametrize("use_cache", [True, False], ids=["cache", "no-cache"])
def test_each_generation_step_sees_the_new_positions_as_a_full_forward_does(
    arch: str, impl: str, use_cache: bool
) -> None:
    model, bus, names = named(arch, impl)
    ids = tokens(batch=2, length=5)
    wanted = [name for name in (*PER_POSITION, *ATTENTION) if name in names.names]
    assert len(wanted) >= 17
    generated: Dict[int, Dict[str, torch.Tensor]] = {}
    with hookbus.torch.steps(model) as step, torch.no_grad():
        handles = [bus.post(name, _recorder(generated, step)) for name in wanted]
        out = model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False,
            use_cache=use_cache, pad_token_id=0,
        )  # fmt: skip
        for handle in handles:
            handle.remove()
    assert sorted(generated) == [0, 1, 2]
    for index, values in generated.items():
        length = ids.shape[1] + index
        new = 1 if use_cache and index else length  # the positions this step computes
        full: Dict[int, Dict[str, torch.Tensor]] = {}
        with hookbus.torch.steps(model) as step, torch.no_grad():
            handles = [bus.post(name, _recorder(full, step)) for name in wanted]
            model(out[:, :length])
            for handle in handles:
                handle.remove()
        assert set(values) == set(wanted)
        for name in ATTENTION:
            assert values[name].shape[-2:] == (new, length), name
            expected = full[0][name][:, :, -new:]
            torch.testing.assert_close(values[name], expected, **TOLERANCE, msg=name)
        for name in wanted[: -len(ATTENTION)]:
            assert values[name].shape[1] == new, name
            expected = full[0][name][:, -new:]
            torch.testing.assert_close(values[name], expected, **TOLERANCE, msg=name)


def test_steering_only_the_generated_tokens_with_steps() -> None:
    model, bus, _ = named("llama", "sdpa")
    ids = tokens(batch=1, length=4)
    with torch.no_grad():
        plain = model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0)
    calls: List[int] = []
    with hookbus.torch.steps(model) as step:

        def steer(ctx: Any) -> None:
            calls.append(ctx.result.shape[1])
            ctx.result = ctx.result + 5.0

        with bus.post("blocks.0.hook_resid_post", step.only(steer, start=1)), torch.no_grad():
            steered = model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert calls == [1, 1, 1]  # the prompt's step is left alone
    assert torch.equal(steered[:, :5], plain[:, :5])


# --- writing during generation -------------------------------------------------------------


def _generate(model: nn.Module, ids: torch.Tensor, use_cache: bool) -> Any:
    with torch.no_grad():
        return model.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, do_sample=False,
            use_cache=use_cache, pad_token_id=0, return_dict_in_generate=True,
            output_logits=True,
        )  # fmt: skip


@contextlib.contextmanager
def _raw_zeroed_head(model: nn.Module, arch: str) -> Iterator[None]:
    """Head 1 of layer 0 zeroed in the output projection's input, by a native hook."""
    _, _, d_head = dims(model)

    def zero(module: nn.Module, args: Any) -> Any:
        x = args[0].clone()
        x[..., d_head : 2 * d_head] = 0
        return (x, *args[1:])

    with block_module(model, arch, 0, layout(arch)["o"]).register_forward_pre_hook(zero):
        yield


@contextlib.contextmanager
def _raw_halved_pattern(model: nn.Module, arch: str) -> Iterator[None]:
    """Every pattern halved in the softmax, under eager attention (sdpa has no softmax)."""
    implementation = model.config._attn_implementation
    model.config._attn_implementation = "eager"
    try:
        with scaled_softmax(0.5):
            yield
    finally:
        model.config._attn_implementation = implementation


def _zero_head_1(z: torch.Tensor) -> torch.Tensor:
    z[:, :, 1] = 0
    return z


WRITES = {
    "hook_z": ("blocks.0.attn.hook_z", _zero_head_1, _raw_zeroed_head),
    "hook_pattern": ("blocks.*.attn.hook_pattern", lambda p: p * 0.5, _raw_halved_pattern),
}


@pytest.mark.parametrize("write", list(WRITES))
@pytest.mark.parametrize(("arch", "impl"), CASES)
@pytest.mark.parametrize("use_cache", [True, False], ids=["cache", "no-cache"])
def test_a_write_during_generation_has_the_raw_edits_effect_on_every_step(
    arch: str, impl: str, use_cache: bool, write: str
) -> None:
    model, bus, _ = named(arch, impl)
    ids = tokens(batch=2, length=5)
    name, edit, raw_edit = WRITES[write]
    with bus.post(name, replacing(edit)):
        edited = _generate(model, ids, use_cache)
    with raw_edit(model, arch):
        expected = _generate(model, ids, use_cache)
    plain = _generate(model, ids, use_cache)
    assert len(edited.logits) == len(expected.logits) == 3
    for step, (ours, theirs) in enumerate(zip(edited.logits, expected.logits)):
        torch.testing.assert_close(ours, theirs, **TOLERANCE, msg=f"step {step}")
    assert torch.equal(edited.sequences, expected.sequences)
    assert not torch.allclose(edited.logits[0], plain.logits[0])
