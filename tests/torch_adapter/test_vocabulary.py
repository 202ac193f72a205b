"""The names vocabulary: every name reads the raw value and writes with the raw effect.

Each architecture is a tiny random model (tests/torch_adapter/transformer_models.py),
under eager and sdpa attention; each value is compared with a reference read by
hand with native hooks, and each write's logits with those of the same edit made
in raw torch.
"""

from __future__ import annotations

from typing import Any, Dict, List

import pytest
import torch
from torch import nn
from torch_helpers import native_hooks
from transformer_models import (
    ARCHITECTURES,
    IMPLEMENTATIONS,
    block_module,
    dims,
    edited_rotary,
    layout,
    reference,
    scaled_scores,
    scaled_softmax,
    tiny_model,
    tokens,
)

import hookbus
import hookbus.torch

pytestmark = pytest.mark.torch

CASES = [(arch, impl) for arch in ARCHITECTURES for impl in IMPLEMENTATIONS]
ROTARY = [case for case in CASES if case[0] not in ("gpt2", "opt")]
TOLERANCE = dict(atol=1e-5, rtol=1e-5)


def _named(arch: str, impl: str) -> Any:
    model = tiny_model(arch, impl)
    bus = hookbus.EventBus()
    return model, bus, hookbus.torch.attach(model, bus, names="transformer").vocabulary


def _logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


def _replace(edit: Any) -> Any:
    def hook(ctx: Any) -> None:
        ctx.result = edit(ctx.result.clone())

    return hook


@pytest.mark.parametrize(("arch", "impl"), CASES)
def test_every_name_reads_the_value_raw_hooks_read(arch: str, impl: str) -> None:
    model, bus, names = _named(arch, impl)
    ids = tokens()
    seen: Dict[str, torch.Tensor] = {}

    def keep(ctx: Any) -> None:
        seen[ctx.name] = ctx.result.detach().clone()

    handles = [bus.post(name, keep) for name in names.names]
    logits = _logits(model, ids)
    for handle in handles:
        handle.remove()
    raw = reference(model, arch, ids)
    torch.testing.assert_close(logits, raw.pop("logits"), **TOLERANCE)
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
    model, bus, _ = _named(arch, impl)
    ids = tokens()
    _, _, d_head = dims(model)

    def zero_head_1(ctx: Any) -> None:
        z = ctx.result.clone()
        z[:, :, 1] = 0
        ctx.result = z

    with bus.post("blocks.0.attn.hook_z", zero_head_1):
        edited = _logits(model, ids)

    def raw(module: nn.Module, args: Any) -> Any:
        x = args[0].clone()
        x[..., d_head : 2 * d_head] = 0
        return (x, *args[1:])

    projection = block_module(model, arch, 0, layout(arch)["o"])
    with projection.register_forward_pre_hook(raw):
        expected = _logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)
    assert not torch.allclose(edited, _logits(model, ids))


@pytest.mark.parametrize(("arch", "impl"), CASES)
def test_scaling_every_pattern_equals_scaling_the_softmax(arch: str, impl: str) -> None:
    model, bus, _ = _named(arch, impl)
    ids = tokens()
    with bus.post("blocks.*.attn.hook_pattern", _replace(lambda p: p * 0.5)):
        edited = _logits(model, ids)
    model.config._attn_implementation = "eager"  # the raw edit needs the softmax
    with scaled_softmax(0.5):
        expected = _logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)


@pytest.mark.parametrize(("arch", "impl"), CASES)
def test_scaling_every_score_equals_scaling_the_softmax_input(arch: str, impl: str) -> None:
    model, bus, _ = _named(arch, impl)
    ids = tokens()
    with bus.post("blocks.*.attn.hook_attn_scores", _replace(lambda s: s * 0.25)):
        edited = _logits(model, ids)
    model.config._attn_implementation = "eager"
    with scaled_scores(0.25):
        expected = _logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)


@pytest.mark.parametrize(("arch", "impl"), [c for c in CASES if c[0] != "gpt_neox"])
def test_replacing_resid_mid_equals_adding_to_the_attention_output(arch: str, impl: str) -> None:
    model, bus, _ = _named(arch, impl)
    ids = tokens()
    delta = torch.linspace(-1, 1, 32)
    with bus.post("blocks.0.hook_resid_mid", _replace(lambda x: x + delta)):
        edited = _logits(model, ids)

    def raw(module: nn.Module, args: Any, output: Any) -> Any:
        if isinstance(output, tuple):
            return (output[0] + delta, *output[1:])
        return output + delta

    added = block_module(model, arch, 0, layout(arch)["attn_out"])
    with added.register_forward_hook(raw):
        expected = _logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)
    assert not torch.allclose(edited, _logits(model, ids))


