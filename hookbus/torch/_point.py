"""One hook point per module, holding native torch hooks only while bus hooks match it.

The bus calls :meth:`ModulePoint.invalidate` (with its lock held) whenever a hook
that may match the module is added or removed. The point then works out which
bus hooks run for each phase and installs or removes its native dispatchers to
match: at most one native hook per phase, however many bus hooks match, and none
at all when none match, so the module runs at native speed.
"""

from __future__ import annotations

import sys
import threading
import warnings
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

import torch
from torch.utils.hooks import RemovableHandle

from .._context import CallContext
from .._dispatch import _returned, run_phase
from .._errors import add_note, describe
from .._wrapper import HookPoint
from ._tree import Path, iter_tensors

if TYPE_CHECKING:
    from .._bus import EventBus
    from .._handle import Handle

__all__ = ["KINDS", "ModulePoint"]

KINDS = ("pre", "post", "exception", "backward_pre", "backward", "grad")
"""The hook kinds a module point runs (the last three are added by this adapter)."""

_Hooks = Tuple["Handle", ...]
_Fast = Optional[Tuple[Callable[..., Any], ...]]


def _fast(handles: _Hooks, plain: bool) -> _Fast:
    """The bare callables, when the short loop can run them (no rare option in play)."""
    if not plain or any(h.once or h.weak or h.target is not None for h in handles):
        return None
    return tuple(h._hook for h in handles)


