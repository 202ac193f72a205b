"""Names for a transformer's internals, the same on every supported architecture.

``hookbus.torch.vocabulary(model, bus)`` makes TransformerLens's names hook
points of ``bus``: ``bus.post("blocks.1.attn.hook_z", hook)`` sees the
attention's output per head, ``[batch, pos, head, d_head]``, on GPT-2, Llama
or Phi-3 alike, and ``ctx.result = ...`` replaces it in the forward. The
Hugging Face model is not rewritten: each name is a :class:`NamePoint` whose
hooks, while it has some, are run from a few hooks on the model's module and
operation points (a private attachment of its own, :mod:`._name_recipes`), and
nothing at all while it has none.

Which module holds which value is data: one table per layout
(:mod:`._tables`), found from the model's structure (:mod:`._architectures`).
"""

from __future__ import annotations

import difflib
import itertools
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from torch import nn

from ..adapter import (
    CallContext,
    EventBus,
    Layout,
    Matcher,
    PointPlan,
    Removable,
    is_pattern,
    layout_of,
    matcher_for,
    run_phase,
)
from ._architecture import Separate
from ._architectures import DOCS, find_architecture
from ._attach import Attachment, attach
from ._name_recipes import (
    AttentionPattern,
    HeadsFirst,
    LastDimSlice,
    ModuleInput,
    ModuleOutput,
    NormScale,
    OperationResult,
    PerHeadPart,
    Recipe,
    ResidMid,
    View,
)
from ._unwrap import unwrap

__all__ = [
    "NameHooks", "NamePoint", "Vocabulary", "is_names_selector", "select_names", "unknown_name",
    "vocabulary",
]  # fmt: skip

_for_call = CallContext.for_call

NAME_KINDS = ("post",)
"""The hook kind a name takes: its hooks see the value as ``ctx.result``."""

BLOCK_NAMES = (
    "hook_resid_pre", "ln1.hook_scale", "ln1.hook_normalized",
    "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_rot_q", "attn.hook_rot_k",
    "attn.hook_attn_scores", "attn.hook_pattern", "attn.hook_z", "hook_attn_out",
    "hook_resid_mid", "ln2.hook_scale", "ln2.hook_normalized",
    "mlp.hook_pre", "mlp.hook_pre_linear", "mlp.hook_post", "hook_mlp_out", "hook_resid_post",
)  # fmt: skip
"""The names of each block, after ``blocks.{layer}.``, in forward order."""


def _is_name(name: str) -> bool:
    """Whether a name or pattern is meant for the vocabulary (it names a ``hook_``)."""
    return "hook_" in name


class NamePoint:
    """The hook point of one name of the vocabulary (``"blocks.0.attn.hook_z"``).

    Its hooks are ``post`` hooks: ``ctx.result`` is the value, and assigning it
    replaces the value in the forward. While it has hooks, its recipe's private
    hooks run on the model; with none, nothing does.
    """

    __slots__ = (
        "__weakref__", "_calls", "_installed", "_lock", "_net", "bus", "name", "plan", "recipe",
        "registry", "slot",
    )  # fmt: skip

    kinds = NAME_KINDS
    kind = "name"
    is_async = False
    skip_refusal = (
        "a name of the vocabulary is a value, not a call: post hooks replace it with "
        "ctx.result = ...; to skip a module, hook the module itself"
    )

    def __init__(self, vocabulary: Vocabulary, name: str, recipe: Recipe, slot: str) -> None:
        self.bus = vocabulary.bus
        self.registry = vocabulary.bus.registry
        self.name = name
        self.recipe = recipe
        self.slot = slot
        self.plan: Optional[PointPlan] = None
        self._net: Optional[Attachment] = vocabulary._net
        self._installed: List[Removable] = []
        self._calls = itertools.count()
        self._lock = threading.Lock()

    @property
    def where(self) -> str:
        """What the name is read from."""
        return type(self.recipe).__name__

    def layout(self) -> Layout:
        """A value has no arguments: ``ctx.arguments`` is empty."""
        return layout_of(_no_arguments, self.name)

    def invalidate(self) -> None:
        """Take the plan of the hooks that match now; install or remove the recipe."""
        plan = self.registry.plan(self) if self._net is not None else None
        if plan is not None:
            hooks = {
                kind: tuple(h for h in handles if h.match is None or _is_name(h.name))
                for kind, handles in plan.hooks.items()
            }  # a pattern without "hook_" is meant for modules: it skips names
            if not any(hooks.values()):
                plan = None
            elif hooks != plan.hooks:
                registry = self.registry
                plan = PointPlan(hooks, registry.errors == "raise" and registry.tracer is None)
        with self._lock:
            self.plan = plan
            net = self._net
            if plan is not None and not self._installed and net is not None:
                self._installed = self.recipe.install(net, self.emit, self.slot)
            elif plan is None and self._installed:
                installed, self._installed = self._installed, []
                for handle in installed:
                    handle.remove()

    def emit(self, value: Any, target: Any) -> Any:
        """Run this name's hooks on ``value``; what they left in ``ctx.result``."""
        plan = self.plan
        if plan is None:
            return value
        ctx = _for_call(self.name, target, (), {}, next(self._calls), "post", self, value)
        run_phase(self.registry, plan.post, ctx)
        new = ctx.result
        if new is not value:
            _check_written(self.name, value, new)
        return new

    def uninstall(self) -> None:
        """No hook of this point runs any more, and its recipe's hooks are gone."""
        with self._lock:
            self._net = None
            self.plan = None
            installed, self._installed = self._installed, []
        for handle in installed:
            handle.remove()

    def __repr__(self) -> str:
        return f"<NamePoint {self.name!r} {'hooked' if self.plan else 'no hooks'}>"


