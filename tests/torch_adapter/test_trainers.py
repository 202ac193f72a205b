"""hookbus.bridges: one hook class, unchanged, under a Hugging Face, Lightning and mmengine run.

Each test trains a tiny model on CPU for a few steps on generated data, with the trainer's own
callback recording its callback points side by side with the bridge; the events the hookbus
hook class saw must be exactly those points mapped through the table in docs/hook-classes.md.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import torch
from torch import nn

import hookbus
from hookbus import bridges, training


class Recorder:
    """The shared hook class: records every event with what a hook relies on."""

    hook_events = training.EVENTS

    def __init__(self) -> None:
        self.events: List[str] = []
        self.iters: List[Tuple[int, int, float]] = []  # (epoch, runner.iter, loss)
        self.metrics: List[Dict[str, Any]] = []
        self.runners: set[int] = set()
        self.finished_iters = -1  # runner.iter at after_run

    def _saw(self, event: str, runner: Any) -> None:
        assert isinstance(runner, bridges.TrainerRunner)
        self.runners.add(id(runner))
        self.events.append(event)

    def __getattr__(self, name: str) -> Any:
        if name not in training.EVENTS:
            raise AttributeError(name)

        def record(runner: Any, **keywords: Any) -> None:
            self._saw(name, runner)
            if name == training.AFTER_TRAIN_ITER:
                self.iters.append((runner.epoch, runner.iter, keywords["outputs"]["loss"]))
            if name == training.AFTER_VAL_EPOCH:
                self.metrics.append(keywords["metrics"])
            if name == training.AFTER_RUN:
                self.finished_iters = runner.iter

        return record


def subscribe_recorder(bus: hookbus.EventBus) -> Recorder:
    recorder = Recorder()
    # __getattr__ methods aren't found by subscribe's scan: map each event explicitly.
    for event in training.EVENTS:
        bus.on(event, getattr(recorder, event))
    return recorder


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


def assert_two_epochs_of_four_iters(recorder: Recorder, metric: str) -> None:
    """What every trainer's run of 2 epochs of 4 iterations gives a subscriber."""
    assert [(e, i) for e, i, _ in recorder.iters] == [
        (e, e * 4 + i) for e in (0, 1) for i in range(4)
    ]  # (epoch, global iteration), in order
    assert all(isinstance(loss, float) for _, _, loss in recorder.iters)
    assert isinstance(recorder.metrics[0][metric], float)
    assert len(recorder.runners) == 1
    assert recorder.finished_iters == 8


def mapped(native: List[str], table: Dict[str, List[str]]) -> List[str]:
    return [event for point in native for event in table.get(point, [])]


# --- Hugging Face ----------------------------------------------------------------------

HF_TABLE = {
    "on_train_begin": ["before_run", "before_train"],
    "on_epoch_begin": ["before_train_epoch"],
    "on_step_begin": ["before_train_iter"],
    "on_step_end": ["after_train_iter"],
    "on_epoch_end": ["after_train_epoch"],
    "on_evaluate": ["after_val_epoch", "after_val"],
    "on_train_end": ["after_train", "after_run"],
}


def hf_expected(native: List[str]) -> List[str]:
    events, evaluating = [], False
    for point in native:
        if point in ("on_prediction_step", "on_evaluate") and not evaluating:
            events += ["before_val", "before_val_epoch"]
            evaluating = True
        if point == "on_prediction_step":
            events += ["before_val_iter", "after_val_iter"]
        if point == "on_evaluate":
            evaluating = False
        events += HF_TABLE.get(point, [])
    return events


