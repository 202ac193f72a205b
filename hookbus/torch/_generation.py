"""Generation steps: which top-level forward of a model is running (nnsight's ``tracer.iter``).

A ``generate()`` loop calls the model once per step: the prompt first (step 0),
then once per new token. ``ctx.call_index`` counts a module's calls for as long
as it is attached, across generations, so "only on newly generated tokens" took
bookkeeping by hand. :func:`steps` does it: one native forward pre hook on the
model counts its calls, from 0 at the start of the block and again at the start
of every ``generate()`` inside it, and :meth:`Steps.only` makes any hook run
only on some steps.

``generate`` is reset by an instance attribute shadowing the model's method for
the block (restored on exit, even if the block raised), as
:class:`~hookbus.torch._forward_swap.ForwardSwap` does for ``forward``; a copy of
the model made inside the block gets a stand-in that removes itself at its
first call, and so does the counting hook (:class:`_StepCounter`), as a
capture's hooks do.
"""

from __future__ import annotations

import sys
import types
import weakref
from typing import Any, Callable, Dict, Optional, Tuple

from torch import nn

from ..adapter import CallContext, Removable
from ._call_starts import add_call_start, remove_call_start
from ._native_hooks import remove_dispatchers
from ._unwrap import bare_model, unwrap

__all__ = ["Steps", "steps"]


def steps(model: nn.Module) -> Steps:
    """Count the top-level forwards of ``model`` while the block runs: ``index`` is the step.

    ``index`` is ``-1`` before the first forward, ``0`` during the first (a
    generation's prompt), ``1`` during the next (the first generated token's),
    and so on; it goes back to ``-1`` at the start of each ``model.generate()``
    called in the block. Read it from any hook, or wrap a hook with
    :meth:`Steps.only`: every hook of a call reads that call's step, the model's
    pre hooks (registered before the block or in it) and ``every_module``'s
    included. Only calls of the model itself count (not of its submodules); under a
    see-through wrapper (DDP, PEFT, ...), those of the model it wraps, which PEFT's
    ``generate`` calls. One native forward pre hook on the model, first of its pre
    hooks; removed on exit, with the ``generate`` reset, even if the block raised
    (:meth:`Steps.remove` without ``with``).

    Example:
        >>> import torch, hookbus, hookbus.torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(2, 2))
        >>> bus = hookbus.EventBus()
        >>> net = hookbus.torch.attach(model, bus)
        >>> with hookbus.torch.steps(model) as step:
        ...     _ = bus.post("0", step.only(lambda ctx: print("step", step.index), start=1))
        ...     for _ in range(3):
        ...         _ = model(torch.ones(1, 2))
        step 1
        step 2
    """
    return Steps(model)


