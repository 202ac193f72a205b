"""capture() and patch() take names of the vocabulary."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch_helpers import native_hooks
from transformer_models import (
    TOLERANCE,
    block_module,
    layout,
    logits,
    reference,
    tiny_model,
    tokens,
)

import hookbus
import hookbus.torch

pytestmark = pytest.mark.torch


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


@pytest.mark.parametrize(("arch", "impl"), [("llama", "sdpa"), ("gpt2", "eager")])
def test_capture_with_grads_records_the_gradient_of_every_name_the_forward_uses(
    arch: str, impl: str
) -> None:
    model = tiny_model(arch, impl)
    names = hookbus.torch.attach(model, hookbus.EventBus(), names="transformer").vocabulary
    assert names is not None
    ids = tokens()
    plain = logits(model, ids)
    with hookbus.torch.capture(model, names.names, grads=True) as cache:
        out = model(ids).logits
        out.sum().backward()
    torch.testing.assert_close(out, plain, **TOLERANCE)  # the capture changes no value
    # Values computed for the hooks alone, which the forward never uses, get none.
    computed = ("hook_scale", "hook_normalized") if arch == "gpt2" else ("hook_scale",)
    computed += ("hook_attn_scores", "hook_pattern") if impl == "sdpa" else ()
    missing = [n for n in names.names if cache[n].grad is None]
    assert missing == [n for n in names.names if n.endswith(computed)]
    for name in names.names:
        if name not in missing:
            assert cache[name].grad.shape == cache[name].output.shape, name
    # hook_z's gradient is the output projection's input's, split by head, as by hand
    seen = {}
    o = block_module(model, arch, 0, layout(arch)["o"])
    hook = o.register_forward_pre_hook(
        lambda _, args: args[0].register_hook(lambda g: seen.setdefault("z", g)) and None
    )
    try:
        model(ids).logits.sum().backward()
    finally:
        hook.remove()
    torch.testing.assert_close(
        cache["blocks.0.attn.hook_z"].grad, seen["z"].unflatten(-1, (4, 8)), **TOLERANCE
    )


def test_capture_and_patch_take_a_list_mixing_names_and_modules() -> None:
    model = tiny_model("gpt2")
    clean, corrupt = tokens(1, 7), tokens(1, 7).flip(1)
    name, block = "blocks.0.attn.hook_z", model.transformer.h[1]
    with (
        hookbus.torch.capture(model, name) as alone,
        hookbus.torch.capture(model, "transformer.h.1") as alone_block,
    ):
        clean_logits = logits(model, clean)
    with hookbus.torch.capture(model, [name, "transformer.h.1.mlp", block]) as cache:
        torch.testing.assert_close(logits(model, clean), clean_logits, **TOLERANCE)
    assert sorted(cache) == [name, "transformer.h.1", "transformer.h.1.mlp"]
    torch.testing.assert_close(cache[name].output, alone[name].output)
    torch.testing.assert_close(
        cache["transformer.h.1"].output, alone_block["transformer.h.1"].output
    )
    assert native_hooks(model) == {}
    # The whole cache patches back: the value and the modules, each the way it needs.
    with hookbus.torch.patch(model, cache):
        torch.testing.assert_close(logits(model, corrupt), clean_logits, **TOLERANCE)
    with hookbus.torch.patch(model, cache, [name, "transformer.h.1"]):
        torch.testing.assert_close(logits(model, corrupt), clean_logits, **TOLERANCE)
    assert native_hooks(model) == {}
    assert "forward" not in vars(block)


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
        clean_logits = logits(model, clean)
    with hookbus.torch.patch(model, cache, "blocks.1.hook_resid_post"):
        torch.testing.assert_close(logits(model, corrupt), clean_logits, **TOLERANCE)
    with (
        hookbus.torch.patch(model, cache, "blocks.0.hook_resid_post", positions=[2]),
        hookbus.torch.capture(model, "blocks.0.hook_resid_post") as patched,
    ):
        model(corrupt)
    stored = cache["blocks.0.hook_resid_post"].output
    torch.testing.assert_close(patched["blocks.0.hook_resid_post"].output[:, 2], stored[:, 2])
    assert not torch.allclose(patched["blocks.0.hook_resid_post"].output[:, 3], stored[:, 3])
    assert native_hooks(model) == {}


def test_a_refused_patch_of_positions_of_a_name_calls_it_a_name() -> None:
    model = tiny_model("gpt2")
    with hookbus.torch.capture(model, "blocks.0.hook_resid_post") as cache:
        model(tokens(1, 7))
    with (
        hookbus.torch.patch(model, cache, "blocks.0.hook_resid_post", positions=[2], dim=5),
        pytest.raises(IndexError, match=r"on name 'blocks\.0\.hook_resid_post': dim=5 is out"),
    ):
        model(tokens(1, 7))
    with (
        hookbus.torch.patch(model, cache, "blocks.0.hook_resid_post", positions=[2]),
        pytest.raises(ValueError, match=r"on name 'blocks\.0\.hook_resid_post': the value has"),
    ):
        model(tokens(2, 7))  # another batch size than the stored value's
    assert native_hooks(model) == {}


def test_a_module_named_like_a_name_is_captured_and_patched_as_a_module() -> None:
    model = nn.Sequential()
    model.add_module("hook_in", nn.Linear(2, 2))  # as a TransformerLens model names its points
    with hookbus.torch.capture(model, "hook_*") as cache:
        model(torch.ones(1, 2))
    assert list(cache) == ["hook_in"]
    with hookbus.torch.patch(model, {"hook_in": torch.zeros(1, 2)}, "hook_*"):
        assert torch.equal(model(torch.ones(1, 2)), torch.zeros(1, 2))
    with pytest.raises(ValueError, match="none of the layouts"):  # not a module: a name
        hookbus.torch.capture(model, "blocks.*.hook_z")
