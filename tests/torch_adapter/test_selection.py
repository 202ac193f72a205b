"""Selection: which modules a selector names (a glob, a type, a module, a list of them),
and the close names that a selector matching nothing lists."""

from __future__ import annotations

import pytest
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
