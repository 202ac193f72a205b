"""Names for a transformer's internals, the same on every supported architecture.

``attach(model, bus, names="transformer")`` makes TransformerLens's names hook
points of ``bus`` through a :class:`Vocabulary`, the bus's point source for
them: ``bus.post("blocks.1.attn.hook_z", hook)`` sees the attention's output per
head, ``[batch, pos, head, d_head]``, on GPT-2, Llama or Phi-3 alike, and
``ctx.result = ...`` replaces it in the forward. The Hugging Face model is not
rewritten: each name is a :class:`~hookbus.torch._value_point.NamePoint` made on
demand, whose hooks, while it has some, are run from a few hooks on the model's
module and operation points (on a private attachment of its own, see
:mod:`._recipes`), and nothing at all while it has none.

Which module holds which value is data: one table per layout (:mod:`._tables`),
found from the model's structure (:mod:`._table_detection`); :func:`recipes` turns
a table into one recipe per name.
"""

from __future__ import annotations

import difflib
import threading
import warnings
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, cast

from torch import nn

from ..adapter import EventBus, Matcher, Removable, is_pattern, matcher_for
from ._architecture import Dims, Separate
from ._attention_pattern import AttentionPattern
from ._head_views import HeadsFirst, LastDimSlice, PerHeadPart, View, Whole
from ._norm_scale import NormScale
from ._recipes import (
    Batched,
    Flattened,
    HeadResult,
    ModuleInput,
    ModuleOutput,
    Net,
    OperationResult,
    Recipe,
    ResidMid,
    linear_weight,
)
from ._replaced_modules import ModuleReads, Replaced
from ._table_detection import DOCS, Found, find_architecture
from ._unwrap import unwrap, walk
from ._user_line import stacklevel_outside_hookbus
from ._value_point import NAME_KINDS, NamePoint, is_name

__all__ = [
    "VOCABULARIES", "Vocabulary", "recipes", "select_names", "split_names", "unknown_name",
]  # fmt: skip

VOCABULARIES = ("transformer",)
"""What ``attach(..., names=)`` takes: the vocabularies hookbus knows."""

Recipes = Dict[str, Tuple[Recipe, str]]
"""Each name's recipe and its slot in a shared recipe (``""`` if alone), in forward order."""


