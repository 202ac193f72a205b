"""Checked by tests/test_typing.py with mypy and pyright, never imported by pytest.

Each line whose comment says error must be reported, and no other line.
"""

import hookbus


@hookbus.hookable("scale")
def scale(x: int, factor: float = 2.0) -> float:
    return x * factor


class Model:
    @hookbus.hookable("forward")
    def forward(self, x: int) -> str:
        return str(x)

    @hookbus.hookable("make")
    @classmethod
    def make(cls, size: int) -> "Model":
        return cls()


ok: float = scale(1, factor=3.0)
text: str = Model().forward(2)
made: Model = Model.make(3)
bad1 = scale("one")  # error: the argument's type is checked
bad2 = Model().forward(x="2")  # error: keyword arguments too
bad3: int = scale(1)  # error: and the return type
bad4 = scale(1, 2.0, 3)  # error: and the arity
