"""What the trainer bridges' tests share: a recording hook class, and one short run per trainer.

Each run trains a tiny model on CPU, 2 epochs of 4 iterations by default (8 rows in batches of
2), and validates on 4 rows (2 batches) after each epoch. The trainer's own callback records
its callback points on the same timeline as the bus's events and the model's forwards
(``forward:train`` / ``forward:eval``), so a test sees what happened in which order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Set

import pytest

# Every test module here imports this one first, and torch from it: skipped, saying why,
# where PyTorch is missing. (No conftest.py here: pytest would import it as "conftest"
# before it collects tests/conftest.py, and refuse the second.)
pytest.importorskip(
    "torch", reason='the trainer bridges\' tests need PyTorch: pip install -e ".[torch]"'
)

import torch
from torch import nn

import hookbus
from hookbus import bridges, training

TRAIN_ROWS, VAL_ROWS, BATCH = 8, 4, 2
ITERS = TRAIN_ROWS // BATCH  # training iterations per epoch
VAL_ITERS = VAL_ROWS // BATCH


@dataclass
class Seen:
    """One event as a hook saw it."""

    event: str
    epoch: int
    iter: int
    batch_idx: Optional[int] = None
    rows: Optional[int] = None  # rows in data_batch
    loss: Any = None  # outputs["loss"]
    metrics: Optional[Dict[str, Any]] = None
    exception: Optional[BaseException] = None


def rows_of(batch: Any) -> Optional[int]:
    """How many rows a batch holds (its first tensor's length), whatever its container."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    values = list(batch.values()) if isinstance(batch, dict) else batch
    if isinstance(values, (list, tuple)) and values:
        return rows_of(values[0])
    return None


class Recorder:
    """The shared hook class: records every event with what a hook relies on."""

    def __init__(self, bus: hookbus.EventBus, timeline: Optional[List[str]] = None) -> None:
        self.seen: List[Seen] = []
        self.runners: Set[int] = set()
        self.timeline = timeline if timeline is not None else []
        for event in training.EVENTS:
            bus.on(event, self._recorder(event))

    def _recorder(self, event: str) -> Callable[..., None]:
        def record(runner: Any, **keywords: Any) -> None:
            assert isinstance(runner, bridges.TrainerRunner)
            self.runners.add(id(runner))
            outputs = keywords.get("outputs")
            self.seen.append(
                Seen(
                    event,
                    runner.epoch,
                    runner.iter,
                    keywords.get("batch_idx"),
                    rows_of(keywords["data_batch"]) if "data_batch" in keywords else None,
                    outputs.get("loss") if isinstance(outputs, dict) else None,
                    keywords.get("metrics"),
                    keywords.get("exception"),
                )
            )
            self.timeline.append(f"bus:{event}")

        return record

    @property
    def events(self) -> List[str]:
        return [seen.event for seen in self.seen]

    def at(self, event: str) -> List[Seen]:
        return [seen for seen in self.seen if seen.event == event]


class StopAt:
    """Asks the trainer to stop once ``steps`` training iterations finished."""

    hook_events = training.EVENTS
    hook_priority = "HIGH"

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def after_train_iter(
        self, runner: Any, *, batch_idx: int, data_batch: Any, outputs: Any
    ) -> None:
        if runner.iter + 1 >= self.steps:
            runner.stop()


def grammar(
    epochs: int,
    *,
    validation_inside_epoch: bool = False,
    forwards: bool = False,
    iters: int = ITERS,
) -> List[str]:
    """The events of ``epochs`` epochs, validated after each, in the documented order.

    ``validation_inside_epoch``: Lightning's order (it validates before ``after_train_epoch``);
    ``forwards``: with the model's forward of each step right after its ``before_*_iter``.
    """
    train_step = [
        "before_train_iter",
        *(["forward:train"] if forwards else []),
        "after_train_iter",
    ]
    val_step = ["before_val_iter", *(["forward:eval"] if forwards else []), "after_val_iter"]
    validation = [
        "before_val",
        "before_val_epoch",
        *val_step * VAL_ITERS,
        "after_val_epoch",
        "after_val",
    ]
    epoch = ["before_train_epoch", *train_step * iters]
    epoch += (
        [*validation, "after_train_epoch"]
        if validation_inside_epoch
        else [
            "after_train_epoch",
            *validation,
        ]
    )
    return ["before_run", "before_train", *epoch * epochs, "after_train", "after_run"]


def seen_in_order(timeline: List[str]) -> List[str]:
    """The bus's events and the model's forwards of ``timeline``, without the ``bus:`` mark."""
    return [entry.split(":", 1)[1] if entry.startswith("bus:") else entry
            for entry in timeline if not entry.startswith("native:")]  # fmt: skip


@dataclass
class Run:
    """A trainer made ready to run, with the bridge connected, and what records it."""

    kind: str
    trainer: Any
    connection: Any
    model: nn.Module  # the module whose forwards are on the timeline
    start: Callable[[], Any]
    timeline: List[str] = field(default_factory=list)

    @property
    def native(self) -> List[str]:
        """The trainer's own callback points, in order."""
        return [entry[len("native:") :] for entry in self.timeline if entry.startswith("native:")]

    def train(self) -> Any:
        return self.start()


def record_forwards(model: nn.Module, timeline: List[str], skip: Callable[[], bool]) -> None:
    def forward(module: nn.Module, args: Any, output: Any) -> None:
        if not skip():
            timeline.append("forward:train" if module.training else "forward:eval")

    model.register_forward_hook(forward)


# --- Hugging Face ----------------------------------------------------------------------

HF_POINTS = [
    "on_train_begin",
    "on_epoch_begin",
    "on_step_begin",
    "on_substep_end",
    "on_step_end",
    "on_epoch_end",
    "on_prediction_step",
    "on_evaluate",
    "on_predict",
    "on_save",
    "on_train_end",
]


def hf_trainer(
    tmp_path: Path,
    bus: Optional[hookbus.EventBus],
    *,
    epochs: int = 2,
    trainer_class: Any = None,
    fail_at: Optional[int] = None,
    resume_from: Any = None,
    **arguments: Any,
) -> Run:
    """A Hugging Face ``Trainer`` of a tiny random GPT-2; ``bus`` None: not connected."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=32, n_positions=8, n_embd=16, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 32, (TRAIN_ROWS + VAL_ROWS, 8))
    rows = [{"input_ids": row, "labels": row} for row in ids]
    timeline: List[str] = []

    class NativeRecorder(transformers.TrainerCallback):  # type: ignore[misc]
        pass

    for point in HF_POINTS:
        setattr(
            NativeRecorder, point, lambda self, *a, _p=point, **k: timeline.append(f"native:{_p}")
        )
    settings: Dict[str, Any] = {
        "output_dir": str(tmp_path / "hf"),
        "per_device_train_batch_size": BATCH,
        "per_device_eval_batch_size": BATCH,
        "num_train_epochs": epochs,
        "learning_rate": 1e-3,
        "eval_strategy": "epoch",
        "save_strategy": "no",
        "logging_strategy": "no",
        "report_to": [],
        "use_cpu": True,
        "disable_tqdm": True,
    }
    settings.update(arguments)
    args = transformers.TrainingArguments(**settings)
    trainer = (trainer_class or transformers.Trainer)(
        model=model, args=args, train_dataset=rows[:TRAIN_ROWS], eval_dataset=rows[TRAIN_ROWS:]
    )
    trainer.remove_callback(transformers.PrinterCallback)
    trainer.add_callback(NativeRecorder())
    if fail_at is not None:

        def fail(module: nn.Module, args: Any) -> None:
            if module.training and trainer.state.global_step == fail_at:
                raise FloatingPointError("loss diverged")

        model.register_forward_pre_hook(fail)
    record_forwards(model, timeline, skip=lambda: False)
    connection = bridges.connect(trainer, bus) if bus is not None else None
    return Run("hf", trainer, connection, model,
               lambda: trainer.train(resume_from_checkpoint=resume_from), timeline)  # fmt: skip


# --- Lightning -------------------------------------------------------------------------

LIGHTNING_POINTS = [
    "setup",
    "on_fit_start",
    "on_train_start",
    "on_train_epoch_start",
    "on_train_batch_start",
    "on_train_batch_end",
    "on_train_epoch_end",
    "on_validation_start",
    "on_validation_epoch_start",
    "on_validation_batch_start",
    "on_validation_batch_end",
    "on_validation_end",
    "on_test_start",
    "on_test_end",
    "on_train_end",
    "on_fit_end",
    "teardown",
    "on_exception",
    "on_save_checkpoint",
    "on_load_checkpoint",
]


def lightning_trainer(
    tmp_path: Path,
    bus: Optional[hookbus.EventBus],
    *,
    epochs: int = 2,
    fail_at: Optional[int] = None,
    ckpt_path: Optional[str] = None,
    **settings: Any,
) -> Run:
    """A Lightning ``Trainer`` fitting a ``Linear(4, 1)``; ``bus`` None: not connected."""
    pl = pytest.importorskip("lightning.pytorch")
    torch.manual_seed(0)
    timeline: List[str] = []

    class Net(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            if self.global_step == fail_at:
                raise FloatingPointError("loss diverged")
            x, y = batch
            return {"loss": nn.functional.mse_loss(self.linear(x), y)}

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.log("val_loss", nn.functional.mse_loss(self.linear(x), y))

        def test_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.log("test_loss", nn.functional.mse_loss(self.linear(x), y))

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class NativeRecorder(pl.Callback):  # type: ignore[misc]
        sanity = 0

    for point in LIGHTNING_POINTS:

        def record(self: Any, trainer: Any, *args: Any, _p: str = point, **kw: Any) -> None:
            if trainer.sanity_checking:
                NativeRecorder.sanity += 1
            else:
                timeline.append(f"native:{_p}")

        setattr(NativeRecorder, point, record)
    x = torch.randn(TRAIN_ROWS + VAL_ROWS, 4)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    subset = torch.utils.data.Subset
    loader = torch.utils.data.DataLoader
    train = loader(subset(data, range(TRAIN_ROWS)), batch_size=BATCH)
    val = loader(subset(data, range(TRAIN_ROWS, TRAIN_ROWS + VAL_ROWS)), batch_size=BATCH)
    options: Dict[str, Any] = {
        "max_epochs": epochs,
        "accelerator": "cpu",
        "devices": 1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 1,
        # Every step, so that Lightning's loop does not warn that the 4 batches of an
        # epoch are fewer than its default interval of 50.
        "log_every_n_steps": 1,
        "default_root_dir": str(tmp_path),
    }
    options.update(settings)
    options["callbacks"] = [NativeRecorder(), *options.get("callbacks", [])]
    trainer = pl.Trainer(**options)
    module = Net()
    record_forwards(module.linear, timeline, skip=lambda: bool(trainer.sanity_checking))
    connection = bridges.connect(trainer, bus) if bus is not None else None
    run = Run("lightning", trainer, connection, module.linear,
              lambda: trainer.fit(module, train, val, ckpt_path=ckpt_path), timeline)  # fmt: skip
    run.val_loader = val  # type: ignore[attr-defined]
    run.module = module  # type: ignore[attr-defined]
    return run


# --- mmengine --------------------------------------------------------------------------

MMENGINE_POINTS = [event for event in training.EVENTS if event != "on_exception"]


def mmengine_trainer(
    tmp_path: Path,
    bus: Optional[hookbus.EventBus],
    *,
    epochs: int = 2,
    fail_at: Optional[int] = None,
    checkpoint: Optional[Dict[str, Any]] = None,
    **settings: Any,
) -> Run:
    """An mmengine ``Runner`` training a ``Linear(4, 1)``; ``bus`` None: not connected."""
    pytest.importorskip("mmengine")
    from mmengine.evaluator import BaseMetric, Evaluator
    from mmengine.hooks import Hook
    from mmengine.model import BaseModel
    from mmengine.runner import Runner

    torch.manual_seed(0)
    timeline: List[str] = []
    steps = [0]

    class Net(BaseModel):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 1)

        def forward(self, inputs: Any, labels: Any, mode: str = "tensor") -> Any:
            prediction = self.linear(inputs)
            if mode == "loss":
                if steps[0] == fail_at:
                    raise FloatingPointError("loss diverged")
                steps[0] += 1
                return {"loss": nn.functional.mse_loss(prediction, labels)}
            return [((prediction - labels) ** 2).mean()]

    class MeanSquaredError(BaseMetric):  # type: ignore[misc]
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def process(self, data_batch: Any, data_samples: Any) -> None:
            self.results.extend(float(value) for value in data_samples)

        def compute_metrics(self, results: List[float]) -> Dict[str, float]:
            return {self.name: sum(results) / len(results)}

    class NativeRecorder(Hook):  # type: ignore[misc]
        pass

    for point in MMENGINE_POINTS:
        setattr(
            NativeRecorder,
            point,
            lambda self, runner, _p=point, **k: timeline.append(f"native:{_p}"),
        )

    x = torch.randn(TRAIN_ROWS + VAL_ROWS, 4)
    rows = [{"inputs": row, "labels": row.sum(0, keepdim=True)} for row in x]

    def loader(part: List[Dict[str, Any]]) -> Dict[str, Any]:
        return {
            "dataset": part,
            "sampler": {"type": "DefaultSampler", "shuffle": False},
            "batch_size": BATCH,
            "collate_fn": {"type": "default_collate"},
        }

    model = Net()
    options: Dict[str, Any] = {
        "model": model,
        "work_dir": str(tmp_path / "mmengine"),
        "experiment_name": f"hookbus-{tmp_path.name}",
        "train_dataloader": loader(rows[:TRAIN_ROWS]),
        "val_dataloader": loader(rows[TRAIN_ROWS:]),
        "val_evaluator": Evaluator(MeanSquaredError("val_loss")),
        "test_dataloader": loader(rows[TRAIN_ROWS:]),
        "test_evaluator": Evaluator(MeanSquaredError("test_loss")),
        "test_cfg": {},
        "train_cfg": {"by_epoch": True, "max_epochs": epochs, "val_interval": 1},
        "val_cfg": {},
        "optim_wrapper": {"optimizer": {"type": "SGD", "lr": 0.1}},
        "default_hooks": {"checkpoint": checkpoint, "logger": None},
        "log_level": "ERROR",
    }
    options.update(settings)
    runner = Runner(**options)
    record_forwards(model, timeline, skip=lambda: False)
    connection = bridges.connect(runner, bus) if bus is not None else None
    runner.register_hook(NativeRecorder())
    return Run("mmengine", runner, connection, model, runner.train, timeline)


MAKERS: Dict[str, Callable[..., Run]] = {
    "hf": hf_trainer,
    "lightning": lightning_trainer,
    "mmengine": mmengine_trainer,
}
KINDS = sorted(MAKERS)


def recorded_run(
    kind: str, tmp_path: Path, bus: Optional[hookbus.EventBus] = None, **options: Any
) -> Any:
    """Train a run of ``kind`` with a :class:`Recorder` on ``bus``; return (recorder, run)."""
    bus = bus if bus is not None else hookbus.EventBus()
    run = MAKERS[kind](tmp_path, bus, **options)
    recorder = Recorder(bus, run.timeline)
    run.train()
    return recorder, run
