"""Attaching a model: its modules' names on a bus, and their hook points.

``attach`` records the names (the root, a prefix); a module's point (and its native
hooks) comes with the first hook that matches the module, whichever way it was
registered: before attaching, after, by pattern, by a bus method or the attachment's,
or brought back by ``Registry.restore``. Everything a user relies on stays as it was.
"""

from __future__ import annotations

import copy
import fnmatch
import gc
import warnings
import weakref
from typing import Any, List

import pytest
import torch
from torch import nn
from torch_helpers import Block, Encoder, TutorialNet, hook_state, native_hooks, tiny_gpt2

import hookbus
import hookbus.torch
from hookbus import CallContext

# --- the attachment: names, one per bus, listed as points ---------------------------------


def test_module_names_start_at_the_root_or_at_a_prefix() -> None:
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


def test_attachments_to_unnamed_buses_tell_the_buses_apart() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    first, second = hookbus.EventBus(), hookbus.EventBus()
    with hookbus.torch.attach(model, first) as one, hookbus.torch.attach(model, second) as two:
        assert f"on {first.name!r}" in repr(one)
        assert f"on {second.name!r}" in repr(two)
        assert repr(one) != repr(two)


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


# --- a module's point is made when a hook may match it ------------------------------------


def gpt2() -> nn.Module:
    return tiny_gpt2()


def _halve(ctx: CallContext) -> None:
    ctx.args = (ctx.args[0] * 0.5, *ctx.args[1:])


def _shift(ctx: CallContext) -> None:
    result = ctx.result
    if isinstance(result, tuple):
        ctx.result = (result[0] + 1.0, *result[1:])
    else:
        ctx.result = result + 1.0


def _raw_halve(module: nn.Module, args: Any) -> Any:
    return (args[0] * 0.5, *args[1:])


def _raw_shift(module: nn.Module, args: Any, output: Any) -> Any:
    if isinstance(output, tuple):
        return (output[0] + 1.0, *output[1:])
    return output + 1.0


@pytest.mark.parametrize("when", ["before attach", "after attach"])
@pytest.mark.parametrize("which", ["gpt2", "hand-written"])
def test_bus_hooks_by_name_and_pattern_agree_with_raw_torch_hooks(when: str, which: str) -> None:
    model = gpt2() if which == "gpt2" else TutorialNet()
    if which == "gpt2":
        pattern, name, x = "transformer.h.*.mlp", "transformer.h.1.attn", torch.tensor([[1, 5, 7]])
    else:
        pattern, name, x = "fc?", "relu", torch.tensor([[0.5, -2.0]])
    twin = copy.deepcopy(model)  # the same hooks, written with torch's own
    for raw_name, module in twin.named_modules():
        if fnmatch.fnmatchcase(raw_name, pattern):
            module.register_forward_pre_hook(_raw_halve)
        if raw_name == name:
            module.register_forward_hook(_raw_shift)
    expected = twin(x)
    bus = hookbus.EventBus()
    before = hook_state(model)
    if when == "before attach":
        bus.pre(pattern, _halve)
        bus.post(name, _shift)
        net = hookbus.torch.attach(model, bus)
    else:
        net = hookbus.torch.attach(model, bus)
        bus.pre(pattern, _halve)
        net.post(name, _shift)
    got = model(x)
    if which == "gpt2":
        torch.testing.assert_close(got.logits, expected.logits, atol=1e-6, rtol=0)
    else:
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)
    hooked = set(native_hooks(model))
    assert hooked == {*net.select(pattern), name} - {"<root>"}
    bus.clear()
    assert native_hooks(model) == {}
    net.detach()
    assert hook_state(model) == before


def test_hooks_of_every_kind_registered_before_attach_apply_at_once() -> None:
    model = TutorialNet()
    bus = hookbus.EventBus()
    seen: List[str] = []

    def around(ctx: CallContext) -> Any:
        seen.append(f"around {ctx.name}")
        yield

    bus.around("fc2", around)
    bus.exception("fc1", lambda ctx: seen.append(f"exception {ctx.name}"))
    bus.registry.register("grad", "fc1", lambda ctx: seen.append(f"grad {ctx.name}"), {})
    bus.registry.register("backward", "relu", lambda ctx: seen.append(f"backward {ctx.name}"), {})
    net = hookbus.torch.attach(model, bus)
    model(torch.ones(1, 2, requires_grad=True)).sum().backward()
    assert seen[0] == "around fc2"
    assert sorted(seen[1:]) == ["backward relu", "grad fc1"]
    with pytest.raises(RuntimeError):
        model(torch.ones(1, 3))  # fc1 expects 2 features
    assert seen[-1] == "exception fc1"
    net.detach()
    bus.clear()


