"""Names of the vocabulary: every name reads the raw value and writes with the raw effect.

Each architecture is a tiny random model (transformer_models.py), under eager and
sdpa attention; each value is compared with a reference read by hand with native
hooks, and each write's logits with those of the same edit made in raw torch.
"""

from __future__ import annotations

from typing import Any, Dict, List

import pytest
import torch
from torch import nn
from transformer_models import (
    CASES,
    TOLERANCE,
    block_module,
    dims,
    edited_rotary,
    layout,
    logits,
    module,
    named,
    reference,
    replacing,
    scaled_scores,
    scaled_softmax,
    tiny_model,
    tokens,
)

import hookbus
import hookbus.torch

pytestmark = pytest.mark.torch

ROTARY = [case for case in CASES if case[0] not in ("gpt2", "opt")]


@pytest.mark.parametrize(("arch", "impl"), CASES)
def test_every_name_reads_the_value_raw_hooks_read(arch: str, impl: str) -> None:
    model, bus, names = named(arch, impl)
    ids = tokens()
    seen: Dict[str, torch.Tensor] = {}

    def keep(ctx: Any) -> None:
        seen[ctx.name] = ctx.result.detach().clone()

    handles = [bus.post(name, keep) for name in names.names]
    out = logits(model, ids)
    for handle in handles:
        handle.remove()
    raw = reference(model, arch, ids)
    torch.testing.assert_close(out, raw.pop("logits"), **TOLERANCE)
    assert set(seen) == set(names.names)
    layers = names.dims.layers
    last = f"blocks.{layers - 1}.hook_resid_post"
    checked_otherwise = {last} | {f"blocks.{n}.attn.hook_attn_scores" for n in range(layers)}
    assert set(names.names) - set(raw) == checked_otherwise
    for name, value in raw.items():
        torch.testing.assert_close(seen[name], value.to(seen[name].dtype), **TOLERANCE, msg=name)
    for layer in range(layers):  # the pattern is the softmax of the scores
        scores = seen[f"blocks.{layer}.attn.hook_attn_scores"]
        torch.testing.assert_close(
            scores.float().softmax(-1), seen[f"blocks.{layer}.attn.hook_pattern"], **TOLERANCE
        )
    norm = block_module(model, arch, 0, layout(arch)["ln1"])  # ln_final's kind
    eps = getattr(norm, "eps", None) or getattr(norm, "variance_epsilon", 1e-6)
    final = seen[last].float()
    if isinstance(norm, nn.LayerNorm):
        final = final - final.mean(-1, keepdim=True)
    normalized = final / (final.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    torch.testing.assert_close(normalized, seen["ln_final.hook_normalized"], **TOLERANCE)


@pytest.mark.parametrize(("arch", "impl"), CASES)
def test_zeroing_a_head_in_hook_z_equals_zeroing_its_slice_of_the_output_projection(
    arch: str, impl: str
) -> None:
    model, bus, _ = named(arch, impl)
    ids = tokens()
    _, _, d_head = dims(model)

    def zero_head_1(ctx: Any) -> None:
        z = ctx.result.clone()
        z[:, :, 1] = 0
        ctx.result = z

    with bus.post("blocks.0.attn.hook_z", zero_head_1):
        edited = logits(model, ids)

    def raw(module: nn.Module, args: Any) -> Any:
        x = args[0].clone()
        x[..., d_head : 2 * d_head] = 0
        return (x, *args[1:])

    projection = block_module(model, arch, 0, layout(arch)["o"])
    with projection.register_forward_pre_hook(raw):
        expected = logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)
    assert not torch.allclose(edited, logits(model, ids))


@pytest.mark.parametrize(("arch", "impl"), CASES)
def test_zeroing_a_head_in_hook_result_equals_zeroing_it_in_hook_z(arch: str, impl: str) -> None:
    model, bus, _ = named(arch, impl)
    ids = tokens()
    seen: List[torch.Tensor] = []

    def zero_head_1(result: torch.Tensor) -> torch.Tensor:
        seen.append(result)
        result[:, :, 1] = 0
        return result

    with bus.post("blocks.1.attn.hook_result", replacing(zero_head_1)):
        edited = logits(model, ids)
    assert seen[0].shape == (2, 7, 4, 32)  # [batch, pos, head, d_model]

    def zero_z_1(z: torch.Tensor) -> torch.Tensor:
        z[:, :, 1] = 0
        return z

    with bus.post("blocks.1.attn.hook_z", replacing(zero_z_1)):
        expected = logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)
    assert not torch.allclose(edited, logits(model, ids))


