"""Across ranks, on ``torch.distributed`` itself: reducing statistics, gathering captures.

Every function here runs the same collectives, in the same order, on every rank
of the group, whatever ran on that rank: each decides what to send only from
what every rank knows (the selected names, and what an earlier collective told
it). A check that fails raises on every rank at the same point, before the next
collective, so a mismatch is an error and never a hang.
"""

from __future__ import annotations

import pickle
import zlib
from functools import partial
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed

from ._moments import Moments
from ._tree import Path, iter_tensors, map_tensors

# torch.distributed is only partly typed; its calls are checked by the tests here.
dist: Any = torch.distributed

__all__ = ["gather_calls", "group_rank", "reduce_stats"]

_F64 = torch.float64
_ABSENT = -(2**62)  # "no size here" in a MAX of negated sizes
_NAN = float("nan")


def group_rank(group: Any, what: str) -> Tuple[int, int]:
    """(this rank in ``group``, the group's size); a clear error if there is no group."""
    if not dist.is_available():
        raise RuntimeError(f"{what} needs torch.distributed, which this build of torch lacks")
    if not dist.is_initialized():
        raise RuntimeError(
            f"{what} needs an initialized process group: call "
            f"torch.distributed.init_process_group() first (torchrun sets up its environment)"
        )
    rank = dist.get_rank(group)
    if rank < 0:
        raise RuntimeError(
            f"{what}: this process (global rank {dist.get_rank()}) is not in the process group "
            f"{group!r}; call it only on the group's ranks "
            f"{dist.get_process_group_ranks(group)}"
        )
    return rank, dist.get_world_size(group)


def _device(group: Any) -> torch.device:
    """Where collectives of ``group`` take their tensors: the GPU for NCCL, else the CPU."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# --- Stats.reduce ----------------------------------------------------------------------


def reduce_stats(
    names: Sequence[str],
    local: Dict[str, Optional[Moments]],
    shapes: Dict[str, Optional[Tuple[int, ...]]],
    kind: Tuple[str, Optional[int]],
    group: Any,
) -> Dict[str, Optional[Moments]]:
    """Every rank's statistics of ``names`` (sorted, the same on all ranks), combined."""
    group_rank(group, "Stats.reduce()")
    device = _device(group)
    # 1. What every rank agrees on: the names and kind (a checksum), in a tensor of
    # the same size everywhere: whatever a rank selected, all take part, all agree.
    signature = zlib.crc32(repr((kind, list(names))).encode())
    layout = [len(names), signature]
    agreed = torch.tensor(layout + [-value for value in layout], dtype=torch.int64, device=device)
    dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=group)
    if agreed[:2].tolist() != (-agreed[2:]).tolist():  # pyright: ignore[reportUnknownMemberType]
        raise ValueError(
            f"Stats.reduce(): the ranks disagree on what they reduce (here of={kind[0]!r}, "
            f"dim={kind[1]!r}, {len(names)} modules: {list(names)[:5]}...); every rank must "
            f"build its stats() from the same model, selector, of= and dim="
        )
    # 2. The feature sizes, over the agreed names (a rank where a module never ran
    # does not know them).
    sizes: List[int] = []
    for name in names:
        shape = shapes[name] if local[name] is not None else None
        size = _numel(shape) if shape is not None else -1
        sizes.append(size)
    negated = [-size if size >= 0 else _ABSENT for size in sizes]
    packed = torch.tensor(sizes + negated, dtype=torch.int64, device=device)
    dist.all_reduce(packed, op=dist.ReduceOp.MAX, group=group)
    high: List[int] = packed[: len(sizes)].tolist()  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    low: List[int] = (-packed[len(sizes) :]).tolist()  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    features: Dict[str, int] = {}
    for name, most, least in zip(names, high, low):
        if most < 0:
            continue  # no rank ran it: it stays empty everywhere
        if most != least:
            raise ValueError(
                f"Stats.reduce(): module {name!r} has {least} features on some rank and "
                f"{most} on another; the feature dimension must have one size on every rank"
            )
        features[name] = most
    # 3. Counts and sums (so the global mean), with max, -min and NaN flags alongside.
    # A MAX over NaN depends on the order of its operands (the NaN of one rank got
    # lost), so a NaN travels as a flag, and min and max become NaN where one is set,
    # as one process over all the data gives.
    order = [name for name in names if name in features]
    width = sum(1 + features[name] for name in order)
    sums = torch.zeros(width, dtype=_F64)
    extremes = torch.full((3 * sum(features[n] for n in order),), -float("inf"), dtype=_F64)
    at = edge = 0
    for name in order:
        size, stat = features[name], local[name]
        if stat is not None:
            high_, low_ = stat.max.reshape(-1), stat.min.reshape(-1)
            nan = torch.isnan(high_) | torch.isnan(low_)
            sums[at] = stat.count
            sums[at + 1 : at + 1 + size] = (stat.mean * stat.count).reshape(-1)
            extremes[edge : edge + size] = high_.masked_fill(nan, -float("inf"))
            extremes[edge + size : edge + 2 * size] = (-low_).masked_fill(nan, -float("inf"))
            extremes[edge + 2 * size : edge + 3 * size] = nan.to(_F64)
        at += 1 + size
        edge += 3 * size
    sums, extremes = sums.to(device), extremes.to(device)
    pending = dist.all_reduce(extremes, op=dist.ReduceOp.MAX, group=group, async_op=True)
    dist.all_reduce(sums, group=group)
    sums = sums.cpu()
    # 4. M2 centred on the global mean: every term a sum of squares, nothing cancels.
    means: Dict[str, torch.Tensor] = {}
    counts: Dict[str, int] = {}
    spread = torch.zeros(sum(features[n] for n in order), dtype=_F64)
    at = edge = 0
    for name in order:
        size, stat = features[name], local[name]
        total = sums[at].item()
        counts[name] = round(total)
        mean = sums[at + 1 : at + 1 + size] / total
        means[name] = mean
        if stat is not None:
            shift = stat.mean.reshape(-1) - mean
            spread[edge : edge + size] = stat.m2.reshape(-1) + shift * shift * stat.count
        at += 1 + size
        edge += size
    spread = spread.to(device)
    dist.all_reduce(spread, group=group)
    assert pending is not None
    pending.wait()
    spread, extremes = spread.cpu(), extremes.cpu()
    merged: Dict[str, Optional[Moments]] = dict.fromkeys(names)
    at = edge = 0
    for name in order:
        size = features[name]
        shape = _shape(kind[1], size)
        nan = extremes[edge + 2 * size : edge + 3 * size] > 0
        merged[name] = Moments(
            counts[name],
            means[name].reshape(shape),
            spread[at : at + size].reshape(shape).clone(),
            (-extremes[edge + size : edge + 2 * size]).masked_fill(nan, _NAN).reshape(shape),
            extremes[edge : edge + size].masked_fill(nan, _NAN).reshape(shape),
        )
        at += size
        edge += 3 * size
    return merged


