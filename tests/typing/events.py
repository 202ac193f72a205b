"""Checked by tests/test_typing.py with mypy and pyright, never imported by pytest.

Declared events: emit's arguments and the hooks are checked against the stub's signature.
Each line whose comment says error must be reported, and no other line.
"""

from typing import Any, List

import hookbus

bus = hookbus.EventBus()


@bus.event
def user_created(user: str, *, admin: bool = False) -> None:
    """Emitted after a user row is committed."""


@hookbus.event("user.deleted")
def user_deleted(user: str, reason: str = "") -> None: ...


def good(user: str, *, admin: bool = False) -> None: ...
def takes_any(user: str, **kwargs: Any) -> None: ...
def named(event: str, user: str, *, admin: bool = False) -> None: ...
def no_admin(user: str) -> None: ...
def wrong_type(user: int, *, admin: bool = False) -> None: ...
def observe(ctx: hookbus.CallContext) -> None: ...


user_created.emit("ada", admin=True)
user_created.emit("ada")
user_deleted.emit("ada", "spam")
results: List[Any] = user_created.collect("ada")
found: Any = user_created.first("ada")
user_created.emit(1)  # error: a wrong argument type
user_created.emit("ada", True)  # error: admin is keyword-only
user_created.emit("ada", adm=True)  # error: an unknown keyword
user_created.emit()  # error: a missing argument
user_deleted.collect("ada", reason=3)  # error: collect is checked too


async def later() -> None:
    await user_created.emit_async("ada", admin=True)
    await user_created.emit_async(admin=True)  # error: emit_async is checked too


user_created.on(good)
user_created.on(takes_any, priority="HIGH", once=True)
user_created.on(named, with_name=True)
user_created.on(no_admin)  # error: the hook can't take admin=
user_created.on(wrong_type)  # error: nor a str user
user_created.on(good, with_name=True)  # error: a with_name hook takes the name first
user_created.on(good, priorty=1)  # error: a misspelt option


@user_created.on(priority=5)
def decorated(user: str, *, admin: bool = False) -> int:
    return 1


kept: int = decorated("ada")


@user_created.on()  # error: the decorator checks the hook too
def decorated_bad(user: str) -> None: ...


bus.on("user_created", no_admin, priority=3, once=True, target=None, weak=False)
bus.on("user_created", no_admin, priorty=3)  # error: the bus's options are spelled out
bus.post("forward", observe, once="yes")  # error: and typed


@user_created.on
def bare(user: str, *, admin: bool = False) -> int:
    return 1


kept_bare: int = bare("ada")  # a bare @event.on leaves the function, as every form does
also_kept: int = user_created.on(bare, priority=1)("bob")


@user_created.on  # error: a bare decorator checks the hook too
def bare_bad(user: int) -> None: ...


class Plugin:
    @hookbus.listens(user_created, priority="HIGH")
    def created(self, user: str, *, admin: bool = False) -> None: ...

    @hookbus.listens(user_created)
    @staticmethod
    def counted(user: str, *, admin: bool = False) -> None: ...

    @hookbus.listens("user_created")
    def by_name(self, anything: int) -> None: ...  # a name is not checked statically

    @hookbus.listens(user_created)  # error: a declared event checks the method
    def no_admin(self, user: str) -> None: ...

    @hookbus.listens(user_created, kind="pre")  # error: an event takes event hooks only
    def around(self, user: str, *, admin: bool = False) -> None: ...


Plugin().created("ada", admin=True)
