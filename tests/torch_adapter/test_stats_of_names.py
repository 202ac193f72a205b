"""stats() takes names of the vocabulary: their values' statistics, and their gradients'."""

from __future__ import annotations

import pytest
import torch
from torch_helpers import native_hooks
from transformer_models import tiny_model, tokens

import hookbus
import hookbus.torch

pytestmark = pytest.mark.torch


def as_rows(value: torch.Tensor) -> torch.Tensor:
    """A value as (values, features) in float64, the last dimension the features."""
    return value.detach().reshape(-1, value.shape[-1]).double()


@pytest.mark.parametrize(("arch", "impl"), [("llama", "sdpa"), ("gpt2", "eager")])
def test_stats_of_names_match_the_values_and_gradients_a_capture_records(
    arch: str, impl: str
) -> None:
    model = tiny_model(arch, impl)
    wanted = ["blocks.*.hook_resid_post", "blocks.0.attn.hook_z", "blocks.1.mlp.hook_post"]
    ids = tokens()
    with hookbus.torch.capture(model, wanted, grads=True) as cache:
        model(ids).logits.sum().backward()
    with hookbus.torch.stats(model, wanted) as values:
        model(ids).logits.sum().backward()
    with hookbus.torch.stats(model, wanted, of="grad") as grads:
        model(ids).logits.sum().backward()
    assert native_hooks(model) == {}  # nothing left on the model
    names = list(cache)
    assert list(values) == list(grads) == values.selected == names
    for name in names:
        value, grad = as_rows(cache[name].output), as_rows(cache[name].grad)
        assert values[name].count == grads[name].count == value.shape[0], name
        torch.testing.assert_close(values[name].mean, value.mean(0), rtol=1e-6, atol=1e-9)
        torch.testing.assert_close(grads[name].mean, grad.mean(0), rtol=1e-6, atol=1e-9)
        torch.testing.assert_close(values[name].max, value.max(0).values.to(values[name].max))


def test_stats_of_names_keep_the_forward_and_count_only_forwards_that_ran() -> None:
    model = tiny_model("gpt2")
    ids = tokens()
    with torch.no_grad():
        plain = model(ids).logits
    grads = hookbus.torch.stats(model, "blocks.1.hook_resid_*", of="grad")
    with grads as st, torch.no_grad():  # no gradient will come
        out = model(ids).logits
    torch.testing.assert_close(out, plain, rtol=0, atol=0)
    assert len(st) == 0
    with pytest.raises(
        KeyError, match=r"name 'blocks\.1\.hook_resid_mid' was selected but .* not run"
    ):
        st["blocks.1.hook_resid_mid"]
    assert repr(st) == "<Stats of='grad' dim=-1, 0 of 3 names>"


def test_stats_refuse_inputs_of_a_name_a_users_bus_with_names_and_a_typo() -> None:
    model = tiny_model("gpt2")
    with pytest.raises(ValueError, match=r"stats\(of='input'\) applies to modules"):
        hookbus.torch.stats(model, "blocks.0.hook_resid_pre", of="input")
    with pytest.raises(ValueError, match=r"stats\(bus=\) applies to modules"):
        hookbus.torch.stats(model, "blocks.0.hook_resid_pre", bus=hookbus.EventBus())
    with pytest.raises(ValueError, match="hook_resid_psot"):
        hookbus.torch.stats(model, "blocks.0.hook_resid_psot")
    assert native_hooks(model) == {}


def test_stats_of_gradients_of_names_stopped_before_the_backward_count_none_of_it() -> None:
    model = tiny_model("llama")
    st = hookbus.torch.stats(model, "blocks.0.attn.hook_z", of="grad")
    st.start()
    model(tokens()).logits.sum().backward()
    loss = model(tokens()).logits.sum()
    st.stop()
    loss.backward()
    assert st["blocks.0.attn.hook_z"].count == 2 * 7 * 4  # the first backward's alone


def test_stats_of_a_list_mixing_names_and_modules_watch_both() -> None:
    model = tiny_model("gpt2")
    selector = ["transformer.h.1", "blocks.0.attn.hook_z"]
    with hookbus.torch.capture(model, selector) as cache:
        model(tokens())
    with hookbus.torch.stats(model, selector) as st:
        model(tokens())
    assert st.selected == ["transformer.h.1", "blocks.0.attn.hook_z"]
    for name in st.selected:
        output = cache[name].output
        value = (output[0] if isinstance(output, tuple) else output).detach()
        torch.testing.assert_close(st[name].mean, as_rows(value).mean(0), rtol=1e-6, atol=1e-9)
    assert repr(st) == "<Stats of='output' dim=-1, 2 of 2 modules and names>"
    with pytest.raises(KeyError, match=r"module 'transformer\.h\.0' was not selected"):
        st["transformer.h.0"]
    assert native_hooks(model) == {}
