"""The Hugging Face ``Trainer``'s bridge: its callbacks, and wrappers where it has none.

The Trainer tells its callbacks of the run's stages, but passes them no batch and no loss,
has no callback before an evaluation, a prediction step or a checkpoint, and none when the run
raises. The bridge is one ``TrainerCallback`` plus wrappers on this trainer's own ``train``,
``evaluate``, ``predict``, ``training_step``, ``prediction_step`` and ``_save_checkpoint``
(per instance: the class is untouched), so that every event comes at its moment, with its data:

* ``train()``: ``on_exception`` when it raises;
* ``training_step(model, inputs)``: ``before_train_iter`` with the batch, then the loss it
  returns, which is what the Trainer backpropagated (``compute_loss`` overrides included);
  ``after_train_iter`` at ``on_substep_end`` / ``on_step_end``, so once per batch;
* ``evaluate()`` / ``predict()``: the validation / test pass (``before_val``... ``after_val``),
  and ``before_run`` / ``after_run`` around a call made outside ``train()``;
* ``prediction_step(model, inputs, ...)``: ``before_val_iter`` with the batch, and the step's
  ``(loss, logits, labels)`` for ``after_val_iter`` at ``on_prediction_step``;
* ``_save_checkpoint()``: ``before_save_checkpoint`` with a dict hooks add to, written next to
  the checkpoint (``hookbus_checkpoint.pt``) and handed to ``after_load_checkpoint`` when
  ``train(resume_from_checkpoint=...)`` resumes from it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import warnings
from typing import Any, Callable, Dict, Generator, List, Optional, Tuple

import hookbus
from hookbus import training

from ._framework import require
from ._relay import Relay, as_outputs, scalar, with_common_names
from ._wrappers import MethodWrappers

CHECKPOINT_FILE = "hookbus_checkpoint.pt"
"""The file, in a checkpoint's folder, holding what hooks added at ``before_save_checkpoint``."""

_callback_class: Optional[type] = None


def accepts(trainer: Any) -> bool:
    """Whether ``trainer`` is a Hugging Face ``Trainer`` (only if transformers is imported)."""
    transformers = sys.modules.get("transformers")
    return transformers is not None and isinstance(trainer, transformers.Trainer)


def _callback_type() -> type:
    """The bridge's ``TrainerCallback`` class, made once."""
    global _callback_class
    if _callback_class is None:
        transformers = require("hf", "transformers")

        class HookbusCallback(transformers.TrainerCallback):  # type: ignore[misc,name-defined]
            """Relays the Trainer's callback points to a hookbus bridge."""

            def __init__(self, bridge: HFBridge) -> None:
                self.bridge = bridge

            def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                self.bridge.train_begin({"args": args, "state": state, "control": control, **kw})

            def on_epoch_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                self.bridge.epoch_begin({"args": args, "state": state, "control": control, **kw})

            def on_substep_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                self.bridge.iter_end({"args": args, "state": state, "control": control, **kw})

            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                self.bridge.iter_end({"args": args, "state": state, "control": control, **kw})

            def on_epoch_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                self.bridge.epoch_end({"args": args, "state": state, "control": control, **kw})

            def on_prediction_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                native = {"args": args, "state": state, "control": control, **kw}
                self.bridge.prediction_step_end(native)

            def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                self.bridge.train_end({"args": args, "state": state, "control": control, **kw})

        _callback_class = HookbusCallback
    return _callback_class


def relays_on(trainer: Any) -> List[Relay]:
    """The relays of the bridges connected to ``trainer``."""
    if _callback_class is None:
        return []
    kind = _callback_class
    ours: List[Any] = [cb for cb in trainer.callback_handler.callbacks if isinstance(cb, kind)]
    return [callback.bridge.relay for callback in ours]


def install(trainer: Any, bus: hookbus.EventBus) -> Tuple[Relay, Callable[[], None]]:
    """Connect ``bus`` to ``trainer``; return the relay, and what disconnects it."""
    require("hf", "transformers")  # each time: a partial install says what is missing
    bridge = HFBridge(trainer, bus)
    return bridge.relay, bridge.disconnect


