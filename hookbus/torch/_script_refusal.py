"""TorchScript: a clear refusal instead of an error inside hookbus.

``torch.jit.script`` compiles a module's forward hooks as TorchScript; hookbus's
native hooks are Python it cannot compile ("try blocks aren't supported",
pointing into hookbus). It calls ``module.__prepare_scriptable__()`` on every
module first, so a module with hookbus hooks holds one, as an instance
attribute, that refuses clearly: a :class:`ScriptRefusal`, held by
:func:`hold_script_refusal` and let go by :func:`release_script_refusal`.
"""

from __future__ import annotations

import sys
import threading
import weakref
from typing import Any, Dict, List, Optional, Tuple

from torch import nn

from ._forward_swap import remove_copied_forward
from ._native_hooks import remove_dispatchers

__all__ = ["ScriptRefusal", "hold_script_refusal", "release_script_refusal"]

_refusals: weakref.WeakKeyDictionary[nn.Module, List[Any]] = weakref.WeakKeyDictionary()
_refusals_lock = threading.Lock()  # counts only; no user code runs under it
_PREPARE = "__prepare_scriptable__"


def hold_script_refusal(module: nn.Module) -> None:
    """Make ``torch.jit.script`` refuse ``module`` clearly while hookbus hooks are on it.

    Every call needs a :func:`release_script_refusal`; the last removes the attribute.
    """
    with _refusals_lock:
        held = _refusals.get(module)
        if held is None:
            refusal = ScriptRefusal(module)
            if vars(module).setdefault(_PREPARE, refusal) is not refusal:
                return  # the module has one of its own: left alone
            held = _refusals[module] = [0, refusal]
        held[0] += 1


def release_script_refusal(module: nn.Module) -> None:
    """Undo one :func:`hold_script_refusal`."""
    with _refusals_lock:
        held = _refusals.get(module)
        if held is None:
            return
        held[0] -= 1
        if held[0] <= 0:
            del _refusals[module]
            attributes = vars(module)
            if attributes.get(_PREPARE) is held[1]:
                del attributes[_PREPARE]


def _hookbus_hooks(module: nn.Module) -> List[Tuple[Any, Any]]:
    """``(owner, name)`` of every hookbus native hook in ``module``'s hook dicts."""
    hooked: Any = module
    found: List[Tuple[Any, Any]] = []
    for hooks in (
        hooked._forward_pre_hooks,
        hooked._forward_hooks,
        hooked._backward_pre_hooks,
        hooked._backward_hooks,
    ):
        for hook in list(hooks.values()):
            owner = getattr(hook, "__self__", None)
            if type(owner).__module__.startswith("hookbus."):
                found.append((owner, getattr(owner, "name", None)))
    return found


def _is_live(owner: Any) -> bool:
    # A copy's point is not attached, a copy's capture hook records nothing, a copy's
    # operation site is inert: they remove themselves at their module's first call.
    return (
        bool(getattr(owner, "attached", True))
        and not getattr(owner, "inert", False)
        and callable(getattr(owner, "record", len))
    )


def _scripted_root(module: nn.Module) -> nn.Module:
    """What ``torch.jit.script`` was given (it prepares submodules from there), so
    that the refusal names every hooked module of it; ``module`` if not found."""
    root = module
    frame: Any = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "call_prepare_scriptable_func":
            found = frame.f_locals.get("obj")
            if isinstance(found, nn.Module):
                root = found
        frame = frame.f_back
    return root


class ScriptRefusal:
    """``module.__prepare_scriptable__`` while hookbus hooks are on ``module``.

    Called by ``torch.jit.script`` before it compiles anything. A copied module
    (``copy.deepcopy``, pickle) gets one too: there it removes the copy's inert
    hookbus hooks and itself, and scripting goes on.

    Example:
        >>> import torch, hookbus, hookbus.torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 2))
        >>> with hookbus.torch.capture(model):
        ...     torch.jit.script(model)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        RuntimeError: torch.jit.script cannot compile a model while hookbus hooks are ...
    """

    __slots__ = ("_module",)

    def __init__(self, module: Optional[nn.Module]) -> None:
        self._module = weakref.ref(module) if module is not None else None

    def __call__(self) -> nn.Module:
        module = self._module() if self._module is not None else None
        if module is None:
            raise RuntimeError("hookbus: the module of this TorchScript refusal was collected")
        names: List[str] = []
        subs: List[nn.Module] = list(_scripted_root(module).modules())
        for sub in subs:
            remove_copied_forward(sub)  # a copy's: the original's live swap is no stand-in
            for owner, name in _hookbus_hooks(sub):
                if _is_live(owner):
                    names.append(str(name))
                else:  # a copy's inert hook
                    remove_dispatchers(sub, owner, getattr(owner, "_full_backward_flag", None))
        if names:
            shown = ", ".join(repr(name) for name in dict.fromkeys(names))
            raise RuntimeError(
                f"torch.jit.script cannot compile a model while hookbus hooks are on it: "
                f"TorchScript compiles a module's forward hooks, and hookbus's are Python "
                f"it cannot compile. Modules with hookbus hooks: {shown}. Remove them "
                f"first (handle.remove(), net.detach(), or leave the capture's with "
                f"block), then script the model; hooks put back afterwards do not reach "
                f"the scripted copy"
            )
        attributes = vars(module)
        if attributes.get(_PREPARE) is self:
            del attributes[_PREPARE]  # a copy's: it never had hooks of its own
        own: Any = getattr(type(module), _PREPARE, None)
        return own(module) if own is not None else module

    def __deepcopy__(self, memo: Dict[int, Any]) -> ScriptRefusal:
        # copy.deepcopy of the module memoizes the copy before copying its __dict__.
        copied = memo.get(id(self._module())) if self._module is not None else None
        return ScriptRefusal(copied if isinstance(copied, nn.Module) else None)

    def __reduce_ex__(self, protocol: Any) -> Tuple[Any, ...]:
        return (ScriptRefusal, (self._module() if self._module is not None else None,))
