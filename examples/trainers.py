"""One hook class, unchanged, in a hand-written loop and inside three trainers.

Shows:
* ``hookbus.bridges.attach(trainer, bus)`` on a Hugging Face ``Trainer``, a Lightning
  ``Trainer`` and an mmengine ``Runner``: each then emits the events of ``hookbus.training``
  on the bus, at the points where it calls its own callbacks;
* a ``Logger`` and an ``EarlyStop`` hook class written once against those events, run
  unchanged in a hand-written loop and under each trainer; ``runner.stop()`` asks any of them
  to stop (mmengine's epoch-based loop stops at the end of that epoch, the others after the
  step that asked);
* priorities keeping their meaning: the early-stopping check (``HIGH``) runs before the
  logger (``LOW``) under every trainer.

Each trainer that is installed (``pip install torch==2.13.0 -e ".[hf,lightning,mmengine]"``)
trains the same tiny model, an ``nn.Linear`` learning ``y = 3x + 1`` from generated data, on
CPU; a missing one is skipped, saying how to install it.
Run it: ``python examples/trainers.py``
"""

from __future__ import annotations

import importlib.util
import logging
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch
from torch import nn

import hookbus
from hookbus import bridges, training

EPOCHS = 20  # the most any run may take; EarlyStop ends each one well before
STOP_BELOW = 0.01  # EarlyStop's loss threshold


