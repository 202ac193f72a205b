"""One set of hook classes, unchanged, in a hand-written loop and inside three trainers.

Shows:
* ``hookbus.bridges.connect(trainer, bus)`` on a Hugging Face ``Trainer``, a Lightning
  ``Trainer`` and an mmengine ``Runner``: each then emits the events of ``hookbus.training``
  on the bus, each at its moment, with the batch, the loss, the metrics and the counters a
  hand-written loop gives; ``with`` disconnects the bridge when the run ends;
* four hook classes written once against those events, run unchanged in a hand-written loop
  and under each trainer: a ``Logger``, an ``EarlyStop`` (``runner.stop()`` asks any trainer to
  stop: mmengine's epoch-based loop at the end of that epoch, the others after the step that
  asked), an ``EMA`` that validates with averaged weights (swapped in at ``before_val_epoch``,
  back at ``after_val_epoch``) and an ``InputCounter`` counting the rows each step received;
* the same numbers everywhere: the four loops train the same model on the same data in the same
  order, so the first epoch's EMA validation loss and the rows counted agree to 1e-6;
* priorities keeping their meaning: the early-stopping check (``HIGH``) runs before the
  logger (``LOW``) under every trainer.

Each trainer that is installed (``pip install torch==2.13.0 -e ".[hf,lightning,mmengine]"``)
trains an ``nn.Linear`` learning ``y = 3x + 1`` from generated data, on CPU; one that is missing
(or half-installed: the Hugging Face ``Trainer`` needs ``accelerate`` too) is skipped, saying
what to install. Name loops to run only those: ``python examples/trainers.py hand-written hf``.
Run it: ``python examples/trainers.py``
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import nn

import hookbus
from hookbus import bridges, training

EPOCHS = 20  # the most any run may take; EarlyStop ends each one well before
STOP_BELOW = 0.01  # EarlyStop's loss threshold
BATCH = 8


class TinyRegressor(nn.Module):
    """The model every loop trains: its forward returns the loss, as HF's models do."""

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
    """Logs the loss now and then, the validation loss, and the end of the run."""

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
        # "loss" is the validation loss under every trainer (HF's eval_loss, the val_loss
        # Lightning's and mmengine's validation below name it).
        self.lines.append(f"epoch {runner.epoch} validation: loss {metrics['loss']:.4f}")

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


class EMA:
    """Keeps an exponential moving average of the weights, and validates with it."""

    hook_events = training.EVENTS

    def __init__(self, decay: float = 0.9) -> None:
        self.decay = decay
        self.average: List[torch.Tensor] = []
        self.trained: List[torch.Tensor] = []
        self.val_losses: List[float] = []  # what validation measured with the average

    def after_train_iter(self, runner: Any, **_: Any) -> None:
        with torch.no_grad():
            weights = [parameter.detach() for parameter in runner.model.parameters()]
            if not self.average:
                self.average = [weight.clone() for weight in weights]
            for average, weight in zip(self.average, weights):
                average.mul_(self.decay).add_(weight, alpha=1 - self.decay)

    def before_val_epoch(self, runner: Any) -> None:  # before the first validation batch
        with torch.no_grad():
            parameters = list(runner.model.parameters())
            self.trained = [parameter.detach().clone() for parameter in parameters]
            for parameter, average in zip(parameters, self.average):
                parameter.copy_(average)

    def after_val_epoch(self, runner: Any, *, metrics: Dict[str, Any]) -> None:
        self.val_losses.append(metrics["loss"])
        with torch.no_grad():
            for parameter, trained in zip(runner.model.parameters(), self.trained):
                parameter.copy_(trained)


class InputCounter:
    """Counts the rows each training and validation step received, per epoch."""

    hook_events = training.EVENTS

    def __init__(self) -> None:
        self.rows: Dict[Tuple[str, int], int] = {}  # (stage, epoch) -> rows

    def _count(self, stage: str, runner: Any, data_batch: Dict[str, torch.Tensor]) -> None:
        key = (stage, runner.epoch)
        self.rows[key] = self.rows.get(key, 0) + len(data_batch["inputs"])

    def after_train_iter(self, runner: Any, *, data_batch: Any, **_: Any) -> None:
        self._count("train", runner, data_batch)

    def after_val_iter(self, runner: Any, *, data_batch: Any, **_: Any) -> None:
        self._count("val", runner, data_batch)


# --- the loops: a hand-written one, then each trainer --------------------------------