def _numel(shape: Tuple[int, ...]) -> int:
    numel = 1
    for size in shape:
        numel *= size
    return numel


def _shape(dim: Optional[int], size: int) -> Tuple[int, ...]:
    return () if dim is None else (size,)


# --- Cache.gather ----------------------------------------------------------------------

# One call as gathered: (output, args, kwargs, {output path: grad}).
CallParts = Tuple[Any, Any, Any, Dict[Path, torch.Tensor]]


def gather_calls(
    names: Sequence[str], calls: Dict[str, List[CallParts]], dst: Optional[int], group: Any
) -> Optional[Dict[str, CallParts]]:
    """Each name's calls from every rank, in rank order, concatenated along dim 0.

    Two collectives: an ``all_gather_object`` of what each rank holds (structure,
    dtypes and shapes, no data), then one ``all_gather`` (or ``gather`` to
    ``dst``) of every tensor's bytes packed into one buffer per rank.
    """
    rank, world = group_rank(group, "Cache.gather()")
    receives = True
    if dst is not None:
        ranks = dist.get_process_group_ranks(group) if group is not None else range(world)
        if dst not in ranks:
            raise ValueError(
                f"Cache.gather(dst={dst!r}): dst is the global rank that receives, one of the "
                f"group's ranks {list(ranks)}"
            )
        receives = dist.get_rank() == dst
    device = _device(group)
    tensors: List[torch.Tensor] = []
    described: Dict[str, List[Any]] = {}
    for name in names:
        for parts in calls.get(name, ()):
            leaves = list(iter_tensors(parts))
            skeleton = map_tensors(parts, _placeholder)
            described.setdefault(name, []).append(
                (skeleton, [(tuple(t.shape), t.dtype) for _, t in leaves])
            )
            tensors.extend(t for _, t in leaves)
    try:
        pickle.dumps(described)
        mine: Any = described
    except Exception as error:  # told to every rank below, so that all raise together
        mine = f"rank {rank} holds records that cannot be described ({error!r})"
    everyone: List[Any] = [None] * world
    dist.all_gather_object(everyone, mine, group=group)
    problems = [entry for entry in everyone if isinstance(entry, str)]
    if problems:
        raise ValueError(f"Cache.gather(): {problems[0]}")
    plans = _check_layout(names, everyone)
    lengths = [
        sum(_numel(shape) * _itemsize(dtype) for calls_ in held.values() for _, leaves in calls_
            for shape, dtype in leaves)
        for held in everyone
    ]  # fmt: skip
    longest = max(lengths)
    payload = torch.zeros(longest, dtype=torch.uint8, device=device)
    if tensors:
        packed = torch.cat([_bytes(t).to(device) for t in tensors])
        payload[: packed.numel()] = packed
    if longest == 0:
        received: List[torch.Tensor] = [payload] * world
    elif dst is None:
        received = [torch.empty_like(payload) for _ in range(world)]
        dist.all_gather(received, payload, group=group)
    else:
        received = [torch.empty_like(payload) for _ in range(world)] if receives else []
        dist.gather(payload, received if receives else None, dst=dst, group=group)
    if not receives:
        return None
    return _unpack(plans, everyone, received)