def hf_run(tmp_path: Path, bus: hookbus.EventBus, epochs: int) -> Tuple[List[str], Any]:
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=32, n_positions=8, n_embd=16, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 32, (12, 8))
    rows = [{"input_ids": row, "labels": row} for row in ids]
    native: List[str] = []

    class NativeRecorder(transformers.TrainerCallback):  # type: ignore[misc]
        pass

    for point in [*HF_TABLE, "on_prediction_step"]:
        setattr(NativeRecorder, point, lambda self, *a, _p=point, **k: native.append(_p))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        per_device_train_batch_size=2,
        per_device_eval_batch_size=2,
        num_train_epochs=epochs,
        learning_rate=1e-3,
        eval_strategy="epoch",
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=rows[:8], eval_dataset=rows[8:]
    )
    trainer.add_callback(NativeRecorder())
    runner = bridges.attach(trainer, bus)
    assert runner.trainer is trainer
    trainer.train()
    return native, runner


def test_hf_trainer_emits_the_mapped_events(tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    recorder = subscribe_recorder(bus)
    native, _ = hf_run(tmp_path, bus, epochs=2)
    assert recorder.events == hf_expected(native)
    assert native.count("on_step_end") == 8  # 2 epochs of 4 steps
    assert recorder.events[:4] == ["before_run", "before_train", "before_train_epoch",
                                   "before_train_iter"]  # fmt: skip
    assert recorder.events[-2:] == ["after_train", "after_run"]
    assert len(recorder.metrics) == 2  # one evaluation per epoch
    assert_two_epochs_of_four_iters(recorder, "eval_loss")


def test_hf_trainer_stops_when_a_hook_asks(tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    recorder = subscribe_recorder(bus)
    bus.subscribe(StopAt(steps=3))
    native, runner = hf_run(tmp_path, bus, epochs=2)
    assert runner.stop_requested
    assert recorder.events == hf_expected(native)
    assert recorder.events.count("after_train_iter") == 3  # stops after the step that asked
    assert recorder.events.count("after_train_epoch") == 1
    assert recorder.events[-2:] == ["after_train", "after_run"]


# --- Lightning -------------------------------------------------------------------------

LIGHTNING_TABLE = {
    "on_fit_start": ["before_run"],
    "on_train_start": ["before_train"],
    "on_train_epoch_start": ["before_train_epoch"],
    "on_train_batch_start": ["before_train_iter"],
    "on_train_batch_end": ["after_train_iter"],
    "on_train_epoch_end": ["after_train_epoch"],
    "on_validation_start": ["before_val"],
    "on_validation_epoch_start": ["before_val_epoch"],
    "on_validation_batch_start": ["before_val_iter"],
    "on_validation_batch_end": ["after_val_iter"],
    "on_validation_end": ["after_val_epoch", "after_val"],
    "on_train_end": ["after_train"],
    "on_fit_end": ["after_run"],
    "on_exception": ["on_exception"],
}


def lightning_run(tmp_path: Path, bus: hookbus.EventBus, epochs: int, fail_at: int = -1) -> Any:
    pl = pytest.importorskip("lightning.pytorch")
    torch.manual_seed(0)

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

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    native: List[str] = []

    class NativeRecorder(pl.Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.sanity = 0

    for point in LIGHTNING_TABLE:

        def record(self: Any, trainer: Any, *args: Any, _p: str = point, **kw: Any) -> None:
            if trainer.sanity_checking:
                self.sanity += 1
            else:
                native.append(_p)

        setattr(NativeRecorder, point, record)
    x = torch.randn(12, 4)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    train = torch.utils.data.DataLoader(torch.utils.data.Subset(data, range(8)), batch_size=2)
    val = torch.utils.data.DataLoader(torch.utils.data.Subset(data, range(8, 12)), batch_size=2)
    recorder_callback = NativeRecorder()
    trainer = pl.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=1,
        default_root_dir=str(tmp_path),
        callbacks=[recorder_callback],
    )
    runner = bridges.attach(trainer, bus)
    trainer.fit(Net(), train, val)
    assert recorder_callback.sanity > 0  # Lightning did run its sanity check
    return native, runner


def test_lightning_emits_the_mapped_events(tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    recorder = subscribe_recorder(bus)
    native, _ = lightning_run(tmp_path, bus, epochs=2)
    assert recorder.events == mapped(native, LIGHTNING_TABLE)
    # Lightning validates before its on_train_epoch_end (documented in the table).
    epoch_end = recorder.events.index("after_train_epoch")
    assert recorder.events[epoch_end - 1] == "after_val"
    assert_two_epochs_of_four_iters(recorder, "val_loss")


def test_lightning_stops_when_a_hook_asks(tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    recorder = subscribe_recorder(bus)
    bus.subscribe(StopAt(steps=3))
    native, runner = lightning_run(tmp_path, bus, epochs=2)
    assert runner.stop_requested
    assert recorder.events == mapped(native, LIGHTNING_TABLE)
    assert recorder.events.count("after_train_iter") == 3
    assert recorder.events[-2:] == ["after_train", "after_run"]


def test_lightning_relays_a_failing_step_to_on_exception(tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    recorder = subscribe_recorder(bus)
    with pytest.raises(FloatingPointError):
        lightning_run(tmp_path, bus, epochs=1, fail_at=2)
    assert recorder.events[-1] == "on_exception"
    assert recorder.events.count("after_train_iter") == 2


# --- mmengine --------------------------------------------------------------------------

MMENGINE_POINTS = [event for event in training.EVENTS if event != "on_exception"]


def mmengine_run(tmp_path: Path, bus: hookbus.EventBus, epochs: int) -> Tuple[List[str], Any]:
    pytest.importorskip("mmengine")
    from mmengine.evaluator import BaseMetric, Evaluator
    from mmengine.hooks import Hook
    from mmengine.model import BaseModel
    from mmengine.runner import Runner

    torch.manual_seed(0)

    class Net(BaseModel):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 1)

        def forward(self, inputs: Any, labels: Any, mode: str = "tensor") -> Any:
            prediction = self.linear(inputs)
            if mode == "loss":
                return {"loss": nn.functional.mse_loss(prediction, labels)}
            return [((prediction - labels) ** 2).mean()]

    class MeanSquaredError(BaseMetric):  # type: ignore[misc]
        def process(self, data_batch: Any, data_samples: Any) -> None:
            self.results.extend(float(value) for value in data_samples)

        def compute_metrics(self, results: List[float]) -> Dict[str, float]:
            return {"mse": sum(results) / len(results)}

    native: List[str] = []

    class NativeRecorder(Hook):  # type: ignore[misc]
        pass

    for point in MMENGINE_POINTS:
        setattr(NativeRecorder, point, lambda self, runner, _p=point, **k: native.append(_p))

    x = torch.randn(12, 4)
    rows = [{"inputs": row, "labels": row.sum(0, keepdim=True)} for row in x]

    def loader(part: List[Dict[str, Any]]) -> Dict[str, Any]:
        return {
            "dataset": part,
            "sampler": {"type": "DefaultSampler", "shuffle": False},
            "batch_size": 2,
            "collate_fn": {"type": "default_collate"},
        }

    runner = Runner(
        model=Net(),
        work_dir=str(tmp_path / "mmengine"),
        experiment_name=f"hookbus-{tmp_path.name}",
        train_dataloader=loader(rows[:8]),
        val_dataloader=loader(rows[8:]),
        val_evaluator=Evaluator(MeanSquaredError()),
        train_cfg={"by_epoch": True, "max_epochs": epochs, "val_interval": 1},
        val_cfg={},
        optim_wrapper={"optimizer": {"type": "SGD", "lr": 0.1}},
        default_hooks={"checkpoint": {"type": "CheckpointHook", "interval": 1}},
        log_level="WARNING",
    )
    view = bridges.attach(runner, bus)
    runner.register_hook(NativeRecorder())
    runner.train()
    return native, view


def test_mmengine_emits_the_same_named_events(tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    recorder = subscribe_recorder(bus)
    native, _ = mmengine_run(tmp_path, bus, epochs=2)
    assert recorder.events == native
    # mmengine's CheckpointHook saves in after_train_epoch, before validation (documented).
    epoch_end = recorder.events.index("after_train_epoch")
    assert recorder.events[epoch_end + 1 : epoch_end + 3] == [
        "before_save_checkpoint",
        "before_val",
    ]
    assert_two_epochs_of_four_iters(recorder, "mse")


def test_mmengine_stops_at_the_end_of_the_epoch_a_hook_asked_in(tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    recorder = subscribe_recorder(bus)
    bus.subscribe(StopAt(steps=3))
    native, runner = mmengine_run(tmp_path, bus, epochs=3)
    assert runner.stop_requested
    assert recorder.events == native
    assert recorder.events.count("after_train_iter") == 4  # the whole first epoch
    assert recorder.events.count("after_train_epoch") == 1
    assert recorder.events[-2:] == ["after_train", "after_run"]


# --- all of them -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bridge", "module", "extra"),
    [
        (bridges.hf_callback, "transformers", "hf"),
        (bridges.lightning_callback, "lightning.pytorch", "lightning"),
        (bridges.mmengine_hook, "mmengine.hooks", "mmengine"),
    ],
)
def test_a_bridge_without_its_framework_names_the_extra(
    bridge: Any, module: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # what a missing package looks like
    with pytest.raises(ImportError) as raised:
        bridge()
    assert f'pip install "hookbus[{extra}]"' in str(raised.value)
    assert f'pip install torch==2.13.0 -e ".[{extra}]"' in str(raised.value)


def test_a_stop_asked_before_the_run_reaches_it_and_the_next_run_starts_unstopped() -> None:
    pytest.importorskip("transformers")
    from types import SimpleNamespace

    callback = bridges.hf_callback(hookbus.EventBus())
    runner = callback.relay.runner
    runner.stop()  # before any event: nothing to tell the trainer yet

    def train_begin() -> Any:
        control = SimpleNamespace(should_training_stop=False)
        state = SimpleNamespace(global_step=0)
        callback.on_train_begin(None, state, control, model=nn.Linear(1, 1))
        callback.on_train_end(None, state, control)
        return control

    assert train_begin().should_training_stop
    assert not train_begin().should_training_stop
    assert not runner.stop_requested


def test_attach_refuses_what_is_no_trainer() -> None:
    with pytest.raises(TypeError, match=r"takes a transformers\.Trainer"):
        bridges.attach(nn.Linear(1, 1))


RUNS = {"hf": hf_run, "lightning": lightning_run, "mmengine": mmengine_run}


class Broken:
    hook_events = training.EVENTS

    def after_train_iter(self, runner: Any, **_: Any) -> None:
        raise ValueError("broken hook")


@pytest.mark.parametrize("kind", sorted(RUNS))
def test_priorities_and_the_log_policy_hold_under(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bus = hookbus.EventBus(errors="log")
    order: List[str] = []

    class Low:
        hook_events = training.EVENTS
        hook_priority = "LOW"

        def after_train_iter(self, runner: Any, **_: Any) -> None:
            order.append("low")

    class High(Low):
        hook_priority = "HIGH"

        def after_train_iter(self, runner: Any, **_: Any) -> None:
            order.append("high")

    for hook in (Low(), Broken(), High()):  # registration order doesn't matter
        bus.subscribe(hook)
    with caplog.at_level("ERROR", logger="hookbus"):
        RUNS[kind](tmp_path, bus, epochs=1)
    assert order == ["high", "low"] * 4  # every step ran, in priority order
    errors = [r for r in caplog.records if r.name == "hookbus" and r.exc_info]
    assert [type(r.exc_info[1]) for r in errors if r.exc_info] == [ValueError] * 4


@pytest.mark.parametrize("kind", sorted(RUNS))
def test_a_hook_error_under_the_raise_policy_ends_the_run(kind: str, tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    bus.subscribe(Broken())
    with pytest.raises(ValueError, match="broken hook"):
        RUNS[kind](tmp_path, bus, epochs=1)