class Loop:
    """A hand-written loop whose runner offers what hooks use: model, epoch, iter, stop()."""

    def __init__(self, model: TinyRegressor, bus: hookbus.EventBus) -> None:
        self.model, self.bus = model, bus
        self.epoch = self.iter = 0
        self.stop_requested = False

    def stop(self) -> None:
        self.stop_requested = True

    def batches(self, rows: List[Dict[str, torch.Tensor]]) -> List[Dict[str, torch.Tensor]]:
        return [
            {key: torch.stack([row[key] for row in rows[i : i + BATCH]]) for key in rows[0]}
            for i in range(0, len(rows), BATCH)
        ]

    def validate(self) -> None:
        emit = self.bus.emit
        emit(training.BEFORE_VAL, self)
        emit(training.BEFORE_VAL_EPOCH, self)
        losses = []
        with torch.no_grad():
            for batch_idx, batch in enumerate(self.batches(VAL)):
                emit(training.BEFORE_VAL_ITER, self, batch_idx=batch_idx, data_batch=batch)
                outputs = {"loss": self.model(**batch)["loss"].item()}
                losses.append(outputs["loss"])
                emit(training.AFTER_VAL_ITER, self, batch_idx=batch_idx, data_batch=batch,
                     outputs=outputs)  # fmt: skip
        emit(training.AFTER_VAL_EPOCH, self, metrics={"loss": sum(losses) / len(losses)})
        emit(training.AFTER_VAL, self)

    def run(self, max_epochs: int) -> None:
        emit = self.bus.emit
        optimizer = torch.optim.SGD(self.model.parameters(), lr=0.5)
        emit(training.BEFORE_RUN, self)
        emit(training.BEFORE_TRAIN, self)
        for self.epoch in range(max_epochs):
            emit(training.BEFORE_TRAIN_EPOCH, self)
            for batch_idx, batch in enumerate(self.batches(TRAIN)):
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
            self.validate()
            if self.stop_requested:
                break
        emit(training.AFTER_TRAIN, self)
        emit(training.AFTER_RUN, self)


def hand_written(model: TinyRegressor, bus: hookbus.EventBus, work_dir: Path) -> None:
    Loop(model, bus).run(EPOCHS)


def hugging_face(model: TinyRegressor, bus: hookbus.EventBus, work_dir: Path) -> None:
    import transformers

    sequential = "train_sampling_strategy" in transformers.TrainingArguments.__dataclass_fields__
    args = transformers.TrainingArguments(
        output_dir=str(work_dir),
        per_device_train_batch_size=BATCH,
        per_device_eval_batch_size=BATCH,
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
        **({"train_sampling_strategy": "sequential"} if sequential else {}),  # as the others
    )

    class InOrder(transformers.Trainer):  # type: ignore[misc]
        def _get_train_sampler(self, *args: Any, **kwargs: Any) -> Any:
            return torch.utils.data.SequentialSampler(self.train_dataset)

    trainer_class = transformers.Trainer if sequential else InOrder
    trainer = trainer_class(model=model, args=args, train_dataset=TRAIN, eval_dataset=VAL)
    trainer.remove_callback(transformers.PrinterCallback)  # it prints each evaluation's metrics
    with bridges.connect(trainer, bus):
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
    with bridges.connect(trainer, bus):
        trainer.fit(Module(), loader(TRAIN, batch_size=BATCH), loader(VAL, batch_size=BATCH))


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
            "batch_size": BATCH,
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
    with bridges.connect(runner, bus):
        runner.train()


LOOPS: Dict[str, Callable[[TinyRegressor, hookbus.EventBus, Path], None]] = {
    "hand-written": hand_written,
    "hf": hugging_face,
    "lightning": lightning,
    "mmengine": mmengine,
}
NEEDS = {
    "hf": ["transformers", "accelerate"],
    "lightning": ["lightning"],
    "mmengine": ["mmengine"],
}


def missing(name: str) -> Optional[str]:
    """The first package loop ``name`` needs that does not import, if any."""
    for package in NEEDS.get(name, []):
        try:
            importlib.import_module(package)
        except ImportError:
            return package
    return None


def train(name: str, work_dir: Path) -> Tuple[str, Dict[str, Any]]:
    """Run loop ``name`` with the four hooks; return its line and the numbers to compare."""
    torch.manual_seed(0)
    model = TinyRegressor()
    bus = hookbus.EventBus(name)
    logger, early_stop = Logger(), EarlyStop(loss_below=STOP_BELOW)
    ema, counter = EMA(), InputCounter()
    for hook in (logger, early_stop, ema, counter):  # the order doesn't matter: priorities do
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
    assert any("validation" in line for line in logger.lines)
    numbers = {
        "first EMA validation loss": ema.val_losses[0],
        "rows in the first epoch": (counter.rows[("train", 0)], counter.rows[("val", 0)]),
    }
    line = (
        f"{name:>12}: asked to stop at iter {early_stop.asked_at}, stopped after {iterations} "
        f"iterations; y = {weight:.2f}x + {bias:.2f}; first EMA validation loss "
        f"{ema.val_losses[0]:.6f}"
    )
    return line, numbers


def main(names: List[str]) -> None:
    # The trainers' own chatter (tips, warnings about this tiny setup) is not the point here.
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    unknown = sorted(set(names) - set(LOOPS))
    assert not unknown, f"no loop named {unknown}; the loops are {list(LOOPS)}"
    results: Dict[str, Dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as work_dir:
        for name in names or LOOPS:
            package = missing(name)
            if package is not None:
                print(f"{name:>12}: skipped, {package} is not installed "
                      f'(pip install torch==2.13.0 -e ".[{name}]")')  # fmt: skip
                continue
            line, results[name] = train(name, Path(work_dir) / name)
            print(line)
    # The same model, data and order everywhere: the hooks saw the same numbers.
    first = next(iter(results.values()), {})
    for name, numbers in results.items():
        assert numbers["rows in the first epoch"] == (len(TRAIN), len(VAL)), name
        loss, expected = numbers["first EMA validation loss"], first["first EMA validation loss"]
        assert abs(loss - expected) < 1e-6, (name, loss, expected)
    print("trainers example: ok")


if __name__ == "__main__":
    main(sys.argv[1:])
