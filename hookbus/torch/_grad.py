"""Gradient hooks on any tensor, leaf or not, with the same ``hook(ctx)`` shape."""

from __future__ import annotations

import weakref
from typing import Any, Callable, Optional

import torch
from torch.utils.hooks import RemovableHandle

from ..adapter import CallContext, Removable, reject_returned

__all__ = ["GradHandle", "handle_alive", "on_grad"]


class GradHandle(Removable):
    """Removes a gradient hook added by :func:`on_grad`; idempotent, a context manager.

    ``active`` is ``False`` from the start when the tensor did not require grad
    (under ``torch.no_grad()``, say): the hook was skipped, not an error.

    Example:
        >>> import torch, hookbus.torch
        >>> with torch.no_grad():
        ...     y = torch.ones(2, requires_grad=True) * 2
        >>> hookbus.torch.on_grad(y, print).active
        False
    """

    __slots__ = ("_handle",)

    def __init__(self, handle: Optional[RemovableHandle]) -> None:
        self._handle = handle

    @property
    def active(self) -> bool:
        """Whether the hook is installed (and its tensor's graph still alive)."""
        handle = self._handle
        if handle is None:
            return False
        hooks_ref: Any = handle.hooks_dict_ref  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        hooks = hooks_ref()
        return hooks is not None and handle.id in hooks

    def remove(self) -> None:
        """Remove the hook; calling it again does nothing."""
        handle, self._handle = self._handle, None
        if handle is not None:
            handle.remove()

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(
            "a GradHandle cannot be pickled or copied: it removes a hook from an autograd "
            "graph that lives in this process only. Keep it where the tensor is, and "
            "pickle the gradients you collected instead"
        )

    def __repr__(self) -> str:
        return f"<GradHandle {'active' if self.active else 'removed'}>"


def on_grad(
    tensor: torch.Tensor, hook: Callable[[CallContext], None], *, name: str = "tensor"
) -> GradHandle:
    """Call ``hook(ctx)`` with the gradient of ``tensor`` in ``ctx.result``, at backward.

    Works on leaf and non-leaf tensors without ``retain_grad()``. Assign
    ``ctx.result`` to replace the gradient that flows on; returning a value is an
    error, as for every hookbus hook. A tensor that does not require grad (made
    under ``torch.no_grad()``) is skipped: the returned handle is inactive.
    ``ctx.name`` is ``name``, ``ctx.phase`` is ``"grad"``, ``ctx.target`` the tensor
    (while it is alive; the hook holds it weakly).

    Example:
        >>> import torch, hookbus.torch
        >>> x = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> y = x * 3
        >>> def double(ctx):
        ...     ctx.result = ctx.result * 2
        >>> handle = hookbus.torch.on_grad(y, double)
        >>> y.sum().backward()
        >>> x.grad
        tensor([6., 6.])
    """
    if not isinstance(tensor, torch.Tensor):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(f"on_grad() needs a torch.Tensor, got {type(tensor).__name__}")
    if not callable(hook):
        raise TypeError(
            f"on_grad() needs a callable hook(ctx), got {type(hook).__name__} {hook!r}"
        )
    if not tensor.requires_grad:
        return GradHandle(None)
    register: Any = tensor.register_hook  # untyped in torch  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    return GradHandle(register(_TensorGradHook(tensor, hook, name)))


class _TensorGradHook:
    __slots__ = ("hook", "name", "tensor")

    def __init__(
        self, tensor: torch.Tensor, hook: Callable[[CallContext], None], name: str
    ) -> None:
        self.tensor = weakref.ref(tensor)  # the graph holds this hook: never the tensor
        self.hook = hook
        self.name = name

    def __call__(self, grad: torch.Tensor) -> Optional[torch.Tensor]:
        ctx = CallContext(self.name, self.tensor(), (), {}, 0, "grad")
        ctx.result = grad
        returned: Any = self.hook(ctx)
        if returned is not None:
            reject_returned(self.hook, ctx, returned)
        result: Optional[torch.Tensor] = ctx.result
        return None if result is grad else result


def handle_alive(handle: RemovableHandle) -> bool:
    """Whether the hook dict a torch ``RemovableHandle`` points into still exists."""
    hooks_ref: Any = handle.hooks_dict_ref  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    return hooks_ref() is not None