def _placeholder(_: Path, tensor: torch.Tensor) -> torch.Tensor:
    return torch.empty(0, dtype=tensor.dtype)


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


def _bytes(tensor: torch.Tensor) -> torch.Tensor:
    flat = tensor.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else torch.empty(0, dtype=torch.uint8)


def _check_layout(names: Sequence[str], everyone: List[Any]) -> Dict[str, List[Path]]:
    """Per name, the tensor paths that every call shares; an error where calls differ."""
    plans: Dict[str, List[Path]] = {}
    for name in names:
        first: Optional[List[Tuple[Path, Tuple[int, ...], torch.dtype]]] = None
        common: Optional[set[Path]] = None
        for rank, held in enumerate(everyone):
            for skeleton, leaves in held.get(name, ()):
                layout = [
                    (path, shape, dtype)
                    for (path, _), (shape, dtype) in zip(iter_tensors(skeleton), leaves)
                ]
                grads = {path for path, _, _ in layout if path and path[0] == 3}
                common = grads if common is None else common & grads
                fixed = [entry for entry in layout if entry[0][0] != 3]
                if first is None:
                    first = fixed
                    continue
                _check_same(name, rank, first, fixed)
        if first is not None:
            plans[name] = [path for path, _, _ in first] + sorted(common or (), key=repr)
    return plans


def _check_same(
    name: str,
    rank: int,
    first: List[Tuple[Path, Tuple[int, ...], torch.dtype]],
    other: List[Tuple[Path, Tuple[int, ...], torch.dtype]],
) -> None:
    if [path for path, _, _ in first] != [path for path, _, _ in other]:
        raise ValueError(
            f"Cache.gather(): the calls of module {name!r} differ in structure (on rank "
            f"{rank}); they must return the same tensors to be concatenated"
        )
    for (path, shape, dtype), (_, other_shape, other_dtype) in zip(first, other):
        if dtype != other_dtype or shape[1:] != other_shape[1:] or len(shape) != len(other_shape):
            where = _PARTS[path[0]] + "".join(f"[{key!r}]" for key in path[1:])  # pyright: ignore[reportUnknownVariableType]
            raise ValueError(
                f"Cache.gather(): module {name!r} has {where} of shape {shape} {dtype} in one "
                f"call and {other_shape} {other_dtype} in another (rank {rank}); only the "
                f"batch dimension (dim 0) may differ"
            )


_PARTS = ("output", "args", "kwargs", "grad")


def _unpack(
    plans: Dict[str, List[Path]], everyone: List[Any], received: List[torch.Tensor]
) -> Dict[str, CallParts]:
    pieces: Dict[Tuple[str, Path], List[torch.Tensor]] = {}
    skeletons: Dict[str, Any] = {}
    for held, buffer in zip(everyone, received):
        offset = 0
        for name, calls in held.items():
            wanted = set(plans[name])
            for skeleton, leaves in calls:
                skeletons.setdefault(name, skeleton)
                for (path, _), (shape, dtype) in zip(iter_tensors(skeleton), leaves):
                    size = _numel(shape) * _itemsize(dtype)
                    if path in wanted:
                        chunk = buffer[offset : offset + size].clone()
                        value = chunk.view(dtype) if size else torch.empty(0, dtype=dtype)
                        pieces.setdefault((name, path), []).append(value.reshape(shape))
                    offset += size
    out: Dict[str, CallParts] = {}
    for name, skeleton in skeletons.items():
        joined = {path: _join(pieces[(name, path)]) for path in plans[name]}
        output, args, kwargs, _ = map_tensors(skeleton, partial(_take, joined))
        grads = {path[1]: joined[path] for path in plans[name] if path[0] == 3}
        out[name] = (output, args, kwargs, grads)
    return out


def _take(joined: Dict[Path, torch.Tensor], path: Path, _: torch.Tensor) -> Optional[torch.Tensor]:
    return joined.get(path)


def _join(parts: List[torch.Tensor]) -> torch.Tensor:
    if parts[0].dim() == 0:  # a scalar per call (a loss): one entry per call
        return torch.stack(parts)
    return torch.cat(parts)
