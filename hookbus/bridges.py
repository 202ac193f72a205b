"""Bridges from a bus to the trainers people use: Hugging Face ``Trainer``, Lightning, mmengine.

Each bridge is that trainer's own callback class (a ``transformers.TrainerCallback``, a
``lightning.pytorch.Callback``, an mmengine ``Hook``) that emits the events of
:mod:`hookbus.training` on a bus at the points where the trainer calls its callbacks. A hook
class written against those events (logging, early stopping, checkpoint bookkeeping) then runs
unchanged under each trainer and in a loop you write. :func:`attach` picks the bridge for a
trainer and adds it:

    >>> import hookbus
    >>> from hookbus import bridges, training
    >>> class StopAfter:
    ...     hook_events = training.EVENTS
    ...     def __init__(self, steps):
    ...         self.steps = steps
    ...     def after_train_iter(self, runner, *, batch_idx, data_batch, outputs):
    ...         if runner.iter + 1 >= self.steps:
    ...             runner.stop()          # the same call under every trainer
    >>> bus = hookbus.EventBus()
    >>> group = bus.subscribe(StopAfter(steps=3))

and then ``bridges.attach(trainer, bus)`` (a Hugging Face or Lightning ``Trainer``, or an
mmengine ``Runner``) before ``trainer.train()`` / ``trainer.fit(model)``. The runner every
bridge passes is a :class:`TrainerRunner`, the same object for the whole run. The mapping of
each trainer's callback points to events, and where a trainer's order differs from the one
:mod:`hookbus.training` documents, is in ``docs/hook-classes.md``.

Each framework is imported only when its bridge is made (``pip install "hookbus[hf]"``,
``"hookbus[lightning]"``, ``"hookbus[mmengine]"``); importing this module imports none.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Dict, Optional

import hookbus
from hookbus import training

__all__ = [
    "TrainerRunner",
    "attach",
    "hf_callback",
    "lightning_callback",
    "mmengine_hook",
]

_PACKAGES = {  # extra -> (the module to import, the distribution users know)
    "hf": ("transformers", "transformers (Hugging Face)"),
    "lightning": ("lightning.pytorch", "lightning"),
    "mmengine": ("mmengine.hooks", "mmengine"),
}


def _framework(extra: str, needed_by: str) -> Any:
    """The framework's module, or an ImportError saying which extra installs it."""
    module, package = _PACKAGES[extra]
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f"hookbus.bridges.{needed_by} needs {package}, which is not installed: "
            f'pip install "hookbus[{extra}]" (from a hookbus checkout: '
            f'pip install torch==2.13.0 -e ".[{extra}]")'
        ) from error


def _scalar(value: Any) -> Any:
    """A one-element tensor as a Python number (other values unchanged)."""
    numel = getattr(value, "numel", None)
    if callable(numel) and numel() == 1 and hasattr(value, "item"):
        return value.detach().item()
    return value


def _as_outputs(value: Any) -> Optional[Dict[str, Any]]:
    """A step's result or metrics as a dict of names to values, one-element tensors as numbers.

    A bare value (a loss tensor) becomes ``{"loss": value}``; ``None`` stays ``None``.
    """
    if value is None:
        return None
    if isinstance(value, dict):
        items: Dict[Any, Any] = value  # pyright: ignore[reportUnknownVariableType]
        return {str(key): _scalar(item) for key, item in items.items()}
    return {"loss": _scalar(value)}