@pytest.mark.parametrize(("arch", "impl"), CASES)
def test_doubling_the_mlp_activation_equals_doubling_the_down_projection_input(
    arch: str, impl: str
) -> None:
    model, bus, _ = named(arch, impl)
    ids = tokens()
    with bus.post("blocks.0.mlp.hook_post", replacing(lambda x: x * 2)):
        edited = logits(model, ids)
    down = block_module(model, arch, 0, layout(arch)["down"])
    with down.register_forward_pre_hook(lambda module, args: (args[0] * 2, *args[1:])):
        expected = logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)
    assert not torch.allclose(edited, logits(model, ids))


@pytest.mark.parametrize(("arch", "impl"), CASES)
def test_scaling_every_pattern_equals_scaling_the_softmax(arch: str, impl: str) -> None:
    model, bus, _ = named(arch, impl)
    ids = tokens()
    with bus.post("blocks.*.attn.hook_pattern", replacing(lambda p: p * 0.5)):
        edited = logits(model, ids)
    model.config._attn_implementation = "eager"  # the raw edit needs the softmax
    with scaled_softmax(0.5):
        expected = logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)


@pytest.mark.parametrize(("arch", "impl"), CASES)
def test_scaling_every_score_equals_scaling_the_softmax_input(arch: str, impl: str) -> None:
    model, bus, _ = named(arch, impl)
    ids = tokens()
    with bus.post("blocks.*.attn.hook_attn_scores", replacing(lambda s: s * 0.25)):
        edited = logits(model, ids)
    model.config._attn_implementation = "eager"
    with scaled_scores(0.25):
        expected = logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)


@pytest.mark.parametrize(("arch", "impl"), [c for c in CASES if c[0] != "gpt_neox"])
def test_replacing_resid_mid_equals_adding_to_the_attention_output(arch: str, impl: str) -> None:
    model, bus, _ = named(arch, impl)
    ids = tokens()
    delta = torch.linspace(-1, 1, 32)
    with bus.post("blocks.0.hook_resid_mid", replacing(lambda x: x + delta)):
        edited = logits(model, ids)

    def raw(module: nn.Module, args: Any, output: Any) -> Any:
        if isinstance(output, tuple):
            return (output[0] + delta, *output[1:])
        return output + delta

    added = block_module(model, arch, 0, layout(arch)["attn_out"])
    with added.register_forward_hook(raw):
        expected = logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)
    assert not torch.allclose(edited, logits(model, ids))


@pytest.mark.parametrize(("arch", "impl"), CASES)
def test_doubling_the_normalized_input_equals_doubling_the_norm_before_its_affine(
    arch: str, impl: str
) -> None:
    model, bus, _ = named(arch, impl)
    ids = tokens()
    with bus.post("blocks.1.ln2.hook_normalized", replacing(lambda x: x * 2)):
        edited = logits(model, ids)
    norm = block_module(model, arch, 1, layout(arch)["ln2"])
    bias = getattr(norm, "bias", None)
    offset = bias if bias is not None else 0

    def raw(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        return (output - offset) * 2 + offset

    with norm.register_forward_hook(raw):
        expected = logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)


@pytest.mark.parametrize("letter", ["q", "k", "v"])
@pytest.mark.parametrize(("arch", "impl"), CASES)
def test_zeroing_a_head_of_q_k_or_v_equals_zeroing_its_slice_of_the_projection(
    arch: str, impl: str, letter: str
) -> None:
    model, bus, _ = named(arch, impl)
    ids = tokens()
    heads, kv, d_head = dims(model)

    def zero_head_1(x: torch.Tensor) -> torch.Tensor:
        x[:, :, 1] = 0
        return x

    with bus.post(f"blocks.0.attn.hook_{letter}", replacing(zero_head_1)):
        edited = logits(model, ids)
    style, path = layout(arch)["qkv"]
    index = "qkv".index(letter)
    if style == "separate":
        projection, start = block_module(model, arch, 0, f"{path}.{letter}_proj"), d_head
    elif style == "concat":  # [q of every head | k of the kv heads | v of the kv heads]
        offset = (0, heads * d_head, (heads + kv) * d_head)[index]
        projection, start = block_module(model, arch, 0, path), offset + d_head
    else:  # per head: [q k v] of head 0, then of head 1, ...
        projection, start = block_module(model, arch, 0, path), 3 * d_head + index * d_head

    def raw(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        output = output.clone()
        output[..., start : start + d_head] = 0
        return output

    with projection.register_forward_hook(raw):
        expected = logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)
    assert not torch.allclose(edited, logits(model, ids))


def _add_to_input(delta: torch.Tensor) -> Any:
    def hook(module: nn.Module, args: Any, kwargs: Any) -> Any:
        if args:
            return (args[0] + delta, *args[1:]), kwargs
        return args, dict(kwargs, hidden_states=kwargs["hidden_states"] + delta)

    return hook