def test_a_second_model_gets_the_patterns_registered_before_it_was_attached() -> None:
    first, second = TutorialNet(), TutorialNet()
    bus = hookbus.EventBus()
    seen: List[str] = []
    hookbus.torch.attach(first, bus, prefix="a")
    bus.post("*.fc2", lambda ctx: seen.append(ctx.name))
    hookbus.torch.attach(second, bus, prefix="b")
    first(torch.ones(1, 2))
    second(torch.ones(1, 2))
    assert seen == ["a.fc2", "b.fc2"]


def test_restore_brings_back_hooks_that_reach_modules_attached_meanwhile() -> None:
    model = TutorialNet()
    bus = hookbus.EventBus()
    seen: List[str] = []
    handle = bus.post("fc1", lambda ctx: seen.append(ctx.name))
    snapshot = bus.registry.snapshot()
    handle.remove()
    net = hookbus.torch.attach(model, bus)  # no hook matches: no point, no native hook
    assert native_hooks(model) == {}
    bus.registry.restore(snapshot)  # the pytest plugin's way back
    model(torch.ones(1, 2))
    assert seen == ["fc1"]
    net.detach()
    assert native_hooks(model) == {}


def test_points_list_every_module_and_a_strict_bus_knows_them() -> None:
    model = TutorialNet()
    bus = hookbus.EventBus(strict=True)
    net = hookbus.torch.attach(model, bus)
    assert [p.name for p in bus.points()] == sorted(net.names)
    assert native_hooks(model) == {}  # listed, not hooked
    bus.post("fc2", lambda ctx: None)
    with pytest.raises(hookbus.UnknownNameError):
        bus.post("decoder", lambda ctx: None)
    net.detach()
    assert bus.points() == []


def test_an_async_hook_matching_a_module_refuses_the_attach_and_leaves_nothing() -> None:
    model = TutorialNet()
    bus = hookbus.EventBus()

    async def hook(ctx: CallContext) -> None:
        pass

    bus.post("fc*", hook)
    before = hook_state(model)
    with pytest.raises(TypeError, match="async"):
        hookbus.torch.attach(model, bus)
    assert hook_state(model) == before
    assert bus.points() == []
    bus.clear()
    net = hookbus.torch.attach(model, bus)  # not attached by the failed call
    net.detach()


def test_a_collected_model_leaves_no_names_on_the_bus() -> None:
    model = TutorialNet()
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)
    with pytest.raises(ValueError, match="no module named 'relu7'"):
        bus.post("relu7", lambda ctx: None)
    model_ref = weakref.ref(model)
    del model
    gc.collect()
    assert model_ref() is None
    assert bus.post("relu7", lambda ctx: None).active  # no model: any name goes
    assert bus.points() == []


def test_selection_and_names_work_without_any_point() -> None:
    model = nn.Sequential(nn.DataParallel(nn.Linear(1, 1)), nn.ReLU())
    net = hookbus.torch.attach(model, hookbus.EventBus(), prefix="m")
    assert net.names == ["m", "m.0", "m.1"]
    assert [net.raw_name(name) for name in net.names] == ["", "0.module", "1"]
    assert [net.name_of(model[0]), net.name_of(model[0].module)] == ["m.0", "m.0"]
    assert net.select(nn.ReLU) == ["m.1"]
    assert net.module("m.1") is model[1]
    with pytest.raises(ValueError, match=r"close names: 'm\.1'"):
        net.select("m.2")
    assert native_hooks(model) == {}


# --- modules replaced after attach ------------------------------------------------------


def test_a_hook_by_the_name_of_a_module_replaced_after_attach_is_refused_naming_it() -> None:
    # The attachment's names are the modules that were there at attach(): a hook by
    # the name of one replaced since would sit on the old module, which the forward no
    # longer calls (raw torch's get_submodule(name) gives the new one), so it is refused.
    model = Encoder()
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    old = model.layers[0]  # still alive: its class at attach() is known
    model.layers[0] = Block()
    with pytest.raises(ValueError, match=r"'layers\.0'.*detach\(\).*attach") as refused:
        bus.post("layers.0", print)
    assert "was a Block at attach() and is now another Block" in str(refused.value)
    for register in (
        lambda: net.post("layers.0", print),
        lambda: net.pre("layers.0.attn", print),  # a module inside the replaced one
        lambda: bus.post("layers.*.mlp", print),  # a pattern matching one
        lambda: net.post(Block, print),  # a type selecting the old block
        lambda: net.post(old, print),  # the old module itself
    ):
        with pytest.raises(ValueError, match=r"the module 'layers\.0'.*attach"):
            register()
    assert bus.registry.hooks() == []  # nothing left half-registered
    seen: List[str] = []

    def hook(ctx: CallContext) -> None:
        seen.append(ctx.name)

    with bus.post("layers.1", hook), net.post("norm", hook):
        model(torch.ones(1, 2))
    assert seen == ["layers.1", "norm"]  # names of modules not replaced register as before


