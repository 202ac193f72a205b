"""Conventional training-loop event names, mmengine's, plus ``on_exception``.

These are names and a calling convention, not a trainer: a loop you write emits
them on a bus, and hook classes (checkpointing, logging, EMA...) listen to them,
so that hooks written for one loop work with another. Nothing here imports a
framework. Each constant's value is its lower-case name, which is also the name of
the method that handles it, so a hook class can declare ``hook_events = EVENTS``
and just define the methods it needs (see :meth:`hookbus.EventBus.subscribe`).

The first argument is always the loop itself (mmengine's ``runner``), whatever
object your loop is, so hooks read its state (``runner.model``, ``runner.epoch``,
``runner.iter``...). The other arguments are keywords, listed per event.

One run emits, in order (``[...]`` repeats, ``(...)`` may be skipped)::

    before_run
      (after_load_checkpoint)
      before_train
        [before_train_epoch
          [before_train_iter  after_train_iter]
         after_train_epoch
         (before_val  before_val_epoch  [before_val_iter  after_val_iter]
          after_val_epoch  after_val)
         (before_save_checkpoint)]
      after_train
      (before_test ... after_test, like validation)
    after_run

and ``on_exception``, instead of the rest, when the run raises. A validation or
test pass run on its own is a run too: ``before_run``, the pass, ``after_run``.

The counters a runner offers, and that the trainer bridges of
:mod:`hookbus.bridges` keep alike:

* ``runner.epoch``: the index, from 0, of the training epoch that runs. Between
  two epochs (the validation and checkpoint after an epoch, ``after_train``,
  ``after_run``) it still names the epoch that ran last: the validation after the
  first epoch reads 0.
* ``runner.iter``: how many training iterations finished before the current one,
  since training began (a resumed run goes on counting): 0 in the first
  ``after_train_iter``, and between iterations the number run so far. An iteration
  is one batch of the training data; with gradient accumulation, several make one
  optimizer step.
* ``batch_idx`` (a keyword of the ``*_iter`` events): the index, from 0, of the
  batch in the current epoch's data, or in the current validation or test pass.

Example:
    >>> import hookbus
    >>> from hookbus import training
    >>> class PrintHook:
    ...     hook_events = training.EVENTS
    ...     def after_train_iter(self, runner, *, batch_idx, data_batch=None, outputs=None):
    ...         print(f"iter {batch_idx}: loss {outputs['loss']}")
    >>> bus = hookbus.EventBus()
    >>> _ = bus.subscribe(PrintHook())
    >>> for i, loss in enumerate([0.9, 0.5]):
    ...     bus.emit(training.AFTER_TRAIN_ITER, None, batch_idx=i, outputs={"loss": loss})
    iter 0: loss 0.9
    iter 1: loss 0.5
"""

from __future__ import annotations

from typing import Final, Literal, Tuple

__all__ = [
    "AFTER_LOAD_CHECKPOINT",
    "AFTER_RUN",
    "AFTER_TEST",
    "AFTER_TEST_EPOCH",
    "AFTER_TEST_ITER",
    "AFTER_TRAIN",
    "AFTER_TRAIN_EPOCH",
    "AFTER_TRAIN_ITER",
    "AFTER_VAL",
    "AFTER_VAL_EPOCH",
    "AFTER_VAL_ITER",
    "BEFORE_RUN",
    "BEFORE_SAVE_CHECKPOINT",
    "BEFORE_TEST",
    "BEFORE_TEST_EPOCH",
    "BEFORE_TEST_ITER",
    "BEFORE_TRAIN",
    "BEFORE_TRAIN_EPOCH",
    "BEFORE_TRAIN_ITER",
    "BEFORE_VAL",
    "BEFORE_VAL_EPOCH",
    "BEFORE_VAL_ITER",
    "EVENTS",
    "ON_EXCEPTION",
    "TEST_EVENTS",
    "TRAIN_EVENTS",
    "VAL_EVENTS",
    "TrainingEvent",
]

TrainingEvent = Literal[
    "before_run",
    "after_run",
    "before_train",
    "after_train",
    "before_train_epoch",
    "after_train_epoch",
    "before_train_iter",
    "after_train_iter",
    "before_val",
    "after_val",
    "before_val_epoch",
    "after_val_epoch",
    "before_val_iter",
    "after_val_iter",
    "before_test",
    "after_test",
    "before_test_epoch",
    "after_test_epoch",
    "before_test_iter",
    "after_test_iter",
    "before_save_checkpoint",
    "after_load_checkpoint",
    "on_exception",
]
"""The type of every name here, for loops and hooks that want their names checked."""

# --- the run ----------------------------------------------------------------------

BEFORE_RUN: Final = "before_run"
"""Once, before anything else: ``(runner)``."""
AFTER_RUN: Final = "after_run"
"""Once, after everything else, when the run did not raise: ``(runner)``."""
ON_EXCEPTION: Final = "on_exception"
"""When the run raises, before the error propagates: ``(runner, *, exception)``.

Instead of the events the run did not reach; the error itself, re-raised unchanged
after the hooks ran (under the bridges, a hook's own error here is logged and noted on it, not
raised in its place). mmengine has no such stage (its bridge sends it all the same);
hooks that must flush or save state on a crash (a logger closing its file, an
emergency checkpoint) listen to it."""