class TrainerRunner:
    """The ``runner`` a bridge passes to every hook: one face over three trainers.

    Hooks read the run's state and ask the trainer to stop the same way under each bridge, as
    they would with the runner of a loop you write:

    * ``model``: the model being trained (the ``LightningModule``, the mmengine model, the
      Hugging Face model);
    * ``epoch``: the current epoch, from 0; ``iter``: how many training iterations finished
      before the current one (mmengine's meaning: ``0`` in the first ``after_train_iter``);
    * ``trainer``: the trainer itself (the Lightning ``Trainer``, the mmengine ``Runner``, the
      Hugging Face ``Trainer`` when the bridge was added by :func:`attach`, else ``None``);
    * ``native``: the arguments the trainer passed to the callback being relayed, by name
      (``args``, ``state``, ``control``... for Hugging Face), for what only one trainer has;
    * :meth:`stop`: ask the trainer to stop training, and ``stop_requested``.

    Example:
        >>> from hookbus.bridges import TrainerRunner
        >>> def stop():
        ...     print("stopping")
        >>> runner = TrainerRunner("hand-written", trainer=None, stop=stop)
        >>> runner.epoch, runner.iter, runner.stop_requested
        (0, 0, False)
        >>> runner.stop()
        stopping
        >>> runner.stop_requested
        True
    """

    def __init__(self, kind: str, *, trainer: Any, stop: Callable[[], None]) -> None:
        self.kind = kind
        """Which trainer runs: ``"hf"``, ``"lightning"`` or ``"mmengine"``."""
        self.trainer = trainer
        self.model: Any = None
        self.epoch = 0
        self.iter = 0
        self.native: Dict[str, Any] = {}
        self.stop_requested = False
        self._ask_trainer_to_stop = stop

    def stop(self) -> None:
        """Ask the trainer to stop training; when it stops differs per trainer (see the docs).

        Asked before the run's first event, the request reaches the trainer at that event.
        """
        self.stop_requested = True
        self._ask_trainer_to_stop()

    def __repr__(self) -> str:
        return f"<TrainerRunner {self.kind} epoch={self.epoch} iter={self.iter}>"


class _Relay:
    """What the three bridges share: the bus, and the runner they pass to its hooks."""

    def __init__(
        self, kind: str, bus: Optional[hookbus.EventBus], stop: Callable[[], None]
    ) -> None:
        if bus is None:
            bus = hookbus.default_bus
        elif not isinstance(bus, hookbus.EventBus):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"bus must be a hookbus.EventBus or None, got {type(bus).__name__}")
        self.bus = bus
        self.runner = TrainerRunner(kind, trainer=None, stop=self._stop)
        self._ask_trainer_to_stop = stop

    def _stop(self) -> None:
        if self.runner.native:  # the trainer's objects are known from the first event on
            self._ask_trainer_to_stop()

    def emit(self, event: str, native: Dict[str, Any], **keywords: Any) -> None:
        runner = self.runner
        first = not runner.native
        if event == training.BEFORE_RUN and not first:
            runner.stop_requested = False  # a new run (fit, then fit again) starts unstopped
        runner.native = native
        if first and runner.stop_requested:
            runner.stop()
        self.bus.emit(event, runner, **keywords)


# --- Hugging Face Trainer --------------------------------------------------------------


