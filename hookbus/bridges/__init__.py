"""Bridges from a bus to the trainers people use: Hugging Face ``Trainer``, Lightning, mmengine.

:func:`connect` makes a trainer emit the events of :mod:`hookbus.training` on a bus, each at
the moment the grammar names, with the same keywords (``data_batch``, ``outputs["loss"]``,
``metrics``) and the same counters under every trainer. A hook class written against those
events (logging, early stopping, EMA, checkpoint bookkeeping) then runs unchanged under each
trainer and in a loop you write:

    >>> import hookbus
    >>> from hookbus import bridges, training
    >>> class StopAfter:
    ...     hook_events = training.EVENTS
    ...     def __init__(self, steps):
    ...         self.steps = steps
    ...     def after_train_iter(self, runner, *, batch_idx, data_batch, outputs):
    ...         runner.log("train_loss", outputs["loss"])   # the trainer's own logging
    ...         if runner.iter + 1 >= self.steps:
    ...             runner.stop()          # the same call under every trainer
    >>> bus = hookbus.EventBus()
    >>> group = bus.subscribe(StopAfter(steps=3))

and then, with a Hugging Face or Lightning ``Trainer`` or an mmengine ``Runner``::

    with bridges.connect(trainer, bus):
        trainer.train()            # Lightning: trainer.fit(model, ...)

The runner every hook gets is a :class:`TrainerRunner`, the same object for the whole run. How
each trainer's callbacks map to events, and what no bridge can make alike, is in
``docs/hook-classes.md``.

Each framework is imported only when a bridge is connected (``pip install "hookbus[hf]"``,
``"hookbus[lightning]"``, ``"hookbus[mmengine]"``); importing this module imports none.
"""

from __future__ import annotations

from ._connection import TrainerConnection, connect
from ._runner import TrainerRunner

__all__ = ["TrainerConnection", "TrainerRunner", "connect"]
