"""mmengine's bridge: one hook relaying the same-named stages, and on_exception around runs."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, List

import pytest
from bridge_helpers import ITERS, VAL_ITERS, Recorder, mmengine_trainer, recorded_run

import hookbus

pytest.importorskip("mmengine")

pytestmark = pytest.mark.torch


def test_each_stage_is_relayed_to_the_same_named_event(tmp_path: Path) -> None:
    recorder, run = recorded_run("mmengine", tmp_path)
    assert recorder.events == run.native


def test_its_checkpoint_hook_saves_before_the_epochs_validation(tmp_path: Path) -> None:
    recorder, run = recorded_run(
        "mmengine", tmp_path, checkpoint={"type": "CheckpointHook", "interval": 1}
    )
    assert recorder.events == run.native
    # mmengine's CheckpointHook saves in after_train_epoch, before validation (documented).
    epoch_end = recorder.events.index("after_train_epoch")
    assert recorder.events[epoch_end + 1 : epoch_end + 3] == [
        "before_save_checkpoint",
        "before_val",
    ]
    assert [seen.epoch for seen in recorder.at("before_save_checkpoint")] == [0, 1]


def test_a_resumed_run_replays_the_interrupted_epoch_from_its_first_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # mmengine 0.10 loads its own checkpoints with torch.load's default, which refuses them
    # from torch 2.6 on; this test trusts the file it just wrote, and says so as torch
    # asks (the TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD variable would do it with a warning).
    import torch

    monkeypatch.setattr(torch, "load", functools.partial(torch.load, weights_only=False))
    saving = {"type": "CheckpointHook", "interval": 2, "by_epoch": False}
    recorded_run("mmengine", tmp_path, checkpoint=saving)
    (checkpoint,) = tmp_path.rglob("iter_6.pth")
    recorder, _ = recorded_run(
        "mmengine", tmp_path / "resumed", load_from=str(checkpoint), resume=True
    )
    assert recorder.events[:3] == ["before_run", "after_load_checkpoint", "before_train"]
    # The epoch and the iterations go on from the checkpoint; the data starts the epoch again.
    assert [(s.epoch, s.iter, s.batch_idx) for s in recorder.at("after_train_iter")] == [
        (1, 6 + batch, batch) for batch in range(ITERS)
    ]


@pytest.mark.parametrize("entry", ["val", "test"])
def test_val_and_test_outside_train_are_runs_of_their_own(entry: str, tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    run = mmengine_trainer(tmp_path, bus)
    recorder = Recorder(bus, run.timeline)
    getattr(run.trainer, entry)()
    assert recorder.events == [
        "before_run",
        f"before_{entry}",
        f"before_{entry}_epoch",
        *[f"before_{entry}_iter", f"after_{entry}_iter"] * VAL_ITERS,
        f"after_{entry}_epoch",
        f"after_{entry}",
        "after_run",
    ]
    (end,) = recorder.at(f"after_{entry}_epoch")
    assert end.metrics is not None
    assert end.metrics["loss"] == end.metrics[f"{entry}_loss"]


def test_a_validation_that_raises_ends_with_on_exception(tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    run = mmengine_trainer(tmp_path, bus)
    recorder = Recorder(bus, run.timeline)
    errors: List[BaseException] = []

    def fail(module: Any, args: Any) -> None:
        errors.append(FloatingPointError("nan in validation"))
        raise errors[-1]

    run.model.register_forward_pre_hook(fail)
    with pytest.raises(FloatingPointError):
        run.trainer.val()
    assert recorder.events[-1] == "on_exception"
    assert recorder.seen[-1].exception is errors[0]