def hf_callback(bus: Optional[hookbus.EventBus] = None) -> Any:
    """A ``transformers.TrainerCallback`` that emits :mod:`hookbus.training` events on ``bus``.

    ``bus`` defaults to :data:`hookbus.default_bus`. Add it with
    ``Trainer(..., callbacks=[hf_callback(bus)])`` or ``trainer.add_callback(...)``, or use
    :func:`attach`, which also sets ``runner.trainer``. ``outputs["loss"]`` of
    ``after_train_iter`` is the loss the model's forward returned (averaged over the step's
    micro-batches), read by a forward hook the callback keeps on the model during training,
    since the Trainer passes no loss to its callbacks (a run that raises, which the Trainer
    tells no callback of, leaves that hook until the next run begins).

    Example:
        >>> import hookbus
        >>> from hookbus.bridges import hf_callback
        >>> import transformers
        >>> callback = hf_callback(hookbus.EventBus())
        >>> isinstance(callback, transformers.TrainerCallback)
        True
    """
    transformers = _framework("hf", "hf_callback")

    class HookbusCallback(transformers.TrainerCallback):  # type: ignore[misc,name-defined]
        """Relays the Trainer's callback points to hookbus's training events."""

        def __init__(self) -> None:
            self.relay = _Relay("hf", bus, self._stop)
            self.losses: list[float] = []
            self.batch_idx = 0  # training steps in this epoch
            self.val_batch = 0  # prediction steps in this evaluation
            self.in_evaluation = False
            self.loss_hook: Any = None

        def _stop(self) -> None:
            self.relay.runner.native["control"].should_training_stop = True

        def _loss(self, module: Any, args: Any, output: Any) -> None:
            if module.training:
                loss = _as_outputs(getattr(output, "loss", output)) or {}
                if isinstance(loss.get("loss"), float):
                    self.losses.append(loss["loss"])

        def _native(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Dict[str, Any]:
            native = {"args": args, "state": state, "control": control, **kwargs}
            model = kwargs.get("model")
            if model is not None:
                self.relay.runner.model = model
            return native

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            native = self._native(args, state, control, **kwargs)
            if self.loss_hook is not None:  # a run that raised left it
                self.loss_hook.remove()
            self.loss_hook = self.relay.runner.model.register_forward_hook(self._loss)
            self.relay.runner.iter = state.global_step
            self.relay.emit(training.BEFORE_RUN, native)
            self.relay.emit(training.BEFORE_TRAIN, native)
            return control

        def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            self.relay.runner.epoch = int(state.epoch or 0)
            self.batch_idx = 0
            self.relay.emit(
                training.BEFORE_TRAIN_EPOCH, self._native(args, state, control, **kwargs)
            )
            return control

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            self.losses = []
            native = self._native(args, state, control, **kwargs)
            self.relay.emit(
                training.BEFORE_TRAIN_ITER, native, batch_idx=self.batch_idx, data_batch=None
            )
            return control

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            native = self._native(args, state, control, **kwargs)
            loss = sum(self.losses) / len(self.losses) if self.losses else None
            self.relay.emit(
                training.AFTER_TRAIN_ITER,
                native,
                batch_idx=self.batch_idx,
                data_batch=None,
                outputs={"loss": loss},
            )
            self.batch_idx += 1
            self.relay.runner.iter += 1
            return control

        def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            self.relay.emit(
                training.AFTER_TRAIN_EPOCH, self._native(args, state, control, **kwargs)
            )
            return control

        def _begin_evaluation(self, native: Dict[str, Any]) -> None:
            if not self.in_evaluation:
                self.in_evaluation, self.val_batch = True, 0
                self.relay.emit(training.BEFORE_VAL, native)
                self.relay.emit(training.BEFORE_VAL_EPOCH, native)

        def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            native = self._native(args, state, control, **kwargs)
            self._begin_evaluation(native)
            # The Trainer calls back only after a prediction step: both events are sent here.
            step = {"batch_idx": self.val_batch, "data_batch": None}
            self.relay.emit(training.BEFORE_VAL_ITER, native, **step)
            self.relay.emit(training.AFTER_VAL_ITER, native, **step, outputs=None)
            self.val_batch += 1
            return control

        def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            native = self._native(args, state, control, **kwargs)
            self._begin_evaluation(native)
            metrics = _as_outputs(kwargs.get("metrics")) or {}
            self.relay.emit(training.AFTER_VAL_EPOCH, native, metrics=metrics)
            self.relay.emit(training.AFTER_VAL, native)
            self.in_evaluation = False
            return control

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            native = self._native(args, state, control, **kwargs)
            if self.loss_hook is not None:
                self.loss_hook.remove()
                self.loss_hook = None
            self.relay.emit(training.AFTER_TRAIN, native)
            self.relay.emit(training.AFTER_RUN, native)
            return control

    return HookbusCallback()


# --- Lightning -------------------------------------------------------------------------


def lightning_callback(bus: Optional[hookbus.EventBus] = None) -> Any:
    """A ``lightning.pytorch.Callback`` that emits :mod:`hookbus.training` events on ``bus``.

    ``bus`` defaults to :data:`hookbus.default_bus`. Add it with
    ``Trainer(callbacks=[lightning_callback(bus)])``, or use :func:`attach`. The sanity check
    Lightning runs before training (``num_sanity_val_steps``) emits nothing.

    Example:
        >>> import hookbus
        >>> from hookbus.bridges import lightning_callback
        >>> import lightning.pytorch as pl
        >>> isinstance(lightning_callback(hookbus.EventBus()), pl.Callback)
        True
    """
    pl = _framework("lightning", "lightning_callback")

    class HookbusCallback(pl.Callback):  # type: ignore[misc,name-defined]
        """Relays Lightning's callback points to hookbus's training events."""

        def __init__(self) -> None:
            self.relay = _Relay("lightning", bus, self._stop)

        def _stop(self) -> None:
            self.relay.runner.native["trainer"].should_stop = True

        def _emit(self, event: str, trainer: Any, module: Any, **keywords: Any) -> None:
            if trainer.sanity_checking:
                return
            runner = self.relay.runner
            runner.trainer, runner.model = trainer, module
            self.relay.emit(event, {"trainer": trainer, "pl_module": module}, **keywords)

        def _metrics(self, trainer: Any) -> Dict[str, Any]:
            return _as_outputs(dict(trainer.callback_metrics)) or {}

        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            self.relay.runner.iter = trainer.global_step
            self._emit(training.BEFORE_RUN, trainer, pl_module)

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self._emit(training.BEFORE_TRAIN, trainer, pl_module)

        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            self.relay.runner.epoch = trainer.current_epoch
            self._emit(training.BEFORE_TRAIN_EPOCH, trainer, pl_module)

        def on_train_batch_start(
            self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
        ) -> None:
            keywords = {"batch_idx": batch_idx, "data_batch": batch}
            self._emit(training.BEFORE_TRAIN_ITER, trainer, pl_module, **keywords)

        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            keywords = {"batch_idx": batch_idx, "data_batch": batch}
            outputs = _as_outputs(outputs)
            self._emit(training.AFTER_TRAIN_ITER, trainer, pl_module, **keywords, outputs=outputs)
            self.relay.runner.iter += 1

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            self._emit(training.AFTER_TRAIN_EPOCH, trainer, pl_module)

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            self._emit(training.AFTER_TRAIN, trainer, pl_module)

        def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
            self._emit(training.AFTER_RUN, trainer, pl_module)

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            self._emit(training.ON_EXCEPTION, trainer, pl_module, exception=exception)

        def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Any) -> None:
            self._emit(training.BEFORE_SAVE_CHECKPOINT, trainer, pl_module, checkpoint=checkpoint)

        def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Any) -> None:
            self._emit(training.AFTER_LOAD_CHECKPOINT, trainer, pl_module, checkpoint=checkpoint)

        # Validation and test: the same six points each; Lightning's epoch-end metrics are
        # complete only after the module's own on_*_epoch_end, so both "after" events wait
        # for on_*_end.
        def _stage(self, stage: str, when: str, trainer: Any, module: Any, **kw: Any) -> None:
            self._emit(f"{when}_{stage}", trainer, module, **kw)

        def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
            self._stage("val", "before", trainer, pl_module)

        def on_validation_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            self._stage("val_epoch", "before", trainer, pl_module)

        def on_validation_batch_start(
            self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
        ) -> None:
            kw = {"batch_idx": batch_idx, "data_batch": batch}
            self._stage("val_iter", "before", trainer, pl_module, **kw)

        def on_validation_batch_end(
            self,
            trainer: Any,
            pl_module: Any,
            outputs: Any,
            batch: Any,
            batch_idx: int,
            dataloader_idx: int = 0,
        ) -> None:
            kw = {"batch_idx": batch_idx, "data_batch": batch, "outputs": _as_outputs(outputs)}
            self._stage("val_iter", "after", trainer, pl_module, **kw)

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            metrics = self._metrics(trainer)
            self._stage("val_epoch", "after", trainer, pl_module, metrics=metrics)
            self._stage("val", "after", trainer, pl_module)

        def on_test_start(self, trainer: Any, pl_module: Any) -> None:
            self._stage("test", "before", trainer, pl_module)

        def on_test_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            self._stage("test_epoch", "before", trainer, pl_module)

        def on_test_batch_start(
            self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
        ) -> None:
            kw = {"batch_idx": batch_idx, "data_batch": batch}
            self._stage("test_iter", "before", trainer, pl_module, **kw)

        def on_test_batch_end(
            self,
            trainer: Any,
            pl_module: Any,
            outputs: Any,
            batch: Any,
            batch_idx: int,
            dataloader_idx: int = 0,
        ) -> None:
            kw = {"batch_idx": batch_idx, "data_batch": batch, "outputs": _as_outputs(outputs)}
            self._stage("test_iter", "after", trainer, pl_module, **kw)

        def on_test_end(self, trainer: Any, pl_module: Any) -> None:
            metrics = self._metrics(trainer)
            self._stage("test_epoch", "after", trainer, pl_module, metrics=metrics)
            self._stage("test", "after", trainer, pl_module)

    return HookbusCallback()


