"""The registration methods of an :class:`~hookbus.torch.Attachment`, one per kind of hook.

Each is a thin, documented entry (with overloads: one name or module gives a
handle, a group selector a group) to the attachment's own registration.
"""

from __future__ import annotations

from typing import Any, Callable, Union, overload

from torch import nn
from typing_extensions import Unpack

from ..adapter import CallContext, Handle, HandleGroup, HookOptions
from ._select import GroupSelector, Selector

__all__ = ["Hook", "ModuleHookMethods"]

Hook = Callable[[CallContext], None]


class ModuleHookMethods:
    """``pre``, ``post``, ``exception``, ``grad``, ``backward_pre`` and ``backward``.

    A base of :class:`~hookbus.torch.Attachment` only, which registers through its
    ``_register``; so that each module stays one concept and short.
    """

    __slots__ = ()

    def _register(self, kind: str, selector: Selector, hook: Hook, options: HookOptions) -> Any:
        raise NotImplementedError  # pragma: no cover - Attachment defines it

    @overload
    def pre(
        self, selector: Union[str, nn.Module], hook: Hook, /, **options: Unpack[HookOptions]
    ) -> Handle: ...
    @overload
    def pre(
        self, selector: GroupSelector, hook: Hook, /, **options: Unpack[HookOptions]
    ) -> HandleGroup: ...
    def pre(self, selector: Selector, hook: Hook, /, **options: Unpack[HookOptions]) -> Any:
        """Forward pre hook: ``ctx.args`` / ``ctx.kwargs`` (kwargs-only calls included).

        Assign ``ctx.args`` (a tuple) or ``ctx.kwargs`` (a dict) to replace them.

        Example:
            >>> import hookbus, torch, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Identity())
            >>> net = hookbus.torch.attach(model, hookbus.EventBus())
            >>> def zero(ctx):
            ...     ctx.args = (torch.zeros_like(ctx.args[0]),)
            >>> _ = net.pre("0", zero)
            >>> model(torch.ones(2))
            tensor([0., 0.])
        """
        return self._register("pre", selector, hook, options)

    @overload
    def post(
        self, selector: Union[str, nn.Module], hook: Hook, /, **options: Unpack[HookOptions]
    ) -> Handle: ...
    @overload
    def post(
        self, selector: GroupSelector, hook: Hook, /, **options: Unpack[HookOptions]
    ) -> HandleGroup: ...
    def post(self, selector: Selector, hook: Hook, /, **options: Unpack[HookOptions]) -> Any:
        """Forward post hook: ``ctx.result`` is the output; assign it to replace it.

        The replacement flows into autograd like any tensor the module returned.

        Example:
            >>> import hookbus, torch, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Identity())
            >>> net = hookbus.torch.attach(model, hookbus.EventBus())
            >>> def double(ctx):
            ...     ctx.result = ctx.result * 2
            >>> _ = net.post(nn.Identity, double)
            >>> model(torch.ones(2))
            tensor([2., 2.])
        """
        return self._register("post", selector, hook, options)

    @overload
    def exception(
        self, selector: Union[str, nn.Module], hook: Hook, /, **options: Unpack[HookOptions]
    ) -> Handle: ...
    @overload
    def exception(
        self, selector: GroupSelector, hook: Hook, /, **options: Unpack[HookOptions]
    ) -> HandleGroup: ...
    def exception(self, selector: Selector, hook: Hook, /, **options: Unpack[HookOptions]) -> Any:
        """Exception hook: runs when the module's forward raises, with ``ctx.exception``.

        It observes: torch re-raises the error after its hooks, so the error
        propagates unchanged (``ctx.recover()`` there warns; recover around the call
        with ``bus.wrap``). Not run under ``torch.compile``.

        Example:
            >>> import hookbus, torch, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Linear(3, 1))
            >>> net = hookbus.torch.attach(model, hookbus.EventBus())
            >>> _ = net.exception("0", lambda ctx: print(ctx.name, tuple(ctx.args[0].shape)))
            >>> try:
            ...     model(torch.ones(2, 5))
            ... except RuntimeError:
            ...     print("raised")
            0 (2, 5)
            raised
        """
        return self._register("exception", selector, hook, options)

    @overload
    def grad(
        self, selector: Union[str, nn.Module], hook: Hook, /, **options: Unpack[HookOptions]
    ) -> Handle: ...
    @overload
    def grad(
        self, selector: GroupSelector, hook: Hook, /, **options: Unpack[HookOptions]
    ) -> HandleGroup: ...
    def grad(self, selector: Selector, hook: Hook, /, **options: Unpack[HookOptions]) -> Any:
        """Gradient hook on the module's outputs: the cheap, safe way to see gradients.

        At backward, ``ctx.result`` is the gradient of one output tensor (assign to
        replace it), ``ctx.data["path"]`` says which tensor of a nested output
        (``()`` for a plain tensor), and ``ctx.call_index`` is that of the forward
        call that made it. Outputs that don't require grad (``torch.no_grad()``)
        are skipped. Safe with in-place ops, unlike :meth:`backward`.

        Example:
            >>> import hookbus, torch, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Linear(2, 1))
            >>> net = hookbus.torch.attach(model, hookbus.EventBus())
            >>> _ = net.grad("0", lambda ctx: print(ctx.name, ctx.result))
            >>> model(torch.ones(1, 2)).sum().backward()
            0 tensor([[1.]])
        """
        return self._register("grad", selector, hook, options)

    @overload
    def backward_pre(
        self, selector: Union[str, nn.Module], hook: Hook, /, **options: Unpack[HookOptions]
    ) -> Handle: ...
    @overload
    def backward_pre(
        self, selector: GroupSelector, hook: Hook, /, **options: Unpack[HookOptions]
    ) -> HandleGroup: ...
    def backward_pre(
        self, selector: Selector, hook: Hook, /, **options: Unpack[HookOptions]
    ) -> Any:
        """Full backward pre hook: ``ctx.args`` is ``grad_output``; assign to replace it.

        Opt-in: full backward hooks cost about as much as the backward pass of a
        small module and fail with in-place ops on the module's output
        (``ReLU(inplace=True)``). Prefer :meth:`grad`.

        Example:
            >>> import hookbus, torch, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Linear(2, 1))
            >>> net = hookbus.torch.attach(model, hookbus.EventBus())
            >>> _ = net.backward_pre("0", lambda ctx: print(ctx.args))
            >>> model(torch.ones(1, 2, requires_grad=True)).sum().backward()
            (tensor([[1.]]),)
        """
        return self._register("backward_pre", selector, hook, options)

    @overload
    def backward(
        self, selector: Union[str, nn.Module], hook: Hook, /, **options: Unpack[HookOptions]
    ) -> Handle: ...
    @overload
    def backward(
        self, selector: GroupSelector, hook: Hook, /, **options: Unpack[HookOptions]
    ) -> HandleGroup: ...
    def backward(self, selector: Selector, hook: Hook, /, **options: Unpack[HookOptions]) -> Any:
        """Full backward hook: ``ctx.args`` is ``grad_output``, ``ctx.result`` ``grad_input``.

        Assign ``ctx.result`` (a tuple of the same length) to replace ``grad_input``.
        Opt-in, with the costs and limits of :meth:`backward_pre`.

        Example:
            >>> import hookbus, torch, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Sequential(nn.Linear(2, 1))
            >>> net = hookbus.torch.attach(model, hookbus.EventBus())
            >>> _ = net.backward("0", lambda ctx: print(ctx.result))
            >>> x = torch.ones(1, 2, requires_grad=True)
            >>> model(x).sum().backward()  # doctest: +ELLIPSIS
            (tensor([[...]]),)
        """
        return self._register("backward", selector, hook, options)