class Vocabulary(Removable):
    """The names of one model on one bus: what ``attach(model, bus, names="transformer")``
    adds, as :attr:`Attachment.vocabulary <hookbus.torch.Attachment.vocabulary>`.

    :attr:`names` lists the model's names in forward order, :attr:`absent` the
    ones it lacks and why, :attr:`architecture` the layout it was found to have
    and :attr:`dims` its sizes. The attachment's ``detach()`` takes the names
    off the bus with every hook they installed.

    Example:
        >>> import transformers, hookbus, hookbus.torch
        >>> config = transformers.LlamaConfig(
        ...     hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        ...     num_attention_heads=4, num_key_value_heads=2, vocab_size=100)
        >>> model = transformers.LlamaForCausalLM(config)
        >>> bus = hookbus.EventBus()
        >>> with hookbus.torch.attach(model, bus, names="transformer") as net:
        ...     names = net.vocabulary
        ...     names.names[:3], names.dims.kv_heads, "hook_pos_embed" in names.absent
        (['hook_embed', 'blocks.0.hook_resid_pre', 'blocks.0.ln1.hook_scale'], 2, True)
    """

    __slots__ = (
        "__weakref__", "_absent", "_architecture", "_dims", "_making", "_net",
        "_on_name_hooked", "_points", "_reads", "_recipes", "_warned", "bus",
    )  # fmt: skip

    def __init__(
        self,
        model: nn.Module,
        bus: EventBus,
        net: Net,
        found: Found,
        prefix: str = "",
        *,
        on_hooked: Optional[Callable[[bool], None]] = None,
    ) -> None:
        self.bus = bus
        # Told when a name comes to have hooks, or has none any more (the attachment
        # counts them: while some has, the model's native hooks keep it alive).
        self._on_name_hooked = on_hooked
        self._architecture = found.architecture.name
        self._dims = found.dims
        self._recipes, self._absent = recipes(model, found, prefix)
        self._net: Optional[Net] = net
        self._points: Dict[str, NamePoint] = {}
        self._making = threading.Lock()
        # The modules that the names hooked read, as attached: one replaced since is
        # refused at a hook's registration, and warned of as it is replaced while a name
        # reading it has hooks (once: a PEFT injection replaces dozens); watched only
        # while some name has hooks (NamePoint.on_hooked).
        self._reads = ModuleReads(model, net.name_of, net.module)
        self._warned = False
        self._reads.watch(self._on_replaced)
        registry = bus.registry
        registry.add_source(self)
        if registry.has_hooks(NAME_KINDS):  # hooks registered before apply at once
            for handle in registry.hooks():
                if handle.kind in NAME_KINDS:
                    names = self._matching(handle.name, handle.match)
                    self._reads.add(names, self._modules_read)
                    self._make(names)

    @property
    def architecture(self) -> str:
        """The name of the layout the model was found to have (``"GPT-2"``)."""
        return self._architecture

    @property
    def dims(self) -> Dims:
        """The sizes the names' shapes use: ``layers``, ``heads``, ``kv_heads``, ``d_head``
        (and ``parallel``: attention and MLP read the same input)."""
        return self._dims

    @property
    def names(self) -> List[str]:
        """Every name this model has, in forward order."""
        return list(self._recipes)

    @property
    def absent(self) -> Dict[str, str]:
        """The names this model lacks (``"hook_pos_embed"`` on a rotary model), and why."""
        return dict(self._absent)

    @property
    def active(self) -> bool:
        """Whether the names are still hook points (the attachment was not detached)."""
        return self._net is not None

    def knows(self, name: str) -> bool:
        """Whether ``name`` is one of the names, or a pattern meant for them.

        Example:
            >>> import transformers, hookbus, hookbus.torch
            >>> config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=10)
            >>> model = transformers.GPT2LMHeadModel(config)
            >>> net = hookbus.torch.attach(model, hookbus.EventBus(), names="transformer")
            >>> names = ("blocks.0.attn.hook_z", "*hook_z", "h.0")
            >>> [net.vocabulary.knows(name) for name in names]
            [True, True, False]
        """
        return name in self._recipes or (is_pattern(name) and is_name(name))

    # --- points on demand: the bus's PointSource ---------------------------------------

    def make_points(self, kind: Optional[str], name: str, match: Optional[Matcher]) -> bool:
        """Make the points of the names that a hook for ``name`` matches (the registry
        asks before registering one); refuse a kind that a name cannot take."""
        if match is not None and not is_name(name):
            return False
        names = self._matching(name, match)
        if not names:
            return False
        if kind is not None and kind not in NAME_KINDS:
            raise ValueError(
                f"{kind} hooks do not apply to {name!r}: a name of the vocabulary is a "
                f"value, read and replaced by post hooks (bus.post(name, hook), "
                f"ctx.result); for {'an' if kind[0] in 'aeiou' else 'a'} {kind} hook on a "
                f"module, use the module's name"
            )
        if kind is not None:
            self._reads.add(names, self._modules_read)
            replaced = self._reads.replaced(names)
            if replaced is not None:
                raise _replaced_error(*replaced)
        self._make(names)
        return True

    def _modules_read(self, name: str) -> List[nn.Module]:
        return _modules_read(self._recipes[name][0])

    def _on_hooked(self, point: NamePoint, hooked: bool) -> None:
        """A name came to have hooks, or has none any more: what it reads is watched
        for a replacement while some name reading it has hooks."""
        if hooked:
            self._reads.add([point.name], self._modules_read)
        self._reads.hooked(point.name, hooked)
        if self._on_name_hooked is not None:
            self._on_name_hooked(hooked)

    def _on_replaced(self, replaced: Replaced) -> None:
        """A module that names with hooks read is being replaced (torch's registration
        hook): warn, as their hooks stay on the old module."""
        hooked = self._reads.hooked_reading(replaced.path)
        if not hooked or self._warned or self._net is None:
            return
        self._warned = True
        shown = ", ".join(map(repr, hooked[:3])) + (", ..." if len(hooked) > 3 else "")
        warnings.warn(
            f"hookbus.torch: the module {replaced.path!r} ({replaced.was}) is being replaced "
            f"by {replaced.taken_by()} after attach(), and the hooks on {shown} read it: they "
            f"stay on the old module and no longer see the forward (hooks on names that "
            f"read a replaced module are refused from now on). detach() and attach the "
            f"model again, after the change, to read the new one",
            RuntimeWarning,
            stacklevel=stacklevel_outside_hookbus(),
        )

    def refuse_unmatched(self, kind: str, name: str, match: Optional[Matcher]) -> None:
        """Refuse a name meant for the vocabulary that this model does not have."""
        if self._net is None or not is_name(name):
            return
        raise unknown_name(self.architecture, self._recipes, self._absent, name, match)

    def _matching(self, name: str, match: Optional[Matcher]) -> List[str]:
        if self._net is None:
            return []
        if match is None:
            return [name] if name in self._recipes else []
        return [each for each in self._recipes if match(each)]

    def _make(self, names: List[str]) -> None:
        made: List[NamePoint] = []
        net = self._net
        if net is None:
            return
        with self._making:
            for name in names:
                if name not in self._points:
                    recipe, slot = self._recipes[name]
                    point = NamePoint(self.bus, net, name, recipe, slot)
                    point.on_hooked = self._on_hooked
                    self._points[name] = point
                    made.append(point)
            if made:
                self.bus.registry.add_points(made)
        for point in made:  # no lock held: installing a recipe registers hooks
            point.invalidate()

    # --- cleanup -----------------------------------------------------------------------

    def remove(self) -> None:
        """Take the names off the bus, with every hook they installed (the attachment's
        ``detach()`` calls it). Idempotent.

        Hooks registered on the bus by name stay on the bus, reaching nothing.
        """
        net, self._net = self._net, None
        if net is None:
            return
        with self._making:
            points, self._points = self._points, {}
        self._reads.close()
        registry = self.bus.registry
        registry.remove_source(self)
        registry.remove_points(list(points.values()))
        for point in points.values():
            point.uninstall()
        net.detach()

    def __repr__(self) -> str:
        state = f"{len(self._recipes)} names" if self._net is not None else "removed"
        return f"<Vocabulary {self.architecture} on {self.bus.name!r} {state}>"