def _no_arguments() -> None:
    """What a name's ``ctx.arguments`` binds to: nothing."""


def _check_written(name: str, value: Any, new: Any) -> None:
    shape = getattr(value, "shape", None)
    if getattr(new, "shape", None) != shape:
        got = f"shape {tuple(new.shape)}" if hasattr(new, "shape") else type(new).__name__
        raise ValueError(
            f"a hook on {name!r} set ctx.result to {got}; the value it replaces has "
            f"shape {tuple(shape) if shape is not None else '?'}, and a replacement must "
            f"keep it"
        )


# Keeps each model's vocabularies (and so their points) alive as long as the model.
_vocabularies: weakref.WeakKeyDictionary[nn.Module, List[Vocabulary]] = weakref.WeakKeyDictionary()


def vocabulary(model: nn.Module, bus: Optional[EventBus] = None) -> Vocabulary:
    """Make the names of TransformerLens's vocabulary hook points of ``bus`` for ``model``.

    ``bus.post(name, hook)`` then runs ``hook(ctx)`` with the value as
    ``ctx.result`` (assign it to replace the value in the forward), for names
    such as ``"blocks.0.attn.hook_z"`` (``[batch, pos, head, d_head]``),
    ``"blocks.*.hook_resid_post"`` or ``"hook_embed"``; every name is listed in
    :attr:`Vocabulary.names` and defined once in docs/torch.md ("Names"). The
    model's layout is found from its structure (GPT-2, GPT-NeoX, Llama and the
    models built like it, Gemma 2, Phi-3); a model wrapped by PEFT, DDP or
    ``torch.compile`` keeps it. Nothing runs on the model while no hook is on a
    name. ``remove()`` (or the end of a ``with`` block) takes the names off the bus
    with every hook they installed on the model.

    Example:
        >>> import torch, transformers, hookbus, hookbus.torch
        >>> config = transformers.GPT2Config(
        ...     n_layer=2, n_head=4, n_embd=32, vocab_size=100, n_positions=64)
        >>> model = transformers.GPT2LMHeadModel(config).eval()
        >>> bus = hookbus.EventBus()
        >>> names = hookbus.torch.vocabulary(model, bus)
        >>> def zero_head_2(ctx):
        ...     z = ctx.result.clone()
        ...     z[:, :, 2] = 0
        ...     ctx.result = z
        >>> with bus.post("blocks.0.attn.hook_z", zero_head_2):
        ...     logits = model(torch.arange(5)[None]).logits
        >>> names.architecture, len(names.names)
        ('GPT-2', 42)
    """
    if not isinstance(model, nn.Module):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(f"vocabulary() needs a torch.nn.Module, got {type(model).__name__}")
    if bus is None:
        from .. import default_bus

        bus = default_bus
    if not isinstance(bus, EventBus):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(
            f"vocabulary() takes a hookbus.EventBus as bus (or None: hookbus.default_bus), "
            f"got {type(bus).__name__}"
        )
    root = unwrap(model)
    for existing in _vocabularies.get(root, ()):
        if existing.bus is bus and existing.active:
            raise ValueError(
                f"{type(root).__name__} already has the names vocabulary on {bus!r}; use "
                f"that one, or remove() it first"
            )
    return Vocabulary(root, bus)


