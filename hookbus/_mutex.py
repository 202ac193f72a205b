"""The bus lock: a plain (non-reentrant) lock whose free acquire and release are one
list operation each.

Register + remove is a benchmark row (``benchmarks/run.py``, row 2), and it takes the bus
lock twice. ``threading.Lock.acquire()`` parses its (absent) arguments and reads the
monotonic clock even when the lock is free: on CPython 3.11 a free acquire and its
release cost about 890 instructions, a tenth of the row. :class:`Mutex` keeps a token in
a list while it is free: ``free.pop()`` takes it and ``free.append(True)`` gives it back,
each one C call that no other thread can interleave (the GIL, or a free-threaded build's
lock on the list), about 310 instructions for the pair. A thread that finds the list
empty waits on a condition (:meth:`Mutex.wait`), and a release wakes one only when one
is waiting.

The registry's hot paths take and give the token inline, with no frame of their own
(``bus.on``'s flat path and the inline drop of its handle, both fast copies listed in
``_dispatch.py``'s map): what :meth:`Mutex.acquire` and :meth:`Mutex.release` do,
spelled out::

    lock = registry._lock
    try:
        lock.free.pop()
    except IndexError:  # held: wait for it
        lock.wait()
    try:
        ...
    finally:
        lock.free.append(True)
        if lock.waiting:
            lock.wake()

No wake-up is lost: a waiter counts itself, under the condition's lock, before it tries
the token once more, and a release gives the token back before it reads the count. So
either the waiter's try finds the token, or the release sees the waiter and wakes it
under the condition's lock, which the waiter holds until it waits. The condition's lock
is reentrant: a weak hook's finalizer may run anywhere, inside this module's own code
too, and release the mutex it took without blocking (``Registry.forget_collected``).
The condition is made at the first wait (most buses never wait: a bus made costs a third
more with one), once, under a lock of this module's.
"""

from __future__ import annotations

import threading
from typing import List, Optional

_making = threading.Lock()  # guards the making of a mutex's condition; nothing else


class Mutex:
    """A plain lock, as ``threading.Lock`` is one (not reentrant, released by any thread),
    whose free acquire and release are one list operation each.

    Example:
        >>> lock = Mutex()
        >>> lock.acquire(), lock.locked(), lock.acquire(blocking=False)
        (True, True, False)
        >>> lock.release()
        >>> with lock:
        ...     lock.locked()
        True
        >>> lock.locked()
        False
    """

    __slots__ = ("_wakeup", "free", "waiting")

    def __init__(self) -> None:
        self.free: List[bool] = [True]
        """The token, while the lock is free: empty while it is held."""
        self.waiting = 0
        """How many threads wait for the lock (changed under ``_wakeup``'s lock)."""
        self._wakeup: Optional[threading.Condition] = None  # made at the first wait

    def acquire(self, blocking: bool = True) -> bool:
        """Take the lock, waiting for it if ``blocking``; whether it was taken."""
        try:
            self.free.pop()
        except IndexError:  # held
            if not blocking:
                return False
            self.wait()
        return True

    def wait(self) -> None:
        """Wait until the token is free, and take it: :meth:`acquire` when the lock is held."""
        wakeup = self._condition()
        with wakeup:
            self.waiting += 1
            try:
                while True:
                    try:
                        self.free.pop()
                        return
                    except IndexError:
                        wakeup.wait()
            finally:
                self.waiting -= 1

    def release(self) -> None:
        """Give the lock back (``RuntimeError`` if it isn't held), waking one waiter."""
        free = self.free
        if free:
            raise RuntimeError("release unlocked lock")
        free.append(True)
        if self.waiting:
            self.wake()

    def wake(self) -> None:
        """Wake one thread that waits for the lock: :meth:`release` when one waits."""
        wakeup = self._condition()
        with wakeup:
            wakeup.notify()

    def _condition(self) -> threading.Condition:
        """The condition waiters wait on, made once, at the first wait (reentrant, as
        ``threading.Condition()`` makes it: see the module docstring)."""
        wakeup = self._wakeup
        if wakeup is None:
            with _making:
                wakeup = self._wakeup
                if wakeup is None:
                    wakeup = self._wakeup = threading.Condition()
        return wakeup

    def locked(self) -> bool:
        """Whether the lock is held now, by any thread."""
        return not self.free

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()
