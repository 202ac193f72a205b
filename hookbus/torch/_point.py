"""One hook point per module, holding native torch hooks only while bus hooks match it.

A :class:`ModulePoint` has the core's point shape (:class:`hookbus.adapter.Point`)
and uses nothing of the core but that seam and public names. The registry calls
:meth:`ModulePoint.invalidate` (after releasing its lock) whenever a hook that may
match the module is added or removed. The point then asks the registry for its
plan and installs or removes its native dispatchers to match: at most one native
hook per phase, however many bus hooks match, and none at all when none match,
so the module runs at native speed.

torch calls a module's pre and post dispatchers from ``Module._call_impl``
without saying which call they belong to; the interpreter's frames do, as
``_call_frames`` reads them.

Around hooks: the pre dispatcher that starts them keeps them in its call's
entry, and that call's post dispatcher (or exception path) resumes them,
whatever is removed meanwhile. So while a call that started around hooks is
under way (in any thread), the point keeps its dispatchers installed: a
``once`` hook's claim, a pre hook's ``remove()``, another thread or a scope's
exit only stop the hook from starting again; the last such call out applies
the change. torch runs no hook for a ``BaseException`` that is no
``Exception``: a dispatcher that raises one resumes the around hooks with it,
and the module's forward swap tells the point of one raised by forward. An
entry left by a call that ended otherwise (a plain torch hook raised Ctrl-C; on
``every_module``, which has no forward swap, forward did) has its around hooks
closed at the thread's next call of the point. ``detach()`` during a call is
the exception: it removes the dispatchers, and the around hooks of the calls
under way are closed then.

Copies of hooked models (the last section). Following torch's stance that hooks
are not part of a model's state, a copy of a module carries no bus hook. A
module's hook dicts hold the point's native dispatchers, its bound methods;
copying or pickling the module copies them, and the point then copies itself
as an *inert point*: one on a private bus with no hooks, whose only action, at
the module's first call of a dispatcher (forward, or backward if hookbus had
only backward hooks there), is to remove its dispatchers from the copy's hook
dicts and put back torch's full-backward mark. From then on the copy runs at
native speed, and its hook dicts are those of a module never hooked.

Why not simply leave no dispatcher in the copy: ``copy.deepcopy`` copies a
bound method as the same function bound to a copy of its object, and pickle as
its object and method name, so a copy's hook dicts always hold *some* method of
*some* point. The inert point is the point that does nothing. A capture's own
hooks (``_capture.CaptureHook``) copy themselves the same way, as inert hooks
that call ``_native_hooks.remove_dispatchers`` at their first call.
"""

from __future__ import annotations

import itertools
import sys
import threading
import types
import warnings
import weakref
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..adapter import (
    CallContext,
    EventBus,
    Handle,
    Layout,
    Started,
    layout_of,
    native_post_hook,
    native_post_plan,
    rebind,
    resume_arounds,
    run_phase,
    start_arounds,
    where_defined,
)
from ._call_frames import CALL_FAILED, call_keys, handled_error, running_calls, runs_hooks
from ._call_starts import ANY_STARTS, start_call
from ._forward_swap import ForwardSwap
from ._grad import hook_output_grads
from ._module_kinds import MODULE_POINT
from ._native_hooks import remove_dispatchers
from ._script_refusal import hold_script_refusal, release_script_refusal
from ._tree import Path, leaves_the_graph

# The fast constructor, bound once: a classmethod is bound again at each access.
_for_call = CallContext.for_call

__all__ = [
    "INTERNAL_STOPS",
    "KINDS",
    "ModulePoint",
    "inert_point",
]

KINDS = MODULE_POINT.runs
"""The hook kinds a module point runs (its row of the table)."""

# What a pre dispatcher passes on to the rest of its call: (the call's key, its
# context or None when an around hook's set-up raised, the around hooks started, and
# while there are some, the frame of the key: held, so that no other call's frame can
# take its id while the entry waits, and a call that ended without its post dispatcher
# is told from a running one, to close its around hooks).
_Entry = Tuple[int, Optional[CallContext], List[Started], Any]
_NO_STARTED: List[Started] = []  # never appended to: start_arounds gets a new list

_Hooks = Tuple["Handle", ...]
_Fast = Optional[Tuple[Callable[..., Any], ...]]
_NO_PLAN: Dict[str, _Hooks] = {kind: () for kind in KINDS}


# torch's register_forward_(pre_)hook puts the hook in the module's dict first and
# marks it with_kwargs just after: a forward running in another thread in between
# calls it without kwargs. The dispatchers take that call too, instead of failing.
_WITHOUT_KWARGS: Any = object()


class _CallCounter(itertools.count):  # type: ignore[type-arg]
    """The count behind a module point's ``ctx.call_index``: an ``itertools.count`` dynamo
    does not trace.

    dynamo traces ``next()`` on an ``itertools.count`` and guards on its value, which changes
    at every call: a compiled model with a post hook compiled again at each call until torch's
    ``recompile_limit``, then ran eagerly for good. On a subclass it breaks the graph instead
    (no warning), so the count runs eagerly; ``next()`` is still the C count's own.
    """


