"""stats().reduce() and Cache.gather() across 2 gloo processes on 127.0.0.1.

One group of two spawned processes runs every check of ``distributed_checks.py``
(starting torch twice per check would cost more than the checks). Every
collective has a timeout and the group a deadline, so a hang fails the tests
instead of blocking them; each check is then its own test here.
"""

from __future__ import annotations

import queue
import socket
import time
from typing import Dict, Optional

import distributed_checks
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import hookbus.torch as ht

DEADLINE = 240.0  # seconds for the whole group: start-up, every check, shut-down

pytestmark = pytest.mark.skipif(
    not dist.is_available(), reason="this build of torch has no torch.distributed"
)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def outcomes() -> Dict[str, Dict[int, Optional[str]]]:
    """check -> rank -> None (passed) or the traceback; a check missing never finished."""
    context = mp.get_context("spawn")
    results = context.Queue()
    port = free_port()
    processes = [
        context.Process(target=distributed_checks.worker, args=(rank, port, results))
        for rank in range(distributed_checks.WORLD)
    ]
    for process in processes:
        process.start()
    found: Dict[str, Dict[int, Optional[str]]] = {}
    expected = len(distributed_checks.CHECKS) * distributed_checks.WORLD
    stop = time.monotonic() + DEADLINE
    received = 0
    try:
        while received < expected and time.monotonic() < stop:
            try:
                rank, check, error = results.get(timeout=1.0)
            except queue.Empty:
                if not any(p.is_alive() for p in processes):
                    break
                continue
            found.setdefault(check, {})[rank] = error
            received += 1
    finally:
        for process in processes:
            process.join(timeout=max(1.0, stop - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(5)
    return found


@pytest.mark.parametrize("check", list(distributed_checks.CHECKS))
def test_check_passes_on_every_rank(
    check: str, outcomes: Dict[str, Dict[int, Optional[str]]]
) -> None:
    ranks = outcomes.get(check, {})
    for rank in range(distributed_checks.WORLD):
        assert rank in ranks, (
            f"check {check!r} never finished on rank {rank} (a crash, a hang past the "
            f"deadline, or an earlier check failed); finished: {outcomes}"
        )
        assert ranks[rank] is None, f"rank {rank}:\n{ranks[rank]}"


def test_reduce_without_a_process_group_says_what_to_do() -> None:
    assert not dist.is_initialized()
    model = nn.Sequential(nn.Linear(2, 2))
    with ht.stats(model, "0") as st:
        model(torch.ones(1, 2))
    with pytest.raises(RuntimeError, match="needs an initialized process group"):
        st.reduce()
    with ht.capture(model) as cache:
        model(torch.ones(1, 2))
    with pytest.raises(RuntimeError, match="init_process_group"):
        cache.gather()