class Vocabulary(Removable):
    """The names of one model on one bus (see :func:`vocabulary`).

    Example:
        >>> import transformers, hookbus, hookbus.torch
        >>> config = transformers.LlamaConfig(
        ...     hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        ...     num_attention_heads=4, num_key_value_heads=2, vocab_size=100)
        >>> model = transformers.LlamaForCausalLM(config)
        >>> with hookbus.torch.vocabulary(model, hookbus.EventBus()) as names:
        ...     names.names[:3]
        ['hook_embed', 'blocks.0.hook_resid_pre', 'blocks.0.ln1.hook_scale']
    """

    __slots__ = (
        "__weakref__", "_absent", "_making", "_model", "_net", "_points", "_recipes",
        "architecture", "bus", "dims",
    )  # fmt: skip

    def __init__(self, model: nn.Module, bus: EventBus) -> None:
        found = find_architecture(model)
        self.bus = bus
        #: The name of the layout the model was found to have (``"GPT-2"``).
        self.architecture = found.architecture.name
        #: The sizes the layouts use: ``layers``, ``heads``, ``kv_heads``, ``d_head``.
        self.dims = found.dims
        self._model = weakref.ref(model)
        private = EventBus(f"hookbus.torch names of {type(model).__name__}")
        self._net: Optional[Attachment] = attach(model, private)
        self._recipes, self._absent = _recipes(model, found)
        self._points: Dict[str, NamePoint] = {}
        self._making = threading.Lock()
        registry = bus.registry
        registry.add_source(self)
        if registry.has_hooks(NAME_KINDS):  # hooks registered before apply at once
            for handle in registry.hooks():
                if handle.kind in NAME_KINDS:
                    self._make(self._matching(handle.name, handle.match))
        _vocabularies.setdefault(model, []).append(self)

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
        """Whether the names are still hook points (``remove()`` was not called)."""
        return self._net is not None

    # --- points on demand: the bus's PointSource ---------------------------------------

    def make_points(self, kind: Optional[str], name: str, match: Optional[Matcher]) -> bool:
        """Make the points of the names that a hook for ``name`` matches (the registry
        asks before registering one); refuse a kind that a name cannot take."""
        if match is not None and not _is_name(name):
            return False
        names = self._matching(name, match)
        if not names:
            return False
        if kind is not None and kind not in NAME_KINDS:
            raise ValueError(
                f"{kind} hooks do not apply to {name!r}: a name of the vocabulary is a "
                f"value, read and replaced by post hooks (bus.post(name, hook), "
                f"ctx.result); for a {kind} hook on a module, use the module's name"
            )
        self._make(names)
        return True

    def refuse_unmatched(self, kind: str, name: str, match: Optional[Matcher]) -> None:
        """Refuse a name meant for the vocabulary that this model does not have."""
        if self._net is None or not (_is_name(name) or name.startswith("blocks.")):
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
        with self._making:
            for name in names:
                if name not in self._points:
                    recipe, slot = self._recipes[name]
                    point = NamePoint(self, name, recipe, slot)
                    self._points[name] = point
                    made.append(point)
            if made:
                self.bus.registry.add_points(made)
        for point in made:
            point.invalidate()

    # --- cleanup -----------------------------------------------------------------------

    def remove(self) -> None:
        """Take the names off the bus, with every hook they installed. Idempotent.

        Hooks registered on the bus by name stay on the bus, reaching nothing.
        """
        net, self._net = self._net, None
        if net is None:
            return
        with self._making:
            points, self._points = self._points, {}
        registry = self.bus.registry
        registry.remove_source(self)
        registry.remove_points(list(points.values()))
        for point in points.values():
            point.uninstall()
        net.detach()
        model = self._model()
        if model is not None:
            mine = _vocabularies.get(model, [])
            if self in mine:
                mine.remove(self)

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
        f"(vocabulary.names lists them; see {DOCS})"
    )


def _module(root: nn.Module, path: str) -> nn.Module:
    module = root
    for part in path.split("."):
        found = module._modules.get(part)
        if found is None:
            raise ValueError(f"the table names {path!r}, which the model does not have")
        module = found
    return module