class ModulePoint:
    """The hook point of one ``nn.Module``, named by its qualified name.

    It holds its module weakly, and keeps in ``_natives`` the native torch hooks it
    installed, by phase. The post dispatcher is installed with ``always_call=True``,
    whether or not exception hooks exist: re-registering it to switch that option
    would mean removing and re-adding the native hook, and a forward running in
    another thread in between would miss its post hooks. The mark is switched in
    place instead, in the module's dict of them, and only for the generated native
    post hook, which runs no error path (see ``_install_post``).
    """

    __slots__ = (
        "__weakref__",
        "_always",
        "_around",
        "_backward",
        "_backward_calls",
        "_backward_pre",
        "_calls",
        "_compile_swap",
        "_exception",
        "_forward_swap",
        "_full_backward_flag",
        "_grad",
        "_grad_handles",
        "_held",
        "_in_flight",
        "_layout",
        "_local",
        "_module",
        "_natives",
        "_post",
        "_post_fast",
        "_pre",
        "_shared",
        "_updating",
        "attached",
        "bus",
        "name",
        "native_post",
        "on_compiled_miss",
        "on_graph_cut",
        "on_hooked",
        "recompile_on_change",
        "registry",
        "where",
    )

    kinds: Tuple[str, ...] = KINDS
    is_async = False  # torch calls hooks synchronously
    kind = "module"
    """What the point wraps, for ``bus.points()``."""

    skip_refusal: Optional[str] = None
    """``ctx.skip`` works: a module with pre hooks has a ``_forward_swap.ForwardSwap``."""

    def __init__(self, bus: EventBus, name: str, module: torch.nn.Module) -> None:
        self.bus = bus
        self.registry = bus.registry
        self.name = name
        self.where = where_defined(getattr(type(module), "forward", None))
        """Where the module's ``forward`` is defined, as ``file:line``."""
        self._calls = _CallCounter()
        # Orders updates from threads that change hooks at once: the last to take
        # it reads the newest plan. Reentrant: a warning it issues may run code
        # (a warnings filter) that registers on this very module.
        self._updating = threading.RLock()
        self._module: Callable[[], Optional[torch.nn.Module]] = weakref.ref(module)
        self._natives: Dict[str, RemovableHandle] = {}
        self._layout: Optional[Layout] = None
        self._local = threading.local()
        self._around: _Hooks = ()
        self._pre: _Hooks = ()
        self._post: _Hooks = ()
        self._post_fast: _Fast = None
        #: When plain post hooks are all there is, what the generated native post hook
        #: runs (``native_post_plan``); torch then calls that function directly (see
        #: ``_install_post``). ``None`` otherwise.
        self.native_post: Optional[Tuple[Any, ...]] = None
        self._exception: _Hooks = ()
        self._backward_pre: _Hooks = ()
        self._backward: _Hooks = ()
        self._grad: _Hooks = ()
        self._shared = False  # pre hooks pass their context on to post/exception/grad
        self._always = False  # a forward error concerns us (exception hooks, shared context)
        # Calls under way, in any thread, that started around hooks (under _updating):
        # while any is, the dispatchers that finish them stay (see invalidate).
        self._in_flight = 0
        self._held = False  # invalidate kept dispatchers for them: the last one out re-runs it
        self._backward_calls = 0
        self._full_backward_flag: Optional[bool] = None
        self._grad_handles: List[RemovableHandle] = []
        # Installed while pre hooks are: lets ctx.skip(value) return value without forward.
        self._forward_swap: Optional[ForwardSwap] = None
        self.attached = True
        # Called with the kind when hooks that torch.compile never runs arrive
        # (exception hooks, around hooks' error path): the compile warning.
        self.on_compiled_miss: Optional[Callable[[ModulePoint, str], None]] = None
        #: The module may run compiled (``torch.compile``): while it has natives it
        #: holds a forward swap, renewed at each change (see ``_renew_compile_swap``).
        self.recompile_on_change = False
        self._compile_swap: Optional[ForwardSwap] = None
        # Called when a post hook replaced an output in the graph by one out of it
        # (the attachment warns, under DDP without find_unused_parameters).
        self.on_graph_cut: Optional[Callable[[ModulePoint], None]] = None
        #: Called with ``True`` when the point comes to have hooks (natives on its module),
        #: ``False`` when it has none any more (the attachment watches its module meanwhile).
        self.on_hooked: Optional[Callable[[ModulePoint, bool], None]] = None

    @property
    def module(self) -> Optional[torch.nn.Module]:
        """The module, or ``None`` once it was garbage collected."""
        return self._module()

    def __reduce_ex__(self, protocol: Any) -> Tuple[Any, ...]:
        # A copied or pickled module (deepcopy, torch.save, AveragedModel,
        # mp.spawn) reaches us through its hook dicts: it gets an inert stand-in.
        return (inert_point, (self.name, self._full_backward_flag))

    def __deepcopy__(self, memo: Dict[int, Any]) -> ModulePoint:
        return inert_point(self.name, self._full_backward_flag)

    def layout(self) -> Layout:
        """``ctx.arguments`` binds to the module's ``forward`` (without ``self``)."""
        layout = self._layout
        if layout is None:
            module = self._module()
            layout = self._layout = layout_of(getattr(module, "forward", None), self.name)
        return layout

    # --- bookkeeping: the registry calls invalidate, with no lock of its held ---------

    def invalidate(self) -> None:
        """Work out this module's hooks again and install exactly the natives they need.

        Errors propagate (a :class:`CompiledModelWarning` turned into an error,
        say): the registration that caused the call is then undone.
        """
        with self._updating:
            module = self._module()
            if not self.attached or module is None:
                return
            plan = self.registry.plan(self)
            hooks = plan.hooks if plan is not None else _NO_PLAN
            fast = plan.fast if plan is not None else {}
            pre, post, exception = hooks["pre"], hooks["post"], hooks["exception"]
            grad, around = hooks.get("grad", ()), hooks["around"]  # not every point's kind
            had_error_hooks = bool(self._exception or self._around)
            self._around = around
            self._pre = pre
            self._post, self._post_fast = post, fast.get("post")
            self._exception, self._grad = exception, grad
            self._backward_pre = hooks.get("backward_pre", ())
            self._backward = hooks.get("backward", ())
            before = tuple(self._natives)
            # While a context stored by a pre hook of this thread waits for its post
            # dispatcher (a once pre hook went in mid-call), post dispatchers look for it.
            pending = self._shared and _any_running(self._stack())
            # While calls that started around hooks are under way, the dispatchers that
            # finish them stay as they are, whatever was removed: the last call out
            # runs this again (_land).
            held = self._held = self._in_flight > 0
            self._shared = (
                bool(around)
                or held
                or ((bool(pre) or pending) and bool(post or exception or grad))
            )
            self._always = bool(exception) or self._shared
            alone = None if self._always or grad else self._post_fast
            native = None if alone is None else _native_post(len(alone))
            self.native_post = (
                None
                if native is None or alone is None
                else native_post_plan(alone, post, name=self.name, counter=self._calls)
            )
            # The post dispatcher that needs torch's error path gets it before a pre
            # dispatcher can push a context for it to take; the generated one goes in
            # once nothing else may need that path.
            swapped = native is None and self._install_post(module, None)
            self._sync(module, "pre", bool(pre or around or held))
            self._sync(module, "post", bool(post or exception or grad or around or held))
            if native is not None:
                swapped = self._install_post(module, native)
            self._sync(module, "backward_pre", bool(self._backward_pre))
            self._sync(module, "backward", bool(self._backward))
            if bool(self._natives) != bool(before):
                if self._natives:
                    hold_script_refusal(module)
                else:
                    release_script_refusal(module)
                on_hooked = self.on_hooked
                if on_hooked is not None:
                    on_hooked(self, bool(self._natives))
            if self.recompile_on_change:
                if swapped or tuple(self._natives) != before:
                    self._renew_compile_swap(module)
                missed = self.on_compiled_miss
                if (exception or around) and not had_error_hooks and missed is not None:
                    missed(self, "exception" if exception else "around")

    def _renew_compile_swap(self, module: Optional[torch.nn.Module]) -> None:
        """Make code compiled for the module's previous hooks stop applying.

        torch.compile skips its guards on a module's *empty* hook dicts and guards
        a non-empty one by its length only, so code compiled before a hook was added
        (or for another set of hooks) would keep running without it. What it does
        guard is a forward set on the instance, by identity, dropping what it
        compiled for one once that is collected. So while the module has natives
        it holds a forward swap (see ``_forward_swap``), a new one at each change; with
        none it has none, and the code compiled for the hook-less module applies.
        """
        old, self._compile_swap = self._compile_swap, None
        if self._natives and module is not None:
            swap = ForwardSwap.acquire(module)
            swap.renew()  # a new identity, even if pre hooks hold this swap already
            self._compile_swap = swap
        if old is not None:
            old.release()

    def uninstall(self) -> None:
        """Remove every native hook this point installed, and forget per-call state."""
        with self._updating:
            self.attached = False
            module = self._module()
            had_natives = bool(self._natives)
            for phase in list(self._natives):
                self._sync(module, phase, False)
            if had_natives and module is not None:
                release_script_refusal(module)
            if had_natives and self.on_hooked is not None:
                self.on_hooked(self, False)
            if self._compile_swap is not None:
                self._renew_compile_swap(module)
            for handle in self._grad_handles:
                handle.remove()
            self._grad_handles = []
            self._local = threading.local()
            self._around = self._pre = self._post = self._exception = ()
            self._backward_pre = self._backward = self._grad = ()
            self._post_fast = self.native_post = None

    def _sync(self, module: Optional[torch.nn.Module], phase: str, want: bool) -> None:
        current = self._natives.get(phase)
        if (current is not None) == want:
            return
        if current is not None:
            current.remove()
            del self._natives[phase]
            if phase == "pre" and self._forward_swap is not None:
                swap, self._forward_swap = self._forward_swap, None
                swap.unwatch(self._on_interrupt)
                swap.release()
            if phase in ("backward_pre", "backward") and module is not None:
                self._restore_backward_flag(module)
        if not want or module is None:
            return
        if phase in ("backward_pre", "backward") and not (
            "backward_pre" in self._natives or "backward" in self._natives
        ):
            self._full_backward_flag = module._is_full_backward_hook
        if phase == "pre":
            swap = ForwardSwap.acquire(module)
            try:
                handle = module.register_forward_pre_hook(self._on_pre, with_kwargs=True)
            except BaseException:
                swap.release()
                raise
            swap.watch(self._on_interrupt)
            self._forward_swap = swap
        elif phase == "post":
            handle = module.register_forward_hook(
                self._on_post, with_kwargs=True, always_call=True
            )
        elif phase == "backward_pre":
            handle = module.register_full_backward_pre_hook(self._on_backward_pre)
        else:
            handle = module.register_full_backward_hook(self._on_backward)
        self._natives[phase] = handle

    def _install_post(self, module: torch.nn.Module, native: Optional[Callable[..., Any]]) -> bool:
        """Make torch call ``native`` (a ``native_post_hook`` function) bound to this point,
        or ``_on_post`` when it is ``None``, as the post dispatcher; say if it changed.

        The function is put in the dispatcher's own entry of the module's hook dict:
        it keeps its place among the user's native hooks, its ``with_kwargs`` mark and
        its removable handle. A forward running meanwhile calls the one it read; either
        runs the plan it finds then (the generated function hands a plan of another
        shape to ``_on_post``). ``_on_post`` has the ``always_call`` mark, the generated
        function not (it runs no error path: with plain post hooks alone, a failed call
        concerns no hook of ours), so that it need not check for one at each call. The
        mark goes before the generated function comes, and comes back after it went:
        torch calls it on no error path, where a ``_on_post`` it read meanwhile runs.
        """
        handle: Any = self._natives.get("post")  # torch leaves the hook dicts partly untyped
        hooks: Optional[Dict[int, Any]] = None if handle is None else handle.hooks_dict_ref()
        if handle is None or hooks is None or handle.id not in hooks:
            return False
        function = ModulePoint._on_post if native is None else native
        if getattr(hooks[handle.id], "__func__", None) is function:
            return False
        always: Dict[int, bool] = module._forward_hooks_always_called  # pyright: ignore[reportUnknownMemberType]
        if native is None:
            hooks[handle.id] = types.MethodType(function, self)
            always[handle.id] = True
        else:
            always.pop(handle.id, None)
            hooks[handle.id] = types.MethodType(function, self)
        return True

    def _restore_backward_flag(self, module: torch.nn.Module) -> None:
        # torch marks a module "full backward" for good at the first such hook; put
        # the mark back when ours were the only backward hooks, so that detaching
        # leaves the module as it was.
        hooks: Any = (module._backward_hooks, module._backward_pre_hooks)  # pyright: ignore[reportUnknownMemberType]
        if not any(hooks) and not ("backward_pre" in self._natives or "backward" in self._natives):
            module._is_full_backward_hook = self._full_backward_flag

    # --- the native dispatchers: short, they run on every module call ----------------

    def _stack(self) -> List[_Entry]:
        """This thread's contexts passed from pre hooks to the rest of their call.

        Each entry is keyed by the call: the id of the frame that calls the
        dispatchers (torch's ``inner`` closure in ``Module._call_impl``; see
        ``_call_frames.call_keys``). So a post dispatcher takes the context of its own
        call whatever other hooks did to the args, and a call that never reached
        its post dispatcher (a ``KeyboardInterrupt`` nothing of ours saw) leaves an
        entry that the next push drops, closing the around hooks it holds. A stored
        context holds no argument of its call (see ``_on_pre``); an entry with around
        hooks holds the call's frame (see ``_Entry``).
        """
        try:
            stack: List[_Entry] = self._local.stack
        except AttributeError:
            stack = self._local.stack = []
        return stack

    def _live_stack(self) -> List[_Entry]:
        """This thread's stack without the entries of calls that ended already.

        Rare: needed when the module calls itself, or a call ended without its
        post dispatcher (a ``KeyboardInterrupt`` raised where nothing of ours saw
        it): the around hooks such a call started are closed here.
        """
        stack = self._stack()
        if stack:
            running = running_calls()
            ended = [entry for entry in stack if entry[0] not in running]
            if ended:
                stack[:] = [entry for entry in stack if entry[0] in running]
                self._abandon(ended)
        return stack

    def _pop_shared(self, keys: Tuple[int, ...]) -> Optional[_Entry]:
        """The entry this call's pre dispatcher pushed, if any: the caller now owns it."""
        stack = self._stack()
        entry: Optional[_Entry] = None
        if stack and stack[-1][0] in keys:  # the common case: the top entry
            entry = stack.pop()
        else:
            for position in range(len(stack) - 2, -1, -1):
                if stack[position][0] in keys:
                    entry = stack[position]
                    ended = stack[position + 1 :]  # calls inside it that ended early
                    del stack[position:]
                    self._abandon(ended)
                    break
        if entry is not None and entry[2]:
            self._land()
        return entry

    def _start_arounds(self, ctx: CallContext) -> List[Started]:
        """Run the around hooks' set-up for one call; its post dispatcher resumes them.

        Counted in flight before the hooks are read, under the lock ``invalidate``
        holds: a change meanwhile (this very call's ``once`` claim, say) then keeps
        the dispatchers that will finish them. If a set-up raises, the ones that
        started are resumed here with the error (torch calls no hook of ours for it).
        """
        with self._updating:
            arounds = self._around
            self._in_flight += 1
        started: List[Started] = []
        try:
            start_arounds(self.registry, arounds, None, ctx, started)
        except BaseException as error:
            self._land()
            if started:
                resume_arounds(started, ctx, None, error)
            raise
        if not started:
            self._land()
        return started

    def _land(self) -> None:
        """A call's around hooks are about to be resumed (or closed): one fewer in flight.

        The last one out applies the changes made while calls were under way.
        """
        with self._updating:
            self._in_flight -= 1
            if self._held and not self._in_flight:
                self.invalidate()

    def _abandon(self, ended: List[_Entry]) -> None:
        """Close the around hooks of calls that ended without their post dispatcher
        (innermost first): their ``finally`` blocks run; the error that ended the call
        is not known here. What a hook raises in closing is a warning: the call is over."""
        for _, _, started, _ in reversed(ended):
            if not started:
                continue
            self._land()
            for handle, around, _, _ in reversed(started):
                try:
                    around.close()
                except Exception as error:
                    warnings.warn(
                        f"hookbus: around hook {handle!r} on module {self.name!r} raised "
                        f"{type(error).__name__} when closed after its call ended without "
                        f"its post hooks (a KeyboardInterrupt torch runs no hook for)",
                        RuntimeWarning,
                        stacklevel=2,
                    )

    def _on_interrupt(self, caller: Any, error: BaseException) -> None:
        """A ``BaseException`` that is no ``Exception`` leaves this call (called from
        ``caller``), and torch runs no hook for it: resume its around hooks with it.

        What they leave raises here: the error itself, or what a hook raised instead.
        """
        entry = self._pop_shared((id(caller),))
        try:
            if entry is not None and entry[1] is not None and entry[2]:
                resume_arounds(entry[2], entry[1], None, error)
        except Exception:
            # An around hook raised an error instead: it ends the call, whose hooks all
            # ran. torch's always_call post dispatcher sees it go by; to it, it is no new
            # error of the call (see _on_exception).
            self._local.ended = id(caller)
            raise
        finally:
            del error  # raised through this frame, which holds the call's: no cycle

    def _run(self, handles: _Hooks, ctx: CallContext) -> None:
        # One module call's pre or post hooks: the core's phase loop (an inline copy
        # here saved nothing measurable on a real forward).
        run_phase(self.registry, handles, ctx)

    @runs_hooks
    def _on_pre(
        self, module: torch.nn.Module, args: Tuple[Any, ...], kwargs: Any = _WITHOUT_KWARGS
    ) -> Any:
        if kwargs is _WITHOUT_KWARGS:
            return self._on_pre_without_kwargs(module, args)
        ctx = _for_call(self.name, module, args, kwargs, next(self._calls), "pre", self)
        swap = self._forward_swap  # kept: a once hook's removal may release it mid-call
        if not self._shared:
            self._run(self._pre, ctx)
            if ctx.skipped or module is not self._module():
                self._skip_forward(ctx, module, swap, _torch_frame(sys._getframe(1)))
            return None if ctx.args is args and ctx.kwargs is kwargs else (ctx.args, ctx.kwargs)
        stack = self._stack()
        if stack:
            stack = self._live_stack()
        caller: Any = sys._getframe(1)  # torch's frame, which calls the post one too
        if caller.f_code is _WITHOUT_KWARGS_CODE:  # see _torch_frame: inlined, per call
            caller = caller.f_back.f_back
        key = id(caller)
        if self._around:
            stack.append((key, None, _NO_STARTED, None))  # a set-up raising: nothing else runs
            started = self._start_arounds(ctx)
            stack[-1] = (key, ctx, started, caller if started else None)
        else:
            stack.append((key, ctx, _NO_STARTED, None))
        # A pre hook's error reaches the exception hooks and the around hooks' teardown:
        # torch calls the post dispatcher (always_call), which finds this entry.
        try:
            self._run(self._pre, ctx)
        except Exception:
            # Kept without the call's arguments, as below: if the hooks went meanwhile,
            # no post dispatcher of ours comes to take the entry, and the thread's next
            # call of the point drops it.
            rebind(ctx, "pre", None, (), _NO_KWARGS)
            raise
        except BaseException as error:  # torch calls no hook for it: finish the call here
            self._on_interrupt(caller, error)
            raise
        if ctx.skipped or module is not self._module():
            self._skip_forward(ctx, module, swap, _torch_frame(sys._getframe(1)))
        new_args, new_kwargs = ctx.args, ctx.kwargs
        # Stored without the call's arguments (the post dispatcher gets them from torch,
        # as forward received them): an entry left behind keeps no input alive.
        rebind(ctx, "pre", None, (), _NO_KWARGS)
        if new_args is args and new_kwargs is kwargs:
            return None
        return new_args, new_kwargs

    def _skip_forward(
        self,
        ctx: CallContext,
        module: torch.nn.Module,
        swap: Optional[ForwardSwap],
        caller: Any,
    ) -> None:
        # A pre hook called ctx.skip(value), or this is a DataParallel replica: the
        # swapped forward, which torch calls from ``caller`` next (it read it before
        # the pre hooks ran, so even if they released it since), returns the value
        # instead of running, or runs as the replica (see ForwardSwap.run_replica).
        if swap is None:  # an inert point (a copy's), whose hooks never skip
            if ctx.skipped:
                raise RuntimeError(f"ctx.skip() on module {self.name!r}: no swapped forward")
            return
        if ctx.skipped:
            swap.skip_call(caller, ctx.result)
        else:
            swap.run_replica(caller, module)

    def _on_pre_without_kwargs(self, module: torch.nn.Module, args: Tuple[Any, ...]) -> Any:
        # See _WITHOUT_KWARGS. torch then expects new args alone, not (args, kwargs).
        if ANY_STARTS[0]:  # a global pre hook (every_module's) runs before the module's own:
            start_call(module, sys._getframe(2))  # a step counter counts the call first
        replaced = self._on_pre(module, args, {})
        return None if replaced is None else replaced[0]

    @runs_hooks
    def _on_post(
        self,
        module: torch.nn.Module,
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
        output: Any = _WITHOUT_KWARGS,
    ) -> Any:
        if output is _WITHOUT_KWARGS:  # see _WITHOUT_KWARGS: (module, args, output)
            kwargs, output = {}, kwargs
        error = handled_error()
        if error is not None:  # rare: torch's except clause, or a call in an except block
            caller = _torch_caller(sys._getframe(1))
            if caller.f_code is CALL_FAILED:
                # The call failed: forward, a pre hook, or a forward hook torch ran
                # before this one (a plain torch hook's error is the call's too,
                # whatever forward returned). Exception hooks then, post hooks never.
                try:
                    self._on_exception(module, args, kwargs, error, caller)
                finally:
                    # What the around hooks left is raised through this frame, which
                    # holds the call's arguments: no cycle through the error.
                    del error
                return None
        return self._on_post_full(module, args, kwargs, output)

    # What the generated native post hook (native_post_hook) calls on this point, its
    # NativePostOwner: the call it does not run, and the output a hook replaced.
    post_otherwise = _on_post

    def _on_post_full(
        self, module: torch.nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any], output: Any
    ) -> Any:
        ctx: Optional[CallContext] = None
        started = _NO_STARTED
        if self._shared:
            entry = self._pop_shared((id(_torch_caller(sys._getframe(2))),))  # _on_post's
            if entry is not None:
                ctx, started = entry[1], entry[2]
            if not (self._pre or self._around):  # a stored context was pending: back to
                self.invalidate()  # the fast path if none is
        if ctx is None:
            ctx = _for_call(self.name, module, args, kwargs, next(self._calls), "post", self)
        else:
            rebind(ctx, "post", module, args, kwargs)
        ctx.result = output
        try:
            if self._post:
                try:
                    self._run(self._post, ctx)
                except Exception as error:
                    # Raised in this dispatcher, so ours to finish: the exception hooks
                    # see it and may recover, the around hooks' teardown too; what is
                    # left propagates through torch.
                    ctx.result = self._after_post_error(ctx, error)
        except BaseException as error:
            if not started:
                raise
            resume_arounds(started, ctx, None, error)  # raises what is left
        else:
            if started:
                ctx.result = resume_arounds(started, ctx, ctx.result, None)
        result = ctx.result
        if self._grad:
            handles = self._grad_handles  # kept to remove at uninstall()
            kept = hook_output_grads(result, self._on_grad, ctx.call_index, handles)
            if kept is not handles:
                self._grad_handles = kept
        return None if result is output else self._replaced(output, result)

    def _after_post_error(self, ctx: CallContext, error: Exception) -> Any:
        """A post hook raised ``error``: run the exception hooks.

        Returns the output a hook recovered, or raises what error is left.
        """
        rebind(ctx, "exception", ctx.target, ctx.args, ctx.kwargs, error)
        if self._exception:
            run_phase(self.registry, self._exception, ctx)
        left = None if ctx.recovered else ctx.exception
        # Back to the post phase, the context lets go of the error (see rebind).
        rebind(ctx, "post", ctx.target, ctx.args, ctx.kwargs)
        if left is not None:
            try:
                raise left
            finally:
                del error, left  # this frame is in the error's traceback: no cycle through it
        return ctx.result

    def _replaced(self, output: Any, result: Any) -> Any:
        """The output a post hook assigned, checked: the rare path, off the common one."""
        if result is None:
            raise TypeError(
                f"a post hook set ctx.result = None on module {self.name!r}, which returned "
                f"{type(output).__name__}: torch reads None from a forward hook as 'output "
                f"unchanged', so it cannot take effect. To make the call return None, wrap "
                f"it: bus.wrap(model, 'name'), and set ctx.result there"
            )
        if self.on_graph_cut is not None and leaves_the_graph(output, result):
            self.on_graph_cut(self)
        return result

    post_replaced = _replaced

    def _on_exception(
        self,
        module: torch.nn.Module,
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
        error: Optional[BaseException],
        caller: Any,
    ) -> None:
        ended = getattr(self._local, "ended", None)
        if ended is not None:  # rare: an around hook turned an interrupt into an error
            self._local.ended = None
            if ended in call_keys(caller, error):
                return
        ctx: Optional[CallContext] = None
        started = _NO_STARTED
        if self._shared:
            entry = self._pop_shared(call_keys(caller, error))
            if entry is not None:
                ctx, started = entry[1], entry[2]
                if ctx is None:
                    return  # an around hook's set-up raised: nothing else started
        if isinstance(error, INTERNAL_STOPS):
            for _, around, _, _ in reversed(started):
                around.close()  # not an error of the call (checkpointing): finally blocks run
            return
        if ctx is None:
            if not self._exception:
                return
            ctx = _for_call(self.name, module, args, kwargs, next(self._calls), "exception", self)
        rebind(ctx, "exception", module, args, kwargs, error)
        if self._exception:
            try:
                run_phase(self.registry, self._exception, ctx)  # every exception hook runs
            except BaseException as interrupt:  # no Exception: those replace the error
                if started:
                    resume_arounds(started, ctx, None, interrupt)
                raise
        replaced = ctx.exception
        recovered = ctx.recovered  # read first: resuming the around hooks resets it
        if started:
            try:
                resume_arounds(started, ctx, None, replaced)
            except Exception as left:  # a BaseException goes on, through torch
                replaced = left
            else:
                replaced = None  # an around hook recovered: torch re-raises all the same
        # The context lets go of the error an exception hook raised (see rebind).
        rebind(ctx, "exception", module, args, kwargs)
        try:
            self._warn_unchanged(error, replaced, recovered)
        finally:
            # The error the around hooks left was raised here: this frame is in its
            # traceback, and holds the call's arguments. No cycle through it.
            del error, replaced

    def _warn_unchanged(
        self, error: Optional[BaseException], replaced: Optional[BaseException], recovered: bool
    ) -> None:
        """Warn that torch re-raises the module's own ``error`` after its hooks, if the
        hooks tried otherwise: recovered (``replaced`` is None, or ``recovered``) or
        raised ``replaced`` instead."""
        if replaced is None or (replaced is error and recovered):
            warnings.warn(
                f"hookbus: ctx.recover() cannot change the result of the module call "
                f"{self.name!r}: torch re-raises a forward error after its hooks, so the "
                f"{type(error).__name__} propagates. Recover around the call instead, with "
                f"bus.wrap(model, 'name') and an exception hook on that name",
                RuntimeWarning,
                stacklevel=4,
            )
        elif replaced is not error:
            warnings.warn(
                f"hookbus: an exception hook on module {self.name!r} raised "
                f"{type(replaced).__name__}: {replaced}; torch re-raises the module's own "
                f"{type(error).__name__}, which propagates unchanged",
                RuntimeWarning,
                stacklevel=4,
            )

    def _on_backward_pre(self, module: torch.nn.Module, grad_output: Any) -> Any:
        ctx = CallContext(
            self.name, module, grad_output, {}, self._next_backward(), "pre", _GRADIENTS
        )
        ctx.phase = "backward_pre"
        run_phase(self.registry, self._backward_pre, ctx)
        return None if ctx.args is grad_output else ctx.args

    def _on_backward(self, module: torch.nn.Module, grad_input: Any, grad_output: Any) -> Any:
        ctx = CallContext(
            self.name, module, grad_output, {}, self._next_backward(), "pre", _GRADIENTS
        )
        ctx.phase = "backward"
        ctx.result = grad_input
        run_phase(self.registry, self._backward, ctx)
        return None if ctx.result is grad_input else ctx.result

    def _on_grad(self, grad: torch.Tensor, call_index: int, path: Path) -> Optional[torch.Tensor]:
        """The gradient of one output tensor of forward call ``call_index`` (a ``GradHook``).

        The ``grad`` hooks that match at backward run, not those of the forward.
        """
        handles = self._grad
        if not handles:
            return None  # the hooks went since forward
        ctx = CallContext(self.name, self._module(), (), {}, call_index, "grad", self)
        ctx.result = grad
        ctx.data["path"] = path
        run_phase(self.registry, handles, ctx)
        result: Optional[torch.Tensor] = ctx.result
        return None if result is grad else result

    def __repr__(self) -> str:
        state = "hooked" if self._natives else "no hooks"
        return f"<ModulePoint {self.name!r} {state}>"

    def _next_backward(self) -> int:
        index = self._backward_calls
        self._backward_calls = index + 1
        return index


