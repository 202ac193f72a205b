"""Lightning's bridge: one callback, relaying each of Lightning's callback points."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Dict, List

import pytest
from bridge_helpers import ITERS, VAL_ITERS, Recorder, lightning_trainer, recorded_run

import hookbus
from hookbus import bridges, training

pl = pytest.importorskip("lightning.pytorch")
pytestmark = pytest.mark.torch

TABLE = {
    "setup": ["before_run"],
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
    "teardown": ["after_run"],
    "on_exception": ["on_exception"],
    "on_save_checkpoint": ["before_save_checkpoint"],
    "on_load_checkpoint": ["after_load_checkpoint"],
}


def mapped(native: List[str]) -> List[str]:
    return [event for point in native for event in TABLE.get(point, [])]


def test_each_callback_point_maps_to_its_events(tmp_path: Path) -> None:
    recorder, run = recorded_run("lightning", tmp_path)
    assert recorder.events == mapped(run.native)
    # Lightning validates before its on_train_epoch_end (documented).
    epoch_end = recorder.events.index("after_train_epoch")
    assert recorder.events[epoch_end - 1] == "after_val"


# The run resumes mid-epoch on purpose, from a plain DataLoader, which Lightning warns
# about whatever the set-up (it asks for a loader with state_dict/load_state_dict).
@pytest.mark.filterwarnings(
    "ignore:You're resuming from a checkpoint that ended before the epoch ended:UserWarning"
)
def test_a_run_resumed_mid_epoch_counts_on_from_the_checkpoint(tmp_path: Path) -> None:
    def saving() -> Any:
        return pl.callbacks.ModelCheckpoint(
            dirpath=str(tmp_path / "ckpt"), every_n_train_steps=2, save_top_k=-1
        )

    recorder, _ = recorded_run(
        "lightning", tmp_path, enable_checkpointing=True, callbacks=[saving()]
    )
    saves = recorder.at("before_save_checkpoint")
    assert [seen.iter for seen in saves] == [1, 3, 5, 7]  # in the iteration's end hooks
    (saved,) = (tmp_path / "ckpt").glob("*step=6.ckpt")
    # The callback that wrote the checkpoint is given again, as Lightning asks, with its
    # folder emptied (Lightning warns of a folder that holds checkpoints already).
    checkpoint = saved.rename(tmp_path / saved.name)
    shutil.rmtree(tmp_path / "ckpt")
    recorder, _ = recorded_run(
        "lightning",
        tmp_path / "resumed",
        ckpt_path=str(checkpoint),
        enable_checkpointing=True,
        callbacks=[saving()],
    )
    first = recorder.at("after_train_iter")[0]
    assert (first.epoch, first.iter, first.batch_idx) == (1, 6, 2)
    assert [(s.epoch, s.iter) for s in recorder.at("after_run")] == [(1, 2 * ITERS)]
    # Lightning loads the checkpoint before on_fit_start: the run began before (setup).
    assert recorder.events[:3] == ["before_run", "after_load_checkpoint", "before_train"]


class KeepsState:
    hook_events = training.EVENTS

    def __init__(self) -> None:
        self.loaded: List[Dict[str, Any]] = []

    def before_save_checkpoint(self, runner: Any, *, checkpoint: Dict[str, Any]) -> None:
        checkpoint["keeps_state"] = {"iter": runner.iter}

    def after_load_checkpoint(self, runner: Any, *, checkpoint: Dict[str, Any]) -> None:
        self.loaded.append(checkpoint["keeps_state"])


def test_hooks_add_to_the_checkpoint_lightning_writes_and_read_it_back(tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    bus.subscribe(KeepsState())
    run = lightning_trainer(tmp_path, bus, epochs=1)
    run.train()
    path = tmp_path / "end.ckpt"
    run.trainer.save_checkpoint(str(path))
    keeps = KeepsState()
    resumed_bus = hookbus.EventBus()
    resumed_bus.subscribe(keeps)
    lightning_trainer(tmp_path / "resumed", resumed_bus, epochs=2, ckpt_path=str(path)).train()
    assert keeps.loaded == [{"iter": ITERS}]


def test_testing_sends_the_test_events_with_common_metric_names(tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    run = lightning_trainer(tmp_path, bus, epochs=1)
    run.train()
    recorder = Recorder(bus, run.timeline)
    run.trainer.test(run.module, run.val_loader)
    assert recorder.events == [
        "before_run",
        "before_test",
        "before_test_epoch",
        *["before_test_iter", "after_test_iter"] * VAL_ITERS,
        "after_test_epoch",
        "after_test",
        "after_run",
    ]
    (end,) = recorder.at("after_test_epoch")
    assert end.metrics is not None
    assert end.metrics["loss"] == end.metrics["test_loss"]


def test_a_trainer_of_the_pytorch_lightning_package_is_bridged_too(tmp_path: Path) -> None:
    legacy = pytest.importorskip("pytorch_lightning")
    trainer = legacy.Trainer(
        max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    connection = bridges.connect(trainer, hookbus.EventBus())
    assert any(isinstance(cb, legacy.Callback) for cb in trainer.callbacks)
    connection.disconnect()
    assert not any(type(cb).__name__ == "HookbusCallback" for cb in trainer.callbacks)


@pytest.mark.parametrize("strategy", ["ddp_spawn", "ddp_spawn_find_unused_parameters_true"])
def test_a_trainer_that_spawns_its_processes_is_refused_at_connect(strategy: str) -> None:
    # Such a trainer pickles itself, callbacks included, into new processes, where the
    # bus and its hooks can't go: fit() once failed with "Can't pickle local object
    # HookbusCallback" (an AttributeError), and only after before_run had gone out.
    trainer = pl.Trainer(
        max_epochs=1, accelerator="cpu", devices=2, strategy=strategy, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    callbacks = list(trainer.callbacks)
    with pytest.raises(ValueError, match="starts its processes with 'spawn'") as info:
        bridges.connect(trainer, hookbus.EventBus())
    assert "strategy='ddp'" in str(info.value)
    assert trainer.callbacks == callbacks  # nothing left half-connected


def test_the_bridge_callback_refuses_pickling_in_words() -> None:
    # What any other way of carrying the trainer to another process meets.
    import pickle

    trainer = pl.Trainer(
        max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    with bridges.connect(trainer, hookbus.EventBus()):
        callback = trainer.callbacks[-1]
        with pytest.raises(TypeError, match="belongs to the process that connected it"):
            pickle.dumps(callback)