class HFBridge:
    """One bus connected to one Hugging Face ``Trainer``."""

    def __init__(self, trainer: Any, bus: hookbus.EventBus) -> None:
        self.trainer = trainer
        self.relay = Relay("hf", bus, trainer, self._stop, self._log)
        self.callback = _callback_type()(self)
        self.runs = 0  # train / evaluate / predict calls under way, nested
        self.training = False  # between on_train_begin and on_train_end
        self.resume_from: Optional[str] = None
        self.first_epoch = False  # the next on_epoch_begin is this train()'s first
        self.first_batch_idx = 0  # where a resumed run's first epoch starts
        self.batch_idx = 0  # the batch of the training epoch
        self.step: Optional[Tuple[Any, Any]] = None  # the batch and loss of the iteration
        self.stage: Optional[str] = None  # "val" or "test" while one runs
        self.stage_batch = 0  # the batch of the evaluation
        self.prediction: Optional[Tuple[Any, Any]] = None  # its batch and outputs
        # The Trainer's own duplicate warning would fire for a second bus: the handler's list
        # is appended to directly.
        trainer.callback_handler.callbacks.append(self.callback)
        self.wrapped = MethodWrappers(trainer)
        self.wrapped.wrap("train", self._wrap_train)
        self.wrapped.wrap("evaluate", self._wrap_stage("val", "eval"))
        self.wrapped.wrap("predict", self._wrap_stage("test", "test"))
        self.wrapped.wrap("training_step", self._wrap_training_step)
        self.wrapped.wrap("prediction_step", self._wrap_prediction_step)
        if hasattr(trainer, "_save_checkpoint"):
            self.wrapped.wrap("_save_checkpoint", self._wrap_save_checkpoint)
        else:  # a transformers that renamed it: say so rather than drop the events silently
            warnings.warn(
                f"{type(trainer).__name__} has no _save_checkpoint method: under this "
                "transformers the bridge sends no before_save_checkpoint, and "
                "after_load_checkpoint gets an empty checkpoint",
                stacklevel=4,
            )

    def disconnect(self) -> None:
        self.relay.active = False
        callbacks = self.trainer.callback_handler.callbacks
        if self.callback in callbacks:
            callbacks.remove(self.callback)
        self.wrapped.restore()

    # --- what the runner asks of the trainer -------------------------------------------

    def _stop(self) -> None:
        self.trainer.control.should_training_stop = True

    def _log(self, name: str, value: float) -> None:
        self.trainer.log({name: value})

    def _native(self, **extra: Any) -> Dict[str, Any]:
        """What a callback would get, for the events sent from a wrapper."""
        trainer = self.trainer
        return {
            "args": trainer.args,
            "state": trainer.state,
            "control": trainer.control,
            "model": trainer.model,
            **extra,
        }

    def _emit(self, event: str, native: Dict[str, Any], **keywords: Any) -> None:
        model = native.get("model")
        if model is not None:
            self.relay.runner.model = model
        if event == training.ON_EXCEPTION:
            self.relay.emit_exception(native, keywords["exception"])
        else:
            self.relay.emit(event, native, **keywords)

    @contextlib.contextmanager
    def _run(self, standalone: bool) -> Generator[None, None, None]:
        """One call of train / evaluate / predict; the outermost one relays its error.

        ``standalone``: an evaluate or predict call outside ``train()``, a run of its own.
        """
        self.runs += 1
        try:
            if standalone:
                self._emit(training.BEFORE_RUN, self._native())
            yield
            if standalone:
                self._emit(training.AFTER_RUN, self._native())
        except BaseException as error:
            if self.runs == 1:
                self.training = False
                self._emit(training.ON_EXCEPTION, self._native(), exception=error)
            raise
        finally:
            self.runs -= 1
            if self.runs == 0:  # let go of the last batch, even when a step raised
                self.step = self.prediction = None

    # --- training ------------------------------------------------------------------------

    def _wrap_train(self, train: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not self.relay.active:
                return train(*args, **kwargs)
            resume = kwargs.get("resume_from_checkpoint", args[0] if args else None)
            self.resume_from = self._checkpoint_folder(resume)
            with self._run(standalone=False):
                return train(*args, **kwargs)

        return wrapper

    def _checkpoint_folder(self, resume: Any) -> Optional[str]:
        if resume is None or resume is False:
            return None
        if resume is True:
            utils: Any = importlib.import_module("transformers.trainer_utils")
            found: Optional[str] = utils.get_last_checkpoint(self.trainer.args.output_dir)
            return found
        return str(resume)

    def train_begin(self, native: Dict[str, Any]) -> None:
        self.training, self.first_epoch, self.step = True, True, None
        state, runner = native["state"], self.relay.runner
        # The Trainer counts optimizer steps; an iteration here is a batch. Its progress
        # through the epochs (state.epoch, restored on resume) gives the batches run.
        batches = _batches_per_epoch(native.get("train_dataloader"))
        progress = float(state.epoch or 0)
        if batches is None:
            runner.iter = state.global_step * native["args"].gradient_accumulation_steps
            self.first_batch_idx = 0
        else:
            runner.iter = round(progress * batches)
            skipped = runner.iter - int(progress) * batches
            self.first_batch_idx = 0 if native["args"].ignore_data_skip else skipped
        runner.epoch = int(progress)
        self._emit(training.BEFORE_RUN, native)
        if self.resume_from is not None:
            checkpoint = _load_checkpoint(self.resume_from)
            self._emit(training.AFTER_LOAD_CHECKPOINT, native, checkpoint=checkpoint)
        self._emit(training.BEFORE_TRAIN, native)

    def epoch_begin(self, native: Dict[str, Any]) -> None:
        runner = self.relay.runner
        if self.first_epoch:
            self.first_epoch = False
            runner.epoch = int(native["state"].epoch or 0)
            self.batch_idx = self.first_batch_idx
        else:
            runner.epoch += 1
            self.batch_idx = 0
        self._emit(training.BEFORE_TRAIN_EPOCH, native)

    def _wrap_training_step(self, step: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not (self.relay.active and self.training):
                return step(*args, **kwargs)
            inputs = args[1] if len(args) > 1 else kwargs.get("inputs")
            native = self._native(inputs=inputs)
            self._emit(
                training.BEFORE_TRAIN_ITER, native, batch_idx=self.batch_idx, data_batch=inputs
            )
            loss = step(*args, **kwargs)
            self.step = (inputs, loss)
            return loss

        return wrapper

    def iter_end(self, native: Dict[str, Any]) -> None:
        if self.step is None:  # the iteration did not go through training_step
            return
        (inputs, loss), self.step = self.step, None
        self._emit(
            training.AFTER_TRAIN_ITER,
            native,
            batch_idx=self.batch_idx,
            data_batch=inputs,
            outputs=as_outputs(loss),
        )
        self.batch_idx += 1
        self.relay.runner.iter += 1

    def epoch_end(self, native: Dict[str, Any]) -> None:
        self._emit(training.AFTER_TRAIN_EPOCH, native)

    def train_end(self, native: Dict[str, Any]) -> None:
        self._emit(training.AFTER_TRAIN, native)
        self.training = False
        self._emit(training.AFTER_RUN, native)

    # --- validation and test ---------------------------------------------------------------

    def _wrap_stage(self, stage: str, prefix: str) -> Callable[..., Callable[..., Any]]:
        """A wrapper for ``evaluate`` (``stage="val"``) or ``predict`` (``"test"``)."""

        # The metric key prefix is the third parameter of both, after the dataset and
        # ignore_keys.
        def make(run: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                self.stage_batch = 0  # each dataset of an evaluation counts from 0
                if not self.relay.active or self.stage is not None:
                    return run(*args, **kwargs)  # inactive, or one dataset of several
                key_prefix = kwargs.get("metric_key_prefix", args[2] if len(args) > 2 else prefix)
                with self._run(standalone=self.runs == 0):
                    self.stage = stage
                    try:
                        native = self._native()
                        self._emit(f"before_{stage}", native)
                        self._emit(f"before_{stage}_epoch", native)
                        result = run(*args, **kwargs)
                    finally:
                        self.stage = None
                    # evaluate returns the metrics, predict an output holding them
                    own: Dict[str, Any] = getattr(result, "metrics", result)
                    metrics = with_common_names(own, (f"{key_prefix}_",))
                    native = self._native(metrics=own)
                    self._emit(f"after_{stage}_epoch", native, metrics=metrics)
                    self._emit(f"after_{stage}", native)
                    return result

            return wrapper

        return make

    def _wrap_prediction_step(self, step: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            stage = self.stage
            if not self.relay.active or stage is None:
                return step(*args, **kwargs)
            inputs = args[1] if len(args) > 1 else kwargs.get("inputs")
            native = self._native(inputs=inputs)
            self._emit(
                f"before_{stage}_iter", native, batch_idx=self.stage_batch, data_batch=inputs
            )
            result = step(*args, **kwargs)
            loss, predictions, labels = result
            outputs = {"loss": scalar(loss), "predictions": predictions, "labels": labels}
            self.prediction = (inputs, outputs)
            return result

        return wrapper

    def prediction_step_end(self, native: Dict[str, Any]) -> None:
        stage = self.stage
        if stage is None or self.prediction is None:
            return
        (inputs, outputs), self.prediction = self.prediction, None
        self._emit(
            f"after_{stage}_iter",
            native,
            batch_idx=self.stage_batch,
            data_batch=inputs,
            outputs=outputs,
        )
        self.stage_batch += 1

    # --- checkpoints -----------------------------------------------------------------------

    def _wrap_save_checkpoint(self, save: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not self.relay.active:
                return save(*args, **kwargs)
            checkpoint: Dict[str, Any] = {}
            self._emit(training.BEFORE_SAVE_CHECKPOINT, self._native(), checkpoint=checkpoint)
            result = save(*args, **kwargs)
            if checkpoint and self.trainer.args.should_save:
                trial = kwargs.get("trial", args[1] if len(args) > 1 else None)
                _save(self.trainer, trial, checkpoint)
            return result

        return wrapper


def _batches_per_epoch(loader: Any) -> Optional[int]:
    try:
        return len(loader) if loader is not None else None
    except TypeError:  # an iterable dataset
        return None


def _save(trainer: Any, trial: Any, checkpoint: Dict[str, Any]) -> None:
    """Write ``checkpoint`` into the folder the Trainer just saved its checkpoint in."""
    import torch  # the Trainer's own dependency
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    output_dir: Any = getattr(trainer, "_get_output_dir", None)
    run_dir: str = output_dir(trial=trial) if output_dir is not None else trainer.args.output_dir
    folder = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}")
    torch.save(checkpoint, os.path.join(folder, CHECKPOINT_FILE))


def _load_checkpoint(folder: str) -> Dict[str, Any]:
    """What hooks saved with the checkpoint in ``folder`` (empty when they saved nothing)."""
    path = os.path.join(folder, CHECKPOINT_FILE)
    if not os.path.isfile(path):
        return {}
    import torch

    loaded: Dict[str, Any] = torch.load(path, weights_only=True)
    return loaded
