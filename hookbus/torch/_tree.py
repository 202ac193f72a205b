"""Nested module outputs: find the tensors in them, and rebuild them with new leaves.

Modules return tensors, tuples, lists, dicts (Hugging Face ``ModelOutput`` is an
ordered dict and a dataclass), namedtuples and dataclasses, nested. A *path* names
one tensor inside: a tuple of indices, keys and field names, ``()`` for the output
itself.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Iterator, List, Tuple

import torch

__all__ = ["Path", "iter_tensors", "map_tensors"]

Path = Tuple[Any, ...]


def iter_tensors(obj: Any, path: Path = ()) -> Iterator[Tuple[Path, torch.Tensor]]:
    """Every tensor inside ``obj`` with its path, depth first, in order.

    Example:
        >>> import torch
        >>> [p for p, _ in iter_tensors((torch.ones(1), {"h": torch.zeros(1), "n": 3}))]
        [(0,), (1, 'h')]
    """
    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif isinstance(obj, dict):
        items: Dict[Any, Any] = obj  # pyright: ignore[reportUnknownVariableType]
        for key, value in items.items():
            yield from iter_tensors(value, (*path, key))
    elif isinstance(obj, (tuple, list)):
        values: List[Any] = list(obj)  # pyright: ignore[reportUnknownArgumentType]
        for index, value in enumerate(values):
            yield from iter_tensors(value, (*path, index))
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for field in dataclasses.fields(obj):
            yield from iter_tensors(getattr(obj, field.name), (*path, field.name))


def map_tensors(obj: Any, fn: Callable[[Path, torch.Tensor], Any], path: Path = ()) -> Any:
    """``obj`` rebuilt with every tensor ``t`` at ``path`` replaced by ``fn(path, t)``.

    Containers keep their type where it can be rebuilt (namedtuples, dict and list
    subclasses, dataclasses); other objects are kept as they are.

    Example:
        >>> import torch
        >>> out = map_tensors({"a": (torch.ones(1), 2)}, lambda path, t: t * 3)
        >>> out["a"][0].item(), out["a"][1]
        (3.0, 2)
    """
    if isinstance(obj, torch.Tensor):
        return fn(path, obj)
    if isinstance(obj, dict):
        items: Dict[Any, Any] = obj  # pyright: ignore[reportUnknownVariableType]
        if dataclasses.is_dataclass(items):  # ModelOutput: rebuilt through its fields below
            return _map_dataclass(obj, fn, path)
        pairs = [(key, map_tensors(value, fn, (*path, key))) for key, value in items.items()]
        return _rebuild(type(items), pairs, dict)
    if isinstance(obj, (tuple, list)):
        sequence: Any = obj  # pyright: ignore[reportUnknownVariableType]
        values = [map_tensors(v, fn, (*path, i)) for i, v in enumerate(sequence)]
        if hasattr(sequence, "_fields"):  # a namedtuple takes its fields as arguments
            return type(sequence)(*values)
        return _rebuild(type(sequence), values, tuple if isinstance(sequence, tuple) else list)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _map_dataclass(obj, fn, path)
    return obj


def _map_dataclass(obj: Any, fn: Callable[[Path, torch.Tensor], Any], path: Path) -> Any:
    changes = {
        field.name: map_tensors(getattr(obj, field.name), fn, (*path, field.name))
        for field in dataclasses.fields(obj)
        if field.init
    }
    return dataclasses.replace(obj, **changes)


def _rebuild(kind: Any, contents: Any, fallback: Callable[[Any], Any]) -> Any:
    try:
        return kind(contents)
    except Exception:  # a container type with its own constructor: keep the plain kind
        return fallback(contents)
