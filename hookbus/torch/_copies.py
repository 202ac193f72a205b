"""Copies of hooked models: what a deepcopy, pickle or ``torch.save`` gets instead of hooks.

Following torch's stance that hooks are not part of a model's state, a copy of
a module carries no bus hook. A module's hook dicts hold hookbus's native
dispatchers, bound methods of its :class:`~hookbus.torch._point.ModulePoint`;
copying or pickling the module copies them, and the point then copies itself
as an *inert point*: one on a private bus with no hooks, whose only action, at
the module's first call of a dispatcher (forward, or backward if hookbus had
only backward hooks there), is to remove its dispatchers from the copy's hook
dicts and put back torch's full-backward mark. From then on the copy
runs at native speed, and its hook dicts are those of a module never hooked.

Why not simply leave no dispatcher in the copy: ``copy.deepcopy`` copies a
bound method as the same function bound to a copy of its object, and pickle as
its object and method name, so a copy's hook dicts always hold *some* method of
*some* point. The inert point is the point that does nothing. A capture's own
hooks (``_recorders.Recorder``) copy themselves the same way, as inert recorders
that call :func:`remove_dispatchers` at their first call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from torch import nn

from ..adapter import CallContext, EventBus, Handle

if TYPE_CHECKING:
    from ._point import ModulePoint

__all__ = ["inert_point", "remove_dispatchers"]

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
    from ._point import ModulePoint

    placeholder = nn.Identity()  # the point holds its module weakly: this one dies at once
    point = ModulePoint(_NO_HOOKS, name, placeholder)
    point.attached = False
    point._full_backward_flag = full_backward_flag

    def remove(ctx: CallContext) -> None:
        remove_dispatchers(ctx.target, point, full_backward_flag)

    # The dispatch loops run "hooks" from these: a handle for the slow loops (the
    # backward phases), the bare callable for the fast ones (forward).
    point._pre = point._post = point._backward_pre = point._backward = (
        Handle.plain(_NO_HOOKS, "post", name, remove),
    )
    point._pre_fast = point._post_fast = point._post_alone = (remove,)
    return point


def remove_dispatchers(module: nn.Module, owner: Any, full_backward_flag: Optional[bool]) -> None:
    """Remove from ``module`` every native hook that is a method of ``owner``.

    Safe during a forward call: torch iterates over copies of the hook dicts, except
    when forward raised, and then this is not called (only post hooks run there,
    and an inert point's post dispatcher passes errors through untouched).
    """
    hooked: Any = module  # torch leaves the hook dicts partly untyped
    dicts = (
        hooked._forward_pre_hooks,
        hooked._forward_hooks,
        hooked._backward_pre_hooks,
        hooked._backward_hooks,
    )
    removed_backward = False
    for position, hooks in enumerate(dicts):
        mine = [key for key, hook in hooks.items() if getattr(hook, "__self__", None) is owner]
        for key in mine:
            del hooks[key]
            hooked._forward_pre_hooks_with_kwargs.pop(key, None)
            hooked._forward_hooks_with_kwargs.pop(key, None)
            hooked._forward_hooks_always_called.pop(key, None)
            removed_backward = removed_backward or position >= 2
    if removed_backward and not (hooked._backward_hooks or hooked._backward_pre_hooks):
        module._is_full_backward_hook = full_backward_flag