def unknown_name(
    architecture: str,
    names: Dict[str, Any],
    absent: Dict[str, str],
    name: str,
    match: Optional[Matcher],
) -> ValueError:
    """The error for a name (or pattern) that no name of the vocabulary is."""
    if match is None and name in absent:
        return ValueError(f"{architecture} has no {name!r}: {absent[name]} (see {DOCS})")
    close = difflib.get_close_matches(name, list(names), n=5, cutoff=0.6)
    shown = f"; close names: {', '.join(map(repr, close))}" if close else ""
    what = "matches" if match is not None else "is"
    return ValueError(
        f"no name of {architecture}'s vocabulary {what} {name!r}{shown} "
        f"(net.vocabulary.names lists them; see {DOCS})"
    )


def _replaced_error(name: str, replaced: Replaced) -> ValueError:
    return ValueError(
        f"{name!r} reads {replaced.described()}: the names read the modules the model "
        f"had when it was attached. detach() and attach the model again, after the "
        f"change, to read the new one"
    )


def _modules_read(recipe: Any) -> List[nn.Module]:
    """The modules a recipe reads (hooks, or reads the weights of), its inner recipe's too."""
    found: List[nn.Module] = []
    attributes = cast(Dict[str, Any], vars(recipe))
    for value in attributes.values():
        if isinstance(value, nn.Module):
            found.append(value)
        elif callable(getattr(value, "install", None)) and not isinstance(value, type):
            found.extend(_modules_read(value))
    return found


def _module(root: nn.Module, path: str) -> nn.Module:
    module = root
    for part in path.split("."):
        found = module._modules.get(part)
        if found is None:
            raise ValueError(f"the table names {path!r}, which the model does not have")
        module = found
    return module