def _add_to_output(delta: torch.Tensor) -> Any:
    def hook(module: nn.Module, args: Any, output: Any) -> Any:
        if isinstance(output, tuple):
            return (output[0] + delta, *output[1:])
        return output + delta

    return hook


STREAM = [
    ("hook_embed", "embed", None, "output"),
    ("blocks.0.hook_resid_pre", "blocks", 0, "input"),
    ("blocks.1.hook_resid_pre", "blocks", 1, "input"),
    ("blocks.0.hook_resid_post", "blocks", 0, "output"),
    ("blocks.1.hook_resid_post", "blocks", 1, "output"),
    ("blocks.0.hook_attn_out", "attn_out", 0, "output"),
    ("blocks.1.hook_mlp_out", "mlp_out", 1, "output"),
]
"""Names of ``[batch, pos, d_model]`` values, and where the raw edit adds: the input or
output of a module of the model (``blocks`` with a layer: that block itself)."""


@pytest.mark.parametrize(("name", "where", "layer", "side"), STREAM, ids=[s[0] for s in STREAM])
@pytest.mark.parametrize(("arch", "impl"), CASES)
def test_adding_to_a_residual_stream_name_equals_adding_at_its_module(
    arch: str, impl: str, name: str, where: str, layer: Any, side: str
) -> None:
    model, bus, _ = named(arch, impl)
    ids = tokens()
    delta = torch.linspace(-1, 1, 32)
    with bus.post(name, replacing(lambda x: x + delta)):
        edited = logits(model, ids)
    spec = layout(arch)
    if layer is None:
        target = module(model, spec[where])
    elif where == "blocks":
        target = module(model, spec["blocks"])[layer]
    else:
        target = block_module(model, arch, layer, spec[where])
    if side == "input":
        handle = target.register_forward_pre_hook(_add_to_input(delta), with_kwargs=True)
    else:
        handle = target.register_forward_hook(_add_to_output(delta))
    with handle:
        expected = logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)
    assert not torch.allclose(edited, logits(model, ids))


@pytest.mark.parametrize(("arch", "impl"), CASES)
def test_doubling_the_mlp_pre_activation_equals_doubling_the_input_projection(
    arch: str, impl: str
) -> None:
    model, bus, _ = named(arch, impl)
    ids = tokens()
    with bus.post("blocks.1.mlp.hook_pre", replacing(lambda x: x * 2)):
        edited = logits(model, ids)
    spec = layout(arch)
    fused = spec["up"] == "fused"  # [gate | up] from one projection: the gate is the first half

    def raw(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        if not fused:
            return output * 2
        gate, up = output.chunk(2, dim=-1)
        return torch.cat([gate * 2, up], dim=-1)

    with block_module(model, arch, 1, spec["mlp_in"]).register_forward_hook(raw):
        expected = logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)
    assert not torch.allclose(edited, logits(model, ids))


GATED = [(arch, impl) for arch, impl in CASES if layout(arch)["up"]]


@pytest.mark.parametrize(("arch", "impl"), GATED)
def test_doubling_the_linear_half_of_a_gated_mlp_equals_doubling_the_up_projection(
    arch: str, impl: str
) -> None:
    model, bus, _ = named(arch, impl)
    ids = tokens()
    with bus.post("blocks.1.mlp.hook_pre_linear", replacing(lambda x: x * 2)):
        edited = logits(model, ids)
    spec = layout(arch)
    fused = spec["up"] == "fused"  # [gate | up] from one projection: the up is the second half

    def raw(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        if not fused:
            return output * 2
        gate, up = output.chunk(2, dim=-1)
        return torch.cat([gate, up * 2], dim=-1)

    projection = spec["mlp_in"] if fused else spec["up"]
    with block_module(model, arch, 1, projection).register_forward_hook(raw):
        expected = logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)
    assert not torch.allclose(edited, logits(model, ids))


@pytest.mark.parametrize("norm", ["blocks.0.ln1", "blocks.0.ln2", "ln_final"])
@pytest.mark.parametrize(("arch", "impl"), CASES)
def test_doubling_a_norm_scale_equals_halving_the_norm_before_its_affine(
    arch: str, impl: str, norm: str
) -> None:
    model, bus, _ = named(arch, impl)
    ids = tokens()
    with bus.post(f"{norm}.hook_scale", replacing(lambda x: x * 2)):
        edited = logits(model, ids)
    spec = layout(arch)
    if norm == "ln_final":
        target = module(model, spec["ln_f"])
    else:
        target = block_module(model, arch, 0, spec[norm.rpartition(".")[2]])
    bias = getattr(target, "bias", None)
    offset = bias if bias is not None else 0

    def raw(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        return (output - offset) / 2 + offset

    with target.register_forward_hook(raw):
        expected = logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)
    assert not torch.allclose(edited, logits(model, ids))