@pytest.mark.parametrize(("arch", "impl"), CASES)
def test_doubling_the_normalized_input_equals_doubling_the_norm_before_its_affine(
    arch: str, impl: str
) -> None:
    model, bus, _ = _named(arch, impl)
    ids = tokens()
    with bus.post("blocks.1.ln2.hook_normalized", _replace(lambda x: x * 2)):
        edited = _logits(model, ids)
    norm = block_module(model, arch, 1, layout(arch)["ln2"])
    bias = getattr(norm, "bias", None)
    offset = bias if bias is not None else 0

    def raw(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        return (output - offset) * 2 + offset

    with norm.register_forward_hook(raw):
        expected = _logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)


@pytest.mark.parametrize(("arch", "impl"), CASES)
def test_zeroing_a_query_head_equals_zeroing_its_slice_of_the_projection(
    arch: str, impl: str
) -> None:
    model, bus, _ = _named(arch, impl)
    ids = tokens()
    _, _, d_head = dims(model)

    def zero_head_2(q: torch.Tensor) -> torch.Tensor:
        q[:, :, 2] = 0
        return q

    with bus.post("blocks.0.attn.hook_q", _replace(zero_head_2)):
        edited = _logits(model, ids)
    style, path = layout(arch)["qkv"]
    if style == "separate":
        projection, start = block_module(model, arch, 0, f"{path}.q_proj"), 2 * d_head
    elif style == "concat":
        projection, start = block_module(model, arch, 0, path), 2 * d_head
    else:
        projection, start = block_module(model, arch, 0, path), 2 * 3 * d_head

    def raw(module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        output = output.clone()
        output[..., start : start + d_head] = 0
        return output

    with projection.register_forward_hook(raw):
        expected = _logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)
    assert not torch.allclose(edited, _logits(model, ids))


@pytest.mark.parametrize(("arch", "impl"), ROTARY)
def test_zeroing_a_rotated_key_head_equals_editing_the_rotary_function(
    arch: str, impl: str
) -> None:
    model, bus, _ = _named(arch, impl)
    ids = tokens()

    def zero_head_0(k: torch.Tensor) -> torch.Tensor:
        k[:, :, 0] = 0
        return k

    with bus.post("blocks.1.attn.hook_rot_k", _replace(zero_head_0)):
        edited = _logits(model, ids)

    def raw(q: torch.Tensor, k: torch.Tensor) -> Any:
        if raw.calls == 1:  # the second layer's call
            k = k.clone()
            k[:, 0] = 0
        raw.calls += 1
        return q, k

    raw.calls = 0  # type: ignore[attr-defined]
    with edited_rotary(arch, raw):
        expected = _logits(model, ids)
    torch.testing.assert_close(edited, expected, **TOLERANCE)
    assert not torch.allclose(edited, _logits(model, ids))


# --- what has no value, and what cannot be written -------------------------------------


def test_a_model_of_no_known_layout_is_refused_naming_the_layouts_and_the_docs() -> None:
    with pytest.raises(
        ValueError, match=r"GPT-2, GPT-NeoX, OPT, Gemma 2, Phi-3, Llama.*docs/torch\.md"
    ):
        hookbus.torch.attach(
            nn.Sequential(nn.Linear(2, 2)), hookbus.EventBus(), names="transformer"
        )


def test_a_typo_of_a_name_is_refused_with_close_names() -> None:
    _, bus, _ = _named("gpt2", "eager")
    with pytest.raises(
        ValueError, match=r"'blocks\.0\.attn\.hook_zz'.*close names: 'blocks\.0\.attn\.hook_z'"
    ):
        bus.post("blocks.0.attn.hook_zz", print)
    with pytest.raises(ValueError, match=r"no name .* matches 'blocks.*.hook_resid_midd'"):
        bus.post("blocks.*.hook_resid_midd", print)
    assert bus.hooks() == []


@pytest.mark.parametrize(
    ("arch", "name", "why"),
    [
        ("llama", "hook_pos_embed", "rotary"),
        ("gpt2", "blocks.0.attn.hook_rot_q", "learned embedding"),
        ("gpt_neox", "blocks.1.hook_resid_mid", "parallel"),
        ("gpt2", "blocks.0.mlp.hook_pre_linear", "not gated"),
    ],
)
def test_a_name_the_model_lacks_is_refused_saying_why(arch: str, name: str, why: str) -> None:
    _, bus, names = _named(arch, "eager")
    assert name in names.absent
    with pytest.raises(ValueError, match=why):
        bus.post(name, print)