_NO_KWARGS: Dict[str, Any] = {}  # what a stored context holds until its post dispatcher


def _any_running(stack: List[_Entry]) -> bool:
    """Whether an entry of this thread's ``stack`` is of a call still under way."""
    if not stack:
        return False
    running = running_calls()
    return any(entry[0] in running for entry in stack)


def _torch_frame(caller: Any) -> Any:
    """The frame of torch's that called the pre dispatcher, ``caller`` or its caller.

    A pre hook called without kwargs (a global pre hook always is) reaches
    ``_on_pre`` again through ``_on_pre_without_kwargs``: the frame that keys the
    call is the one that called the first ``_on_pre``.
    """
    return caller.f_back.f_back if caller.f_code is _WITHOUT_KWARGS_CODE else caller


def _backward_arguments(*grad_output: Any) -> None:
    """The signature ``ctx.arguments`` binds to in backward hooks (never called)."""


class _GradientArguments:
    """The point of a backward hook's context: ``ctx.arguments`` holds the gradients.

    A backward hook's ``ctx.args`` is ``grad_output``, not the forward's arguments;
    binding it to ``forward``'s signature named a gradient ``"input"``. Here its one
    key is ``"grad_output"`` (``grad_input`` is ``ctx.result`` in backward hooks).
    """

    __slots__ = ()

    skip_refusal = "ctx.skip() is for a forward's pre hooks, not backward hooks"
    _layout = layout_of(_backward_arguments, "backward")

    def layout(self) -> Layout:
        return self._layout


