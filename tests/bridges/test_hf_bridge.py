"""The Hugging Face ``Trainer``'s bridge: its callbacks, and the wrappers where it has none."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List

import pytest
from bridge_helpers import (
    BATCH,
    ITERS,
    VAL_ITERS,
    Recorder,
    hf_trainer,
    recorded_run,
    torch,
)

import hookbus
from hookbus import bridges, training

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

pytestmark = pytest.mark.torch


def _follows(timeline: List[str], event: str, point: str) -> bool:
    """Whether each ``bus:event`` of ``timeline`` comes right after a ``native:point``."""
    indices = [i for i, entry in enumerate(timeline) if entry == f"bus:{event}"]
    return bool(indices) and all(timeline[i - 1] == f"native:{point}" for i in indices)


def test_the_after_events_come_at_the_trainers_own_callbacks(tmp_path: Path) -> None:
    recorder, run = recorded_run("hf", tmp_path)
    assert run.native.count("on_step_end") == 2 * ITERS
    assert run.native.count("on_prediction_step") == 2 * VAL_ITERS
    timeline = run.timeline
    assert _follows(timeline, "after_train_iter", "on_step_end")
    assert _follows(timeline, "after_val_iter", "on_prediction_step")
    assert _follows(timeline, "after_val_epoch", "on_evaluate")  # the Trainer's own first
    assert timeline.index("bus:before_val_epoch") < timeline.index("native:on_prediction_step")
    assert recorder.events[-2:] == ["after_train", "after_run"]


class HandWrittenLoss(transformers.Trainer):  # type: ignore[misc]
    """The subclass the Hugging Face docs teach: a compute_loss of its own."""

    losses: List[float]

    def compute_loss(
        self, model: Any, inputs: Dict[str, Any], return_outputs: bool = False, **kwargs: Any
    ) -> Any:
        labels = inputs["labels"]
        outputs = model(input_ids=inputs["input_ids"])  # no labels: outputs.loss is None
        logits = outputs.logits[:, :-1].reshape(-1, outputs.logits.shape[-1])
        loss = torch.nn.functional.cross_entropy(logits, labels[:, 1:].reshape(-1))
        if model.training:
            self.losses.append(loss.item())
        return (loss, outputs) if return_outputs else loss


def test_the_loss_is_what_the_trainer_backpropagated_with_a_compute_loss_of_its_own(
    tmp_path: Path,
) -> None:
    bus = hookbus.EventBus()
    run = hf_trainer(tmp_path, bus, trainer_class=HandWrittenLoss)
    run.trainer.losses = []
    recorder = Recorder(bus, run.timeline)
    run.train()
    reported = [seen.loss for seen in recorder.at("after_train_iter")]
    assert reported == pytest.approx(run.trainer.losses)
    assert len(reported) == 2 * ITERS
    losses = [seen.metrics["loss"] for seen in recorder.at("after_val_epoch") if seen.metrics]
    assert all(isinstance(loss, float) for loss in losses)
    assert len(losses) == 2


def test_with_gradient_accumulation_each_batch_is_an_iteration(tmp_path: Path) -> None:
    recorder, run = recorded_run("hf", tmp_path, gradient_accumulation_steps=2)
    assert run.native.count("on_step_end") == ITERS  # two optimizer steps an epoch
    steps = recorder.at("after_train_iter")
    assert [(s.epoch, s.iter, s.batch_idx, s.rows) for s in steps] == [
        (epoch, epoch * ITERS + batch, batch, BATCH)
        for epoch in range(2)
        for batch in range(ITERS)
    ]
    # The batch's share of the step's loss, as backpropagated: all positive numbers.
    assert all(isinstance(s.loss, float) and s.loss > 0 for s in steps)
    # The last batch of a step ends after the optimizer step, the others before it.
    timeline = run.timeline
    ends = [timeline[i - 1] for i, e in enumerate(timeline) if e == "bus:after_train_iter"]
    assert ends == ["native:on_substep_end", "native:on_step_end"] * ITERS


def test_evaluate_and_predict_outside_train_are_runs_of_their_own(tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    run = hf_trainer(tmp_path, bus)
    recorder = Recorder(bus, run.timeline)
    run.trainer.evaluate()
    validation = [
        "before_val",
        "before_val_epoch",
        *["before_val_iter", "after_val_iter"] * VAL_ITERS,
        "after_val_epoch",
        "after_val",
    ]
    assert recorder.events == ["before_run", *validation, "after_run"]
    del recorder.seen[:]
    output = run.trainer.predict(run.trainer.eval_dataset)
    testing = [event.replace("val", "test") for event in validation]
    assert recorder.events == ["before_run", *testing, "after_run"]
    (end,) = recorder.at("after_test_epoch")
    assert end.metrics is not None
    assert end.metrics["loss"] == output.metrics["test_loss"]
    assert all(seen.rows == BATCH for seen in recorder.seen if seen.event.endswith("_iter"))


def test_an_evaluation_that_raises_outside_train_ends_with_on_exception(tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    run = hf_trainer(tmp_path, bus)
    recorder = Recorder(bus, run.timeline)

    def fail(module: Any, args: Any) -> None:
        raise FloatingPointError("nan in evaluation")

    run.model.register_forward_pre_hook(fail)
    with pytest.raises(FloatingPointError):
        run.trainer.evaluate()
    assert recorder.events == ["before_run", "before_val", "before_val_epoch",
                               "before_val_iter", "on_exception"]  # fmt: skip


class KeepsState:
    """Adds its state to each checkpoint, and reads it back on resume."""

    hook_events = training.EVENTS

    def __init__(self) -> None:
        self.loaded: List[Dict[str, Any]] = []

    def before_save_checkpoint(self, runner: Any, *, checkpoint: Dict[str, Any]) -> None:
        checkpoint["keeps_state"] = {"iter": runner.iter, "ema": torch.full((2,), runner.iter)}

    def after_load_checkpoint(self, runner: Any, *, checkpoint: Dict[str, Any]) -> None:
        self.loaded.append(checkpoint)


def test_a_run_resumed_mid_epoch_counts_on_from_the_checkpoint(tmp_path: Path) -> None:
    recorded_run("hf", tmp_path, save_strategy="steps", save_steps=2)
    checkpoint = tmp_path / "hf" / "checkpoint-6"
    recorder, _ = recorded_run("hf", tmp_path, resume_from=str(checkpoint))
    # The run goes on from iteration 6, batch 2 of the second epoch.
    assert [(s.epoch, s.iter, s.batch_idx) for s in recorder.at("after_train_iter")] == [
        (1, 6, 2),
        (1, 7, 3),
    ]
    assert [(s.epoch, s.iter) for s in recorder.at("after_run")] == [(1, 2 * ITERS)]


def test_hooks_save_state_with_each_checkpoint_and_a_resumed_run_reads_it_back(
    tmp_path: Path,
) -> None:
    bus = hookbus.EventBus()
    bus.subscribe(KeepsState())
    recorder, _ = recorded_run("hf", tmp_path, bus, save_strategy="steps", save_steps=2)
    assert recorder.events.count("before_save_checkpoint") == ITERS
    saved = sorted(path.parent.name for path in tmp_path.rglob("hookbus_checkpoint.pt"))
    assert saved == [f"checkpoint-{step}" for step in (2, 4, 6, 8)]

    resumed_bus = hookbus.EventBus()
    keeps = KeepsState()
    resumed_bus.subscribe(keeps)
    checkpoint = tmp_path / "hf" / "checkpoint-6"
    recorder, _ = recorded_run("hf", tmp_path, resumed_bus, resume_from=str(checkpoint))
    assert recorder.events[:3] == ["before_run", "after_load_checkpoint", "before_train"]
    (state,) = keeps.loaded
    assert state["keeps_state"]["iter"] == 6  # saved once the sixth iteration finished
    assert torch.equal(state["keeps_state"]["ema"], torch.full((2,), 6))


def test_a_trainer_without_save_checkpoint_is_connected_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = hf_trainer(tmp_path, None, epochs=1)
    # What a transformers that renamed the method looks like.
    monkeypatch.delattr(transformers.Trainer, "_save_checkpoint")
    with pytest.warns(UserWarning, match="has no _save_checkpoint method"):
        connection = bridges.connect(run.trainer, hookbus.EventBus())
    connection.disconnect()