# --- training ---------------------------------------------------------------------

BEFORE_TRAIN: Final = "before_train"
"""Before the first training epoch: ``(runner)``."""
AFTER_TRAIN: Final = "after_train"
"""After the last training epoch: ``(runner)``."""
BEFORE_TRAIN_EPOCH: Final = "before_train_epoch"
"""At the start of each training epoch: ``(runner)``."""
AFTER_TRAIN_EPOCH: Final = "after_train_epoch"
"""At the end of each training epoch: ``(runner)``."""
BEFORE_TRAIN_ITER: Final = "before_train_iter"
"""Before each training step: ``(runner, *, batch_idx, data_batch)``."""
AFTER_TRAIN_ITER: Final = "after_train_iter"
"""After each training step: ``(runner, *, batch_idx, data_batch, outputs)``.

``outputs`` is what the step returned, by convention a dict holding ``"loss"``, the
loss that was backpropagated, as a number."""

# --- validation -------------------------------------------------------------------

BEFORE_VAL: Final = "before_val"
"""Before a validation pass: ``(runner)``."""
AFTER_VAL: Final = "after_val"
"""After a validation pass: ``(runner)``."""
BEFORE_VAL_EPOCH: Final = "before_val_epoch"
"""At the start of a validation epoch: ``(runner)``."""
AFTER_VAL_EPOCH: Final = "after_val_epoch"
"""At the end of a validation epoch: ``(runner, *, metrics)``, a dict of name to value.

By convention ``metrics["loss"]`` is the validation loss (the trainer bridges add
each metric's name without its stage prefix, ``val_loss`` -> ``loss``, beside it)."""
BEFORE_VAL_ITER: Final = "before_val_iter"
"""Before each validation step: ``(runner, *, batch_idx, data_batch)``."""
AFTER_VAL_ITER: Final = "after_val_iter"
"""After each validation step: ``(runner, *, batch_idx, data_batch, outputs)``."""

# --- testing ----------------------------------------------------------------------

BEFORE_TEST: Final = "before_test"
"""Before a test pass: ``(runner)``."""
AFTER_TEST: Final = "after_test"
"""After a test pass: ``(runner)``."""
BEFORE_TEST_EPOCH: Final = "before_test_epoch"
"""At the start of a test epoch: ``(runner)``."""
AFTER_TEST_EPOCH: Final = "after_test_epoch"
"""At the end of a test epoch: ``(runner, *, metrics)``, a dict of name to value."""
BEFORE_TEST_ITER: Final = "before_test_iter"
"""Before each test step: ``(runner, *, batch_idx, data_batch)``."""
AFTER_TEST_ITER: Final = "after_test_iter"
"""After each test step: ``(runner, *, batch_idx, data_batch, outputs)``."""

# --- checkpoints ------------------------------------------------------------------

BEFORE_SAVE_CHECKPOINT: Final = "before_save_checkpoint"
"""Before a checkpoint is written: ``(runner, *, checkpoint)``, a dict hooks may add to."""
AFTER_LOAD_CHECKPOINT: Final = "after_load_checkpoint"
"""After a checkpoint was read: ``(runner, *, checkpoint)``, the dict that was loaded.

When a run resumes: after ``before_run``, before ``before_train``."""

# --- sets -------------------------------------------------------------------------

TRAIN_EVENTS: Final[Tuple[TrainingEvent, ...]] = (
    BEFORE_TRAIN,
    BEFORE_TRAIN_EPOCH,
    BEFORE_TRAIN_ITER,
    AFTER_TRAIN_ITER,
    AFTER_TRAIN_EPOCH,
    AFTER_TRAIN,
)
"""The training events, in the order a training pass first emits them."""

VAL_EVENTS: Final[Tuple[TrainingEvent, ...]] = (
    BEFORE_VAL,
    BEFORE_VAL_EPOCH,
    BEFORE_VAL_ITER,
    AFTER_VAL_ITER,
    AFTER_VAL_EPOCH,
    AFTER_VAL,
)
"""The validation events, in the order a validation pass first emits them."""

TEST_EVENTS: Final[Tuple[TrainingEvent, ...]] = (
    BEFORE_TEST,
    BEFORE_TEST_EPOCH,
    BEFORE_TEST_ITER,
    AFTER_TEST_ITER,
    AFTER_TEST_EPOCH,
    AFTER_TEST,
)
"""The test events, in the order a test pass first emits them."""

EVENTS: Final[Tuple[TrainingEvent, ...]] = (
    BEFORE_RUN,
    *TRAIN_EVENTS,
    *VAL_EVENTS,
    *TEST_EVENTS,
    BEFORE_SAVE_CHECKPOINT,
    AFTER_LOAD_CHECKPOINT,
    AFTER_RUN,
    ON_EXCEPTION,
)
"""Every name above; ``hook_events = EVENTS`` makes a class's same-named methods hooks.

Example:
    >>> from hookbus import training
    >>> len(training.EVENTS), training.EVENTS[0], training.EVENTS[-1]
    (23, 'before_run', 'on_exception')
"""
