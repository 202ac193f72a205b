"""Selection: which modules a selector names (a glob, a type, a module, a list of them),
and the close names that a selector matching nothing lists."""

from __future__ import annotations

from typing import Any, List

import pytest
import torch
from torch import nn
from torch_helpers import Block, Encoder, native_hooks

import hookbus
import hookbus.torch


def test_selection_by_glob_type_object_and_list() -> None:
    model = Encoder()
    attached = hookbus.torch.attach(model, hookbus.EventBus())
    assert attached.select("layers.*.attn") == ["layers.0.attn", "layers.1.attn"]
    assert attached.select(nn.LayerNorm) == ["norm"]
    assert attached.select(model.layers[1]) == ["layers.1"]
    assert attached.select([model.norm, "layers.0.m*"]) == ["layers.0.mlp", "norm"]
    assert attached.select(Block) == ["layers.0", "layers.1"]


def test_selection_errors_name_close_names() -> None:
    model = Encoder()
    attached = hookbus.torch.attach(model, hookbus.EventBus())
    with pytest.raises(ValueError, match=r"layer\.\*\.attn.*close names: .*'layers\.0\.attn'"):
        attached.post("layer.*.attn", lambda ctx: None)
    with pytest.raises(ValueError, match=r"no module named 'nrom'.*'norm'"):
        attached.pre("nrom", lambda ctx: None)
    with pytest.raises(ValueError, match=r"no module of type Conv2d.*Linear"):
        attached.post(nn.Conv2d, lambda ctx: None)
    with pytest.raises(ValueError, match="not part of the attached model"):
        attached.post(nn.Linear(1, 1), lambda ctx: None)
    with pytest.raises(TypeError, match="cannot select modules with int"):
        attached.post(3, lambda ctx: None)  # type: ignore[call-overload]
    assert attached.bus.hooks() == []  # nothing half-registered


def test_type_selection_returns_a_group_of_exact_names() -> None:
    model = Encoder()
    attached = hookbus.torch.attach(model, hookbus.EventBus())
    group = attached.post(nn.Linear, lambda ctx: None)
    assert isinstance(group, hookbus.HandleGroup)
    assert sorted(h.name for h in group) == sorted(attached.select(nn.Linear))
    assert set(native_hooks(model)) == {f"layers.{i}.{n}" for i in (0, 1) for n in ("attn", "mlp")}
    group.remove()
    assert native_hooks(model) == {}


# --- a name that holds glob characters is matched literally -------------------------------


def _glob_named() -> nn.ModuleDict:
    return nn.ModuleDict({"a[0]": nn.Linear(2, 2), "a0": nn.Linear(2, 3), "b*": nn.Identity()})


def test_capture_records_modules_whose_names_hold_glob_characters() -> None:
    model = _glob_named()
    with hookbus.torch.capture(model, nn.Linear) as cache:
        model["a[0]"](torch.ones(1, 2))
        model["a0"](torch.ones(1, 2))
    assert list(cache) == ["a[0]", "a0"]
    assert [len(cache["a[0]"]), len(cache["a0"])] == [1, 1]
    assert [cache["a[0]"].output.shape, cache["a0"].output.shape] == [(1, 2), (1, 3)]


@pytest.mark.parametrize("selector", ["a[0]", "module", "type"])
def test_a_name_from_the_model_is_matched_literally(selector: str) -> None:
    model = _glob_named()
    net = hookbus.torch.attach(model, hookbus.EventBus())
    seen: List[str] = []
    chosen: Any = {"a[0]": "a[0]", "module": model["a[0]"], "type": [model["a[0]"]]}[selector]
    net.post(chosen, lambda ctx: seen.append(ctx.name))
    model["a0"](torch.ones(1, 2))
    model["a[0]"](torch.ones(1, 2))
    assert seen == ["a[0]"]
    assert net.select("b*") == ["b*"]  # the name, not every name starting with b
    assert net.select("a?") == ["a0"]  # a pattern that is no name still matches names
    net.detach()


@pytest.mark.parametrize(
    ("selector", "expected"),
    [("a[0]", ["a[0]"]), ("a?", ["a0"]), ("*", ["a[0]", "a0", "b*"]), ("b*", ["b*"])],
)
def test_a_capture_by_name_or_glob_records_exactly_what_it_selects(
    selector: str, expected: List[str]
) -> None:
    model = _glob_named()
    with hookbus.torch.capture(model, selector, grads=True) as cache:
        model["a[0]"](torch.ones(1, 2, requires_grad=True)).sum().backward()
        model["a0"](torch.ones(1, 2, requires_grad=True)).sum().backward()
        model["b*"](torch.ones(1, 2, requires_grad=True)).sum().backward()
    assert list(cache) == expected
    assert all(cache[name].grad is not None for name in expected)
    assert not any(m._forward_hooks for m in model.modules())