class TinyRegressor(nn.Module):
    """The model every trainer trains: its forward returns the loss, as HF's models do."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(1, 1)

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor) -> Dict[str, torch.Tensor]:
        return {"loss": nn.functional.mse_loss(self.linear(inputs), labels)}


def make_rows(count: int, seed: int) -> List[Dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(count, 1, generator=generator) * 2 - 1
    return [{"inputs": row, "labels": 3 * row + 1} for row in x]


TRAIN, VAL = make_rows(64, seed=0), make_rows(16, seed=1)


# --- the hooks: written once ---------------------------------------------------------


class Logger:
    """Logs the loss now and then, the validation metrics, and the end of the run."""

    hook_events = training.EVENTS
    hook_priority = "LOW"

    def __init__(self) -> None:
        self.lines: List[str] = []
        self.order: List[str] = []

    def after_train_iter(
        self, runner: Any, *, batch_idx: int, data_batch: Any, outputs: Dict[str, Any]
    ) -> None:
        self.order.append("logger")
        if runner.iter % 8 == 0:
            self.lines.append(
                f"epoch {runner.epoch} iter {runner.iter}: loss {outputs['loss']:.4f}"
            )

    def after_val_epoch(self, runner: Any, *, metrics: Dict[str, Any]) -> None:
        shown = ", ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items()) if "loss" in k)
        self.lines.append(f"epoch {runner.epoch} validation: {shown}")

    def after_run(self, runner: Any) -> None:
        self.lines.append(f"done after {runner.iter} iterations")


class EarlyStop:
    """Asks the trainer to stop once the training loss is below a threshold."""

    hook_events = training.EVENTS
    hook_priority = "HIGH"

    def __init__(self, loss_below: float) -> None:
        self.loss_below = loss_below
        self.asked_at: Optional[int] = None
        self.order: List[str] = []

    def after_train_iter(self, runner: Any, *, outputs: Dict[str, Any], **_: Any) -> None:
        self.order.append("early stop")
        if outputs["loss"] < self.loss_below and self.asked_at is None:
            self.asked_at = runner.iter
            runner.stop()


# --- the loops: a hand-written one, then each trainer --------------------------------


class Loop:
    """A hand-written loop whose runner offers what hooks use: model, epoch, iter, stop()."""

    def __init__(self, model: TinyRegressor, bus: hookbus.EventBus) -> None:
        self.model, self.bus = model, bus
        self.epoch = self.iter = 0
        self.stop_requested = False

    def stop(self) -> None:
        self.stop_requested = True

    def run(self, max_epochs: int) -> None:
        emit = self.bus.emit
        optimizer = torch.optim.SGD(self.model.parameters(), lr=0.5)
        emit(training.BEFORE_RUN, self)
        emit(training.BEFORE_TRAIN, self)
        for self.epoch in range(max_epochs):
            emit(training.BEFORE_TRAIN_EPOCH, self)
            for batch_idx in range(len(TRAIN) // 8):
                batch = {
                    k: torch.stack([r[k] for r in TRAIN[batch_idx * 8 :][:8]]) for k in TRAIN[0]
                }
                emit(training.BEFORE_TRAIN_ITER, self, batch_idx=batch_idx, data_batch=batch)
                loss = self.model(**batch)["loss"]
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                outputs = {"loss": loss.item()}
                emit(training.AFTER_TRAIN_ITER, self, batch_idx=batch_idx, data_batch=batch,
                     outputs=outputs)  # fmt: skip
                self.iter += 1
                if self.stop_requested:
                    break
            emit(training.AFTER_TRAIN_EPOCH, self)
            if self.stop_requested:
                break
        emit(training.AFTER_TRAIN, self)
        emit(training.AFTER_RUN, self)


def hand_written(model: TinyRegressor, bus: hookbus.EventBus, work_dir: Path) -> None:
    Loop(model, bus).run(EPOCHS)


def hugging_face(model: TinyRegressor, bus: hookbus.EventBus, work_dir: Path) -> None:
    import transformers

    args = transformers.TrainingArguments(
        output_dir=str(work_dir),
        per_device_train_batch_size=8,
        per_device_eval_batch_size=8,
        num_train_epochs=EPOCHS,
        optim="sgd",
        learning_rate=0.5,
        lr_scheduler_type="constant",
        max_grad_norm=0.0,  # no clipping, as in the other loops
        eval_strategy="epoch",
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=TRAIN, eval_dataset=VAL)
    trainer.remove_callback(transformers.PrinterCallback)  # it prints each evaluation's metrics
    bridges.attach(trainer, bus)
    trainer.train()


def lightning(model: TinyRegressor, bus: hookbus.EventBus, work_dir: Path) -> None:
    import lightning.pytorch as pl

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = model

        def training_step(self, batch: Dict[str, torch.Tensor], batch_idx: int) -> Any:
            return self.net(**batch)

        def validation_step(self, batch: Dict[str, torch.Tensor], batch_idx: int) -> None:
            self.log("val_loss", self.net(**batch)["loss"])

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.5)

    loader = torch.utils.data.DataLoader
    trainer = pl.Trainer(
        max_epochs=EPOCHS,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(work_dir),
    )
    bridges.attach(trainer, bus)
    trainer.fit(Module(), loader(TRAIN, batch_size=8), loader(VAL, batch_size=8))


def mmengine(model: TinyRegressor, bus: hookbus.EventBus, work_dir: Path) -> None:
    from mmengine.evaluator import BaseMetric, Evaluator
    from mmengine.model import BaseModel
    from mmengine.runner import Runner

    class Model(BaseModel):
        def __init__(self) -> None:
            super().__init__()
            self.net = model

        def forward(self, inputs: Any, labels: Any, mode: str = "tensor") -> Any:
            if mode == "loss":
                return self.net(inputs, labels)
            return [self.net(inputs, labels)["loss"]]

        # mmengine averages a step's losses itself; a one-element list keeps ours.

    class MeanLoss(BaseMetric):
        def process(self, data_batch: Any, data_samples: Any) -> None:
            self.results.extend(float(loss) for loss in data_samples)

        def compute_metrics(self, results: List[float]) -> Dict[str, float]:
            return {"val_loss": sum(results) / len(results)}

    def loader(rows: List[Dict[str, torch.Tensor]]) -> Dict[str, Any]:
        return {
            "dataset": rows,
            "sampler": {"type": "DefaultSampler", "shuffle": False},
            "batch_size": 8,
            "collate_fn": {"type": "default_collate"},
        }

    runner = Runner(
        model=Model(),
        work_dir=str(work_dir),
        train_dataloader=loader(TRAIN),
        val_dataloader=loader(VAL),
        val_evaluator=Evaluator(MeanLoss()),
        train_cfg={"by_epoch": True, "max_epochs": EPOCHS, "val_interval": 1},
        val_cfg={},
        optim_wrapper={"optimizer": {"type": "SGD", "lr": 0.5}},
        default_hooks={"checkpoint": None, "logger": None},
        log_level="ERROR",
    )
    bridges.attach(runner, bus)
    runner.train()


LOOPS: Dict[str, Callable[[TinyRegressor, hookbus.EventBus, Path], None]] = {
    "hand-written": hand_written,
    "hf": hugging_face,
    "lightning": lightning,
    "mmengine": mmengine,
}
NEEDS = {"hf": "transformers", "lightning": "lightning", "mmengine": "mmengine"}


def train(name: str, work_dir: Path) -> str:
    torch.manual_seed(0)
    model = TinyRegressor()
    bus = hookbus.EventBus(name)
    logger, early_stop = Logger(), EarlyStop(loss_below=STOP_BELOW)
    for hook in (logger, early_stop):  # registration order doesn't matter: priorities do
        bus.subscribe(hook)
    LOOPS[name](model, bus, work_dir)

    assert early_stop.asked_at is not None, f"{name}: the loss never fell below {STOP_BELOW}"
    iterations = int(logger.lines[-1].split()[2])
    # Stopped soon after it asked: at once, or (mmengine) at the end of that epoch.
    assert early_stop.asked_at < iterations <= (early_stop.asked_at // 8 + 1) * 8, name
    assert iterations < EPOCHS * 8, f"{name} did not stop early"
    weight, bias = model.linear.weight.item(), model.linear.bias.item()
    assert abs(weight - 3) < 0.5, (name, weight)  # it learned
    assert abs(bias - 1) < 0.5, (name, bias)
    # The HIGH hook ran before the LOW one at every step, under every loop.
    steps = len(early_stop.order)
    assert [who for pair in zip(early_stop.order, logger.order) for who in pair] == (
        ["early stop", "logger"] * steps
    )
    assert any("validation" in line for line in logger.lines) or name == "hand-written"
    return (
        f"{name:>12}: asked to stop at iter {early_stop.asked_at}, stopped after {iterations} "
        f"iterations; y = {weight:.2f}x + {bias:.2f}"
    )


def main() -> None:
    # The trainers' own chatter (tips, warnings about this tiny setup) is not the point here.
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    with tempfile.TemporaryDirectory() as work_dir:
        for name in LOOPS:
            needed = NEEDS.get(name)
            if needed and importlib.util.find_spec(needed) is None:
                print(f"{name:>12}: skipped, {needed} is not installed "
                      f'(pip install torch==2.13.0 -e ".[{name}]")')  # fmt: skip
                continue
            print(train(name, Path(work_dir) / name))
    print("trainers example: ok")


if __name__ == "__main__":
    main()
