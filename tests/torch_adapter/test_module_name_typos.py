"""A bus-level hook whose name is a typo of an attached module's name is refused.

``net.post("h.1.atn", ...)`` and ``capture(model, "h.1.atn")`` always refused a
name that no module has; ``bus.post("h.1.atn", ...)`` was accepted and never
fired. Now every bus-level registration of a module's hook kinds (``pre``,
``post``, ``exception``, ``around``) is checked the same way, when a model is
attached to the bus: a name (or pattern) that matches no hook point and is close
to a module name, or a module's path followed by a child it does not have, is a
``ValueError`` in the same words; any other name is accepted, as before (an event,
a hook point defined later), and so is any name with ``optional=True``.
"""

from __future__ import annotations

from typing import Any, List

import pytest
import torch
from torch import nn
from torch_helpers import hook_state, tiny_gpt2

import hookbus
import hookbus.torch
from hookbus import CallContext


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.Linear(3, 3)
        self.mlp = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(torch.softmax(self.attn(x), dim=-1))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


@pytest.fixture(scope="module")
def gpt2() -> Any:
    return tiny_gpt2()


@pytest.fixture
def bus() -> hookbus.EventBus:
    return hookbus.EventBus()


def _noop(ctx: CallContext) -> None:
    return None


def _refused_like_net(net: Any, bus: hookbus.EventBus, name: str, method: str = "post") -> str:
    """The bus's error for ``name``, checked to be the attachment's, word for word."""
    with pytest.raises(ValueError, match=r"^no module name") as from_net:
        getattr(net, method)(name, _noop)
    with pytest.raises(ValueError, match=r"^no module name") as from_bus:
        getattr(bus, method)(name, _noop)
    assert str(from_bus.value) == str(from_net.value)
    return str(from_bus.value)


def test_a_typo_of_a_gpt2_module_is_refused_at_registration(
    gpt2: Any, bus: hookbus.EventBus
) -> None:
    before = hook_state(gpt2)
    with hookbus.torch.attach(gpt2, bus) as net:
        message = _refused_like_net(net, bus, "transformer.h.1.atn")
        assert message.startswith("no module named 'transformer.h.1.atn'; close names: ")
        assert "'transformer.h.1.attn'" in message
        for method in ("pre", "exception"):
            _refused_like_net(net, bus, "transformer.h.1.atn", method)

        def around(ctx: CallContext) -> Any:
            yield

        with pytest.raises(ValueError, match=r"no module named 'transformer\.h\.1\.atn'"):
            bus.around("transformer.h.1.atn", around)
        pattern = _refused_like_net(net, bus, "transformer.h.*.atn")
        assert pattern.startswith("no module name matches 'transformer.h.*.atn'; close names")
        # Nothing half-registered: no hook, no native hook, and the hook can go
        # on the right name at once (no "already registered").
        assert bus.hooks() == []
        assert hook_state(gpt2) == before
        seen: List[str] = []
        bus.post("transformer.h.1.attn", lambda ctx: seen.append(ctx.name))
        gpt2(torch.tensor([[1, 2, 3]]))
        assert seen == ["transformer.h.1.attn"]
        bus.clear()
    assert hook_state(gpt2) == before


def test_a_typo_of_a_hand_written_module_is_refused(bus: hookbus.EventBus) -> None:
    model = Net()
    net = hookbus.torch.attach(model, bus)
    message = _refused_like_net(net, bus, "layers.0.atn")
    assert "close names: 'layers.0.attn'" in message
    assert bus.hooks() == []
    net.detach()


def test_names_far_from_every_module_and_events_are_accepted(
    gpt2: Any, bus: hookbus.EventBus
) -> None:
    with hookbus.torch.attach(gpt2, bus):
        ran: List[str] = []
        # Events need no declaration, whatever their name: a module's hooks are
        # pre/post/..., never "event" hooks, so an event can't be a module typo.
        bus.on("transformer.h.1.atn", lambda: ran.append("event"))
        bus.emit("transformer.h.1.atn")
        # A hook point defined later, under a name unlike the modules'.
        bus.post("checkpoint.save", lambda ctx: ran.append(ctx.name))

        @bus.hookable("checkpoint.save")
        def save() -> None:
            return None

        save()
        # An around hook is for events too: one emitted or declared is accepted.
        bus.emit("transformer.h.1.atn")

        def around(ctx: CallContext) -> Any:
            ran.append("around")
            yield

        bus.around("transformer.h.1.atn", around)
        bus.emit("transformer.h.1.atn")
        assert ran == ["event", "checkpoint.save", "event", "around", "event"]
        # optional=True: a name that may never exist, whatever it is (as for check_pending).
        assert bus.post("transformer.h.1.atn", _noop, optional=True).active
        bus.clear()


def test_an_existing_hook_point_of_the_name_is_accepted(bus: hookbus.EventBus) -> None:
    model = Net()
    net = hookbus.torch.attach(model, bus)

    @bus.hookable("layers.0.atn")
    def helper() -> int:
        return 1

    handle = bus.post("layers.0.atn", _noop)  # a function's point, not a typo
    assert handle.active
    net.detach()


