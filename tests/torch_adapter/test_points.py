"""Modules as hook points: the same API, selection, lazy native hooks, the hook kinds."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List

import pytest
import torch
from torch import nn
from torch_helpers import TutorialNet, hook_state, native_hooks

import hookbus
import hookbus.torch
from hookbus import CallContext


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.Linear(2, 2)
        self.mlp = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.attn(x))


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])
        self.norm = nn.LayerNorm(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


def test_names_root_and_prefix() -> None:
    model = Encoder()
    bus = hookbus.EventBus()
    plain = hookbus.torch.attach(model, bus)
    assert plain.names[0] == "<root>"
    assert "layers.1.attn" in plain.names
    plain.detach()
    prefixed = hookbus.torch.attach(model, bus, prefix="enc")
    assert prefixed.names[:2] == ["enc", "enc.layers"]
    assert prefixed.name_of(model.layers[0].mlp) == "enc.layers.0.mlp"
    prefixed.detach()


def test_the_same_bus_api_applies_to_module_calls() -> None:
    model = Encoder()
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)
    seen: List[Any] = []
    bus.pre("layers.*.attn", lambda ctx: seen.append((ctx.phase, ctx.name, ctx.target)))
    bus.post("norm", lambda ctx: seen.append((ctx.phase, ctx.name, ctx.result.shape)))
    model(torch.ones(1, 2))
    assert seen == [
        ("pre", "layers.0.attn", model.layers[0].attn),
        ("pre", "layers.1.attn", model.layers[1].attn),
        ("post", "norm", torch.Size([1, 2])),
    ]
    bus.clear()
    assert native_hooks(model) == {}


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


def test_native_hooks_are_lazy_one_per_phase_and_removed_with_the_last_hook() -> None:
    model = TutorialNet()
    before = hook_state(model)
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(model, bus)
    assert native_hooks(model) == {}  # attaching installs nothing
    first = bus.post("fc1", lambda ctx: None)
    second = bus.post("fc*", lambda ctx: None)
    third = attached.post(model.fc1, lambda ctx: None, priority=5)
    assert len(model.fc1._forward_hooks) == 1  # one dispatcher for three hooks
    assert len(model.fc1._forward_pre_hooks) == 0
    assert native_hooks(model) == {"fc1": 1, "fc2": 1}
    pre = bus.pre("fc1", lambda ctx: None)
    assert len(model.fc1._forward_pre_hooks) == 1
    pre.remove()
    assert len(model.fc1._forward_pre_hooks) == 0
    second.remove()
    assert native_hooks(model) == {"fc1": 1}
    first.remove()
    assert native_hooks(model) == {"fc1": 1}
    third.remove()
    assert native_hooks(model) == {}
    assert hook_state(model) == before


def test_hooks_registered_before_attaching_apply_at_once() -> None:
    bus = hookbus.EventBus()
    calls: List[str] = []
    bus.post("fc2", lambda ctx: calls.append(ctx.name))
    model = TutorialNet()
    attached = hookbus.torch.attach(model, bus)
    model(torch.ones(1, 2))
    assert calls == ["fc2"]
    attached.detach()
    model(torch.ones(1, 2))
    assert calls == ["fc2"]
    assert native_hooks(model) == {}


def test_paused_names_hold_no_native_hooks() -> None:
    model = TutorialNet()
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)
    bus.post("fc1", lambda ctx: None)
    with bus.paused("fc*"):
        assert native_hooks(model) == {}
    assert native_hooks(model) == {"fc1": 1}


def test_pre_hook_replaces_args_and_sees_kwargs_only_calls() -> None:
    class KwargsOnly(nn.Module):
        def forward(self, *, hidden_states: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
            return hidden_states * scale

    model = nn.ModuleDict({"layer": KwargsOnly()})
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(model, bus)
    seen: List[Any] = []

    def triple(ctx: CallContext) -> None:
        seen.append((ctx.args, sorted(ctx.kwargs)))
        ctx.kwargs = {**ctx.kwargs, "scale": 3.0}

    attached.pre("layer", triple)
    out = model["layer"](hidden_states=torch.ones(2))
    assert seen == [((), ["hidden_states"])]
    assert out.tolist() == [3.0, 3.0]


def test_pre_and_post_share_one_context_per_call() -> None:
    model = TutorialNet()
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)
    indices: List[Any] = []

    def start(ctx: CallContext) -> None:
        ctx.data["mark"] = ctx.call_index

    def finish(ctx: CallContext) -> None:
        indices.append((ctx.data.get("mark"), ctx.call_index))

    bus.pre("fc1", start)
    bus.post("fc1", finish)
    model(torch.ones(1, 2))
    model(torch.ones(1, 2))
    assert indices == [(0, 0), (1, 1)]


def test_a_reused_module_fires_once_per_call_with_its_one_name() -> None:
    shared = nn.Linear(2, 2)

    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.shared = shared

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.shared(self.shared(x))

    model = Twice()
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)
    calls: List[Any] = []
    bus.post("shared", lambda ctx: calls.append((ctx.name, ctx.call_index)))
    model(torch.ones(1, 2))
    assert calls == [("shared", 0), ("shared", 1)]
    with hookbus.torch.capture(model, "shared") as cache:
        y = model(torch.ones(1, 2))
    assert len(cache["shared"]) == 2
    assert torch.equal(cache["shared"].outputs[1], y)


def test_returning_a_value_is_an_error_not_a_replacement() -> None:
    model = TutorialNet()
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)
    bus.post("fc2", lambda ctx: ctx.result * 2)
    with pytest.raises(TypeError, match="returned Tensor, not None"):
        model(torch.ones(1, 2))


def test_hook_errors_follow_the_bus_policy() -> None:
    model = TutorialNet()
    bus = hookbus.EventBus(errors="collect")
    hookbus.torch.attach(model, bus)
    bus.post("fc1", lambda ctx: 1 / 0)
    bus.post("fc1", lambda ctx: [][0])
    with pytest.raises(hookbus.HookError) as caught:
        model(torch.ones(1, 2))
    assert [type(e) for e in caught.value.exceptions] == [ZeroDivisionError, IndexError]


def test_once_target_and_priority_options_work_on_modules() -> None:
    model = TutorialNet()
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)
    order: List[str] = []
    bus.post("fc*", lambda ctx: order.append("low " + ctx.name))
    bus.post("fc*", lambda ctx: order.append("high " + ctx.name), priority="HIGH")
    bus.post("fc*", lambda ctx: order.append("once"), once=True)
    bus.post("fc*", lambda ctx: order.append("fc2 only"), target=model.fc2)
    model(torch.ones(1, 2))
    model(torch.ones(1, 2))
    assert order[:5] == ["high fc1", "low fc1", "once", "high fc2", "low fc2"]
    assert order[5:7] == ["fc2 only", "high fc1"]
    assert order.count("once") == 1


def test_exception_hooks_observe_and_the_error_propagates_unchanged() -> None:
    model = nn.Sequential(nn.Linear(3, 2))
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(model, bus)
    seen: List[Any] = []
    attached.exception(
        "0", lambda ctx: seen.append((ctx.phase, type(ctx.exception), ctx.args[0].shape))
    )
    attached.exception("<root>", lambda ctx: seen.append(("root", type(ctx.exception))))
    bad = torch.ones(4, 5)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied") as caught:
        model(bad)
    assert seen == [
        ("exception", RuntimeError, torch.Size([4, 5])),
        ("root", RuntimeError),
    ]
    assert caught.value.__traceback__ is not None
    seen.clear()
    model(torch.ones(4, 3))  # a good call fires no exception hook
    assert seen == []


def test_exception_hooks_inside_an_outer_except_block_fire_only_on_errors() -> None:
    model = nn.Sequential(nn.Linear(3, 2))
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)
    errors: List[Any] = []
    bus.exception("0", lambda ctx: errors.append(ctx.exception))
    outputs: List[Any] = []
    bus.post("0", lambda ctx: outputs.append(ctx.result.shape))
    try:
        raise KeyError("outer")
    except KeyError:
        model(torch.ones(1, 3))  # runs while handling another error: a normal call
    assert errors == []
    assert outputs == [torch.Size([1, 2])]


def test_exception_hook_recover_warns_and_the_error_propagates() -> None:
    model = nn.Sequential(nn.Linear(3, 2))
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)
    bus.exception("0", lambda ctx: ctx.recover(torch.zeros(1)))
    with (
        pytest.warns(RuntimeWarning, match="cannot change the result"),
        pytest.raises(RuntimeError),
    ):
        model(torch.ones(1, 5))


def test_recovery_works_around_the_call_with_bus_wrap() -> None:
    model = nn.Sequential(nn.Linear(3, 2))
    bus = hookbus.EventBus()
    safe = bus.wrap(model, "predict")

    def fallback(ctx: CallContext) -> None:
        ctx.recover(torch.zeros(1, 2))

    bus.exception("predict", fallback)
    assert torch.equal(safe(torch.ones(1, 5)), torch.zeros(1, 2))


def test_a_pre_hook_error_reaches_the_exception_hooks_and_leaves_no_state() -> None:
    # One rule with the core's hook points: exception hooks see a pre hook's error.
    model = nn.Sequential(nn.Linear(3, 2))
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)
    seen: List[Any] = []
    bus.pre("0", lambda ctx: 1 / 0)
    bus.exception("0", lambda ctx: seen.append(type(ctx.exception).__name__))
    with pytest.raises(ZeroDivisionError):
        model(torch.ones(1, 3))
    assert seen == ["ZeroDivisionError"]
    bus.clear()
    assert native_hooks(model) == {}


def test_backward_pre_and_backward_hooks_replace_gradients() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 2))
    x = torch.randn(3, 2, requires_grad=True)
    attached = hookbus.torch.attach(model, hookbus.EventBus())
    model(x).sum().backward()
    plain_w, plain_x = model[0].weight.grad.clone(), x.grad.clone()
    model.zero_grad()
    x.grad = None

    def triple_grad_output(ctx: CallContext) -> None:
        ctx.args = tuple(g * 3 for g in ctx.args)

    def zero_grad_input(ctx: CallContext) -> None:
        assert torch.equal(ctx.args[0], torch.full((3, 2), 3.0))
        ctx.result = tuple(torch.zeros_like(g) for g in ctx.result)

    with attached.backward_pre("0", triple_grad_output), attached.backward("0", zero_grad_input):
        assert len(model[0]._backward_pre_hooks) == 1
        assert len(model[0]._backward_hooks) == 1
        model(x).sum().backward()
    assert torch.allclose(model[0].weight.grad, 3 * plain_w)
    assert torch.equal(x.grad, torch.zeros_like(plain_x))
    assert native_hooks(model) == {}
    assert model[0]._is_full_backward_hook is None  # torch's mark restored


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    hidden: Any


class Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> Output:
        h = self.lin(x)
        return Output(logits=h * 2, hidden={"h": h, "pair": (h + 1, 7)})


def test_grad_hooks_on_nested_outputs_with_paths() -> None:
    model = Nested()
    attached = hookbus.torch.attach(model, hookbus.EventBus())
    seen: Dict[Any, torch.Tensor] = {}

    def keep(ctx: CallContext) -> None:
        seen[ctx.data["path"]] = ctx.result

    attached.grad("<root>", keep)
    out = model(torch.ones(1, 2))
    (out.logits.sum() + out.hidden["h"].sum() * 3 + out.hidden["pair"][0].sum() * 5).backward()
    assert {path: g.tolist() for path, g in seen.items()} == {
        ("logits",): [[1.0, 1.0]],
        ("hidden", "h"): [[10.0, 10.0]],  # 3 directly, 2 through logits, 5 through pair
        ("hidden", "pair", 0): [[5.0, 5.0]],
    }


def test_grad_hook_replaces_the_gradient_flowing_on() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 2), nn.Tanh())
    attached = hookbus.torch.attach(model, hookbus.EventBus())
    model(torch.ones(1, 2)).sum().backward()
    plain = model[0].weight.grad.clone()
    model.zero_grad()

    def double(ctx: CallContext) -> None:
        ctx.result = ctx.result * 2

    with attached.grad("0", double):
        model(torch.ones(1, 2)).sum().backward()
    assert torch.allclose(model[0].weight.grad, 2 * plain)


def test_grad_hooks_skip_outputs_under_no_grad() -> None:
    model = TutorialNet()
    attached = hookbus.torch.attach(model, hookbus.EventBus())
    seen: List[Any] = []
    attached.grad("fc1", lambda ctx: seen.append(ctx))
    with torch.no_grad():
        model(torch.ones(1, 2))  # no error: nothing to hook
    with torch.inference_mode():
        model(torch.ones(1, 2))
    assert seen == []
    with torch.no_grad():
        frozen = torch.ones(2) * 2
    with pytest.raises(ValueError, match="requires_grad"):
        hookbus.torch.on_grad(frozen, lambda ctx: None)


def test_async_hooks_are_refused_on_modules() -> None:
    model = TutorialNet()
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)

    async def hook(ctx: CallContext) -> None:
        pass

    with pytest.raises(TypeError, match="async"):
        bus.post("fc1", hook)
    assert native_hooks(model) == {}


def test_attaching_twice_to_one_bus_is_an_error() -> None:
    model = TutorialNet()
    bus = hookbus.EventBus()
    first = hookbus.torch.attach(model, bus)
    with pytest.raises(ValueError, match="already attached"):
        hookbus.torch.attach(model, bus)
    first.detach()
    hookbus.torch.attach(model, bus).detach()
    with pytest.raises(TypeError, match=r"needs a torch\.nn\.Module"):
        hookbus.torch.attach("model", bus)  # type: ignore[arg-type]


def test_bus_points_lists_modules_and_check_pending_knows_them() -> None:
    model = Encoder()
    bus = hookbus.EventBus()
    attachment = hookbus.torch.attach(model, bus)
    listed = {point.name: point for point in bus.points()}
    assert listed["layers.0.attn"].kind == "module"
    code = Block.forward.__code__
    assert listed["layers.0"].where == f"{code.co_filename}:{code.co_firstlineno}"
    bus.post("layers.*.attn", lambda ctx: None)
    attachment.backward("norm", lambda ctx: None)
    assert bus.check_pending() is None
    # A typo is refused at registration now (test_module_name_typos.py), and one
    # registered before attaching is reported here.
    with pytest.raises(ValueError, match=r"no module named 'layers\.0\.atn'"):
        bus.post("layers.0.atn", lambda ctx: None)
    assert bus.check_pending() is None
    bus.clear()
    attachment.detach()
    assert [p.name for p in bus.points() if p.kind == "module"] == []


def test_attachments_to_unnamed_buses_tell_the_buses_apart() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    first, second = hookbus.EventBus(), hookbus.EventBus()
    with hookbus.torch.attach(model, first) as one, hookbus.torch.attach(model, second) as two:
        assert f"on {first.name!r}" in repr(one)
        assert f"on {second.name!r}" in repr(two)
        assert repr(one) != repr(two)