class ModulePoint(HookPoint):
    """The hook point of one ``nn.Module``, named by its qualified name.

    It holds its module weakly, and keeps in ``_natives`` the native torch hooks it
    installed, by phase, with the option each was installed with.
    """

    __slots__ = (
        "_always",
        "_backward",
        "_backward_calls",
        "_backward_pre",
        "_exception",
        "_full_backward_flag",
        "_grad",
        "_grad_handles",
        "_local",
        "_module",
        "_natives",
        "_post",
        "_post_fast",
        "_pre",
        "_pre_fast",
        "_shared",
        "attached",
        "on_install",
    )

    kinds = KINDS

    def __init__(self, bus: EventBus, name: str, module: torch.nn.Module) -> None:
        super().__init__(bus, name)
        self.plan = None  # the core's plan is unused: dispatch reads the tuples below
        self._module: Callable[[], Optional[torch.nn.Module]] = weakref.ref(module)
        self._natives: Dict[str, Tuple[RemovableHandle, bool]] = {}
        self._local = threading.local()
        self._pre: _Hooks = ()
        self._pre_fast: _Fast = None
        self._post: _Hooks = ()
        self._post_fast: _Fast = None
        self._exception: _Hooks = ()
        self._backward_pre: _Hooks = ()
        self._backward: _Hooks = ()
        self._grad: _Hooks = ()
        self._shared = False  # pre hooks pass their context on to post/exception/grad
        self._always = False  # the post dispatcher also runs when forward raised
        self._backward_calls = 0
        self._full_backward_flag: Optional[bool] = None
        self._grad_handles: List[RemovableHandle] = []
        self.attached = True
        # Called with the phase when a native hook is installed (the compile warning).
        self.on_install: Optional[Callable[[ModulePoint, str], None]] = None

    @property
    def module(self) -> Optional[torch.nn.Module]:
        """The module, or ``None`` once it was garbage collected."""
        return self._module()

    # --- bookkeeping, with the bus lock held -----------------------------------------

    def invalidate(self) -> None:
        """Work out this module's hooks again and install exactly the natives they need."""
        module = self._module()
        if not self.attached or module is None:
            return
        bus = self.bus
        resolved = [bus._resolve_locked(kind, self.name) for kind in KINDS]
        pre, post, exception, backward_pre, backward, grad = resolved
        plain = bus._errors == "raise" and bus._tracer is None
        self._pre, self._pre_fast = pre, _fast(pre, plain)
        self._post, self._post_fast = post, _fast(post, plain)
        self._exception, self._backward_pre, self._backward, self._grad = (
            exception, backward_pre, backward, grad,
        )  # fmt: skip
        self._shared = bool(pre) and bool(post or exception or grad)
        self._always = bool(exception) or self._shared
        try:
            self._sync(module, "pre", bool(pre), False)
            self._sync(module, "post", bool(post or exception or grad), self._always)
            self._sync(module, "backward_pre", bool(backward_pre), False)
            self._sync(module, "backward", bool(backward), False)
        except Exception as error:  # pragma: no cover - registration checks come first
            warnings.warn(
                f"hookbus.torch could not update the native hooks of {self.name!r}: {error!r}",
                RuntimeWarning,
                stacklevel=2,
            )

    def uninstall(self) -> None:
        """Remove every native hook this point installed, and forget per-call state."""
        self.attached = False
        module = self._module()
        for phase in list(self._natives):
            self._sync(module, phase, False, False)
        for handle in self._grad_handles:
            handle.remove()
        self._grad_handles = []
        self._local = threading.local()
        self._pre = self._post = self._exception = ()
        self._backward_pre = self._backward = self._grad = ()
        self._pre_fast = self._post_fast = None

    def _sync(
        self, module: Optional[torch.nn.Module], phase: str, want: bool, always: bool
    ) -> None:
        current = self._natives.get(phase)
        if current is not None and want and current[1] == always:
            return
        if current is not None:
            current[0].remove()
            del self._natives[phase]
            if phase in ("backward_pre", "backward") and module is not None:
                self._restore_backward_flag(module)
        if not want or module is None:
            return
        if phase in ("backward_pre", "backward") and not (
            "backward_pre" in self._natives or "backward" in self._natives
        ):
            self._full_backward_flag = module._is_full_backward_hook
        if phase == "pre":
            handle = module.register_forward_pre_hook(self._on_pre, with_kwargs=True)
        elif phase == "post":
            handle = module.register_forward_hook(
                self._on_post, with_kwargs=True, always_call=always
            )
        elif phase == "backward_pre":
            handle = module.register_full_backward_pre_hook(self._on_backward_pre)
        else:
            handle = module.register_full_backward_hook(self._on_backward)
        self._natives[phase] = (handle, always)
        if self.on_install is not None:
            self.on_install(self, phase)

    def _restore_backward_flag(self, module: torch.nn.Module) -> None:
        # torch marks a module "full backward" for good at the first such hook; put
        # the mark back when ours were the only backward hooks, so that detaching
        # leaves the module as it was.
        hooks: Any = (module._backward_hooks, module._backward_pre_hooks)  # pyright: ignore[reportUnknownMemberType]
        if not any(hooks) and not ("backward_pre" in self._natives or "backward" in self._natives):
            module._is_full_backward_hook = self._full_backward_flag

    def track_grad_handle(self, handle: RemovableHandle) -> None:
        """Remember a tensor hook so that :meth:`uninstall` can remove it."""
        handles = self._grad_handles
        handles.append(handle)
        if len(handles) >= 256 and len(handles) & (len(handles) - 1) == 0:
            # At each power of two, drop the hooks whose graph is gone already.
            self._grad_handles = [h for h in handles if _alive(h)]

    # --- the native dispatchers: short, they run on every module call ----------------

    def _stack(self) -> List[Optional[CallContext]]:
        try:
            stack: List[Optional[CallContext]] = self._local.stack
        except AttributeError:
            stack = self._local.stack = []
        return stack

    def _run(self, handles: _Hooks, fast: _Fast, ctx: CallContext) -> None:
        if fast is None:
            run_phase(self.bus, handles, ctx)
            return
        for hook in fast:
            try:
                returned = hook(ctx)
            except Exception as error:
                add_note(error, describe(handles[fast.index(hook)], self.name))
                raise
            if returned is not None:
                _returned(handles[fast.index(hook)], ctx, returned)

    def _on_pre(
        self, module: torch.nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any]
    ) -> Optional[Tuple[Tuple[Any, ...], Dict[str, Any]]]:
        ctx = CallContext(self.name, module, args, kwargs, next(self._calls))
        if self._shared:
            stack = self._stack()
            stack.append(ctx)
            try:
                self._run(self._pre, self._pre_fast, ctx)
            except BaseException:
                stack[-1] = None  # the post dispatcher pops it: no exception hooks for it
                raise
        else:
            self._run(self._pre, self._pre_fast, ctx)
        if ctx.args is args and ctx.kwargs is kwargs:
            return None
        return ctx.args, ctx.kwargs

    def _on_post(
        self, module: torch.nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any], output: Any
    ) -> Any:
        fast = self._post_fast
        if fast is not None and not self._always and not self._grad:
            # The common case (plain post hooks only), kept short: it runs per call.
            ctx = CallContext(self.name, module, args, kwargs, next(self._calls), "post")
            ctx.result = output
            for hook in fast:
                try:
                    returned = hook(ctx)
                except Exception as error:
                    add_note(error, describe(self._post[fast.index(hook)], self.name))
                    raise
                if returned is not None:
                    _returned(self._post[fast.index(hook)], ctx, returned)
            result = ctx.result
            return None if result is output else result
        return self._on_post_full(module, args, kwargs, output)

    def _on_post_full(
        self, module: torch.nn.Module, args: Tuple[Any, ...], kwargs: Dict[str, Any], output: Any
    ) -> Any:
        ctx: Optional[CallContext] = None
        if self._always:
            error = sys.exc_info()[1]
            # torch calls an always_call hook from the except clause of Module._call_impl
            # when forward raised: the error then was caught in our caller's frame.
            if error is not None and _caught_in(error, sys._getframe(2)):
                self._on_exception(module, args, kwargs, error)
                return None
            stack = self._stack()
            if stack:
                ctx = stack.pop()
        if ctx is None:
            ctx = CallContext(self.name, module, args, kwargs, next(self._calls))
        ctx.phase = "post"
        ctx.result = output
        if self._post:
            self._run(self._post, self._post_fast, ctx)
        result = ctx.result
        if self._grad:
            hook_output_grads(self, ctx.call_index, result)
        return None if result is output else result

    def _on_exception(
        self,
        module: torch.nn.Module,
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
        error: BaseException,
    ) -> None:
        ctx: Optional[CallContext] = None
        if self._shared:
            stack = self._stack()
            if stack:
                ctx = stack.pop()
                if ctx is None:
                    return  # a pre hook of ours raised: the call never started
        if not self._exception:
            return
        if ctx is None:
            ctx = CallContext(self.name, module, args, kwargs, next(self._calls))
        ctx.phase = "exception"
        ctx._exception = error
        try:
            run_phase(self.bus, self._exception, ctx)
        except Exception as hook_error:
            # torch would turn this into a vague warning anyway; say what happened.
            warnings.warn(
                f"hookbus: an exception hook on module {self.name!r} raised "
                f"{type(hook_error).__name__}: {hook_error}; torch re-raises the module's own "
                f"{type(error).__name__}, which propagates unchanged",
                RuntimeWarning,
                stacklevel=3,
            )
            return
        if ctx._recovered:
            warnings.warn(
                f"hookbus: ctx.recover() cannot change the result of the module call "
                f"{self.name!r}: torch re-raises a forward error after its hooks, so the "
                f"{type(error).__name__} propagates. Recover around the call instead, with "
                f"bus.wrap(model, 'name') and an exception hook on that name",
                RuntimeWarning,
                stacklevel=3,
            )

    def _on_backward_pre(self, module: torch.nn.Module, grad_output: Any) -> Any:
        ctx = CallContext(self.name, module, grad_output, {}, self._next_backward())
        ctx.phase = "backward_pre"
        run_phase(self.bus, self._backward_pre, ctx)
        return None if ctx.args is grad_output else ctx.args

    def _on_backward(self, module: torch.nn.Module, grad_input: Any, grad_output: Any) -> Any:
        ctx = CallContext(self.name, module, grad_output, {}, self._next_backward())
        ctx.phase = "backward"
        ctx.result = grad_input
        run_phase(self.bus, self._backward, ctx)
        return None if ctx.result is grad_input else ctx.result

    def _next_backward(self) -> int:
        index = self._backward_calls
        self._backward_calls = index + 1
        return index


