"""Every module of every model as one hook point: torch's global module hooks.

:func:`every_module` makes an :class:`EveryModule`, which holds one
:class:`EveryModulePoint` on the bus: a module point whose natives are torch's
process-wide module hooks, installed only while a bus hook matches it.
"""

from __future__ import annotations

import weakref
from typing import Any, Optional, Tuple, Union

import torch
from torch import nn
from typing_extensions import Unpack

from ..adapter import (
    EventBus,
    Handle,
    HandleGroup,
    HookOptions,
    Layout,
    Removable,
    check_name,
    layout_of,
)
from ._attach import AroundHook, Hook, bus_or_default
from ._module_kinds import EVERY_MODULE_POINT
from ._point import ModulePoint
from ._selection import literal_pattern

__all__ = ["EveryModule", "EveryModulePoint", "every_module"]


def _any_call(*args: Any, **kwargs: Any) -> None:
    """The signature ``ctx.arguments`` binds to on the every-module point (never called)."""


class EveryModulePoint(ModulePoint):
    """One hook point for every module call of every model: torch's global module hooks.

    A :class:`ModulePoint` whose natives are torch's process-wide hooks
    (``torch.nn.modules.module.register_module_forward_pre_hook`` and
    ``register_module_forward_hook``), installed only while a bus hook matches it,
    so that it costs nothing otherwise. ``ctx.target`` is the module being called.
    torch calls a global pre hook without kwargs: pre hooks see ``ctx.args`` only.
    """

    __slots__ = ("_placeholder",)

    kinds = EVERY_MODULE_POINT.runs
    kind = EVERY_MODULE_POINT.name
    skip_refusal = EVERY_MODULE_POINT.skip_refusal
    _layout_of_any = layout_of(_any_call, "any module")

    def __init__(self, bus: EventBus, name: str) -> None:
        placeholder = nn.Identity()  # the point holds its module weakly: kept here
        super().__init__(bus, name, placeholder)
        self._placeholder = placeholder
        self.where = "every module"

    def layout(self) -> Layout:
        """``ctx.arguments`` binds to ``(*args, **kwargs)``: modules differ."""
        return self._layout_of_any

    def _sync(self, module: Optional[torch.nn.Module], phase: str, want: bool) -> None:
        from torch.nn.modules import module as torch_module

        current = self._natives.get(phase)
        if (current is not None) == want:
            return
        if current is not None:
            current.remove()
            del self._natives[phase]
            # torch's handle forgets to remove its with_kwargs mark: a stale one makes
            # every torch.compile'd module warn of global hooks for good.
            torch_module._global_forward_hooks_with_kwargs.pop(current.id, None)
            return
        if phase == "pre":
            handle = torch_module.register_module_forward_pre_hook(self._on_pre)
        elif phase == "post":
            handle = torch_module.register_module_forward_hook(
                self._on_post, with_kwargs=True, always_call=True
            )
        else:  # no backward kinds here: never asked for
            return
        self._natives[phase] = handle

    def __repr__(self) -> str:
        state = "hooked" if self._natives else "no hooks"
        return f"<EveryModulePoint {self.name!r} {state}>"


# (id(bus), name) -> the live one, held weakly: the bus holds its points weakly, as it
# holds every point, so a dropped EveryModule (and its bus) can go.
_every: weakref.WeakValueDictionary[Tuple[int, str], EveryModule] = weakref.WeakValueDictionary()


def every_module(bus: Optional[EventBus] = None, *, name: str = "<modules>") -> EveryModule:
    """One hook point, ``name``, for every module call of every model in the process.

    What torch's global hooks (``torch.nn.modules.module.register_module_forward_hook``
    and its pre-hook twin) give, through the bus: ``pre`` / ``post`` /
    ``exception`` / ``around`` hooks on ``name``, with priorities, ``once``,
    handles and errors as anywhere else, and ``ctx.target`` the module being called
    (``type(ctx.target).__name__`` its class; :meth:`Attachment.name_of` its name in
    an attached model). Use it to trace every module call, count operations, or find
    the first module whose output holds a NaN.

    torch's global hooks go in only while a bus hook matches ``name``, and out with
    the last (so it costs nothing otherwise); :meth:`EveryModule.remove` removes them
    and the hooks registered through it. torch runs global hooks before a module's
    own, and calls a global pre hook without the call's kwargs: pre hooks see
    ``ctx.args`` only. They cannot ``ctx.skip()`` a module. Under ``torch.compile``,
    register them before a ``torch.compile(model)`` wrapper's first call: torch
    does not guard on global hooks, and after it they see only the wrapper's call.

    Example:
        >>> import hookbus, torch, hookbus.torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
        >>> with hookbus.torch.every_module(hookbus.EventBus()) as every:
        ...     _ = every.post(lambda ctx: print(type(ctx.target).__name__))
        ...     _ = model(torch.ones(1, 2))
        Linear
        ReLU
        Sequential
    """
    bus = bus_or_default(bus, "every_module()")
    check_name(name, "hook point name", allow_pattern=False)
    taken = bus.registry.points(name)  # a module of an attached model, say
    if taken and not all(isinstance(point, EveryModulePoint) for point in taken):
        raise ValueError(
            f"{name!r} is already a hook point of {bus!r} ({taken[0]!r}): every_module() "
            f"needs a name of its own (the default is '<modules>'), else hooks on that "
            f"point would run for every module and twice for it"
        )
    existing = _every.get((id(bus), name))
    if existing is not None and existing.active:
        raise ValueError(
            f"every module is already a hook point {name!r} of {bus!r}: use that "
            f"{existing!r}, or remove() it first (two would run each hook twice)"
        )
    # A point whose EveryModule was dropped while hooks matched it lives on (torch's
    # global hooks hold it): take it over, or each hook would run twice.
    orphan = next((point for point in taken if isinstance(point, EveryModulePoint)), None)
    return EveryModule(bus, name, orphan)


