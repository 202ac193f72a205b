"""The module point: a module of an attached model runs hooks as any hook point does.

The bus's API on module calls, native hooks installed lazily (one per phase, gone with
the last hook), what each hook kind may do, options and the error policy, backward hooks,
activation checkpointing, ``ctx.arguments`` bound to ``forward``'s parameters, what is let
go of, and threads. Exception hooks on modules: test_module_exceptions.py."""

from __future__ import annotations

import gc
import threading
import warnings
import weakref
from typing import Any, Dict, List

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch_helpers import Encoder, Scaled, TutorialNet, hook_state, native_hooks, tiny_gpt2

import hookbus
import hookbus.torch
from hookbus import CallContext

# --- the bus's API on module calls, with native hooks only while hooks are there ----------


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


@pytest.mark.filterwarnings("ignore:hookbus.torch. capture:RuntimeWarning")  # ran nothing
def test_calling_module_forward_directly_bypasses_hooks() -> None:
    net = TutorialNet()
    with hookbus.torch.capture(net, "fc1") as cache:
        net.fc1.forward(torch.ones(1, 2))
    assert len(cache) == 0
    with hookbus.torch.capture(net, "fc1") as cache:
        net.fc1(torch.ones(1, 2))
    assert len(cache) == 1


def test_dataparallel_style_replicas_fire_under_the_name_bound_at_registration() -> None:
    # DataParallel replicas share the original's hook dicts and run on worker threads;
    # torch passes the replica to the hook. Replicate as DataParallel does (CPU here).
    net = TutorialNet()
    bus = hookbus.EventBus()
    hookbus.torch.attach(net, bus)
    seen: List[Any] = []
    lock = threading.Lock()

    def record(ctx: CallContext) -> None:
        with lock:
            seen.append((ctx.name, ctx.target))

    bus.post("fc1", record)
    replica_fc1 = net.fc1._replicate_for_data_parallel()
    # replicate() then sets each parameter on the replica, as a plain tensor:
    replica_fc1.weight = net.fc1.weight.detach().clone()
    replica_fc1.bias = net.fc1.bias.detach().clone()
    thread = threading.Thread(target=lambda: replica_fc1(torch.ones(1, 2)))
    thread.start()
    thread.join(timeout=60)
    assert seen == [("fc1", replica_fc1)]
    assert replica_fc1 is not net.fc1


def test_leaving_a_scope_removes_native_hooks_even_when_forward_raises() -> None:
    net = TutorialNet()
    before = hook_state(net)
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(net, bus)

    def run_in_scope() -> None:
        with bus.scope():
            bus.pre("fc1", lambda ctx: None)
            attached.post(nn.Linear, lambda ctx: None)
            attached.exception("*", lambda ctx: None)
            net(torch.ones(1, 3))  # wrong shape

    with pytest.raises(RuntimeError):
        run_in_scope()
    assert hook_state(net) == before
    assert bus.hooks() == []


# --- what each hook kind may do -----------------------------------------------------------


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


def test_returning_a_value_is_an_error_not_a_replacement() -> None:
    model = TutorialNet()
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)
    bus.post("fc2", lambda ctx: ctx.result * 2)
    with pytest.raises(TypeError, match="returned Tensor, not None"):
        model(torch.ones(1, 2))


def test_a_post_hook_setting_the_result_to_none_is_refused_not_dropped() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())

    def drop(ctx: CallContext) -> None:
        ctx.result = None

    with net.post("0", drop), pytest.raises(TypeError, match=r"ctx\.result = None.*'0'"):
        model(torch.ones(1, 2))
    with net.pre("0", lambda ctx: None), net.post("0", drop), pytest.raises(TypeError):
        model(torch.ones(1, 2))  # the other dispatch path too
    # A module whose output is None keeps it: nothing was replaced.
    none_module = nn.Module()
    none_module.forward = lambda x: None  # type: ignore[method-assign]
    with hookbus.torch.attach(none_module, hookbus.EventBus()) as other:
        other.post("<root>", lambda ctx: None)
        assert none_module(1) is None
    net.detach()


def test_async_hooks_are_refused_on_modules() -> None:
    model = TutorialNet()
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)

    async def hook(ctx: CallContext) -> None:
        pass

    with pytest.raises(TypeError, match="async"):
        bus.post("fc1", hook)
    assert native_hooks(model) == {}


# --- backward hooks: their gradients, by name too -----------------------------------------


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


def _gpt2() -> Any:
    return tiny_gpt2()


