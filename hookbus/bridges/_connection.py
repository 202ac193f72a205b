"""Connecting a bus to a trainer, and the connection that undoes it."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Callable, Optional, Type

import hookbus

from . import _hf, _lightning, _mmengine
from ._runner import TrainerRunner

_BRIDGES = (_hf, _lightning, _mmengine)


class TrainerConnection:
    """A bus connected to a trainer by :func:`connect`: its runner, and how to disconnect.

    ``runner`` is the :class:`TrainerRunner` every hook gets; :meth:`disconnect` takes the
    bridge off the trainer (its callback or hook, and every method it wrapped); a connection
    is a context manager that disconnects when the block ends.

    Example:
        >>> import tempfile
        >>> import transformers
        >>> import hookbus
        >>> from hookbus import bridges
        >>> folder = tempfile.mkdtemp()
        >>> args = transformers.TrainingArguments(folder, use_cpu=True, report_to=[])
        >>> model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        ...     n_layer=1, n_embd=8, n_head=2, vocab_size=16, n_positions=8))
        >>> trainer = transformers.Trainer(model=model, args=args)
        >>> bus = hookbus.EventBus()
        >>> with bridges.connect(trainer, bus) as connection:
        ...     connection.runner.kind, connection.connected, "train" in vars(trainer)
        ('hf', True, True)
        >>> connection.connected, "train" in vars(trainer)   # the wrapper is gone
        (False, False)
    """

    def __init__(
        self, trainer: Any, bus: hookbus.EventBus, runner: TrainerRunner, undo: Callable[[], None]
    ) -> None:
        self.trainer = trainer
        self.bus = bus
        self.runner = runner
        self._undo: Optional[Callable[[], None]] = undo

    @property
    def connected(self) -> bool:
        """Whether the bridge is still on the trainer."""
        return self._undo is not None

    def disconnect(self) -> None:
        """Take the bridge off the trainer; the trainer's events no longer reach the bus.

        Idempotent: a second call does nothing.
        """
        undo, self._undo = self._undo, None
        if undo is not None:
            undo()

    def __enter__(self) -> TrainerConnection:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self.disconnect()

    def __repr__(self) -> str:
        state = "connected" if self.connected else "disconnected"
        return f"<TrainerConnection {self.runner.kind} bus={self.bus.name!r} {state}>"


def connect(trainer: Any, bus: Optional[hookbus.EventBus] = None) -> TrainerConnection:
    """Connect ``bus`` to ``trainer``, so that it emits :mod:`hookbus.training`'s events.

    ``trainer`` is a Hugging Face ``transformers.Trainer``, a Lightning ``Trainer`` or an
    mmengine ``Runner``; ``bus`` defaults to :data:`hookbus.default_bus`. The bridge adds its
    callback (or hook) to the trainer, and wraps the trainer's own methods where the trainer
    has no callback for a moment (per instance; see ``docs/hook-classes.md``). Call it before
    ``trainer.train()`` / ``trainer.fit(...)``; the returned :class:`TrainerConnection` holds
    the runner hooks get, and disconnects (``connection.disconnect()``, or a ``with`` block).

    A second connection of the same bus to the same trainer is refused (every event would
    reach each hook twice), and so is anything that is not one of those trainers.

    Example:
        >>> import hookbus
        >>> from hookbus import bridges
        >>> bridges.connect(object(), hookbus.EventBus())
        Traceback (most recent call last):
        ...
        TypeError: connect() takes a transformers.Trainer, ... or an mmengine Runner, got object
    """
    if bus is None:
        bus = hookbus.default_bus
    elif not isinstance(bus, hookbus.EventBus):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(
            f"connect() takes a hookbus.EventBus or None as bus, got {type(bus).__name__}"
        )
    for bridge in _BRIDGES:
        if bridge.accepts(trainer):
            if any(relay.bus is bus for relay in bridge.relays_on(trainer)):
                raise ValueError(
                    f"connect(): bus {bus.name!r} is already connected to this "
                    f"{type(trainer).__name__}; disconnect that connection first "
                    "(connection.disconnect()), or connect another bus"
                )
            relay, undo = bridge.install(trainer, bus)
            return TrainerConnection(trainer, bus, relay.runner, undo)
    raise TypeError(
        "connect() takes a transformers.Trainer, a lightning.pytorch.Trainer or an mmengine "
        f"Runner, got {type(trainer).__name__}"
    )
