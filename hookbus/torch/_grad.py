"""Gradient hooks on tensors: :func:`on_grad`, :func:`on_accumulated_grad`, and the one
tensor hook hookbus installs.

Three features hook gradients: :func:`on_grad` on any tensor, the ``grad``
hooks of a module point on its outputs, and a capture with ``grads=True``.
Each registers a :class:`GradHook` per tensor, which hands the gradient to a
function of the feature's own; :func:`hook_output_grads` puts them on every
tensor of a module's output and keeps their handles for removal.
"""

from __future__ import annotations

import functools
import itertools
import weakref
from typing import Any, Callable, List, Optional

import torch
from torch.utils.hooks import RemovableHandle

from ..adapter import CallContext, Removable, reject_returned
from ._tree import Path, iter_tensors

__all__ = [
    "Deliver",
    "GradHandle",
    "GradHook",
    "hook_output_grads",
    "on_accumulated_grad",
    "on_grad",
]

Deliver = Callable[[torch.Tensor, int, Path], Optional[torch.Tensor]]
"""``deliver(grad, call_index, path)``: what a :class:`GradHook` hands a gradient to.

It returns the gradient to flow on instead, or ``None`` to leave it unchanged.
"""


class GradHandle(Removable):
    """Removes a gradient hook added by :func:`on_grad`; idempotent, a context manager.

    ``active`` is ``True`` while the hook is installed: until :meth:`remove`, or until
    the tensor's autograd graph is gone.

    Example:
        >>> import torch, hookbus.torch
        >>> y = torch.ones(2, requires_grad=True) * 2
        >>> handle = hookbus.torch.on_grad(y, print)
        >>> handle.active
        True
        >>> handle.remove()
        >>> handle.active
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
    under ``torch.no_grad()``, say) is refused with a ``ValueError``, as torch's
    ``Tensor.register_hook`` refuses it: no gradient would ever reach the hook.
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
        raise ValueError(
            f"on_grad() needs a tensor that requires grad, got a "
            f"{'leaf' if tensor.is_leaf else 'non-leaf'} tensor of shape "
            f"{tuple(tensor.shape)} with requires_grad=False (made under torch.no_grad() "
            f"or inference_mode, or detached?): no gradient would ever reach the hook"
        )
    register: Any = tensor.register_hook  # untyped in torch  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    deliver = functools.partial(_run_on_grad, hook, name, weakref.ref(tensor))
    return GradHandle(register(GradHook(deliver, 0, ())))


def on_accumulated_grad(
    parameter: torch.Tensor, hook: Callable[[CallContext], None], *, name: str = "parameter"
) -> GradHandle:
    """Call ``hook(ctx)`` once ``parameter.grad`` holds this backward's accumulated gradient.

    torch's ``register_post_accumulate_grad_hook``, behind hookbus's hook shape: for
    per-parameter optimisers (an update inside backward) and gradient statistics.
    ``ctx.result`` is ``parameter.grad``; assigning it replaces ``parameter.grad``.
    A hook that sets ``parameter.grad`` itself (an optimizer's ``step()`` and
    ``zero_grad()`` inside backward) keeps what it set, as with torch's own hook.
    ``ctx.target`` is the parameter, ``ctx.phase`` ``"accumulated_grad"``, and
    ``ctx.call_index`` counts the backward passes that reached it. A leaf tensor
    that requires grad is needed (torch accumulates gradients into leaves only).

    Example:
        >>> import torch, hookbus.torch
        >>> weight = torch.nn.Parameter(torch.ones(2))
        >>> def clip(ctx):
        ...     ctx.result = ctx.result.clamp(max=1.0)
        >>> handle = hookbus.torch.on_accumulated_grad(weight, clip)
        >>> (weight * 5).sum().backward()
        >>> weight.grad
        tensor([1., 1.])
        >>> handle.remove()
    """
    if not isinstance(parameter, torch.Tensor):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(
            f"on_accumulated_grad() needs a torch.Tensor (a parameter), got "
            f"{type(parameter).__name__}"
        )
    if not callable(hook):
        raise TypeError(
            f"on_accumulated_grad() needs a callable hook(ctx), got {type(hook).__name__}"
        )
    if not (parameter.is_leaf and parameter.requires_grad):
        raise ValueError(
            f"on_accumulated_grad() needs a leaf tensor that requires grad (a parameter), "
            f"got a {'non-leaf' if not parameter.is_leaf else 'leaf'} tensor of shape "
            f"{tuple(parameter.shape)} with requires_grad={parameter.requires_grad}; for "
            f"the gradient of any tensor, use on_grad()"
        )
    calls = itertools.count()

    def accumulated(tensor: torch.Tensor) -> None:
        ctx = CallContext(name, tensor, (), {}, next(calls), "accumulated_grad")
        handed = ctx.result = tensor.grad
        returned: Any = hook(ctx)  # type: ignore[func-returns-value]  # checked: None
        if returned is not None:
            reject_returned(hook, ctx, returned)
        # Compared with the gradient handed to the hook, not the current one: a hook
        # that set parameter.grad itself (an optimizer's zero_grad() or step inside
        # backward) keeps what it set.
        if ctx.result is not handed:
            tensor.grad = ctx.result

    register: Any = parameter.register_post_accumulate_grad_hook  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    return GradHandle(register(accumulated))


def _run_on_grad(
    hook: Callable[[CallContext], Any],  # returns None; anything else is refused
    name: str,
    tensor: Callable[[], Optional[torch.Tensor]],
    grad: torch.Tensor,
    call_index: int,
    path: Path,
) -> Optional[torch.Tensor]:
    """The :data:`Deliver` of :func:`on_grad`: one user hook, the tensor held weakly."""
    ctx = CallContext(name, tensor(), (), {}, call_index, "grad")
    ctx.result = grad
    returned: Any = hook(ctx)
    if returned is not None:
        reject_returned(hook, ctx, returned)
    result: Optional[torch.Tensor] = ctx.result
    return None if result is grad else result


class GradHook:
    """The tensor hook of one tensor: hands its gradient to ``deliver``.

    torch calls it with the gradient at backward; it calls
    ``deliver(grad, call_index, path)`` with the index of the forward call that
    made the tensor and the tensor's place in that call's output (``()`` for the
    output itself), and returns what ``deliver`` returns (``None``: the gradient
    flows on unchanged). The autograd graph holds it, so it holds no tensor, and
    ``deliver`` holds no module or activation but weakly: a graph kept longer
    keeps neither alive.

    Example:
        >>> import torch
        >>> x = torch.ones(2, requires_grad=True)
        >>> def twice(grad, call_index, path):
        ...     return grad * 2
        >>> _ = x.register_hook(GradHook(twice, 0, ()))
        >>> (x * 3).sum().backward()
        >>> x.grad
        tensor([6., 6.])
    """

    __slots__ = ("call_index", "deliver", "path")

    def __init__(self, deliver: Deliver, call_index: int, path: Path) -> None:
        self.deliver = deliver
        self.call_index = call_index
        self.path = path

    def __call__(self, grad: torch.Tensor) -> Optional[torch.Tensor]:
        return self.deliver(grad, self.call_index, self.path)


def hook_output_grads(
    output: Any, deliver: Deliver, call_index: int, handles: List[RemovableHandle]
) -> List[RemovableHandle]:
    """Put a :class:`GradHook` on each tensor of ``output`` that requires grad.

    Their handles go into ``handles``, which is returned: at each power of two
    from 256 on, as a new list without the handles whose graph is gone already
    (the caller keeps the returned list).

    Example:
        >>> import torch
        >>> out = (torch.ones(1, requires_grad=True) * 2, torch.zeros(1))
        >>> seen = []
        >>> def note(grad, call_index, path):
        ...     seen.append(path)
        >>> handles = hook_output_grads(out, note, 0, [])
        >>> out[0].backward()
        >>> len(handles), seen
        (1, [(0,)])
    """
    for path, tensor in iter_tensors(output):
        if tensor.requires_grad:
            register: Any = tensor.register_hook  # untyped in torch  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            handles.append(register(GradHook(deliver, call_index, path)))
            count = len(handles)
            if count >= 256 and count & (count - 1) == 0:
                handles = [handle for handle in handles if _graph_alive(handle)]
    return handles


def _graph_alive(handle: RemovableHandle) -> bool:
    """Whether the hook dict a torch ``RemovableHandle`` points into still exists."""
    hooks_ref: Any = handle.hooks_dict_ref  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    return hooks_ref() is not None
