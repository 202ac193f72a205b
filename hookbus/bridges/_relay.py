"""From a trainer's callback to a bus event: the runner's state and the keywords' common form.

Each bridge turns what its trainer hands its callbacks into the keywords of
:mod:`hookbus.training`'s events, in one form whatever the trainer: one-element tensors as
Python numbers, a step's result as a dict holding ``"loss"``, and metrics under their own names
plus their *common names*, the names without the stage's prefix.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

import hookbus
from hookbus import training
from hookbus.adapter import add_note

from ._runner import TrainerRunner

VAL_PREFIXES: Tuple[str, ...] = (
    "val_",
    "val/",
    "validation_",
    "validation/",
    "valid_",
    "valid/",
    "eval_",
    "eval/",
)
"""The prefixes a validation metric's common name drops (``val_loss`` -> ``loss``)."""

logger = logging.getLogger("hookbus")

TEST_PREFIXES: Tuple[str, ...] = ("test_", "test/")
"""The prefixes a test metric's common name drops (``test_loss`` -> ``loss``)."""


def scalar(value: Any) -> Any:
    """A one-element tensor as a Python number (other values unchanged)."""
    numel = getattr(value, "numel", None)
    if callable(numel) and numel() == 1 and hasattr(value, "item"):
        return value.detach().item()
    return value


def as_outputs(value: Any) -> Optional[Dict[str, Any]]:
    """A step's result as a dict of names to values, one-element tensors as numbers.

    A bare value (a loss tensor) becomes ``{"loss": value}``; ``None`` stays ``None``.
    """
    if value is None:
        return None
    if isinstance(value, dict):
        items: Dict[Any, Any] = value  # pyright: ignore[reportUnknownVariableType]
        return {str(key): scalar(item) for key, item in items.items()}
    return {"loss": scalar(value)}


def with_common_names(metrics: Any, prefixes: Iterable[str]) -> Dict[str, Any]:
    """``metrics`` under their own names, then each again under its common name.

    The common name is the name without the first of ``prefixes`` it starts with
    (``eval_loss``, ``val_loss``, ``val/loss`` -> ``loss``); it wins over an original of the
    same name (a training metric Lightning logged as ``loss``), which stays in the trainer's
    own metrics (``runner.native``).
    """
    if not metrics:
        return {}
    items: Dict[Any, Any] = dict(metrics)
    named = {str(name): scalar(value) for name, value in items.items()}
    common: Dict[str, Any] = {}
    for name, value in named.items():
        for prefix in prefixes:
            if name.startswith(prefix) and len(name) > len(prefix):
                common[name[len(prefix) :]] = value
                break
    named.update(common)
    return named


class Relay:
    """What a bridge and its connection share: the bus, the runner, and how events go out.

    ``active`` turns false when the connection is closed: a wrapper the bridge could not take
    off (another wrapped the same method after it) then passes calls through, sending nothing.
    """

    def __init__(
        self,
        kind: str,
        bus: hookbus.EventBus,
        trainer: Any,
        stop: Callable[[], None],
        log: Callable[[str, float], None],
    ) -> None:
        self.bus = bus
        self.runner = TrainerRunner(kind, trainer=trainer, stop=self._stop, log=log)
        self.active = True
        self._ask_trainer_to_stop = stop
        self._started = False  # whether the first event was sent: the trainer is known then

    def _stop(self) -> None:
        if self._started:
            self._ask_trainer_to_stop()

    def emit(self, event: str, native: Dict[str, Any], **keywords: Any) -> None:
        """Send ``event`` to the bus with the runner, after updating ``runner.native``."""
        if not self.active:
            return
        runner = self.runner
        first = not self._started
        if event == training.BEFORE_RUN and not first:
            runner.stop_requested = False  # a new run (fit, then fit again) starts unstopped
        runner.native = native
        self._started = True
        if first and runner.stop_requested:
            runner.stop()
        self.bus.emit(event, runner, **keywords)

    def emit_exception(self, native: Dict[str, Any], error: BaseException) -> None:
        """Send ``on_exception`` for the run's ``error``, which the caller then re-raises.

        A hook of ``on_exception`` that raises in turn (an emergency checkpoint on a full disk)
        does not replace the run's error: a caller's ``except`` for the trainer's error must
        still catch it, as the event's contract says (re-raised unchanged). The hook's error is
        logged on the ``"hookbus"`` logger, with its traceback, and noted on the run's error.
        An interrupt (a ``BaseException`` that is no ``Exception``) raised by a hook propagates.
        """
        try:
            self.emit(training.ON_EXCEPTION, native, exception=error)
        except Exception as hook_error:
            logger.error(
                "a hook of on_exception raised while the run's %s was being handled; "
                "the run's error propagates",
                type(error).__name__,
                exc_info=(type(hook_error), hook_error, hook_error.__traceback__),
            )
            add_note(
                error,
                f"hookbus: a hook of on_exception raised {type(hook_error).__name__} too "
                "(logged on the 'hookbus' logger)",
            )
