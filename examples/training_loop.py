"""An mmengine-style training loop, without a framework: events plus hook classes.

Shows:
* a ~40-line loop (``Runner``) that emits the conventional events of
  ``hookbus.training`` (``before_run`` ... ``after_train_iter`` ... ``after_run``,
  and ``on_exception`` when the run fails) and knows nothing about its hooks;
* checkpoint, logger and EMA hooks written as hook classes: methods named after
  the events (``hook_events = training.EVENTS``) or marked with ``@hookbus.listens``,
  with mmengine's priorities (``hook_priority = "VERY_LOW"``...) setting their order;
* ``before_save_checkpoint``: hooks adding their state to a checkpoint;
* ``on_exception``: a logger noting the crash and an emergency checkpoint.

A tiny ``nn.Linear`` learns ``y = 3x + 1`` from synthetic data in a few steps.
Run it: ``python examples/training_loop.py``
"""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any, Dict, List

import torch
from torch import nn

import hookbus
from hookbus import training


class Runner:
    """The loop: owns model, optimizer and data; everything else is a hook."""

    def __init__(self, model: nn.Module, bus: hookbus.EventBus, work_dir: Path) -> None:
        self.model, self.bus, self.work_dir = model, bus, work_dir
        self.optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        x = torch.rand(64, 1) * 2 - 1
        self.train_data = list(zip(x.split(8), (3 * x + 1 + 0.01 * torch.randn_like(x)).split(8)))
        self.val_data = [(x[:16], 3 * x[:16] + 1)]
        self.epoch = self.iter = 0

    def run(self, max_epochs: int) -> None:
        emit = self.bus.emit
        emit(training.BEFORE_RUN, self)
        try:
            emit(training.BEFORE_TRAIN, self)
            for self.epoch in range(max_epochs):
                emit(training.BEFORE_TRAIN_EPOCH, self)
                self.model.train()
                for batch_idx, batch in enumerate(self.train_data):
                    emit(training.BEFORE_TRAIN_ITER, self, batch_idx=batch_idx, data_batch=batch)
                    outputs = self.train_step(batch)
                    emit(
                        training.AFTER_TRAIN_ITER,
                        self,
                        batch_idx=batch_idx,
                        data_batch=batch,
                        outputs=outputs,
                    )
                    self.iter += 1
                emit(training.AFTER_TRAIN_EPOCH, self)
                self.validate()
            emit(training.AFTER_TRAIN, self)
        except Exception as error:
            emit(training.ON_EXCEPTION, self, exception=error)
            raise
        emit(training.AFTER_RUN, self)

    def train_step(self, batch: Any) -> Dict[str, Any]:
        x, y = batch
        loss = nn.functional.mse_loss(self.model(x), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return {"loss": loss.item()}

    @torch.no_grad()
    def validate(self) -> None:
        emit = self.bus.emit
        emit(training.BEFORE_VAL, self)
        emit(training.BEFORE_VAL_EPOCH, self)
        self.model.eval()
        losses = []
        for batch_idx, (x, y) in enumerate(self.val_data):
            emit(training.BEFORE_VAL_ITER, self, batch_idx=batch_idx, data_batch=(x, y))
            loss = nn.functional.mse_loss(self.model(x), y).item()
            losses.append(loss)
            emit(
                training.AFTER_VAL_ITER,
                self,
                batch_idx=batch_idx,
                data_batch=(x, y),
                outputs={"loss": loss},
            )
        emit(training.AFTER_VAL_EPOCH, self, metrics={"val_loss": sum(losses) / len(losses)})
        emit(training.AFTER_VAL, self)

    def save_checkpoint(self, name: str) -> Path:
        checkpoint: Dict[str, Any] = {"epoch": self.epoch, "model": self.model.state_dict()}
        self.bus.emit(training.BEFORE_SAVE_CHECKPOINT, self, checkpoint=checkpoint)
        path = self.work_dir / name
        torch.save(checkpoint, path)
        return path


# --- hooks --------------------------------------------------------------------------


class EMAHook:
    """Keeps an exponential moving average of the weights; validates with it."""

    hook_events = training.EVENTS
    hook_priority = "NORMAL"

    def __init__(self, momentum: float = 0.5) -> None:
        self.momentum = momentum
        self.ema: nn.Module = nn.Identity()
        self.backup: Dict[str, torch.Tensor] = {}

    def before_run(self, runner: Runner) -> None:
        self.ema = copy.deepcopy(runner.model).requires_grad_(False)

    @hookbus.listens(training.AFTER_TRAIN_ITER)
    def update(self, runner: Runner, **_: Any) -> None:
        with torch.no_grad():
            for average, current in zip(self.ema.parameters(), runner.model.parameters()):
                average.lerp_(current, 1 - self.momentum)

    def before_val_epoch(self, runner: Runner) -> None:
        self.backup = {k: v.clone() for k, v in runner.model.state_dict().items()}
        runner.model.load_state_dict(self.ema.state_dict())

    def after_val_epoch(self, runner: Runner, metrics: Dict[str, float]) -> None:
        runner.model.load_state_dict(self.backup)

    def before_save_checkpoint(self, runner: Runner, checkpoint: Dict[str, Any]) -> None:
        checkpoint["ema"] = self.ema.state_dict()


class LoggerHook:
    """Logs the loss every few iterations, the metrics, and a crash."""

    hook_events = training.EVENTS
    hook_priority = "BELOW_NORMAL"  # after the EMA hook, before the checkpoint hook

    def __init__(self, interval: int) -> None:
        self.interval = interval
        self.lines: List[str] = []

    def after_train_iter(self, runner: Runner, *, batch_idx: int, outputs: Any, **_: Any) -> None:
        if (runner.iter + 1) % self.interval == 0:
            self.lines.append(
                f"epoch {runner.epoch} iter {runner.iter}: loss {outputs['loss']:.4f}"
            )

    def after_train_epoch(self, runner: Runner) -> None:
        self.lines.append(f"epoch {runner.epoch} done")

    def after_val_epoch(self, runner: Runner, metrics: Dict[str, float]) -> None:
        self.lines.append(f"epoch {runner.epoch} val_loss {metrics['val_loss']:.4f}")

    def before_save_checkpoint(self, runner: Runner, checkpoint: Dict[str, Any]) -> None:
        checkpoint["log"] = list(self.lines)

    def on_exception(self, runner: Runner, exception: BaseException) -> None:
        self.lines.append(f"crashed at iter {runner.iter}: {exception}")


class CheckpointHook:
    """Saves a checkpoint after each epoch, and one more if the run crashes."""

    hook_events = training.EVENTS
    hook_priority = "VERY_LOW"  # last: sees the logger's line for this epoch

    def __init__(self) -> None:
        self.saved: List[Path] = []

    def after_train_epoch(self, runner: Runner) -> None:
        self.saved.append(runner.save_checkpoint(f"epoch_{runner.epoch}.pt"))

    def on_exception(self, runner: Runner, exception: BaseException) -> None:
        self.saved.append(runner.save_checkpoint("emergency.pt"))


class DivergenceGuard:
    """Stops the run when the loss explodes (here: on purpose, at a set iteration)."""

    def __init__(self, fail_at: int) -> None:
        self.fail_at = fail_at

    @hookbus.listens(training.AFTER_TRAIN_ITER, priority="HIGHEST")
    def check(self, runner: Runner, **_: Any) -> None:
        if runner.iter == self.fail_at:
            raise FloatingPointError("loss diverged")


def main() -> None:
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as work_dir:
        bus = hookbus.EventBus("train")
        runner = Runner(nn.Linear(1, 1), bus, Path(work_dir))
        ema, logger, checkpoints = EMAHook(), LoggerHook(interval=4), CheckpointHook()
        for hook in (checkpoints, logger, ema):  # registration order doesn't matter
            bus.subscribe(hook)
        order = [getattr(h.hook, "__qualname__", "?") for h in bus.hooks("after_train_iter")]
        assert order == ["EMAHook.update", "LoggerHook.after_train_iter"], order

        runner.run(max_epochs=3)

        losses = [float(line.rsplit(" ", 1)[1]) for line in logger.lines if "iter" in line]
        assert len(losses) == 3 * 8 // 4, logger.lines
        assert losses[-1] < losses[0] / 10, losses  # it learned
        weight, bias = runner.model.weight.item(), runner.model.bias.item()
        assert abs(weight - 3) < 0.5, weight
        assert abs(bias - 1) < 0.5, bias

        # The EMA hook swapped its weights in for validation, then back.
        assert not torch.equal(ema.ema.weight, runner.model.weight)
        assert [p.name for p in checkpoints.saved] == ["epoch_0.pt", "epoch_1.pt", "epoch_2.pt"]
        last = torch.load(checkpoints.saved[-1])
        assert set(last) == {"epoch", "model", "ema", "log"}
        assert last["log"][-1] == "epoch 2 done"  # the logger ran before the checkpoint
        assert torch.equal(last["ema"]["weight"], ema.ema.weight)

        # A failing run: on_exception lets the hooks log and save before it propagates.
        guard = bus.subscribe(DivergenceGuard(fail_at=runner.iter + 5))
        try:
            runner.run(max_epochs=1)
        except FloatingPointError:
            pass
        else:
            raise AssertionError("the guard should have stopped the run")
        guard.remove()
        assert logger.lines[-1] == "crashed at iter 29: loss diverged", logger.lines[-1]
        assert checkpoints.saved[-1].name == "emergency.pt"
        assert "crashed" in torch.load(checkpoints.saved[-1])["log"][-1]

    print("\n".join(logger.lines[-4:]))
    print("training loop example: ok")


if __name__ == "__main__":
    main()
