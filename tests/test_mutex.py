"""The bus lock (``hookbus._mutex.Mutex``): a plain lock, as ``threading.Lock`` is one.

It excludes under stress, a waiter wakes when the holder releases, a non-blocking try
fails while it is held, and releasing it twice is refused; registrations and removals
racing on one name leave a consistent store. (The registry's hot paths take and give its
token inline: ``tests/test_fast_copies.py`` checks that they wait as the methods do.)
Every join has a timeout: a lost wake-up fails, it doesn't hang.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Callable, Iterator, List

import pytest

from hookbus import EventBus
from hookbus._mutex import Mutex

JOIN = 10.0  # seconds: far more than any test needs, so a hang fails instead


@pytest.fixture
def switch_often() -> Iterator[None]:
    """Threads switch every microsecond, so that unlocked sections would interleave."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def _run_threads(targets: List[Callable[[], None]]) -> None:
    errors: List[BaseException] = []

    def guarded(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                target()
            except BaseException as error:  # pragma: no cover - reported below
                errors.append(error)

        return run

    threads = [threading.Thread(target=guarded(target)) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN)
    assert not any(thread.is_alive() for thread in threads), "a thread never got the lock"
    assert not errors, errors


def _wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + JOIN
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_the_lock_excludes_every_other_thread_under_stress(switch_often: None) -> None:
    lock = Mutex()
    inside: List[int] = []
    overlaps: List[int] = []
    total = [0]

    def work() -> None:
        for _ in range(2_000):
            lock.acquire()
            try:
                inside.append(1)
                if len(inside) > 1:
                    overlaps.append(len(inside))
                count = total[0]
                time.sleep(0) if count % 97 == 0 else None  # give the others a chance
                total[0] = count + 1
                inside.pop()
            finally:
                lock.release()

    _run_threads([work] * 6)
    assert overlaps == []
    assert total[0] == 6 * 2_000
    assert not lock.locked()
    assert lock.waiting == 0


def test_a_waiter_wakes_when_the_holder_releases() -> None:
    lock = Mutex()
    lock.acquire()
    got: List[str] = []

    def take() -> None:
        with lock:
            got.append("taken")

    thread = threading.Thread(target=take)
    thread.start()
    _wait_until(lambda: lock.waiting == 1)
    assert got == []
    assert lock.locked()
    lock.release()
    thread.join(JOIN)
    assert not thread.is_alive()
    assert got == ["taken"]
    assert not lock.locked()
    assert lock.waiting == 0


def test_many_waiters_each_wake_once_the_lock_is_free_again() -> None:
    lock = Mutex()
    lock.acquire()
    got: List[int] = []

    def take(number: int) -> Callable[[], None]:
        def run() -> None:
            with lock:
                got.append(number)

        return run

    threads = [threading.Thread(target=take(number)) for number in range(5)]
    for thread in threads:
        thread.start()
    _wait_until(lambda: lock.waiting == 5)
    lock.release()
    for thread in threads:
        thread.join(JOIN)
    assert not any(thread.is_alive() for thread in threads)
    assert sorted(got) == [0, 1, 2, 3, 4]
    assert not lock.locked()
    assert lock.waiting == 0


def test_a_try_without_blocking_fails_while_the_lock_is_held() -> None:
    lock = Mutex()
    assert lock.acquire(blocking=False) is True
    assert lock.locked()
    assert lock.acquire(blocking=False) is False
    lock.release()
    assert not lock.locked()
    assert lock.acquire(blocking=False) is True
    lock.release()


def test_releasing_a_free_lock_is_refused_as_threading_lock_refuses_it() -> None:
    lock = Mutex()
    with pytest.raises(RuntimeError, match="release unlocked lock"):
        lock.release()
    with pytest.raises(RuntimeError):
        threading.Lock().release()
    assert lock.acquire(blocking=False)  # still one token, not two
    assert not lock.acquire(blocking=False)


def test_a_release_inside_a_waiters_own_section_does_not_deadlock() -> None:
    # A weak hook's finalizer may run anywhere on a thread, inside Mutex.wait too (with
    # the condition's lock held, the waiter counted): it takes the lock without blocking
    # and releases it, which wakes the waiters under the condition's lock again.
    lock = Mutex()
    done: List[bool] = []

    def finalizer_inside_wait() -> None:
        with lock._condition():
            lock.waiting += 1  # as wait() counts itself before it tries the token
            try:
                assert lock.acquire(blocking=False)
                lock.release()
            finally:
                lock.waiting -= 1
        done.append(True)

    _run_threads([finalizer_inside_wait])
    assert done == [True]
    assert not lock.locked()


def test_registrations_and_removals_on_one_name_race_to_a_consistent_store(
    switch_often: None,
) -> None:
    bus = EventBus()
    hooks = [lambda *args, number=number: None for number in range(8)]
    bus.on("other", print)  # a name whose hooks stay

    def churn(hook: Callable[..., None]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(500):
                bus.on("saved", hook).remove()
            bus.on("saved", hook)

        return run

    _run_threads([churn(hook) for hook in hooks])
    assert sorted(map(id, (h.hook for h in bus.hooks("saved")))) == sorted(map(id, hooks))
    assert [h.hook for h in bus.hooks("other")] == [print]
    assert not bus.registry.locked()
    assert bus.registry._lock.waiting == 0