def test_a_module_replaced_and_collected_after_attach_is_refused_naming_what_is_there() -> None:
    model = Encoder()
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus, prefix="enc")
    model.layers[1].mlp = nn.Linear(2, 2)  # the old Linear is collected at once
    gc.collect()
    with pytest.raises(ValueError, match=r"'enc\.layers\.1\.mlp'.*now a Linear.*attach"):
        bus.post("enc.layers.1.mlp", print)
    assert bus.registry.hooks() == []


def test_a_model_attached_again_after_a_replacement_hooks_the_new_module() -> None:
    model = Encoder()
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus).detach()
    model.layers[0] = Block()
    hookbus.torch.attach(model, bus)
    seen: List[Any] = []
    with bus.post("layers.0", lambda ctx: seen.append(ctx.target)):
        model(torch.ones(1, 2))
    assert seen == [model.get_submodule("layers.0")]


def test_replacing_a_module_hooked_by_name_warns_naming_it() -> None:
    model = Encoder()
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    seen: List[str] = []
    net.post("layers.0.attn", lambda ctx: seen.append(ctx.name))
    with pytest.warns(RuntimeWarning, match=r"'layers\.0'.*'layers\.0\.attn'.*attach"):
        model.layers[0] = Block()
    model(torch.ones(1, 2))
    assert seen == []  # the hook stays on the old block: warned, not silent


def test_replacing_a_module_hooked_before_attach_warns_naming_it() -> None:
    model = Encoder()
    bus = hookbus.EventBus()
    bus.post("enc.layers.1", print)
    hookbus.torch.attach(model, bus, prefix="enc")
    with pytest.warns(RuntimeWarning, match=r"'enc\.layers\.1' \(Block\).*'enc\.layers\.1'"):
        model.layers[1] = Block()


def test_replacing_a_module_whose_hooks_were_all_removed_does_not_warn() -> None:
    model = Encoder()
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    with bus.post("layers.0", print), net.pre(Block, print):
        pass
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.layers[0] = Block()
    with pytest.raises(ValueError, match=r"'layers\.0'.*attach"):
        bus.post("layers.0", print)  # refused all the same: it would sit on the old block


def _registration_hooks() -> Any:
    from torch.nn.modules import module as torch_module

    return dict(torch_module._global_module_registration_hooks)


def test_torchs_global_registration_hook_is_there_only_while_hooks_by_name_are() -> None:
    gc.collect()  # models of earlier tests, hooked and dropped, stop watching
    before = _registration_hooks()
    model = Encoder()
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    net.select("layers.*")  # names read, no hook: nothing watched
    assert _registration_hooks() == before
    first, second = bus.post("layers.0", print), net.pre(nn.Linear, print)
    assert _registration_hooks() != before
    first.remove()
    assert _registration_hooks() != before  # the Linears' hooks are still there
    second.remove()
    assert _registration_hooks() == before  # the last hook by name went
    bus.post("layers.1.mlp", print)
    assert _registration_hooks() != before
    net.detach()
    assert _registration_hooks() == before


def test_a_model_hooked_by_name_and_dropped_is_collected_and_no_longer_watched() -> None:
    gc.collect()
    before = _registration_hooks()
    model = Encoder()
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    net.post("layers.0", lambda ctx, held=model: print(held))  # the hook holds the model
    kept = hookbus.EventBus()
    hookbus.torch.attach(model, kept).post("norm", print)  # a bus that outlives the model
    assert _registration_hooks() != before
    model_ref, net_ref = weakref.ref(model), weakref.ref(net)
    del model, bus, net
    gc.collect()
    assert model_ref() is None
    assert net_ref() is None
    assert _registration_hooks() == before
    assert kept.hooks("norm")  # its hook stays on the bus, watching nothing


def test_raw_names_refuse_a_hook_on_a_replaced_module_and_warn_as_it_is_replaced() -> None:
    model = nn.Sequential(nn.DataParallel(nn.Linear(2, 2)), Block())
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus, raw_names=True)
    seen: List[str] = []
    bus.post("0.module", lambda ctx: seen.append(ctx.name))  # inside a wrapper: no replacement
    bus.post("0", lambda ctx: seen.append(ctx.name))
    net.post("1.attn", print)
    with pytest.warns(RuntimeWarning, match=r"'1' \(Block\).*'1\.attn'.*attach"):
        model[1] = Block()
    with pytest.raises(ValueError, match=r"cannot hook '1\.mlp': it is inside the module '1'"):
        net.post("1.mlp", print)
    model(torch.ones(1, 2))
    assert seen == ["0.module", "0"]