def _alive(handle: RemovableHandle) -> bool:
    hooks_ref: Any = handle.hooks_dict_ref  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    return hooks_ref() is not None


def _caught_in(error: BaseException, frame: Any) -> bool:
    tb = error.__traceback__
    return tb is not None and tb.tb_frame is frame


def hook_output_grads(point: ModulePoint, call_index: int, output: Any) -> None:
    """Register a gradient dispatcher on each tensor of ``output`` that requires grad."""
    for path, tensor in iter_tensors(output):
        if tensor.requires_grad:
            register: Any = tensor.register_hook  # untyped in torch  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            point.track_grad_handle(register(_GradDispatch(point, call_index, path)))


class _GradDispatch:
    """The tensor hook of one module output: runs the point's ``grad`` hooks on its grad.

    It holds the point (which holds its module weakly), never the tensor, so the
    autograd graph it lives in keeps no module or activation alive.
    """

    __slots__ = ("call_index", "path", "point")

    def __init__(self, point: ModulePoint, call_index: int, path: Path) -> None:
        self.point = point
        self.call_index = call_index
        self.path = path

    def __call__(self, grad: torch.Tensor) -> Optional[torch.Tensor]:
        point = self.point
        handles = point._grad
        if not handles:
            return None  # the hooks went since forward
        ctx = CallContext(point.name, point.module, (), {}, self.call_index, "grad")
        ctx.result = grad
        ctx.data["path"] = self.path
        run_phase(point.bus, handles, ctx)
        result: Optional[torch.Tensor] = ctx.result
        return None if result is grad else result
