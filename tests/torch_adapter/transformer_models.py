"""Tiny random Hugging Face models of every layout the names vocabulary knows, and the
raw-torch references each name is checked against (native hooks, by hand).

The references read each value where a user without hookbus would: the model's
own ``output_hidden_states`` and ``output_attentions``, native forward hooks on
the modules written out here per model (not taken from hookbus's tables), the
rotary function of the model's module replaced for the call, and the norms'
formulas.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest
import torch
from torch import nn

ARCHITECTURES = (
    "gpt2", "gpt_neox", "opt", "llama", "mistral", "qwen2", "qwen3", "gemma2", "phi3",
)  # fmt: skip
IMPLEMENTATIONS = ("eager", "sdpa")
CASES = [(arch, impl) for arch in ARCHITECTURES for impl in IMPLEMENTATIONS]
TOLERANCE: Dict[str, Any] = dict(atol=1e-5, rtol=1e-5)

_SMALL = dict(
    hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
    vocab_size=100, max_position_embeddings=64, bos_token_id=0, eos_token_id=0,
    pad_token_id=0,
)  # fmt: skip


def _config(arch: str) -> Any:
    transformers = pytest.importorskip("transformers")
    if arch == "gpt2":
        return transformers.GPT2Config(
            n_layer=2, n_head=4, n_embd=32, vocab_size=100, n_positions=64,
            bos_token_id=0, eos_token_id=0,
        )  # fmt: skip
    if arch == "opt":
        return transformers.OPTConfig(
            hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=4,
            vocab_size=100, max_position_embeddings=64, word_embed_proj_dim=32,
            bos_token_id=0, eos_token_id=0, pad_token_id=0,
        )  # fmt: skip
    if arch == "gpt_neox":
        return transformers.GPTNeoXConfig(
            **_SMALL, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                       "partial_rotary_factor": 0.5},
        )  # fmt: skip
    gqa = dict(_SMALL, num_key_value_heads=2)
    if arch == "gemma2":
        return transformers.Gemma2Config(
            **gqa, head_dim=8, query_pre_attn_scalar=8, attn_logit_softcapping=None,
            final_logit_softcapping=None, sliding_window=4,
        )  # fmt: skip
    if arch == "phi3":
        return transformers.Phi3Config(
            **gqa, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                    "partial_rotary_factor": 0.5},
        )  # fmt: skip
    if arch == "qwen3":  # Llama's layout with a norm on each head's queries and keys
        return transformers.Qwen3Config(**gqa, head_dim=8)
    kind = {"llama": "LlamaConfig", "mistral": "MistralConfig", "qwen2": "Qwen2Config"}[arch]
    return getattr(transformers, kind)(**gqa)


def tiny_model(arch: str, implementation: str = "eager", **overrides: Any) -> nn.Module:
    """A random causal LM of ``arch``, 2 layers of width 32, 4 heads (2 key-value
    heads where the layout has GQA), seed 0, eval mode, larger weights than the
    default init so that values differ visibly.

    Gemma 2 under ``sdpa``: transformers refuses to load it so (sdpa cannot soft-cap
    the scores), so it is built eager, without soft-capping, and switched, as a user
    forcing it would."""
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    config = _config(arch)
    for key, value in overrides.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    forced = arch == "gemma2" and implementation == "sdpa"
    model: nn.Module = transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation="eager" if forced else implementation
    ).eval()
    if forced:
        model.config._attn_implementation = "sdpa"
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0, 0.2)
    return model


def tokens(batch: int = 2, length: int = 7) -> torch.Tensor:
    return torch.arange(batch * length).reshape(batch, length) % 97 + 1


def named(arch: str, implementation: str = "eager") -> Tuple[nn.Module, Any, Any]:
    """A tiny model attached to a new bus with names: ``(model, bus, vocabulary)``."""
    import hookbus
    import hookbus.torch

    model = tiny_model(arch, implementation)
    bus = hookbus.EventBus()
    return model, bus, hookbus.torch.attach(model, bus, names="transformer").vocabulary


def logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


def replacing(edit: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[Any], None]:
    """A post hook that replaces the value by ``edit`` of a copy of it."""

    def hook(ctx: Any) -> None:
        ctx.result = edit(ctx.result.clone())

    return hook


# --- where each value is, written out by hand per model ------------------------------------

# (body path, embed, pos_embed, ln_final, block fields)
_LAYOUT: Dict[str, Dict[str, Any]] = {
    "gpt2": dict(
        blocks="transformer.h",
        embed="transformer.wte",
        pos="transformer.wpe",
        ln_f="transformer.ln_f",
        ln1="ln_1",
        ln2="ln_2",
        attn="attn",
        o="attn.c_proj",
        qkv=("concat", "attn.c_attn"),
        mlp_in="mlp.c_fc",
        up=None,
        down="mlp.c_proj",
        attn_out="attn",
        mlp_out="mlp",
        rotary=None,
    ),
    "gpt_neox": dict(
        blocks="gpt_neox.layers",
        embed="gpt_neox.embed_in",
        pos=None,
        ln_f="gpt_neox.final_layer_norm",
        ln1="input_layernorm",
        ln2="post_attention_layernorm",
        attn="attention",
        o="attention.dense",
        qkv=("per_head", "attention.query_key_value"),
        mlp_in="mlp.dense_h_to_4h",
        up=None,
        down="mlp.dense_4h_to_h",
        attn_out="attention",
        mlp_out="mlp",
        rotary="transformers.models.gpt_neox.modeling_gpt_neox",
    ),
    "phi3": dict(
        blocks="model.layers",
        embed="model.embed_tokens",
        pos=None,
        ln_f="model.norm",
        ln1="input_layernorm",
        ln2="post_attention_layernorm",
        attn="self_attn",
        o="self_attn.o_proj",
        qkv=("concat", "self_attn.qkv_proj"),
        mlp_in="mlp.gate_up_proj",
        up="fused",
        down="mlp.down_proj",
        attn_out="self_attn",
        mlp_out="mlp",
        rotary="transformers.models.phi3.modeling_phi3",
    ),
}
_LAYOUT["opt"] = dict(
    blocks="model.decoder.layers",
    embed="model.decoder.embed_tokens",
    pos="model.decoder.embed_positions",
    ln_f="model.decoder.final_layer_norm",
    ln1="self_attn_layer_norm",
    ln2="final_layer_norm",
    attn="self_attn",
    o="self_attn.out_proj",
    qkv=("separate", "self_attn"),
    mlp_in="fc1",
    up=None,
    down="fc2",
    attn_out="self_attn",
    mlp_out="fc2",
    rotary=None,
    flat=True,  # the block runs its MLP on [batch * pos, d_model]
)
for _arch in ("llama", "mistral", "qwen2", "qwen3", "gemma2"):
    _LAYOUT[_arch] = dict(
        blocks="model.layers",
        embed="model.embed_tokens",
        pos=None,
        ln_f="model.norm",
        ln1="input_layernorm",
        ln2="post_attention_layernorm",
        attn="self_attn",
        o="self_attn.o_proj",
        qkv=("separate", "self_attn"),
        mlp_in="mlp.gate_proj",
        up="mlp.up_proj",
        down="mlp.down_proj",
        attn_out="self_attn",
        mlp_out="mlp",
        rotary=f"transformers.models.{_arch}.modeling_{_arch}",
    )
_LAYOUT["gemma2"].update(
    ln2="pre_feedforward_layernorm",
    attn_out="post_attention_layernorm",
    mlp_out="post_feedforward_layernorm",
)


def layout(arch: str) -> Dict[str, Any]:
    return _LAYOUT[arch]


def module(model: nn.Module, path: str) -> nn.Module:
    return model.get_submodule(path)


def block_module(model: nn.Module, arch: str, layer: int, path: str) -> nn.Module:
    return model.get_submodule(f"{_LAYOUT[arch]['blocks']}.{layer}.{path}")


def _first(output: Any) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output


def _norm_values(norm: nn.Module, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(scale [b, s, 1], normalized) of a norm's input, by the norm's formula."""
    if isinstance(norm, nn.LayerNorm):
        centred = x - x.mean(-1, keepdim=True)
        scale = (centred.pow(2).mean(-1, keepdim=True) + norm.eps).sqrt()
        return scale, centred / scale
    eps = getattr(norm, "variance_epsilon", None) or norm.eps
    x = x.float()
    scale = (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    return scale, x / scale


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    return x.reshape(*x.shape[:-1], heads, -1)


def per_head(o: nn.Module, z: torch.Tensor, heads: int) -> torch.Tensor:
    """Each head's part of the output projection ``o(z)``, without the bias, from its
    weight by hand: ``[..., head, d_model]``."""
    d_head = z.shape[-1] // heads
    weight = o.weight
    conv1d = type(o).__name__ == "Conv1D"  # GPT-2's: [in, out]
    parts = []
    for head in range(heads):
        rows = slice(head * d_head, (head + 1) * d_head)
        w = weight[rows, :] if conv1d else weight[:, rows].T
        parts.append(z[..., rows] @ w)
    return torch.stack(parts, dim=-2)


def dims(model: nn.Module) -> Tuple[int, int, int]:
    """(heads, key-value heads, d_head) from the config, by hand."""
    config: Any = model.config
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    d_head = getattr(config, "head_dim", None) or config.hidden_size // heads
    return heads, kv, d_head


@contextlib.contextmanager
def _recording_rotary(
    arch: str, record: List[Tuple[torch.Tensor, torch.Tensor]]
) -> Iterator[None]:
    """The model module's ``apply_rotary_pos_emb`` replaced by one that records its outputs."""
    path = _LAYOUT[arch]["rotary"]
    if path is None:
        yield
        return
    where = importlib.import_module(path)
    original = where.apply_rotary_pos_emb

    def recording(*args: Any, **kwargs: Any) -> Any:
        q, k = original(*args, **kwargs)
        record.append((q, k))
        return q, k

    where.apply_rotary_pos_emb = recording
    try:
        yield
    finally:
        where.apply_rotary_pos_emb = original


def reference(model: nn.Module, arch: str, ids: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Every name's value in one forward, read by hand (under eager attention, for the
    pattern; the model's own implementation is put back)."""
    spec = _LAYOUT[arch]
    heads, kv, d_head = dims(model)
    values: Dict[str, torch.Tensor] = {}
    handles: List[Any] = []

    def on_output(name: str, cut: Callable[[torch.Tensor], torch.Tensor]) -> Any:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            values[name] = cut(_first(output)).detach().clone()

        return hook

    def on_input(name: str, cut: Callable[[torch.Tensor], torch.Tensor]) -> Any:
        def hook(module: nn.Module, args: Any, kwargs: Any) -> None:
            x = args[0] if args else kwargs["hidden_states"]
            values[name] = cut(x).detach().clone()

        return hook

    def on_norm(prefix: str) -> Any:
        def hook(module: nn.Module, args: Any) -> None:
            scale, normalized = _norm_values(module, args[0])
            values[f"{prefix}.hook_scale"] = scale.detach()
            values[f"{prefix}.hook_normalized"] = normalized.detach()

        return hook

    same = lambda x: x  # noqa: E731
    q_size, kv_size = heads * d_head, kv * d_head
    handles.append(
        module(model, spec["embed"]).register_forward_hook(on_output("hook_embed", same))
    )
    if spec["pos"]:  # [batch, pos, d_model], as TransformerLens has it (GPT-2 computes [1, ...])
        batch = lambda x: x.expand(ids.shape[0], *x.shape[1:])  # noqa: E731
        handles.append(
            module(model, spec["pos"]).register_forward_hook(on_output("hook_pos_embed", batch))
        )
    handles.append(module(model, spec["ln_f"]).register_forward_pre_hook(on_norm("ln_final")))
    layers = len(module(model, spec["blocks"]))
    for layer in range(layers):
        at = f"blocks.{layer}."

        def part(path: str) -> nn.Module:
            return block_module(model, arch, layer, path)  # noqa: B023

        handles.append(part(spec["ln1"]).register_forward_pre_hook(on_norm(at + "ln1")))
        handles.append(part(spec["ln2"]).register_forward_pre_hook(on_norm(at + "ln2")))
        style, path = spec["qkv"]
        if style == "separate":
            for letter, n in (("q", heads), ("k", kv), ("v", kv)):
                handles.append(
                    part(f"{path}.{letter}_proj").register_forward_hook(
                        on_output(f"{at}attn.hook_{letter}", lambda x, n=n: _heads(x, n))
                    )
                )
        elif style == "concat":
            bounds = ((0, q_size, heads), (q_size, q_size + kv_size, kv),
                      (q_size + kv_size, q_size + 2 * kv_size, kv))  # fmt: skip
            for letter, (start, stop, n) in zip("qkv", bounds):
                handles.append(
                    part(path).register_forward_hook(
                        on_output(
                            f"{at}attn.hook_{letter}",
                            lambda x, a=start, b=stop, n=n: _heads(x[..., a:b], n),
                        )
                    )
                )
        else:  # per head: [q k v] of head 0, then of head 1, ...
            for index, letter in enumerate("qkv"):
                handles.append(
                    part(path).register_forward_hook(
                        on_output(
                            f"{at}attn.hook_{letter}",
                            lambda x, i=index: x.reshape(*x.shape[:-1], heads, 3 * d_head)[
                                ..., i * d_head : (i + 1) * d_head
                            ],
                        )
                    )
                )
        handles.append(
            part(spec["o"]).register_forward_pre_hook(
                on_input(f"{at}attn.hook_z", lambda x: _heads(x, heads)), with_kwargs=True
            )
        )
        o = part(spec["o"])
        handles.append(
            o.register_forward_pre_hook(
                on_input(f"{at}attn.hook_result", lambda x, o=o: per_head(o, x, heads)),
                with_kwargs=True,
            )
        )
        handles.append(
            part(spec["attn_out"]).register_forward_hook(on_output(f"{at}hook_attn_out", same))
        )
        handles.append(
            part(spec["mlp_out"]).register_forward_hook(on_output(f"{at}hook_mlp_out", same))
        )
        if spec["up"] == "fused":
            handles.append(
                part(spec["mlp_in"]).register_forward_hook(
                    on_output(f"{at}mlp.hook_pre", lambda x: x.chunk(2, dim=-1)[0])
                )
            )
            handles.append(
                part(spec["mlp_in"]).register_forward_hook(
                    on_output(f"{at}mlp.hook_pre_linear", lambda x: x.chunk(2, dim=-1)[1])
                )
            )
        else:
            handles.append(
                part(spec["mlp_in"]).register_forward_hook(on_output(f"{at}mlp.hook_pre", same))
            )
            if spec["up"]:
                handles.append(
                    part(spec["up"]).register_forward_hook(
                        on_output(f"{at}mlp.hook_pre_linear", same)
                    )
                )
        handles.append(
            part(spec["down"]).register_forward_pre_hook(
                on_input(f"{at}mlp.hook_post", same), with_kwargs=True
            )
        )
        if not getattr(model.config, "use_parallel_residual", False):
            handles.append(
                part(spec["ln2"]).register_forward_pre_hook(
                    on_input(f"{at}hook_resid_mid", same), with_kwargs=True
                )
            )
    rotary: List[Tuple[torch.Tensor, torch.Tensor]] = []
    implementation = model.config._attn_implementation
    model.config._attn_implementation = "eager"
    try:
        with torch.no_grad(), _recording_rotary(arch, rotary):
            out = model(ids, output_hidden_states=True, output_attentions=True)
    finally:
        model.config._attn_implementation = implementation
        for handle in handles:
            handle.remove()
    for layer in range(layers):
        at = f"blocks.{layer}."
        values[f"{at}hook_resid_pre"] = out.hidden_states[layer]
        if layer + 1 < layers:  # the last hidden state has the final norm applied
            values[f"{at}hook_resid_post"] = out.hidden_states[layer + 1]
        values[f"{at}attn.hook_pattern"] = out.attentions[layer]
        if rotary:
            q, k = rotary[layer]
            values[f"{at}attn.hook_rot_q"] = q.transpose(1, 2)
            values[f"{at}attn.hook_rot_k"] = k.transpose(1, 2)
    if spec.get("flat"):  # the MLP side's values, seen as [batch, pos, ...]
        mlp_side = ("hook_resid_mid", "ln2.hook_scale", "ln2.hook_normalized", "mlp.hook_pre",
                    "mlp.hook_post", "hook_mlp_out")  # fmt: skip
        for layer in range(layers):
            for name in mlp_side:
                key = f"blocks.{layer}.{name}"
                values[key] = values[key].reshape(*ids.shape, -1)
    values["logits"] = out.logits
    return values


@contextlib.contextmanager
def scaled_softmax(factor: float) -> Iterator[None]:
    """Every ``softmax`` of the forward (the attention's: the models call no other) times
    ``factor``: the raw edit of scaling every pattern."""
    functional = torch.nn.functional
    original = functional.softmax

    def scaled(*args: Any, **kwargs: Any) -> torch.Tensor:
        return original(*args, **kwargs) * factor

    functional.softmax = scaled  # type: ignore[assignment]
    try:
        yield
    finally:
        functional.softmax = original  # type: ignore[assignment]


@contextlib.contextmanager
def scaled_scores(factor: float) -> Iterator[None]:
    """Every ``softmax``'s input times ``factor``: the raw edit of scaling every layer's
    attention scores (masked positions stay far below the others)."""
    functional = torch.nn.functional
    original = functional.softmax

    def scaled(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return original(x * factor, *args, **kwargs)

    functional.softmax = scaled  # type: ignore[assignment]
    try:
        yield
    finally:
        functional.softmax = original  # type: ignore[assignment]


@contextlib.contextmanager
def edited_rotary(arch: str, edit: Callable[[torch.Tensor, torch.Tensor], Any]) -> Iterator[None]:
    """The model module's ``apply_rotary_pos_emb`` returning ``edit(q, k)``."""
    where = importlib.import_module(_LAYOUT[arch]["rotary"])
    original = where.apply_rotary_pos_emb

    def edited(*args: Any, **kwargs: Any) -> Any:
        return edit(*original(*args, **kwargs))

    where.apply_rotary_pos_emb = edited
    try:
        yield
    finally:
        where.apply_rotary_pos_emb = original