def test_replacing_a_module_no_name_hooked_is_inside_neither_warns_nor_refuses() -> None:
    model = Encoder()
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    bus.post("layers.1.attn", print)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.norm = nn.LayerNorm(2)  # no hook is on it
        model.layers[1].attn = model.layers[1].attn  # the same module
    net.post("layers.1", print)
    bus.post("layers.0.*", print)


def test_a_see_through_wrapper_put_around_a_module_after_attach_is_no_replacement() -> None:
    wrappers = pytest.importorskip("torch.distributed.algorithms._checkpoint.checkpoint_wrapper")
    model = Encoder()
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(model, bus)
    seen: List[str] = []
    net.post("layers.0.attn", lambda ctx: seen.append(ctx.name))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.layers[0] = wrappers.checkpoint_wrapper(model.layers[0])
    bus.post("layers.0.mlp", lambda ctx: seen.append(ctx.name))
    with torch.no_grad():
        model(torch.ones(1, 2))
    assert seen == ["layers.0.attn", "layers.0.mlp"]


# --- detaching, and what an attachment keeps ----------------------------------------------


def test_detach_restores_the_hook_dicts_exactly_with_users_own_hooks_kept() -> None:
    net = TutorialNet()
    own = net.fc1.register_forward_hook(lambda m, i, o: None)
    before = hook_state(net)
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(net, bus)
    attached.pre("*", lambda ctx: None)
    attached.post("*", lambda ctx: None)
    attached.exception("*", lambda ctx: None)
    attached.grad(nn.Linear, lambda ctx: None)
    attached.backward_pre("fc2", lambda ctx: None)
    attached.backward("fc2", lambda ctx: None)
    bus.post("relu", lambda ctx: None)  # registered on the bus directly, by name
    net(torch.ones(1, 2, requires_grad=True)).sum().backward()
    assert native_hooks(net)
    attached.detach()
    assert hook_state(net) == before
    attached.detach()  # idempotent
    assert [h.name for h in bus.hooks()] == ["relu"]
    own.remove()


def test_handle_removal_and_attachment_context_manager() -> None:
    net = TutorialNet()
    before = hook_state(net)
    with hookbus.torch.attach(net, hookbus.EventBus()) as attached:
        with attached.post("fc1", lambda ctx: None):
            assert native_hooks(net) == {"fc1": 1}
        assert hook_state(net) == before
        attached.post("fc2", lambda ctx: None)
    assert hook_state(net) == before


def test_an_attachment_dropped_without_detach_keeps_working_then_dies_with_the_model() -> None:
    bus = hookbus.EventBus()
    net = TutorialNet()
    hookbus.torch.attach(net, bus)  # the Attachment object is dropped at once
    gc.collect()
    calls: List[str] = []
    bus.post("fc1", lambda ctx: calls.append(ctx.name))
    net(torch.ones(1, 2))
    assert calls == ["fc1"]
    model_ref = weakref.ref(net)
    del net
    gc.collect()
    assert model_ref() is None
    assert bus.registry.points("fc1") == []


def test_a_removed_hook_is_not_kept_by_its_attachment() -> None:
    # `with net.post(...)`, the documented way to hook for a while, once left every
    # hook (and what its closure holds) in the attachment until detach().
    net = TutorialNet()
    attached = hookbus.torch.attach(net, hookbus.EventBus())

    class Payload:
        pass

    refs = []
    for selector in ("fc1", net.fc2, nn.Linear, ["relu", "fc1"]):
        payload = Payload()
        refs.append(weakref.ref(payload))

        def hook(ctx: CallContext, payload: Payload = payload) -> None:
            pass

        with attached.post(selector, hook):
            net(torch.ones(1, 2))
        del hook, payload
    gc.disable()
    try:
        assert [ref() for ref in refs] == [None] * 4
    finally:
        gc.enable()
    assert attached.active
    attached.detach()


def test_temporary_hooks_on_an_attachment_do_not_grow_memory() -> None:
    import tracemalloc

    net = TutorialNet()
    attached = hookbus.torch.attach(net, hookbus.EventBus())

    def cycle() -> None:
        ballast = bytearray(256)
        with attached.post("fc1", lambda ctx, ballast=ballast: None):
            pass

    for _ in range(200):  # warm-up: caches and interned names
        cycle()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(5_000):
            cycle()
        gc.collect()
        growth = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert growth < 64 * 1024, f"{growth} bytes kept over 5,000 temporary hooks"
    attached.detach()


def test_the_detached_attachment_says_it_is_detached() -> None:
    model = TutorialNet()
    net = hookbus.torch.attach(model, hookbus.EventBus())
    net.detach()
    for call in (
        lambda: net.module("fc1"),
        lambda: net.select("fc1"),
        lambda: net.name_of(nn.Linear(1, 1)),
        lambda: net.post("fc1", lambda ctx: None),
    ):
        with pytest.raises(RuntimeError, match=r"attachment of TutorialNet .* is detached"):
            call()