# --- mmengine --------------------------------------------------------------------------

# mmengine's hook methods and hookbus's events have the same names and arguments.
_MMENGINE_ITER_EVENTS = {
    training.BEFORE_TRAIN_ITER,
    training.AFTER_TRAIN_ITER,
    training.BEFORE_VAL_ITER,
    training.AFTER_VAL_ITER,
    training.BEFORE_TEST_ITER,
    training.AFTER_TEST_ITER,
}


def mmengine_hook(bus: Optional[hookbus.EventBus] = None) -> Any:
    """An mmengine ``Hook`` that emits :mod:`hookbus.training` events on ``bus``.

    ``bus`` defaults to :data:`hookbus.default_bus`. Register it with
    ``runner.register_hook(mmengine_hook(bus))`` (priority ``NORMAL`` among mmengine's own
    hooks; hookbus's priorities order the bus's hooks), or use :func:`attach`. mmengine's
    methods and hookbus's events share their names; ``runner.stop()`` sets the train loop's
    ``stop_training``, which mmengine's epoch-based loop reads at the end of an epoch.

    Example:
        >>> import hookbus
        >>> from hookbus.bridges import mmengine_hook
        >>> from mmengine.hooks import Hook
        >>> isinstance(mmengine_hook(hookbus.EventBus()), Hook)
        True
    """
    hooks = _framework("mmengine", "mmengine_hook")

    class HookbusHook(hooks.Hook):  # type: ignore[misc,name-defined]
        """Relays mmengine's hook stages to the same-named hookbus events."""

        def __init__(self) -> None:
            self.relay = _Relay("mmengine", bus, self._stop)

        def _stop(self) -> None:
            self.relay.runner.native["runner"].train_loop.stop_training = True

        def _relay(self, event: str, runner: Any, **keywords: Any) -> None:
            view = self.relay.runner
            # mmengine's runner.iter counts the finished iterations, as TrainerRunner.iter does.
            view.trainer, view.model = runner, runner.model
            view.epoch, view.iter = runner.epoch, runner.iter
            if event in _MMENGINE_ITER_EVENTS:
                keywords.setdefault("data_batch", None)
                if event.startswith("after_"):
                    keywords["outputs"] = _as_outputs(keywords.get("outputs"))
            self.relay.emit(event, {"runner": runner}, **keywords)

    def relayer(event: str) -> Callable[..., None]:
        def relay(self: Any, runner: Any, **keywords: Any) -> None:
            self._relay(event, runner, **keywords)

        relay.__name__ = event
        return relay

    # mmengine's Runner.call_hook passes everything but the runner by keyword.
    for event in training.EVENTS:
        if event != training.ON_EXCEPTION:  # mmengine has no such stage
            setattr(HookbusHook, event, relayer(event))
    return HookbusHook()


