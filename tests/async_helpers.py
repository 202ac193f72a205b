"""Helpers of the async tests: run a coroutine; an asyncio.Event made in the running loop."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Optional, TypeVar

T = TypeVar("T")


def run(coro: Awaitable[T]) -> T:
    async def main() -> T:
        return await coro

    return asyncio.run(main())


class LazyEvent:
    """An asyncio.Event made at first use, in the running loop (3.9 binds one at creation)."""

    def __init__(self) -> None:
        self._event: Optional[asyncio.Event] = None

    def _get(self) -> asyncio.Event:
        if self._event is None:
            self._event = asyncio.Event()
        return self._event

    def set(self) -> None:
        self._get().set()

    async def wait(self) -> None:
        await self._get().wait()