def recipes(model: nn.Module, found: Found, prefix: str = "") -> Tuple[Recipes, Dict[str, str]]:
    """Every name's recipe and slot, in forward order, and the names the model lacks
    (each with the reason), from the table ``found`` for ``model``."""
    table, dims = found.architecture, found.dims
    body = _module(model, found.body) if found.body else model
    start = f"{prefix}." if prefix else ""
    made: Recipes = {}
    absent: Dict[str, str] = {}
    whole = Whole()

    def add_top(name: str, recipe: Recipe, slot: str = "") -> None:
        made[start + name] = (recipe, slot)

    add_top("hook_embed", ModuleOutput(_module(body, table.embed), whole))
    if table.pos_embed is not None:
        positions = ModuleOutput(_module(body, table.pos_embed), whole)
        add_top("hook_pos_embed", Batched(positions, body))
    else:
        absent[start + "hook_pos_embed"] = (
            "its positions are rotary (see attn.hook_rot_q and hook_rot_k), not an embedding"
        )
    spec = table.block
    heads, kv_heads, d_head = dims.heads, dims.kv_heads, dims.d_head
    q_size, kv_size = heads * d_head, kv_heads * d_head
    blocks: List[nn.Module] = list(_module(body, table.blocks).children())
    for layer, block in enumerate(blocks):
        at = f"{start}blocks.{layer}."

        def add(name: str, recipe: Recipe, slot: str = "", flat: bool = False) -> None:
            if flat and spec.flat_mlp:
                recipe = Flattened(recipe, block)  # noqa: B023 - called in this iteration
            made[at + name] = (recipe, slot)  # noqa: B023

        def part(path: str) -> nn.Module:
            return _module(block, path)  # noqa: B023 - called in this iteration

        add("hook_resid_pre", ModuleInput(block, whole))
        norm = NormScale(part(spec.ln1))
        add("ln1.hook_scale", norm, "scale")
        add("ln1.hook_normalized", norm, "normalized")
        qkv = spec.qkv
        if isinstance(qkv, Separate):
            add("attn.hook_q", ModuleOutput(part(qkv.q), LastDimSlice(0, q_size, heads)))
            add("attn.hook_k", ModuleOutput(part(qkv.k), LastDimSlice(0, kv_size, kv_heads)))
            add("attn.hook_v", ModuleOutput(part(qkv.v), LastDimSlice(0, kv_size, kv_heads)))
        else:
            fused = part(qkv.path)
            views: Tuple[View, View, View]
            if qkv.order == "per_head":
                views = (PerHeadPart(0, heads), PerHeadPart(1, heads), PerHeadPart(2, heads))
            else:
                views = (
                    LastDimSlice(0, q_size, heads),
                    LastDimSlice(q_size, q_size + kv_size, kv_heads),
                    LastDimSlice(q_size + kv_size, q_size + 2 * kv_size, kv_heads),
                )
            for index, letter in enumerate("qkv"):
                add(f"attn.hook_{letter}", ModuleOutput(fused, views[index]))
        attn = part(spec.attn)
        if spec.rotary is not None:
            operation, q_index, k_index = spec.rotary
            add("attn.hook_rot_q", OperationResult(attn, operation, q_index, HeadsFirst()))
            add("attn.hook_rot_k", OperationResult(attn, operation, k_index, HeadsFirst()))
        else:
            for letter in "qk":
                absent[f"{at}attn.hook_rot_{letter}"] = (
                    "its positions are a learned embedding (hook_pos_embed), not rotary"
                )
        pattern = AttentionPattern(attn, heads)
        add("attn.hook_attn_scores", pattern, "scores")
        add("attn.hook_pattern", pattern, "pattern")
        add("attn.hook_z", ModuleInput(part(spec.o), LastDimSlice(0, q_size, heads)))
        o = part(spec.o)
        if linear_weight(o) is not None:
            add("attn.hook_result", HeadResult(o, heads))
        else:
            absent[f"{at}attn.hook_result"] = (
                f"its output projection is a {type(o).__name__}, whose weight hookbus cannot "
                f"split by head (an nn.Linear, a transformers Conv1D, or a PEFT LoRA layer "
                f"on one)"
            )
        add("hook_attn_out", ModuleOutput(part(spec.attn_out or spec.attn), whole))
        if dims.parallel:
            absent[f"{at}hook_resid_mid"] = (
                "its blocks are parallel (attention and MLP both read hook_resid_pre), so "
                "no residual stream lies between them"
            )
        else:
            add("hook_resid_mid", ResidMid(block, part(spec.ln2)), flat=True)
        norm = NormScale(part(spec.ln2))
        add("ln2.hook_scale", norm, "scale", flat=True)
        add("ln2.hook_normalized", norm, "normalized", flat=True)
        mlp_in = part(spec.mlp_in)
        if spec.gate_up:
            width = _out_features(mlp_in) // 2
            add("mlp.hook_pre", ModuleOutput(mlp_in, LastDimSlice(0, width)), flat=True)
            add(
                "mlp.hook_pre_linear",
                ModuleOutput(mlp_in, LastDimSlice(width, 2 * width)),
                flat=True,
            )
        else:
            add("mlp.hook_pre", ModuleOutput(mlp_in, whole), flat=True)
            if spec.mlp_linear is not None:
                add("mlp.hook_pre_linear", ModuleOutput(part(spec.mlp_linear), whole), flat=True)
            else:
                absent[f"{at}mlp.hook_pre_linear"] = "its MLP is not gated"
        add("mlp.hook_post", ModuleInput(part(spec.mlp_down), whole), flat=True)
        add("hook_mlp_out", ModuleOutput(part(spec.mlp_out), whole), flat=True)
        add("hook_resid_post", ModuleOutput(block, whole))
    norm = NormScale(_module(body, table.ln_final))
    add_top("ln_final.hook_scale", norm, "scale")
    add_top("ln_final.hook_normalized", norm, "normalized")
    return made, absent