# --- any trainer -----------------------------------------------------------------------


def attach(trainer: Any, bus: Optional[hookbus.EventBus] = None) -> TrainerRunner:
    """Add the bridge that fits ``trainer`` and return the runner its hooks will get.

    ``trainer`` is a Hugging Face ``transformers.Trainer``, a ``lightning.pytorch.Trainer`` or
    an mmengine ``Runner``; ``bus`` defaults to :data:`hookbus.default_bus`. Anything else is
    refused with a ``TypeError`` naming what is accepted.

    Example:
        >>> import hookbus
        >>> from hookbus import bridges
        >>> bridges.attach(object(), hookbus.EventBus())
        Traceback (most recent call last):
        ...
        TypeError: attach() takes a transformers.Trainer, ... or an mmengine Runner, got object
    """
    # A trainer of a framework means that framework is imported: look only at those that are.
    transformers = sys.modules.get("transformers")
    if transformers is not None and isinstance(trainer, transformers.Trainer):
        callback = hf_callback(bus)
        trainer.add_callback(callback)
        runner: TrainerRunner = callback.relay.runner
        runner.trainer = trainer  # the Trainer passes itself to no callback
        return runner
    lightning = sys.modules.get("lightning.pytorch")
    if lightning is not None and isinstance(trainer, lightning.Trainer):
        callback = lightning_callback(bus)
        trainer.callbacks.append(callback)
        runner = callback.relay.runner
        return runner
    runner_module = sys.modules.get("mmengine.runner")
    if runner_module is not None and isinstance(trainer, runner_module.Runner):
        hook = mmengine_hook(bus)
        trainer.register_hook(hook)
        runner = hook.relay.runner
        return runner
    raise TypeError(
        "attach() takes a transformers.Trainer, a lightning.pytorch.Trainer or an mmengine "
        f"Runner, got {type(trainer).__name__}"
    )