@pytest.mark.parametrize("letter", ["q", "k"])
@pytest.mark.parametrize(("arch", "impl"), ROTARY)
def test_zeroing_a_rotated_head_equals_editing_the_rotary_function(
    arch: str, impl: str, letter: str
) -> None:
    model, bus, _ = named(arch, impl)
    ids = tokens()

    def zero_head_0(x: torch.Tensor) -> torch.Tensor:
        x[:, :, 0] = 0
        return x

    with bus.post(f"blocks.1.attn.hook_rot_{letter}", replacing(zero_head_0)):
        edited = logits(model, ids)

    def raw(q: torch.Tensor, k: torch.Tensor) -> Any:
        if raw.calls == 1:  # the second layer's call ([batch, head, pos, d_head])
            q, k = q.clone(), k.clone()
            (q if letter == "q" else k)[:, 0] = 0
        raw.calls += 1
        return q, k

    raw.calls = 0  # type: ignore[attr-defined]
    with edited_rotary(arch, raw):
        expected = logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)
    assert not torch.allclose(edited, logits(model, ids))


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("arch", ["gpt2", "opt"])
def test_writing_the_position_embedding_of_one_sequence_equals_the_raw_edit(
    arch: str, impl: str
) -> None:
    model, bus, _ = named(arch, impl)
    ids = tokens()
    seen: List[torch.Size] = []

    def zero_second(x: torch.Tensor) -> torch.Tensor:
        seen.append(x.shape)
        x[1] = 0
        return x

    with bus.post("hook_pos_embed", replacing(zero_second)):
        edited = logits(model, ids)
    assert seen == [torch.Size([2, 7, 32])]  # [batch, pos, d_model] whatever the model held

    def raw(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        output = output.expand(2, -1, -1).clone()
        output[1] = 0
        return output

    with module(model, layout(arch)["pos"]).register_forward_hook(raw):
        expected = logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)
    torch.testing.assert_close(edited[0], logits(model, ids)[0], **TOLERANCE)


PEFT = [
    ("llama", "base_model.model.model.layers.0.self_attn", "q_proj", "o_proj"),
    ("gpt2", "base_model.model.transformer.h.0.attn", "c_attn", "c_proj"),
]


@pytest.mark.parametrize(("arch", "attention", "qkv", "o"), PEFT)
def test_a_peft_model_keeps_the_vocabulary_and_reads_the_adapted_values(
    arch: str, attention: str, qkv: str, o: str
) -> None:
    peft = pytest.importorskip("peft")
    model = tiny_model(arch, "sdpa")
    lora = peft.LoraConfig(  # GPT-2's projections are Conv1D, whose weight is transposed
        target_modules=[qkv, o], r=4, init_lora_weights=False, fan_in_fan_out=arch == "gpt2"
    )
    wrapped = peft.get_peft_model(model, lora).eval()
    bus = hookbus.EventBus()
    names = hookbus.torch.attach(wrapped, bus, names="transformer").vocabulary
    assert names.architecture == (
        "GPT-2" if arch == "gpt2" else "Llama-like (Llama, Mistral, Qwen2, ...)"
    )
    seen: Dict[str, torch.Tensor] = {}
    raw: Dict[str, torch.Tensor] = {}
    module = wrapped.get_submodule(attention)
    projection, output = getattr(module, qkv), getattr(module, o)

    def keep(ctx: Any) -> None:
        seen[ctx.name.rsplit(".", 1)[-1]] = ctx.result

    def on(name: str) -> Any:
        return lambda module, args, output: raw.__setitem__(name, output.detach())

    with (
        bus.post("blocks.0.attn.hook_q", keep),
        bus.post("blocks.0.attn.hook_result", keep),
        projection.register_forward_hook(on("q")),
        projection.base_layer.register_forward_hook(on("q base")),
        output.register_forward_hook(on("o")),
        output.base_layer.register_forward_hook(on("o base")),
    ):
        wrapped(tokens())
    torch.testing.assert_close(seen["hook_q"], raw["q"][..., :32].unflatten(-1, (4, -1)))
    assert not torch.allclose(raw["q"], raw["q base"])  # the adapter changed it
    # each head's part of the adapted projection sums to its output, less the bias
    bias = output.base_layer.bias
    total = seen["hook_result"].sum(-2) + (bias if bias is not None else 0)
    torch.testing.assert_close(total, raw["o"], **TOLERANCE)
    assert not torch.allclose(raw["o"], raw["o base"])