def _out_features(module: nn.Module) -> int:
    features = getattr(module, "out_features", None)
    if isinstance(features, int):
        return features
    weight: Any = getattr(module, "weight", None)
    return int(weight.shape[0])


def split_names(model: nn.Module, selector: Any) -> Tuple[List[str], Optional[Any]]:
    """``selector`` split into the names of ``model``'s vocabulary it selects
    (``"blocks.*.hook_z"``), in forward order, and the rest, which selects modules
    (``None`` if nothing is left): what :func:`capture`, :func:`patch` and
    :func:`stats` ask, so one list may hold both. A name or pattern that selects a
    module of the model is a module's (a TransformerLens model names its modules
    ``hook_*``): modules come first. A name the model lacks is the ``ValueError`` of
    :func:`select_names`.

    Example:
        >>> import transformers
        >>> config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=8, vocab_size=10)
        >>> model = transformers.GPT2LMHeadModel(config)
        >>> split_names(model, ["blocks.1.hook_resid_p*", "transformer.h.0"])
        (['blocks.1.hook_resid_pre', 'blocks.1.hook_resid_post'], ['transformer.h.0'])
        >>> split_names(model, "transformer.h.*")
        ([], 'transformer.h.*')
    """
    if isinstance(selector, str):
        items: List[Any] = [selector]
    elif isinstance(selector, (list, tuple, set, frozenset)):
        items = list(selector)  # pyright: ignore[reportUnknownArgumentType]
    else:
        return [], selector
    wanted = [item for item in items if isinstance(item, str) and is_name(item)]
    if not wanted:
        return [], cast(Any, selector)
    root = unwrap(model)
    modules = [entry.bare for entry in walk(root) if not entry.is_wrapper]
    names = [
        item
        for item in wanted
        if item not in modules and not (is_pattern(item) and any(map(matcher_for(item), modules)))
    ]
    if not names:
        return [], cast(Any, selector)
    rest = [item for item in items if not (isinstance(item, str) and item in names)]
    return select_names(root, names), rest or None


def select_names(model: nn.Module, selector: Any) -> List[str]:
    """The names of ``model``'s vocabulary that ``selector`` (a name, a pattern or a list
    of those) selects, in forward order; ``ValueError`` as ``bus.post`` would raise.

    Example:
        >>> import transformers
        >>> config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=8, vocab_size=10)
        >>> select_names(transformers.GPT2LMHeadModel(config), "blocks.*.hook_resid_post")
        ['blocks.0.hook_resid_post', 'blocks.1.hook_resid_post']
    """
    root = unwrap(model)
    found_in = find_architecture(root)
    made, absent = recipes(root, found_in)
    items: List[str] = [selector] if isinstance(selector, str) else list(selector)
    chosen: Set[str] = set()
    for item in items:
        match = matcher_for(item) if is_pattern(item) else None
        found = [name for name in made if (match(name) if match else name == item)]
        if not found:
            raise unknown_name(found_in.architecture.name, made, absent, item, match)
        chosen.update(found)
    return [name for name in made if name in chosen]
