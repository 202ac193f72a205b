"""Taking hookbus's native hooks out of a module's hook dicts.

A copied or pickled module (``copy.deepcopy``, ``torch.save``, ``mp.spawn``)
carries copies of the native hooks in its hook dicts: a module point's
dispatchers, a capture's hooks, a steps counter, an operation site's. Each
copies itself as an inert stand-in that, at its first call, removes every
native hook of its owner with :func:`remove_dispatchers`; the TorchScript
refusal removes them the same way before scripting a copy.
"""

from __future__ import annotations

from typing import Any, Optional

from torch import nn

__all__ = ["remove_dispatchers"]


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