class Steps(Removable):  # remove(), and ``with`` removes on exit
    """The step counter of one model while its block runs: what :func:`steps` returns.

    ``index`` is the step now running; :meth:`only` wraps a hook to run on some
    steps only; :meth:`remove` (or the end of its ``with`` block) stops counting.

    Example:
        >>> import torch, hookbus.torch
        >>> from torch import nn
        >>> model = nn.Linear(1, 1)
        >>> with hookbus.torch.steps(model) as step:
        ...     _ = model(torch.ones(1)); _ = model(torch.ones(1))
        >>> isinstance(step, hookbus.torch.Steps), step.index
        (True, 1)
    """

    def __init__(self, model: nn.Module) -> None:
        if not isinstance(model, nn.Module):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"steps() needs a torch.nn.Module, got {type(model).__name__}")
        #: The step now running: the index of the model's current forward since the
        #: block (or the last ``generate()`` in it) began; ``-1`` before the first.
        self.index = -1
        root = bare_model(unwrap(model))  # PEFT calls the model it adapts, not itself
        self._model: Callable[[], Optional[nn.Module]] = weakref.ref(root)
        self._active = True
        # The frame of the call counted by an every-module pre dispatcher, before the
        # counting hook ran (see _call_starts): held, not its id, so that a call that
        # never reached the hook (a pre hook raised) can match no other; the hook or
        # the next call lets go of it.
        self._started: Any = None
        counter = _StepCounter(self)
        self._handle = root.register_forward_pre_hook(counter.on_forward, prepend=True)
        add_call_start(root, self._start)
        self._generate: Any = None
        self._own_generate: Any = None
        if callable(getattr(root, "generate", None)):
            self._reset_at_generate(root)

    def _start(self, frame: Any) -> None:
        """A call of the model starts, running its hooks from ``frame``: count it once."""
        if self._started is not frame:
            self._started = frame
            self.index += 1

    def _counted(self, frame: Any) -> None:
        """The counting hook runs in the call whose hooks run from ``frame``."""
        started, self._started = self._started, None
        if started is not frame:  # not counted at its start
            self.index += 1

    def _reset_at_generate(self, root: nn.Module) -> None:
        attributes = vars(root)
        own = attributes.get("generate")  # a user's own (or an outer steps block's)
        self._own_generate = own
        ref = self._model
        counter = self

        def generate(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
            if self is not ref():  # a copy made in the block: it removes this stand-in
                attributes = vars(self)
                if getattr(attributes.get("generate"), "__func__", None) is generate:
                    del attributes["generate"]
                return getattr(self, "generate")(*args, **kwargs)  # noqa: B009 - untyped
            if counter._active:
                counter.index = -1
            if own is not None:
                return own(*args, **kwargs)
            return getattr(type(self), "generate")(self, *args, **kwargs)  # noqa: B009

        generate.__name__ = "generate"  # pickle stores a bound method as getattr(obj, name)
        generate.__wrapped__ = type(root).generate  # type: ignore[attr-defined]
        self._generate = types.MethodType(generate, root)
        attributes["generate"] = self._generate

    def only(
        self, hook: Callable[[CallContext], None], start: int = 0, stop: Optional[int] = None
    ) -> Callable[[CallContext], None]:
        """``hook``, run only while ``start <= index < stop`` (``stop=None``: no end).

        ``start=1`` is nnsight's ``tracer.iter[1:]``: every forward after a
        generation's prompt, that is, on the generated tokens.

        Example:
            >>> import torch, hookbus.torch
            >>> from torch import nn
            >>> model = nn.Linear(1, 1)
            >>> with hookbus.torch.steps(model) as step:
            ...     hook = step.only(lambda ctx: print("ran"), start=1, stop=2)
            ...     step.index = 1
            ...     hook(None)
            ...     step.index = 2
            ...     hook(None)
            ran
        """
        if not callable(hook):
            raise TypeError(
                f"steps.only() takes a callable hook, got {type(hook).__name__}: pass the "
                f"function itself, as to bus.post"
            )
        checked: Tuple[Tuple[str, object], ...] = (("start", start), ("stop", stop))
        for option, value in checked:
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):  # pyright: ignore[reportUnnecessaryIsInstance]
                raise TypeError(
                    f"steps.only() option {option}= takes an int"
                    f"{' or None' if option == 'stop' else ''}, got {type(value).__name__}"
                )
            if value is not None and value < 0:
                # Not Python's "from the end": how many steps a generation takes is
                # not known while it runs.
                raise ValueError(
                    f"steps.only() option {option}= takes an int >= 0, got {value}: steps "
                    f"count from 0 (the prompt), and a count from the end is not known "
                    f"while generating"
                )

        def on_steps(ctx: CallContext) -> None:
            if not self._active:  # its index stopped counting: it would run on any step
                raise RuntimeError(
                    "a hook wrapped by steps.only() ran after its steps() block had "
                    "ended; remove the hook with the block (register it inside, with "
                    "'with net.post(...):'), or open a new steps() block and wrap the "
                    "hook with its only()"
                )
            index = self.index
            if index >= start and (stop is None or index < stop):
                hook(ctx)

        on_steps.__name__ = f"only_steps({getattr(hook, '__name__', 'hook')})"
        on_steps.__qualname__ = on_steps.__name__
        return on_steps

    def __enter__(self) -> Steps:
        if not self._active:  # its hook is gone: it would never count again
            raise RuntimeError(f"this steps() block ({self!r}) has ended; open a new one")
        return self

    def remove(self) -> None:
        """Stop counting and put ``generate`` back; idempotent."""
        self._active = False
        self._handle.remove()
        self._started = None
        root = self._model()
        if root is not None:
            remove_call_start(root, self._start)
        bound, self._generate = self._generate, None
        if root is None or bound is None:
            return
        attributes = vars(root)
        if attributes.get("generate") is bound:  # else a later block shadows ours: it stays
            if self._own_generate is not None:  # inert, and that block restores it
                attributes["generate"] = self._own_generate
            else:
                del attributes["generate"]

    def __repr__(self) -> str:
        state = f"step {self.index}" if self._active else "ended"
        return f"<Steps {state}>"


class _StepCounter:
    """The native forward pre hook of :class:`Steps`; a copy of it is inert and removes itself."""

    __slots__ = ("steps",)

    def __init__(self, counter: Optional[Steps]) -> None:
        self.steps = counter

    def on_forward(self, module: nn.Module, args: Tuple[Any, ...]) -> None:
        counter = self.steps
        if counter is None:  # in a copied module's hook dict
            remove_dispatchers(module, self, None)
            return
        counter._counted(sys._getframe(1))  # torch's frame that runs the call's hooks

    def __reduce_ex__(self, protocol: Any) -> Tuple[Any, ...]:
        return (_StepCounter, (None,))

    def __deepcopy__(self, memo: Dict[int, Any]) -> _StepCounter:
        return _StepCounter(None)