def _recipes(model: nn.Module, found: Any) -> Tuple[Dict[str, Tuple[Recipe, str]], Dict[str, str]]:
    """Every name's recipe and slot, in forward order, and the names the model lacks."""
    table, dims = found.architecture, found.dims
    body = _module(model, found.body) if found.body else model
    recipes: Dict[str, Tuple[Recipe, str]] = {}
    absent: Dict[str, str] = {}
    whole = View()
    recipes["hook_embed"] = (ModuleOutput(_module(body, table.embed), whole), "")
    if table.pos_embed is not None:
        recipes["hook_pos_embed"] = (ModuleOutput(_module(body, table.pos_embed), whole), "")
    else:
        absent["hook_pos_embed"] = (
            "its positions are rotary (see attn.hook_rot_q and hook_rot_k), not an embedding"
        )
    spec = table.block
    blocks = _module(body, table.blocks)
    heads, kv_heads, d_head = dims.heads, dims.kv_heads, dims.d_head
    for layer, block in enumerate(blocks):
        at = f"blocks.{layer}."

        def add(name: str, recipe: Recipe, slot: str = "") -> None:
            recipes[at + name] = (recipe, slot)  # noqa: B023 - called in this iteration

        def part(path: str) -> nn.Module:
            return _module(block, path)  # noqa: B023 - called in this iteration

        add("hook_resid_pre", ModuleInput(block, whole))
        for norm, path in (("ln1", spec.ln1),):
            site = NormScale(part(path))
            add(f"{norm}.hook_scale", site, "scale")
            add(f"{norm}.hook_normalized", site, "normalized")
        qkv = spec.qkv
        q_size, kv_size = heads * d_head, kv_heads * d_head
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
            for letter, view in zip("qkv", views):
                add(f"attn.hook_{letter}", ModuleOutput(fused, view))
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
        add("hook_attn_out", ModuleOutput(part(spec.attn_out or spec.attn), whole))
        mlp_out = part(spec.mlp_out or spec.mlp)
        if dims.parallel:
            absent[f"{at}hook_resid_mid"] = (
                "its blocks are parallel (attention and MLP both read hook_resid_pre), so "
                "no residual stream lies between them"
            )
        else:
            add("hook_resid_mid", ResidMid(block, part(spec.mid or spec.ln2), mlp_out))
        site = NormScale(part(spec.ln2))
        add("ln2.hook_scale", site, "scale")
        add("ln2.hook_normalized", site, "normalized")
        mlp_in = part(spec.mlp_in)
        if spec.gate_up:
            width = _out_features(mlp_in) // 2
            add("mlp.hook_pre", ModuleOutput(mlp_in, LastDimSlice(0, width)))
            add("mlp.hook_pre_linear", ModuleOutput(mlp_in, LastDimSlice(width, 2 * width)))
        else:
            add("mlp.hook_pre", ModuleOutput(mlp_in, whole))
            if spec.mlp_linear is not None:
                add("mlp.hook_pre_linear", ModuleOutput(part(spec.mlp_linear), whole))
            else:
                absent[f"{at}mlp.hook_pre_linear"] = "its MLP is not gated"
        add("mlp.hook_post", ModuleInput(part(spec.mlp_down), whole))
        add("hook_mlp_out", ModuleOutput(mlp_out, whole))
        add("hook_resid_post", ModuleOutput(block, whole))
    site = NormScale(_module(body, table.ln_final))
    recipes["ln_final.hook_scale"] = (site, "scale")
    recipes["ln_final.hook_normalized"] = (site, "normalized")
    return recipes, absent


def _out_features(module: nn.Module) -> int:
    features = getattr(module, "out_features", None)
    if isinstance(features, int):
        return features
    weight: Any = getattr(module, "weight", None)
    return int(weight.shape[0])


def is_names_selector(selector: Any) -> bool:
    """Whether ``selector`` names values of the vocabulary (``"blocks.*.hook_z"``, or a
    list of such names) rather than modules: what :func:`capture` and :func:`patch` ask."""
    if isinstance(selector, str):
        return _is_name(selector)
    if isinstance(selector, (list, tuple)) and selector:
        items: Tuple[Any, ...] = tuple(selector)  # pyright: ignore[reportUnknownArgumentType]
        return all(isinstance(item, str) and _is_name(item) for item in items)
    return False


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
    recipes, absent = _recipes(root, found_in)
    items: List[str] = [selector] if isinstance(selector, str) else list(selector)
    chosen: Set[str] = set()
    for item in items:
        match = matcher_for(item) if is_pattern(item) else None
        found = [name for name in recipes if (match(name) if match else name == item)]
        if not found:
            raise unknown_name(found_in.architecture.name, recipes, absent, item, match)
        chosen.update(found)
    return [name for name in recipes if name in chosen]


class NameHooks(Removable):
    """Post hooks on some names of a model, on a private bus: what :func:`capture` and
    :func:`patch` install for names (``hook_for(name)`` makes each one's hook)."""

    __slots__ = ("_vocabulary",)

    def __init__(
        self, model: nn.Module, names: List[str], hook_for: Callable[[str], Callable[..., None]]
    ) -> None:
        bus = EventBus(f"hookbus.torch names of {type(model).__name__}, privately")
        self._vocabulary: Optional[Vocabulary] = Vocabulary(unwrap(model), bus)
        try:
            for name in names:
                bus.post(name, hook_for(name))
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        """Remove the hooks and every native hook they installed; idempotent."""
        vocabulary, self._vocabulary = self._vocabulary, None
        if vocabulary is not None:
            vocabulary.remove()