def test_hooks_registered_before_attach_or_after_detach_are_accepted(
    bus: hookbus.EventBus,
) -> None:
    model = Net()
    early = bus.post("layers.0.atn", _noop)  # no model attached yet: nothing to compare
    net = hookbus.torch.attach(model, bus)
    assert early.active
    with pytest.raises(hookbus.UnknownNameError, match=r"did you mean 'layers\.0\.attn'"):
        bus.check_pending()  # where such a hook is reported
    net.detach()
    late = bus.post("layers.1.atn", _noop)  # the names went with detach()
    assert late.active
    bus.clear()


def test_prefixes_and_several_models_on_one_bus(bus: hookbus.EventBus) -> None:
    student, teacher = Net(), Net()
    first = hookbus.torch.attach(student, bus, prefix="student")
    second = hookbus.torch.attach(teacher, bus, prefix="teacher")
    seen: List[str] = []
    bus.post("teacher.layers.1.attn", lambda ctx: seen.append(ctx.name))
    bus.post("student.layers.*.mlp", lambda ctx: seen.append(ctx.name))
    student(torch.ones(1, 3))
    teacher(torch.ones(1, 3))
    assert seen == ["student.layers.0.mlp", "student.layers.1.mlp", "teacher.layers.1.attn"]
    message = _refused_like_net(first, bus, "student.layers.1.atn")
    assert "'student.layers.1.attn'" in message
    with pytest.raises(ValueError, match=r"close names: 'teacher\.layers\.0\.attn'"):
        bus.pre("teacher.layers.0.atn", _noop)
    # Without the prefix it names no module of either model, and is refused as close.
    with pytest.raises(ValueError, match=r"no module named 'layers\.0\.attn'"):
        bus.post("layers.0.attn", _noop)
    first.detach()
    second.detach()


def test_operation_point_names_are_checked_like_module_names(bus: hookbus.EventBus) -> None:
    model = Net()
    net = hookbus.torch.attach(model, bus)
    seen: List[str] = []
    # Before the operations are selected (and found), by name and by pattern.
    bus.post("layers.0:softmax.0", lambda ctx: seen.append(ctx.name))
    bus.pre("layers.*:softmax.*", lambda ctx: seen.append(ctx.name))
    net.operations("layers.?", torch.softmax)
    model(torch.ones(1, 3))
    model(torch.ones(1, 3))
    assert seen[-3:] == ["layers.0:softmax.0", "layers.0:softmax.0", "layers.1:softmax.0"]
    # A typo in the module part is refused like a module's name.
    with pytest.raises(ValueError, match=r"no module named 'layers\.0\.atn'.*'layers\.0\.attn'"):
        bus.post("layers.0.atn:softmax.0", _noop)
    net.detach()
    bus.clear()


# --- a child name under a module's path that names no module ------------------------------


def test_a_child_name_that_no_module_has_is_refused_on_the_bus() -> None:
    """``net.post`` refuses it; ``bus.post`` must too, with the close names: a module's path
    followed by a child it does not have is a typo, not a hook point to come."""
    model = nn.Sequential(nn.Linear(2, 2))
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    with pytest.raises(ValueError, match=r"0\.weigth_typo"):
        bus.post("0.weigth_typo", lambda ctx: None)
    assert bus.hooks() == []
    model(torch.ones(1, 2))
    net.detach()


@pytest.mark.parametrize("name", ["1.3", "1.0.weight", "1.0.x.y", "<root>.typo"])
def test_a_descendant_that_no_module_has_is_refused_at_any_depth(name: str) -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), nn.Linear(2, 2)))
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    with pytest.raises(ValueError, match=f"no module named {name!r}"):
        bus.pre(name, lambda ctx: None)
    assert bus.hooks() == []
    net.detach()


def test_a_child_name_under_an_attachment_s_prefix_is_refused() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus, prefix="encoder")
    for name in ("encoder.0.weigth_typo", "0.weigth_typo"):
        with pytest.raises(ValueError, match="no module named"):
            bus.post(name, lambda ctx: None)
    assert bus.hooks() == []
    net.detach()


def test_optional_accepts_a_child_name_that_no_module_has() -> None:
    """``optional=True`` says the name may never be a point: it is accepted as ever."""
    model = nn.Sequential(nn.Linear(2, 2))
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    handle = bus.post("0.weigth_typo", lambda ctx: None, optional=True)
    assert handle.active
    handle.remove()
    net.detach()


def test_a_dotted_name_under_no_module_stays_a_point_to_come() -> None:
    """A name whose leading part is no module (a function point declared later, say) is
    not the model's: it is accepted, as before."""
    model = nn.Sequential(nn.Linear(2, 2))
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    handle = bus.post("trainer.step_done", lambda ctx: None)
    assert handle.active
    handle.remove()
    net.detach()