_GRADIENTS = _GradientArguments()

_WITHOUT_KWARGS_CODE = ModulePoint._on_pre_without_kwargs.__code__


# --- the generated native post hook -----------------------------------------------------

# The native_post_hook function of each number of hooks, marked as running hooks, and the
# ids of their code objects (a code object's hash is computed from its contents).
_NATIVE_POSTS: Dict[int, Callable[..., Any]] = {}
_NATIVE_POST_CODES: Set[int] = set()


def _native_post(count: int) -> Optional[Callable[..., Any]]:
    """The generated native post hook of ``count`` plain hooks, or ``None`` for too many."""
    native = _NATIVE_POSTS.get(count)
    if native is None:
        # Off torch's error path: installed without the always_call mark (_install_post).
        native = native_post_hook(count, error_path=False)
        if native is None:
            return None
        _NATIVE_POST_CODES.add(id(native.__code__))
        _NATIVE_POSTS[count] = runs_hooks(native)
    return native


def _torch_caller(caller: Any) -> Any:
    """The frame of torch's that called ``_on_post``: ``caller``, or its caller when
    ``_on_post`` was called by the generated native post hook, as its way out."""
    return caller.f_back if id(caller.f_code) in _NATIVE_POST_CODES else caller


# --- errors torch raises through a module and swallows ----------------------------------


