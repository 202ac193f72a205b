"""The runner a bridge passes to every hook: one face over three trainers."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional


def _ignore(name: str, value: float) -> None:
    pass


class TrainerRunner:
    """The ``runner`` a bridge passes to every hook: one face over three trainers.

    Hooks read the run's state, log a number and ask the trainer to stop the same way under
    each bridge, as they would with the runner of a loop you write:

    * ``model``: the model being trained (the Hugging Face model, the ``LightningModule``, the
      mmengine model);
    * ``epoch``: the index, from 0, of the training epoch that runs; between two epochs (the
      validation and checkpoint after an epoch, ``after_train``, ``after_run``) it still names
      the epoch that ran last, so the validation after the first epoch reads 0;
    * ``iter``: how many training iterations finished before the current one, since training
      began (a resumed run goes on counting): 0 in the first ``after_train_iter``, the number
      of iterations run from then on. An iteration is one batch of the training data loader:
      with gradient accumulation, several make one optimizer step;
    * ``trainer``: the trainer itself (the Hugging Face or Lightning ``Trainer``, the mmengine
      ``Runner``);
    * ``native``: the arguments of the trainer's callback being relayed, by name (``args``,
      ``state``, ``control``... for Hugging Face, ``trainer`` and ``pl_module`` for Lightning,
      ``runner`` for mmengine), where each trainer's own counters stay readable;
    * :meth:`log`: record a number with the trainer's own logging; :meth:`stop`: ask the
      trainer to stop training, and ``stop_requested``.

    The ``batch_idx`` keyword of the iteration events is the index, from 0, of the batch in
    the current epoch's data (a run resumed in the middle of an epoch starts where it resumed).

    Example:
        >>> from hookbus.bridges import TrainerRunner
        >>> def stop():
        ...     print("stopping")
        >>> def log(name, value):
        ...     print(f"{name} = {value}")
        >>> runner = TrainerRunner("hand-written", trainer=None, stop=stop, log=log)
        >>> runner.epoch, runner.iter, runner.stop_requested
        (0, 0, False)
        >>> runner.log("lr", 0.1)
        lr = 0.1
        >>> runner.stop()
        stopping
        >>> runner.stop_requested
        True
    """

    def __init__(
        self,
        kind: str,
        *,
        trainer: Any,
        stop: Callable[[], None],
        log: Optional[Callable[[str, float], None]] = None,
    ) -> None:
        self.kind = kind
        """Which trainer runs: ``"hf"``, ``"lightning"`` or ``"mmengine"``."""
        self.trainer = trainer
        self.model: Any = None
        self.epoch = 0
        self.iter = 0
        self.native: Dict[str, Any] = {}
        self.stop_requested = False
        self._ask_trainer_to_stop = stop
        self._log = log if log is not None else _ignore

    def stop(self) -> None:
        """Ask the trainer to stop training; when it stops differs per trainer (see the docs).

        Asked before the run's first event, the request reaches the trainer at that event.
        """
        self.stop_requested = True
        self._ask_trainer_to_stop()

    def log(self, name: str, value: Any) -> None:
        """Record ``value`` under ``name`` with the trainer's own logging, at its current step.

        ``value`` is a number or a one-element tensor. Each bridge hands it to what its trainer
        logs with: the Hugging Face ``Trainer.log`` (its ``report_to`` integrations and
        ``state.log_history``), each of Lightning's loggers, mmengine's visualizer backends. It
        works at every event, under every trainer (where the trainer has nowhere to log, such
        as Lightning with ``logger=False``, the value goes nowhere, as the trainer's own would).

        Example:
            >>> from hookbus.bridges import TrainerRunner
            >>> runner = TrainerRunner("hand-written", trainer=None, stop=lambda: None,
            ...                        log=lambda name, value: print(name, value))
            >>> runner.log("ema_loss", 0.25)
            ema_loss 0.25
            >>> runner.log("ema_loss", "low")
            Traceback (most recent call last):
            ...
            TypeError: log() takes a number or a one-element tensor as value, got str
        """
        if not isinstance(name, str) or not name:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"log() takes a non-empty str as name, got {type(name).__name__}")
        self._log(name, _number(value))

    def __repr__(self) -> str:
        return f"<TrainerRunner {self.kind} epoch={self.epoch} iter={self.iter}>"


def _number(value: Any) -> float:
    """``value`` as a float: a number, or a one-element tensor (or array)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    numel: Any = getattr(value, "numel", None)
    size: Any = numel() if callable(numel) else getattr(value, "size", None)
    item: Any = getattr(value, "item", None)
    if size == 1 and item is not None:
        detach: Any = getattr(value, "detach", None)
        number: Any = detach().item() if detach is not None else item()
        if isinstance(number, (int, float)) and not isinstance(number, bool):
            return float(number)
    raise TypeError(
        "log() takes a number or a one-element tensor as value, got " + type(value).__name__
    )
