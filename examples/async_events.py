"""Async hooks: ``await bus.emit_async(...)`` with ``async def`` and plain hooks mixed.

Shows:
* sync and ``async def`` hooks on one event: ``emit_async`` awaits each before the
  next starts, in priority order, so a hook can rely on the ones before it;
* ``collect_async`` gathering the (awaited) results, as an extension point;
* an ``async def`` hook point with async pre and post hooks around it;
* a plain ``emit`` refusing an event that has async hooks, instead of silently
  dropping a coroutine;
* several emissions running at once in ``asyncio.gather``, each in hook order.

Run it: ``python examples/async_events.py``
"""

from __future__ import annotations

import asyncio
from typing import Dict, List

import hookbus

bus = hookbus.EventBus("web")
log: List[str] = []


@bus.on("user.signup", priority="HIGH")
def validate(user: Dict[str, str]) -> None:
    if "@" not in user["email"]:
        raise ValueError(f"bad email {user['email']!r}")
    log.append(f"validated {user['name']}")


@bus.on("user.signup")
async def send_welcome_mail(user: Dict[str, str]) -> None:
    await asyncio.sleep(0.01)  # pretend to talk to a mail server
    log.append(f"mailed {user['email']}")


@bus.on("user.signup", priority="LOW")
async def audit(user: Dict[str, str]) -> None:
    await asyncio.sleep(0)
    log.append(f"audited {user['name']}")


# An extension point: every plugin contributes a widget, some after an await.
@bus.on("dashboard.widgets")
def clock() -> str:
    return "clock"


@bus.on("dashboard.widgets")
async def weather() -> str:
    await asyncio.sleep(0)
    return "weather"


# A hook point that is itself a coroutine function, with async hooks around it.
@bus.hookable("fetch")
async def fetch(url: str) -> str:
    await asyncio.sleep(0)
    return f"<html>{url}</html>"


@bus.pre("fetch")
async def add_scheme(ctx: hookbus.CallContext) -> None:
    (url,) = ctx.args
    if "://" not in url:
        ctx.args = (f"https://{url}",)


@bus.post("fetch")
async def cache(ctx: hookbus.CallContext) -> None:
    await asyncio.sleep(0)
    ctx.data["cached"] = True
    log.append(f"cached {ctx.args[0]}")


async def main() -> None:
    await bus.emit_async("user.signup", {"name": "ada", "email": "ada@example.org"})
    assert log == ["validated ada", "mailed ada@example.org", "audited ada"], log

    # A failing hook stops the emission, as with emit: the later hooks don't run.
    log.clear()
    try:
        await bus.emit_async("user.signup", {"name": "bob", "email": "bob"})
    except ValueError as error:
        log.append(f"refused: {error}")
    assert log == ["refused: bad email 'bob'"], log

    assert await bus.collect_async("dashboard.widgets") == ["clock", "weather"]

    log.clear()
    assert await fetch("example.org") == "<html>https://example.org</html>"
    assert log == ["cached https://example.org"], log

    # emit() can't await: it refuses an event with async hooks.
    try:
        bus.emit("user.signup", {"name": "eve", "email": "eve@example.org"})
    except TypeError as error:
        print("emit refused:", str(error).split(";")[0])
    else:
        raise AssertionError("emit should refuse async hooks")

    # Concurrent emissions interleave at their awaits, but each keeps hook order.
    log.clear()
    users = [{"name": name, "email": f"{name}@example.org"} for name in ("kim", "max", "zoe")]
    await asyncio.gather(*(bus.emit_async("user.signup", user) for user in users))
    for user in users:
        mine = [line for line in log if line.split()[-1] in (user["name"], user["email"])]
        assert mine == [
            f"validated {user['name']}",
            f"mailed {user['email']}",
            f"audited {user['name']}",
        ], mine
    print("async example: ok")


if __name__ == "__main__":
    asyncio.run(main())