def _internal_stops() -> Tuple[type, ...]:
    # Non-reentrant checkpointing stops a recomputation in backward by raising this
    # private error through the modules, then swallows it: no error of theirs.
    from torch.utils import checkpoint

    stop = getattr(checkpoint, "_StopRecomputationError", None)
    return (stop,) if isinstance(stop, type) else ()


INTERNAL_STOPS = _internal_stops()
"""Errors torch raises through modules and swallows itself: no error of theirs."""


# --- copies: what a deepcopy, pickle or torch.save gets instead of hooks ----------------

# The private bus of inert points: it never gets a hook.
_NO_HOOKS = EventBus("hookbus.torch copies")


def inert_point(name: str, full_backward_flag: Optional[bool]) -> ModulePoint:
    """The stand-in of a copied module's point (``ModulePoint`` pickles to this call).

    Example:
        >>> import copy, torch, hookbus, hookbus.torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 2))
        >>> net = hookbus.torch.attach(model, hookbus.EventBus())
        >>> _ = net.post("0", lambda ctx: print("hooked"))
        >>> twin = copy.deepcopy(model)
        >>> _ = twin(torch.ones(1, 2))  # no bus hook runs on the copy
        >>> len(twin[0]._forward_hooks)  # the stand-in left at the first call
        0
        >>> _ = model(torch.ones(1, 2))
        hooked
    """
    placeholder = nn.Identity()  # the point holds its module weakly: this one dies at once
    point = ModulePoint(_NO_HOOKS, name, placeholder)
    point.attached = False
    point._full_backward_flag = full_backward_flag

    def remove(ctx: CallContext) -> None:
        remove_dispatchers(ctx.target, point, full_backward_flag)

    # The dispatch loops run "hooks" from these: a handle for the slow loops (the
    # backward phases), the bare callable for the fast ones (forward).
    point._pre = point._post = point._backward_pre = point._backward = (
        Handle.plain(_NO_HOOKS.registry, "post", name, remove),
    )
    point._post_fast = (remove,)
    return point