def test_backward_hooks_see_the_gradients_under_their_own_names() -> None:
    net = TutorialNet()
    bus = hookbus.EventBus()
    seen: List[Any] = []

    def pre(ctx: hookbus.CallContext) -> None:
        seen.append(("backward_pre", list(ctx.arguments), ctx.arguments["grad_output"]))
        with pytest.raises(KeyError, match="grad_output"):
            ctx.arguments["input"]

    def post(ctx: hookbus.CallContext) -> None:
        seen.append(("backward", list(ctx.arguments), ctx.arguments["grad_output"]))
        with pytest.raises(KeyError, match="grad_output"):
            ctx.arguments["input"]

    with hookbus.torch.attach(net, bus) as attached:
        attached.backward_pre("fc2", pre)
        attached.backward("fc2", post)
        x = torch.full((1, 2), 0.1, requires_grad=True)
        (net(x) * 3).sum().backward()
    assert [(phase, names) for phase, names, _ in seen] == [
        ("backward_pre", ["grad_output"]),
        ("backward", ["grad_output"]),
    ]
    for _, _, grads in seen:
        assert isinstance(grads, tuple)
        assert len(grads) == 1
        assert torch.allclose(grads[0], torch.tensor([[3.0]]))  # d(3 * relu6(fc2)) / d fc2


def test_gpt2_backward_hooks_arguments_equal_hand_written_full_backward_hooks() -> None:
    model = _gpt2().train()
    model.config.use_cache = False
    for module in model.modules():  # dropout off, so both passes are the same function
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    ids = torch.randint(0, 100, (1, 6))
    mlp = model.transformer.h[1].mlp
    native: List[Any] = []
    handle = mlp.register_full_backward_pre_hook(lambda m, g: native.append(g[0].clone()))
    model(ids, labels=ids).loss.backward()
    handle.remove()
    model.zero_grad()
    ours: List[Any] = []

    def read(ctx: hookbus.CallContext) -> None:
        ours.append(ctx.arguments["grad_output"][0].clone())

    with hookbus.torch.attach(model, hookbus.EventBus()) as net:
        net.backward_pre("transformer.h.1.mlp", read)
        net.backward("transformer.h.1.mlp", read)
        model(ids, labels=ids).loss.backward()
    assert len(ours) == 2
    for grad in ours:
        assert torch.allclose(grad, native[0], atol=1e-6)


def test_a_backward_pre_hook_replaces_the_gradient_through_arguments() -> None:
    lin = nn.Linear(2, 1)
    model = nn.Sequential(lin)
    bus = hookbus.EventBus()

    def double(ctx: hookbus.CallContext) -> None:
        (grad,) = ctx.arguments["grad_output"]
        ctx.arguments["grad_output"] = (grad * 2,)

    x = torch.ones(1, 2, requires_grad=True)
    with hookbus.torch.attach(model, bus) as attached:
        attached.backward_pre("0", double)
        model(x).sum().backward()
    assert x.grad is not None
    assert torch.allclose(x.grad, 2 * lin.weight.detach(), atol=1e-6)


# --- ctx.arguments: forward's parameters --------------------------------------------------


def test_arguments_bind_against_forward_however_they_were_passed() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(Scaled())
    hookbus.torch.attach(model, bus)
    seen: List[Any] = []

    def read(ctx: CallContext) -> None:
        seen.append(
            (float(ctx.arguments["x"].sum()), ctx.arguments["scale"], ctx.arguments["shift"])
        )

    bus.pre("0", read)
    inner = model[0]
    x = torch.ones(2)
    inner(x)
    inner(x, 2.0)
    inner(x=x, scale=3.0, shift=1.0)
    assert seen == [(2.0, 1.0, 0.0), (2.0, 2.0, 0.0), (2.0, 3.0, 1.0)]


def test_writing_an_argument_changes_the_forward() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(Scaled())
    hookbus.torch.attach(model, bus)
    bus.pre("0", lambda ctx: ctx.arguments.__setitem__("scale", 10.0))
    assert torch.equal(model[0](torch.ones(1)), torch.full((1,), 10.0))
    assert torch.equal(model[0](torch.ones(1), 2.0), torch.full((1,), 10.0))


def test_builtin_modules_bind_their_forward_parameter_names() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(nn.Linear(2, 2))
    hookbus.torch.attach(model, bus)
    seen: List[Any] = []
    bus.pre("0", lambda ctx: seen.append((list(ctx.arguments), ctx.target is model[0])))
    model(torch.ones(1, 2))
    assert seen == [(["input"], True)]