def _around(ctx: Any) -> Any:
    yield


@pytest.mark.parametrize("kind", ["pre", "around", "exception"])
def test_a_name_takes_post_hooks_only(kind: str) -> None:
    _, bus, _ = _named("gpt2", "eager")
    with pytest.raises(ValueError, match=f"{kind} hooks do not apply to 'blocks.0.attn.hook_z'"):
        getattr(bus, kind)("blocks.0.attn.hook_z", _around if kind == "around" else print)
    assert bus.hooks() == []


def test_a_replacement_of_another_shape_is_refused_naming_both_shapes() -> None:
    model, bus, _ = _named("gpt2", "eager")
    with (
        bus.post("blocks.0.attn.hook_z", _replace(lambda z: z[:, :, :2])),
        pytest.raises(ValueError, match=r"shape \(2, 7, 2, 8\).*shape \(2, 7, 4, 8\)"),
    ):
        model(tokens())


def test_writing_the_pattern_under_sdpa_with_dropout_is_refused_naming_eager() -> None:
    model = tiny_model("llama", "sdpa", attention_dropout=0.5).train()
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus, names="transformer")
    seen: List[torch.Size] = []
    with bus.post("blocks.0.attn.hook_pattern", lambda ctx: seen.append(ctx.result.shape)):
        model(tokens())  # reading works: the pattern before dropout
    assert seen == [torch.Size([2, 4, 7, 7])]
    with (
        bus.post("blocks.0.attn.hook_pattern", _replace(lambda p: p)),
        pytest.raises(RuntimeError, match="attn_implementation='eager'"),
    ):
        model(tokens())


# --- cost and cleanup --------------------------------------------------------------------


@pytest.mark.parametrize(("arch", "impl"), CASES[:4])
def test_no_native_hook_is_on_the_model_while_no_name_has_hooks(arch: str, impl: str) -> None:
    model = tiny_model(arch, impl)
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus, names="transformer")
    names = net.vocabulary
    assert native_hooks(model) == {}
    with bus.post("blocks.*.attn.hook_pattern", print), bus.post("blocks.0.attn.hook_z", print):
        assert native_hooks(model) != {}
    assert native_hooks(model) == {}
    bus.post("blocks.1.ln1.hook_normalized", print)
    net.detach()
    assert native_hooks(model) == {}
    assert not names.active
    model(tokens())  # the hook left on the bus reaches nothing


def test_hooks_registered_before_the_vocabulary_apply_once_it_is_made() -> None:
    model = tiny_model("gpt2")
    bus = hookbus.EventBus()
    seen: List[str] = []
    bus.post("blocks.*.hook_resid_post", lambda ctx: seen.append(ctx.name))
    hookbus.torch.attach(model, bus, names="transformer")
    model(tokens())
    assert seen == ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]


def test_a_pattern_without_hook_reaches_modules_only() -> None:
    model = tiny_model("gpt2")
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus, names="transformer")
    seen: List[str] = []
    with bus.post("*", lambda ctx: seen.append(ctx.name)):
        model(tokens())
    assert seen
    assert not any("hook_" in name for name in seen)


# --- generation with a key-value cache -----------------------------------------------------

GENERATION = [("gpt2", "eager"), ("gpt2", "sdpa"), ("llama", "sdpa"), ("llama", "eager"),
              ("gpt_neox", "sdpa"), ("phi3", "sdpa")]  # fmt: skip
STEP_NAMES = ("blocks.1.attn.hook_pattern", "blocks.1.attn.hook_z", "blocks.1.attn.hook_rot_k",
              "blocks.0.hook_resid_post")  # fmt: skip


@pytest.mark.parametrize(("arch", "impl"), GENERATION)
@pytest.mark.parametrize("use_cache", [True, False])
def test_each_generation_step_sees_the_new_positions_as_a_full_forward_does(
    arch: str, impl: str, use_cache: bool
) -> None:
    model, bus, names = _named(arch, impl)
    ids = tokens(batch=2, length=5)
    wanted = [name for name in STEP_NAMES if name in names.names]

    def record(into: Dict[int, Dict[str, torch.Tensor]], step: Any) -> Any:
        def keep(ctx: Any) -> None:
            into.setdefault(step.index, {})[ctx.name] = ctx.result.detach().clone()

        return keep

    generated: Dict[int, Dict[str, torch.Tensor]] = {}
    with hookbus.torch.steps(model) as step, torch.no_grad():
        handles = [bus.post(name, record(generated, step)) for name in wanted]
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
            handles = [bus.post(name, record(full, step)) for name in wanted]
            model(out[:, :length])
            for handle in handles:
                handle.remove()
        pattern = values["blocks.1.attn.hook_pattern"]
        assert pattern.shape[-2:] == (new, length)
        torch.testing.assert_close(
            pattern, full[0]["blocks.1.attn.hook_pattern"][:, :, -new:], **TOLERANCE
        )
        for name in wanted[1:]:
            assert values[name].shape[1] == new, name
            torch.testing.assert_close(values[name], full[0][name][:, -new:], **TOLERANCE)


