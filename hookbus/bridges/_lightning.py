"""Lightning's bridge: one ``Callback``, since Lightning has a callback for every moment.

``setup`` and ``teardown`` bound a run (``before_run`` / ``after_run``, for ``fit``,
``validate`` and ``test``), so that ``after_load_checkpoint`` (``on_load_checkpoint``, which
Lightning calls before ``on_fit_start``) comes after ``before_run``, as under mmengine. The
counters are read from Lightning's own progress at each event, so that they hold on resume
(Lightning restores them after ``on_fit_start``). The sanity check Lightning runs before
training (``num_sanity_val_steps``) sends nothing.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Dict, List, Tuple

import hookbus
from hookbus import training

from ._framework import require
from ._relay import TEST_PREFIXES, VAL_PREFIXES, Relay, as_outputs, with_common_names

# Lightning ships as lightning.pytorch and, the same code, as pytorch_lightning.
_PACKAGES = ("lightning.pytorch", "pytorch_lightning")
_callback_classes: Dict[str, type] = {}
_RUN_STAGES = ("fit", "validate", "test")  # predict has no events


def _package_of(trainer: Any) -> str:
    for package in _PACKAGES:
        module = sys.modules.get(package)
        if module is not None and isinstance(trainer, module.Trainer):
            return package
    return ""


def accepts(trainer: Any) -> bool:
    """Whether ``trainer`` is a Lightning ``Trainer``."""
    return bool(_package_of(trainer))


def _callback_type(package: str) -> type:
    """The bridge's ``Callback`` class for ``package``, made once."""
    if package not in _callback_classes:
        pl = (
            require("lightning", "lightning.pytorch")
            if package == _PACKAGES[0]
            else (sys.modules[package])
        )
        _callback_classes[package] = _make_callback_type(pl)
    return _callback_classes[package]


def relays_on(trainer: Any) -> List[Relay]:
    """The relays of the bridges connected to ``trainer``."""
    kinds = tuple(_callback_classes.values())
    ours: List[Any] = [cb for cb in trainer.callbacks if kinds and isinstance(cb, kinds)]
    return [callback.bridge.relay for callback in ours]


def install(trainer: Any, bus: hookbus.EventBus) -> Tuple[Relay, Callable[[], None]]:
    """Connect ``bus`` to ``trainer``; return the relay, and what disconnects it."""
    if _package_of(trainer) == _PACKAGES[0]:
        require("lightning", "lightning.pytorch")  # each time: a partial install says so
    _refuse_spawned_processes(trainer)
    bridge = LightningBridge(trainer, bus)
    return bridge.relay, bridge.disconnect


def _refuse_spawned_processes(trainer: Any) -> None:
    """Refuse a trainer that pickles itself into new processes (``ddp_spawn``).

    Its callbacks go along, and this one can't: a bus belongs to its process. Lightning's
    ``ddp`` (each process runs the script, and connects its own bus) and ``ddp_fork``
    (each process gets a copy of the bus as it was) need no pickling.
    """
    launcher = getattr(trainer.strategy, "launcher", None)
    start_method = getattr(launcher, "_start_method", None)
    if start_method in ("spawn", "forkserver"):
        raise ValueError(
            f"connect(): this Trainer's strategy ({type(trainer.strategy).__name__}) "
            f"starts its processes with {start_method!r}, pickling the trainer and its "
            "callbacks into them, and a bus with its hooks belongs to the process that made "
            "it; use strategy='ddp' (each process runs your script and connects its own bus) "
            "or strategy='ddp_fork'"
        )


class LightningBridge:
    """One bus connected to one Lightning ``Trainer``."""

    def __init__(self, trainer: Any, bus: hookbus.EventBus) -> None:
        self.trainer = trainer
        self.relay = Relay("lightning", bus, trainer, self._stop, self._log)
        self.callback = _callback_type(_package_of(trainer))(self)
        trainer.callbacks.append(self.callback)

    def disconnect(self) -> None:
        self.relay.active = False
        if self.callback in self.trainer.callbacks:
            self.trainer.callbacks.remove(self.callback)

    def _stop(self) -> None:
        self.trainer.should_stop = True

    def _log(self, name: str, value: float) -> None:
        # Straight to the loggers: LightningModule.log is refused in half the callbacks
        # (on_validation_end, on_train_end...), and aggregates over the epoch in others.
        for logger in self.trainer.loggers:
            logger.log_metrics({name: value}, step=self.trainer.global_step)

    def emit(self, event: str, trainer: Any, module: Any, **keywords: Any) -> None:
        if trainer.sanity_checking:
            return
        runner = self.relay.runner
        runner.model = module
        # Batches finished since training began: Lightning counts them at the end of each
        # batch, after on_train_batch_end, and restores them on resume.
        runner.iter = trainer.fit_loop.epoch_loop.batch_progress.total.completed
        if event in (training.BEFORE_TRAIN, training.BEFORE_TRAIN_EPOCH):
            runner.epoch = trainer.current_epoch  # held until the next epoch begins
        native = {"trainer": trainer, "pl_module": module}
        if event == training.ON_EXCEPTION:
            self.relay.emit_exception(native, keywords["exception"])
        else:
            self.relay.emit(event, native, **keywords)

    def metrics(self, trainer: Any, prefixes: Tuple[str, ...]) -> Dict[str, Any]:
        return with_common_names(trainer.callback_metrics, prefixes)


