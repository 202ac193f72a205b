"""Nested module outputs: find the tensors in them, and rebuild them with new leaves.

Modules return tensors, tuples, lists, dicts (Hugging Face ``ModelOutput`` is an
ordered dict and a dataclass), namedtuples, dataclasses, ``PackedSequence``, and
objects such as Hugging Face's ``DynamicCache`` (a plain object holding layers that
hold tensors), nested. The traversal, in this order of tests:

1. a tensor is a leaf;
2. a plain ``tuple``, ``list`` or ``dict``: its items (as ``torch.utils._pytree``
   flattens them, done inline because it runs on every captured call);
3. a ``dict`` that is a dataclass (``ModelOutput``): its items, rebuilt without its
   constructor (which costs more than the rest of a capture's work);
4. a ``PackedSequence``: its ``data`` alone; ``batch_sizes`` and the sort indices are
   its structure, kept as they are (so its gradient is a ``PackedSequence`` too);
5. a type registered with ``torch.utils._pytree`` (``OrderedDict``, ``defaultdict``,
   ``deque``, ``torch.return_types``, the node types Hugging Face and the user
   register): its children, named by the node's keys, rebuilt by the node;
6. other dict, tuple and list subclasses (namedtuples too), and dataclasses: their
   items or fields;
7. an ``nn.Module``, a class, a function or a module object is kept as it is
   (state, not data);
8. the fallback, by heuristic: any other object with a ``__dict__`` (an unregistered
   cache, say) is rebuilt as a ``copy.copy`` with its attributes rebuilt, whether or
   not it holds a tensor now, so a rebuilt object shares no mutable part with the
   original (a cache that generation keeps filling, say). An object whose copy is
   itself (an enum member), or that refuses copying, is kept as it is;
9. anything else (numbers, strings, ``None``, C objects without a ``__dict__``) is
   kept as it is.

Rules 8 and 9 are the only places where a rebuilt value can share a tensor or a
mutable object with the original. An object met twice (shared, or a cycle) is
rebuilt once. A *path* names one tensor inside: a tuple of indices, keys and
attribute names, ``()`` for the output itself.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import types
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

__all__ = ["Path", "iter_tensors", "leaves_the_graph", "map_tensors"]

Path = Tuple[Any, ...]


def _pytree_nodes() -> Dict[Any, Any]:
    try:  # private, but the registry that torch.export and FSDP rely on
        from torch.utils._pytree import SUPPORTED_NODES
    except ImportError:  # pragma: no cover - every torch this adapter supports has it
        return {}
    return SUPPORTED_NODES


_PYTREE_NODES = _pytree_nodes()

_OPAQUE = (nn.Module, type, types.FunctionType, types.MethodType, types.ModuleType)


def _attributes(obj: Any) -> Optional[Dict[str, Any]]:
    """The attributes to traverse of an object of rule 8, or None (rules 7 and 9)."""
    if isinstance(obj, _OPAQUE):
        return None
    attributes: Optional[Dict[str, Any]] = getattr(obj, "__dict__", None)
    return attributes if isinstance(attributes, dict) else None


def _pytree_children(node: Any, obj: Any) -> Tuple[List[Any], List[Any], Any]:
    """``(keys, children, context)`` of a pytree node: keys as the node names them."""
    with_keys = getattr(node, "flatten_with_keys_fn", None)
    if with_keys is not None:
        pairs, context = with_keys(obj)
        keys = [_key_of(entry) for entry, _ in pairs]
        return keys, [child for _, child in pairs], context
    children, context = node.flatten_fn(obj)
    return list(range(len(children))), list(children), context


def _key_of(entry: Any) -> Any:
    """The plain key of a pytree key entry (``MappingKey``, ``SequenceKey``, ``GetAttrKey``)."""
    for field in ("key", "idx", "name"):
        if hasattr(entry, field):
            return getattr(entry, field)
    return entry


def _packed_with(sequence: Any, data: Any) -> Any:
    """``sequence`` with another ``data`` (a gradient, a copy, ``None``), its structure kept.

    Built without ``PackedSequence``'s constructor, which refuses ``None`` data.
    """
    sorted_indices, unsorted_indices = sequence.sorted_indices, sequence.unsorted_indices
    if isinstance(data, torch.Tensor) and sorted_indices is not None:
        # PackedSequence.to() keeps the indices on data's device, batch_sizes on the CPU.
        sorted_indices = sorted_indices.to(data.device)
        unsorted_indices = unsorted_indices.to(data.device)
    fields = (data, sequence.batch_sizes, sorted_indices, unsorted_indices)
    return _TUPLE_NEW(_type_of(sequence), fields)


def iter_tensors(obj: Any, path: Path = ()) -> Iterator[Tuple[Path, torch.Tensor]]:
    """Every tensor inside ``obj`` with its path, depth first, in order.

    Example:
        >>> import torch
        >>> [p for p, _ in iter_tensors((torch.ones(1), {"h": torch.zeros(1), "n": 3}))]
        [(0,), (1, 'h')]
    """
    if isinstance(obj, torch.Tensor):  # the common case, first and alone
        yield path, obj
        return
    yield from _iter(obj, path, set())


def _iter(obj: Any, path: Path, seen: Set[int]) -> Iterator[Tuple[Path, torch.Tensor]]:
    if isinstance(obj, torch.Tensor):
        yield path, obj
        return
    if isinstance(obj, (str, bytes, int, float, bool)) or obj is None:
        return
    if id(obj) in seen:
        return
    seen.add(id(obj))
    for key, value in _items(obj):
        yield from _iter(value, (*path, key), seen)


def _items(obj: Any) -> List[Tuple[Any, Any]]:
    """The ``(key, child)`` pairs the traversal visits in ``obj`` (rules 2 to 9)."""
    kind = _type_of(obj)
    if kind is tuple or kind is list:
        sequence: List[Any] = obj
        return list(enumerate(sequence))
    if _is_dict(obj) and (kind is dict or dataclasses.is_dataclass(obj)):
        return list(_as_dict(obj).items())
    if isinstance(obj, PackedSequence):
        return [(0, obj.data)]
    node = _PYTREE_NODES.get(kind)
    if node is not None:
        keys, children, _ = _pytree_children(node, obj)
        return list(zip(keys, children))
    if isinstance(obj, dict):
        return list(_as_dict(obj).items())
    if isinstance(obj, (tuple, list)):
        values: List[Any] = list(obj)  # pyright: ignore[reportUnknownArgumentType]
        return list(enumerate(values))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [(field.name, getattr(obj, field.name)) for field in dataclasses.fields(obj)]
    attributes = _attributes(obj)
    return list(attributes.items()) if attributes is not None else []


def map_tensors(obj: Any, fn: Callable[[Path, torch.Tensor], Any], path: Path = ()) -> Any:
    """``obj`` rebuilt with every tensor ``t`` at ``path`` replaced by ``fn(path, t)``.

    Containers keep their type where it can be rebuilt (namedtuples, dict and list
    subclasses, dataclasses, pytree nodes, plain objects through ``copy.copy``);
    other objects are kept as they are (see the module docstring).

    Example:
        >>> import torch
        >>> out = map_tensors({"a": (torch.ones(1), 2)}, lambda path, t: t * 3)
        >>> out["a"][0].item(), out["a"][1]
        (3.0, 2)
    """
    if isinstance(obj, torch.Tensor):  # the common case, first and alone
        return fn(path, obj)
    return _map(obj, fn, path, {})


def _map(
    obj: Any, fn: Callable[[Path, torch.Tensor], Any], path: Path, memo: Dict[int, Any]
) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(path, obj)
    if isinstance(obj, (str, bytes, int, float, bool)) or obj is None:
        return obj
    done = memo.get(id(obj), memo)
    if done is not memo:
        return done
    memo[id(obj)] = obj  # a cycle back to obj sees obj itself
    result = _map_new(obj, fn, path, memo)
    memo[id(obj)] = result
    return result


def _map_new(
    obj: Any, fn: Callable[[Path, torch.Tensor], Any], path: Path, memo: Dict[int, Any]
) -> Any:
    kind = _type_of(obj)
    if kind is tuple or kind is list:
        plain: List[Any] = obj
        values = [_map(v, fn, (*path, i), memo) for i, v in enumerate(plain)]
        return tuple(values) if kind is tuple else values
    if kind is dict:
        mapping = _as_dict(obj)
        return {key: _map(value, fn, (*path, key), memo) for key, value in mapping.items()}
    if _is_dict(obj) and dataclasses.is_dataclass(obj):
        return _map_dict_dataclass(obj, fn, path, memo)  # ModelOutput
    if isinstance(obj, PackedSequence):
        return _packed_with(obj, _map(obj.data, fn, (*path, 0), memo))
    node = _PYTREE_NODES.get(kind)
    if node is not None:
        keys, children, context = _pytree_children(node, obj)
        mapped = [_map(v, fn, (*path, key), memo) for key, v in zip(keys, children)]
        try:
            return node.unflatten_fn(mapped, context)
        except Exception:  # a node that cannot take these leaves (None, say): kept
            return obj
    if isinstance(obj, dict):
        items: Dict[Any, Any] = obj  # pyright: ignore[reportUnknownVariableType]
        pairs = [(key, _map(value, fn, (*path, key), memo)) for key, value in items.items()]
        return _rebuild(type(items), pairs, dict)
    if isinstance(obj, (tuple, list)):
        sequence: Any = obj  # pyright: ignore[reportUnknownVariableType]
        values = [_map(v, fn, (*path, i), memo) for i, v in enumerate(sequence)]
        if hasattr(sequence, "_fields"):  # a namedtuple takes its fields as arguments
            try:
                return type(sequence)(*values)
            except Exception:  # a constructor that checks its fields (refuses None)
                return _TUPLE_NEW(_type_of(sequence), values)
        return _rebuild(type(sequence), values, tuple if isinstance(sequence, tuple) else list)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _map_dataclass(obj, fn, path, memo)
    attributes = _attributes(obj)
    if attributes is None:
        return obj
    try:
        rebuilt = copy.copy(obj)
        rebuilt_attributes: Any = vars(rebuilt)
    except Exception:  # an object that refuses copying: kept as it is
        return obj
    if rebuilt is obj or rebuilt_attributes is attributes:
        return obj  # its copy is itself (an enum member, a singleton): kept as it is
    memo[id(obj)] = rebuilt  # a cycle back to obj finds the rebuilt object
    for key, value in list(attributes.items()):
        rebuilt_attributes[key] = _map(value, fn, (*path, key), memo)
    return rebuilt


_TUPLE_NEW: Any = getattr(tuple, "__new__")  # noqa: B009 - builds a namedtuple unchecked


def _is_dict(obj: Any) -> bool:
    return isinstance(obj, dict)  # a function: the caller's obj stays Any for the checker


def _vars(obj: Any) -> Dict[str, Any]:
    attributes: Dict[str, Any] = obj.__dict__
    return attributes


def _as_dict(obj: Any) -> Dict[Any, Any]:
    mapping: Dict[Any, Any] = obj
    return mapping


def _type_of(obj: Any) -> Any:
    return type(obj)  # pyright: ignore[reportUnknownVariableType]


def _map_dataclass(
    obj: Any, fn: Callable[[Path, torch.Tensor], Any], path: Path, memo: Dict[int, Any]
) -> Any:
    changes = {
        field.name: _map(getattr(obj, field.name), fn, (*path, field.name), memo)
        for field in dataclasses.fields(obj)
        if field.init
    }
    return dataclasses.replace(obj, **changes)


def _map_dict_dataclass(
    obj: Any, fn: Callable[[Path, torch.Tensor], Any], path: Path, memo: Dict[int, Any]
) -> Any:
    """A dict that is a dataclass (Hugging Face ``ModelOutput``), rebuilt without its constructor.

    ``dataclasses.replace`` runs ``ModelOutput.__post_init__`` and its
    ``__setattr__``, which cost more than the rest of a capture's work on a
    forward; this copies the instance's attributes and items as they are, each
    value mapped once (an item and the field of the same name share it). A tensor
    mapped to ``None`` (a gradient not there yet) is left to the constructor, which
    drops ``None`` fields from the items, as is any class that refuses the copy.
    """
    attributes: Dict[str, Any] = _vars(obj)
    mapped: Dict[str, Any] = {}
    for key, value in attributes.items():
        new = _map(value, fn, (*path, key), memo)
        if new is None and value is not None:
            return _map_dataclass(obj, fn, path, memo)
        mapped[key] = new
    items: Dict[Any, Any] = _as_dict(obj)
    pairs: List[Tuple[Any, Any]] = []
    for key, value in items.items():
        if isinstance(key, str) and key in attributes and attributes[key] is value:
            new = mapped[key]
        else:
            new = _map(value, fn, (*path, key), memo)
        if new is None and value is not None:
            return _map_dataclass(obj, fn, path, memo)
        pairs.append((key, new))
    kind = _type_of(obj)
    base = collections.OrderedDict if isinstance(obj, collections.OrderedDict) else dict
    setitem: Any = getattr(base, "__setitem__")  # noqa: B009 - the base's, not the class's
    try:
        rebuilt: Any = kind.__new__(kind)
        for key, new in pairs:
            setitem(rebuilt, key, new)
        _vars(rebuilt).update(mapped)
    except Exception:  # a class that refuses being built this way: its constructor, then
        return _map_dataclass(obj, fn, path, memo)
    return rebuilt


def _rebuild(kind: Any, contents: Any, fallback: Callable[[Any], Any]) -> Any:
    try:
        return kind(contents)
    except Exception:  # a container type with its own constructor: keep the plain kind
        return fallback(contents)


def leaves_the_graph(output: Any, result: Any) -> bool:
    """Whether ``result`` replaced an output that autograd tracks by one it does not."""
    if not torch.is_grad_enabled():
        return False
    tracked = any(t.requires_grad for _, t in iter_tensors(output))
    return tracked and not any(t.requires_grad for _, t in iter_tensors(result))