def test_module_args_leave_out_the_module() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(Scaled())
    hookbus.torch.attach(model, bus)
    seen: List[Any] = []

    def unpack(ctx: CallContext) -> None:
        (_x,) = ctx.args
        seen.append(ctx.target)

    bus.pre("0", unpack)
    model(torch.ones(1))
    assert seen == [model[0]]


def test_arguments_of_a_wrapped_module_are_its_forwards() -> None:
    class Scale(torch.nn.Module):
        def forward(self, x: Any, factor: float = 2.0) -> Any:
            return x * factor

    bus = hookbus.EventBus()
    model = bus.wrap(Scale(), "scale")
    seen: List[Dict[str, Any]] = []

    def halve(ctx: hookbus.CallContext) -> None:
        seen.append({name: type(value).__name__ for name, value in ctx.arguments.items()})
        ctx.arguments["factor"] = 0.5

    bus.pre("scale", halve)
    out = model(torch.ones(2))
    assert torch.equal(out, torch.full((2,), 0.5))
    assert seen == [{"x": "Tensor", "factor": "float"}]


# --- options and the error policy ---------------------------------------------------------


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


# --- activation checkpointing: a second call, in backward -------------------------------


def test_activation_checkpointing_fires_forward_hooks_again_in_backward() -> None:
    block = nn.Sequential(nn.Linear(2, 2), nn.Tanh())
    model = nn.ModuleDict({"block": block})
    x = torch.ones(1, 2, requires_grad=True)
    with hookbus.torch.capture(model, "block.0") as cache:
        out = checkpoint(block, x, use_reentrant=False)
        assert len(cache["block.0"]) == 1
        out.sum().backward()
    # The recomputation in backward is a second call, with the same values.
    assert len(cache["block.0"]) == 2
    first, again = cache["block.0"].outputs
    assert torch.equal(first, again)


# --- installing native hooks: with no bus lock held, all or nothing -----------------------


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))


def _noop(ctx: CallContext) -> None:
    pass


def test_a_compile_warning_turned_error_undoes_the_registration() -> None:
    # -W error on a compiled model: the warning is raised where the native hook is
    # installed; the caller gets it, and neither the bus nor the model keep anything.
    model = _model()
    before = hook_state(model)
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(torch.compile(model, backend="eager"), bus)
    with warnings.catch_warnings():
        warnings.simplefilter("error", hookbus.torch.CompiledModelWarning)
        with pytest.raises(hookbus.torch.CompiledModelWarning):
            attached.exception("0", _noop)  # torch skips them under compile: warned
        with pytest.raises(hookbus.torch.CompiledModelWarning):
            bus.exception("2", _noop)  # through the bus by name: the same
    assert bus.hooks() == []
    assert attached.hooks() == []
    assert hook_state(model) == before
    attached.detach()