def _stage_name(stage: Any) -> str:
    """``"fit"`` for ``TrainerFn.FITTING`` (a str enum, whose str() differs by Python)."""
    return str(getattr(stage, "value", stage))


def _make_callback_type(pl: Any) -> type:
    class HookbusCallback(pl.Callback):  # type: ignore[misc]
        """Relays Lightning's callback points to a hookbus bridge."""

        def __init__(self, bridge: LightningBridge) -> None:
            self.bridge = bridge

        def __reduce__(self) -> Any:
            raise TypeError(
                "hookbus's Lightning callback belongs to the process that connected it (its "
                "bus and hooks can't be pickled): connect a bus to the trainer in each process"
            )

        def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
            if _stage_name(stage) in _RUN_STAGES:
                self.bridge.emit(training.BEFORE_RUN, trainer, pl_module)

        def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
            if _stage_name(stage) in _RUN_STAGES:
                self.bridge.emit(training.AFTER_RUN, trainer, pl_module)

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            self.bridge.emit(training.BEFORE_TRAIN, trainer, pl_module)

        def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            self.bridge.emit(training.BEFORE_TRAIN_EPOCH, trainer, pl_module)

        def on_train_batch_start(
            self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
        ) -> None:
            keywords = {"batch_idx": batch_idx, "data_batch": batch}
            self.bridge.emit(training.BEFORE_TRAIN_ITER, trainer, pl_module, **keywords)

        def on_train_batch_end(
            self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
        ) -> None:
            keywords = {"batch_idx": batch_idx, "data_batch": batch}
            outputs = as_outputs(outputs)
            self.bridge.emit(
                training.AFTER_TRAIN_ITER, trainer, pl_module, **keywords, outputs=outputs
            )

        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            self.bridge.emit(training.AFTER_TRAIN_EPOCH, trainer, pl_module)

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            self.bridge.emit(training.AFTER_TRAIN, trainer, pl_module)

        def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
            self.bridge.emit(training.ON_EXCEPTION, trainer, pl_module, exception=exception)

        def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Any) -> None:
            self.bridge.emit(
                training.BEFORE_SAVE_CHECKPOINT, trainer, pl_module, checkpoint=checkpoint
            )

        def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: Any) -> None:
            self.bridge.emit(
                training.AFTER_LOAD_CHECKPOINT, trainer, pl_module, checkpoint=checkpoint
            )

        # Validation and test: the same six points each. The epoch's metrics are complete
        # only after the module's own on_*_epoch_end, which Lightning calls after the
        # callbacks': both "after" events wait for on_*_end.
        def _stage(self, event: str, trainer: Any, module: Any, **keywords: Any) -> None:
            self.bridge.emit(event, trainer, module, **keywords)

        def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
            self._stage(training.BEFORE_VAL, trainer, pl_module)

        def on_validation_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            self._stage(training.BEFORE_VAL_EPOCH, trainer, pl_module)

        def on_validation_batch_start(
            self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
        ) -> None:
            keywords = {"batch_idx": batch_idx, "data_batch": batch}
            self._stage(training.BEFORE_VAL_ITER, trainer, pl_module, **keywords)

        def on_validation_batch_end(
            self,
            trainer: Any,
            pl_module: Any,
            outputs: Any,
            batch: Any,
            batch_idx: int,
            dataloader_idx: int = 0,
        ) -> None:
            keywords = {"batch_idx": batch_idx, "data_batch": batch}
            outputs = as_outputs(outputs)
            self._stage(training.AFTER_VAL_ITER, trainer, pl_module, **keywords, outputs=outputs)

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            metrics = self.bridge.metrics(trainer, VAL_PREFIXES)
            self._stage(training.AFTER_VAL_EPOCH, trainer, pl_module, metrics=metrics)
            self._stage(training.AFTER_VAL, trainer, pl_module)

        def on_test_start(self, trainer: Any, pl_module: Any) -> None:
            self._stage(training.BEFORE_TEST, trainer, pl_module)

        def on_test_epoch_start(self, trainer: Any, pl_module: Any) -> None:
            self._stage(training.BEFORE_TEST_EPOCH, trainer, pl_module)

        def on_test_batch_start(
            self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
        ) -> None:
            keywords = {"batch_idx": batch_idx, "data_batch": batch}
            self._stage(training.BEFORE_TEST_ITER, trainer, pl_module, **keywords)

        def on_test_batch_end(
            self,
            trainer: Any,
            pl_module: Any,
            outputs: Any,
            batch: Any,
            batch_idx: int,
            dataloader_idx: int = 0,
        ) -> None:
            keywords = {"batch_idx": batch_idx, "data_batch": batch}
            outputs = as_outputs(outputs)
            self._stage(training.AFTER_TEST_ITER, trainer, pl_module, **keywords, outputs=outputs)

        def on_test_end(self, trainer: Any, pl_module: Any) -> None:
            metrics = self.bridge.metrics(trainer, TEST_PREFIXES)
            self._stage(training.AFTER_TEST_EPOCH, trainer, pl_module, metrics=metrics)
            self._stage(training.AFTER_TEST, trainer, pl_module)

    return HookbusCallback