class EveryModule(Removable):
    """The hook point of every module call (see :func:`every_module`).

    Its registration methods take a hook and the usual options, and return a
    :class:`~hookbus.Handle`; ``bus.pre(every.name, hook)`` works too. ``remove()``
    (or the end of its ``with`` block) removes torch's global hooks and the hooks
    registered here; hooks registered on the bus by name stay there.

    The bus holds the point weakly, as it holds every hook point (a dropped
    ``bus.wrap`` wrapper goes too): keep this object, or use ``with``. Dropped, it
    lets go of its bus, unless a hook still matches the point: torch's global hooks
    then hold it, and go with the last such hook (``handle.remove()``);
    ``every_module(bus)`` takes such a point over.

    Example:
        >>> import hookbus, torch, hookbus.torch
        >>> from torch import nn
        >>> bus = hookbus.EventBus()
        >>> every = hookbus.torch.every_module(bus)
        >>> calls = []
        >>> handle = bus.pre("<modules>", lambda ctx: calls.append(ctx.target))
        >>> _ = nn.Linear(1, 1)(torch.ones(1))
        >>> len(calls), every.active
        (1, True)
        >>> every.remove()
    """

    __slots__ = ("__weakref__", "_handles", "_point", "bus", "name")

    def __init__(self, bus: EventBus, name: str, point: Optional[EveryModulePoint] = None) -> None:
        self.bus = bus
        self.name = name
        self._handles: weakref.WeakSet[Handle] = weakref.WeakSet()
        if point is None:  # else a live point, taken over (see every_module)
            point = EveryModulePoint(bus, name)
            registry = bus.registry
            registry.add_points([point])
            if registry.has_hooks(EveryModulePoint.kinds):  # hooks registered before apply
                point.invalidate()
        self._point: Optional[EveryModulePoint] = point
        _every[(id(bus), name)] = self

    @property
    def active(self) -> bool:
        """Whether the point is still there (``remove()`` was not called)."""
        return self._point is not None

    def _register(self, kind: str, hook: Union[Hook, AroundHook], options: HookOptions) -> Handle:
        if self._point is None:
            raise RuntimeError(
                f"this every-module point {self.name!r} was removed; make a new one with "
                f"hookbus.torch.every_module()"
            )
        handle = self.bus.registry.register(kind, literal_pattern(self.name), hook, options)
        self._handles.add(handle)
        return handle

    def pre(self, hook: Hook, /, **options: Unpack[HookOptions]) -> Handle:
        """Before every module call: ``ctx.args`` (assign to replace them).

        Example:
            >>> import hookbus, torch, hookbus.torch
            >>> from torch import nn
            >>> with hookbus.torch.every_module(hookbus.EventBus()) as every:
            ...     _ = every.pre(lambda ctx: print(tuple(ctx.args[0].shape)))
            ...     _ = nn.Linear(3, 1)(torch.ones(2, 3))
            (2, 3)
        """
        return self._register("pre", hook, options)

    def post(self, hook: Hook, /, **options: Unpack[HookOptions]) -> Handle:
        """After every module call: ``ctx.result`` is the output (assign to replace it).

        Example:
            >>> import hookbus, torch, hookbus.torch
            >>> from torch import nn
            >>> with hookbus.torch.every_module(hookbus.EventBus()) as every:
            ...     _ = every.post(lambda ctx: print(ctx.result.isnan().any().item()))
            ...     _ = nn.Linear(3, 1)(torch.ones(2, 3))
            False
        """
        return self._register("post", hook, options)

    def exception(self, hook: Hook, /, **options: Unpack[HookOptions]) -> Handle:
        """When a module call raises: ``ctx.exception`` (it propagates unchanged).

        Example:
            >>> import hookbus, torch, hookbus.torch
            >>> from torch import nn
            >>> with hookbus.torch.every_module(hookbus.EventBus()) as every:
            ...     _ = every.exception(lambda ctx: print("in", type(ctx.target).__name__))
            ...     try:
            ...         nn.Linear(3, 1)(torch.ones(2, 5))
            ...     except RuntimeError:
            ...         print("raised")
            in Linear
            raised
        """
        return self._register("exception", hook, options)

    def around(self, hook: AroundHook, /, **options: Unpack[HookOptions]) -> Handle:
        """A generator spanning every module call (see :meth:`Attachment.around`).

        Example:
            >>> import hookbus, torch, hookbus.torch
            >>> from torch import nn
            >>> def nested(ctx):
            ...     print("enter", type(ctx.target).__name__)
            ...     yield
            ...     print("exit", type(ctx.target).__name__)
            >>> with hookbus.torch.every_module(hookbus.EventBus()) as every:
            ...     _ = every.around(nested)
            ...     _ = nn.Sequential(nn.ReLU())(torch.ones(1))
            enter Sequential
            enter ReLU
            exit ReLU
            exit Sequential
        """
        return self._register("around", hook, options)

    def remove(self) -> None:
        """Remove torch's global hooks and the hooks registered here. Idempotent."""
        point, self._point = self._point, None
        if point is None:
            return
        if _every.get((id(self.bus), self.name)) is self:
            del _every[(id(self.bus), self.name)]
        self.bus.registry.remove_points([point])  # first: no change reaches it
        point.uninstall()
        handles = list(self._handles)
        self._handles = weakref.WeakSet()
        HandleGroup(handles).remove()

    def __repr__(self) -> str:
        state = "active" if self._point is not None else "removed"
        return f"<EveryModule {self.name!r} on {self.bus.name!r} {state}>"