def test_the_compile_warning_runs_with_no_bus_lock_held() -> None:
    # A warnings hook that registers on the same bus would deadlock under the lock.
    model = _model()
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(torch.compile(model, backend="eager"), bus)
    seen: List[str] = []

    def show(message: Any, *args: Any, **kwargs: Any) -> None:
        bus.on("warned", seen.append)
        bus.emit("warned", str(message)[:8])

    def register() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = show
            attached.exception("0", _noop)

    thread = threading.Thread(target=register, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "deadlocked: the warning was issued under the bus lock"
    assert seen == ["hookbus."]
    attached.detach()


def test_the_compile_warning_points_at_the_callers_line() -> None:
    model = _model()
    attached = hookbus.torch.attach(torch.compile(model, backend="eager"), hookbus.EventBus())
    with pytest.warns(hookbus.torch.CompiledModelWarning) as caught:
        attached.exception("0", _noop)
    assert caught[0].filename == __file__
    attached.detach()


def test_module_points_use_the_registry_plan_and_its_fast_path_rule() -> None:
    model = _model()
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(model, bus)
    calls: List[str] = []
    bus.post("0", lambda ctx: calls.append("plain"))
    bus.post("0", lambda ctx: calls.append("once"), once=True)
    model(torch.ones(1, 4))
    model(torch.ones(1, 4))
    assert calls == ["plain", "once", "plain"]
    with bus.trace() as trace:  # tracing leaves the fast path, and comes back after
        model(torch.ones(1, 4))
    assert [record.name for record in trace.records] == ["0"]
    attached.detach()
    assert hook_state(model) == hook_state(_model())


def _compiled() -> Any:
    return torch.compile(nn.Sequential(nn.Linear(2, 2), nn.ReLU()), backend="eager")


def test_a_warning_handler_that_uses_the_bus_does_not_deadlock() -> None:
    compiled = _compiled()
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(compiled, bus)
    handled: List[str] = []

    def showwarning(message: Any, *args: Any, **kwargs: Any) -> None:
        handled.append(repr(bus))  # takes the bus lock

    outcome: Dict[str, Any] = {}

    def register() -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = showwarning
            outcome["handle"] = net.exception("0", lambda ctx: None)

    thread = threading.Thread(target=register, daemon=True)
    thread.start()
    thread.join(timeout=20)
    assert not thread.is_alive(), "registering deadlocked: a warning was issued under the lock"
    assert len(handled) == 1
    assert outcome["handle"].active
    net.detach()


@pytest.mark.filterwarnings("error")
def test_registration_on_a_compiled_model_is_all_or_nothing_under_warnings_as_errors() -> None:
    compiled = _compiled()
    before = hook_state(compiled._orig_mod)
    bus = hookbus.EventBus()
    net = hookbus.torch.attach(compiled, bus)
    with pytest.raises(hookbus.torch.CompiledModelWarning):
        net.exception("0", lambda ctx: None)  # torch skips them under compile: warned
    assert bus.hooks() == []
    assert hook_state(compiled._orig_mod) == before
    with pytest.raises(hookbus.torch.CompiledModelWarning):
        bus.exception("1", lambda ctx: None)  # on the bus directly, by name: the same
    assert bus.hooks() == []
    assert hook_state(compiled._orig_mod) == before
    net.detach()


# --- nothing keeps a module or its input after removal or a call --------------------------


def test_no_references_to_modules_or_activations_after_removal() -> None:
    net = TutorialNet()
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(net, bus)
    refs: List[Any] = []

    def keep_ref(ctx: CallContext) -> None:
        refs.append(weakref.ref(ctx.result))

    attached.pre("*", lambda ctx: None)
    attached.post("*", keep_ref)
    attached.grad("*", lambda ctx: None)
    attached.exception("*", lambda ctx: None)
    attached.backward("fc1", lambda ctx: None)
    out = net(torch.ones(1, 2, requires_grad=True))
    out.sum().backward()
    with pytest.raises(RuntimeError):
        net(torch.ones(1, 3))  # an error mid-forward leaves no per-call state behind
    with hookbus.torch.capture(net, "*", inputs=True, grads=True) as cache:
        net(torch.ones(1, 2, requires_grad=True)).sum().backward()
    assert len(cache) == 5
    attached.detach()
    module_refs = [weakref.ref(m) for m in net.modules()]
    del net, out, cache, attached
    gc.collect()
    assert all(ref() is None for ref in module_refs)
    assert refs
    assert all(ref() is None for ref in refs)


def _input_is_freed(run: Any) -> bool:
    x = torch.randn(3, 2)
    ref = weakref.ref(x)
    run(x)
    del x
    gc.collect()
    gc.disable()
    try:
        return ref() is None
    finally:
        gc.enable()


def test_a_once_pre_hook_next_to_a_post_hook_leaves_no_input_behind() -> None:
    net = TutorialNet()
    data: List[Any] = []
    with hookbus.torch.attach(net, hookbus.EventBus()) as attached:
        attached.pre("fc1", lambda ctx: ctx.data.update(mark=1), once=True)
        attached.post("fc1", lambda ctx: data.append(dict(ctx.data)))
        assert _input_is_freed(net)
        net(torch.ones(1, 2))
    assert data == [{"mark": 1}, {}]  # the once hook's call shared its context


def test_a_keyboard_interrupt_in_forward_leaves_no_input_behind() -> None:
    class Interrupted(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise KeyboardInterrupt

    model = nn.Sequential(nn.Linear(2, 2), Interrupted())
    seen: List[str] = []
    with hookbus.torch.attach(model, hookbus.EventBus()) as net:
        net.pre("*", lambda ctx: None)
        net.post("*", lambda ctx: seen.append(ctx.name))

        def run(x: torch.Tensor) -> None:
            with pytest.raises(KeyboardInterrupt):
                model(x)

        assert _input_is_freed(run)
        model[0](torch.ones(1, 2))  # the next calls share contexts as usual
    assert seen == ["0", "0"]


# --- threads ------------------------------------------------------------------------------


def test_two_threads_run_separate_models_attached_to_one_bus() -> None:
    bus = hookbus.EventBus()
    models = [TutorialNet(), TutorialNet()]
    for index, model in enumerate(models):
        hookbus.torch.attach(model, bus, prefix=f"m{index}")
    counts = {"m0.fc1": 0, "m1.fc1": 0}
    lock = threading.Lock()

    def count(ctx: CallContext) -> None:
        with lock:
            counts[ctx.name] += 1
        ctx.result = ctx.result * 1.0

    bus.pre("m*.fc2", lambda ctx: None)
    bus.post("m*.fc1", count)
    errors: List[BaseException] = []

    def run(model: nn.Module) -> None:
        try:
            for _ in range(200):
                out = model(torch.full((1, 2), 0.1))
                assert abs(out.item() - 3.4) < 1e-5
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(m,)) for m in models]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    assert counts == {"m0.fc1": 200, "m1.fc1": 200}