def test_steering_only_the_generated_tokens_with_steps() -> None:
    model, bus, _ = _named("llama", "sdpa")
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


def test_a_peft_model_keeps_the_vocabulary_and_reads_the_adapted_values() -> None:
    peft = pytest.importorskip("peft")
    model = tiny_model("llama", "sdpa")
    lora = peft.LoraConfig(target_modules=["q_proj", "o_proj"], r=4, init_lora_weights=False)
    wrapped = peft.get_peft_model(model, lora).eval()
    bus = hookbus.EventBus()
    names = hookbus.torch.attach(wrapped, bus, names="transformer").vocabulary
    assert names.architecture.startswith("Llama")
    seen: Dict[str, torch.Tensor] = {}
    raw: Dict[str, torch.Tensor] = {}
    adapted = wrapped.base_model.model.model.layers[0].self_attn.q_proj
    plain = adapted.base_layer

    def on(name: str) -> Any:
        return lambda module, args, output: raw.__setitem__(name, output.detach())

    with (
        bus.post("blocks.0.attn.hook_q", lambda ctx: seen.__setitem__("q", ctx.result)),
        adapted.register_forward_hook(on("adapted")),
        plain.register_forward_hook(on("base")),
    ):
        wrapped(tokens())
    torch.testing.assert_close(seen["q"], raw["adapted"].unflatten(-1, (4, -1)))
    assert not torch.allclose(raw["adapted"], raw["base"])  # the adapter changed it


# --- capture and patch take names ----------------------------------------------------------


def test_capture_takes_names_and_patterns_of_names() -> None:
    model = tiny_model("llama", "sdpa")
    with hookbus.torch.capture(model, "blocks.*.hook_resid_post", grads=True) as cache:
        model(tokens()).logits.sum().backward()
    assert list(cache) == ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    assert native_hooks(model) == {}
    raw = reference(model, "llama", tokens())  # output_attentions leaves transformers' hooks
    torch.testing.assert_close(
        cache["blocks.0.hook_resid_post"].output, raw["blocks.0.hook_resid_post"]
    )
    assert cache["blocks.1.hook_resid_post"].grad.shape == (2, 7, 32)
    with hookbus.torch.capture(model, ["blocks.0.attn.hook_z"], keep="last") as cache:
        model(tokens())
        model(tokens(batch=1))
    assert cache["blocks.0.attn.hook_z"].count == 2
    assert cache["blocks.0.attn.hook_z"].output.shape == (1, 7, 4, 8)


def test_capture_refuses_a_typo_of_a_name_and_inputs_of_a_value() -> None:
    model = tiny_model("gpt2")
    with pytest.raises(ValueError, match=r"close names: 'blocks.0.hook_resid_post'"):
        hookbus.torch.capture(model, "blocks.0.hook_resid_psot")
    with pytest.raises(TypeError, match="inputs= applies to modules"):
        hookbus.torch.capture(model, "blocks.0.hook_resid_post", inputs=True)


@pytest.mark.parametrize(("arch", "impl"), [("gpt2", "sdpa"), ("gpt_neox", "eager")])
def test_patching_a_name_replaces_the_value_in_the_forward(arch: str, impl: str) -> None:
    model = tiny_model(arch, impl)
    clean, corrupt = tokens(1, 7), tokens(1, 7).flip(1)
    with hookbus.torch.capture(model, "blocks.*.hook_resid_post") as cache:
        clean_logits = _logits(model, clean)
    with hookbus.torch.patch(model, cache, "blocks.1.hook_resid_post"):
        torch.testing.assert_close(_logits(model, corrupt), clean_logits, **TOLERANCE)
    with (
        hookbus.torch.patch(model, cache, "blocks.0.hook_resid_post", positions=[2]),
        hookbus.torch.capture(model, "blocks.0.hook_resid_post") as patched,
    ):
        model(corrupt)
    stored = cache["blocks.0.hook_resid_post"].output
    torch.testing.assert_close(patched["blocks.0.hook_resid_post"].output[:, 2], stored[:, 2])
    assert not torch.allclose(patched["blocks.0.hook_resid_post"].output[:, 3], stored[:, 3])
    assert native_hooks(model) == {}