def test_a_call_sees_the_post_hooks_of_one_plan_while_another_thread_changes_them() -> None:
    model = nn.Sequential(nn.Identity())
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(model, bus)
    seen: Dict[int, List[str]] = {}
    lock = threading.Lock()

    def hook(label: str) -> Any:
        def record(ctx: CallContext) -> None:
            with lock:
                seen.setdefault(ctx.call_index, []).append(label)

        return record

    bus.post("0", hook("a"))
    stop = threading.Event()
    errors: List[BaseException] = []

    def churn() -> None:  # the plan changes shape: one hook, two, three, one...
        try:
            while not stop.is_set():
                second = bus.post("0", hook("b"))
                third = bus.post("0", hook("c"))
                third.remove()
                second.remove()
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    changer = threading.Thread(target=churn)
    changer.start()
    try:
        for _ in range(300):
            model(torch.ones(2))
    finally:
        stop.set()
        changer.join(timeout=60)
    assert not changer.is_alive()
    assert errors == []
    assert len(seen) == 300
    assert {tuple(labels) for labels in seen.values()} <= {("a",), ("a", "b"), ("a", "b", "c")}
    attached.detach()
    assert hook_state(model) == hook_state(nn.Sequential(nn.Identity()))


def test_bus_post_hooks_keep_their_place_among_the_users_forward_hooks() -> None:
    model = nn.Sequential(nn.Identity())
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(model, bus)
    calls: List[str] = []
    bus.post("0", lambda ctx: calls.append("bus 1"))
    model[0].register_forward_hook(lambda m, a, o: calls.append("user"))
    for change in ("second bus hook", "exception hook", "exception hook gone", "one left"):
        if change == "second bus hook":
            second = bus.post("0", lambda ctx: calls.append("bus 2"))
        elif change == "exception hook":
            error_hook = bus.exception("0", lambda ctx: None)
        elif change == "exception hook gone":
            error_hook.remove()
        else:
            second.remove()
        calls.clear()
        model(torch.ones(2))
        assert calls[-1] == "user", change  # the bus's hooks run where they were registered
    assert calls == ["bus 1", "user"]
    attached.detach()


def test_a_copy_made_before_a_hook_is_removed_does_not_keep_the_hook() -> None:
    import copy

    model = nn.Sequential(nn.Identity())
    bus = hookbus.EventBus()
    attached = hookbus.torch.attach(model, bus)

    class Recorder:
        def __call__(self, ctx: CallContext) -> None:
            return None

    recorder = Recorder()
    handle = bus.post("0", recorder)
    twin = copy.deepcopy(model)  # its stand-ins leave at its first call, which never comes
    gone = weakref.ref(recorder)
    gc.disable()
    try:
        handle.remove()
        del recorder, handle
        assert gone() is None
    finally:
        gc.enable()
    assert len(twin[0]._forward_hooks) == 1
    attached.detach()


@pytest.mark.parametrize("with_exception_hook", [False, True])
def test_the_post_dispatcher_takes_a_call_without_kwargs(with_exception_hook: bool) -> None:
    # torch reads a hook's with_kwargs mark after taking the hook from the module's dict:
    # a hook removed by another thread in between is called as hook(module, args, output).
    model = nn.Sequential(nn.Linear(2, 2))
    bus = hookbus.EventBus()
    hookbus.torch.attach(model, bus)
    seen: List[Any] = []

    def double(ctx: CallContext) -> None:
        seen.append(ctx.result)
        ctx.result = ctx.result * 2

    bus.post("0", double)
    if with_exception_hook:
        bus.exception("0", lambda ctx: None)
    (dispatcher,) = model[0]._forward_hooks.values()
    x, output = torch.ones(1, 2), torch.ones(1, 2)
    replaced = dispatcher(model[0], (x,), output)
    assert seen == [output]
    assert torch.equal(replaced, output * 2)
