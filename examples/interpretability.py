"""Interpretability on a small GPT-2: ablation, attention, patching, steering, memory.

On a random Hugging Face ``GPT2LMHeadModel`` (built from a tiny config, no
download), with hookbus's public API only.

Shows:

* zero-ablating one attention head: a hook on the output of the attention
  operation inside ``attn``'s forward (``net.operations(...)``), under the
  ``eager`` and the ``sdpa`` attention;
* reading the attention pattern: the output of ``softmax`` under ``eager``, and
  worked out from the inputs of ``scaled_dot_product_attention`` under ``sdpa``
  (which never materializes it);
* activation patching with ``hookbus.torch.patch``: a clean run's ``capture()``
  patched into a corrupted run, one block and one position at a time;
* steering during ``generate()`` only from the first generated token on, with
  ``hookbus.torch.steps``;
* a bounded capture (``keep="last"``, and a ``sink=`` that reduces on the fly)
  over many forwards: the memory it holds stays flat.

Each part checks its numbers against the same thing written in raw torch (hooks
and a monkeypatch written by hand) to 1e-6, so the example fails loudly if
hookbus is wrong.

Run it: ``python examples/interpretability.py``
"""

from __future__ import annotations

from typing import Any, Dict, List

import torch
import transformers
from torch import nn

import hookbus
import hookbus.torch

SDPA = "scaled_dot_product_attention"
HEADS, D_HEAD = 2, 16


def check(got: torch.Tensor, want: torch.Tensor) -> None:
    """hookbus's number against raw torch's, to 1e-6."""
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def tiny_gpt2() -> Any:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_head=HEADS, n_embd=HEADS * D_HEAD, vocab_size=100,
        n_positions=64, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return transformers.GPT2LMHeadModel(config).eval()


# --- 1. zero-ablating one head ---------------------------------------------------------


def ablate_head(gpt2: Any, net: hookbus.torch.Attachment, tokens: torch.Tensor) -> None:
    # The attention's output before the heads are merged: [batch, head, position, d_head].
    # eager makes it with its second matmul; sdpa with one call of the fused kernel.
    where = {"eager": ("matmul", "matmul.1"), "sdpa": (SDPA, f"{SDPA}.0")}

    def zero_head_1(ctx: hookbus.CallContext) -> None:
        z = ctx.result.clone()
        z[:, 1] = 0
        ctx.result = z

    # Raw torch: zero head 1's slice of c_proj's input (where the heads are merged).
    def zero_slice(module: nn.Module, args: Any) -> Any:
        z = args[0].clone()
        z[..., D_HEAD : 2 * D_HEAD] = 0
        return (z,)

    for implementation, (operation, point) in where.items():
        gpt2.set_attn_implementation(implementation)
        with torch.no_grad(), net.operations("transformer.h.0.attn", operation):
            with net.post(f"transformer.h.0.attn:{point}", zero_head_1):
                ablated = gpt2(tokens).logits
            handle = gpt2.transformer.h[0].attn.c_proj.register_forward_pre_hook(zero_slice)
            by_hand = gpt2(tokens).logits
            handle.remove()
            plain = gpt2(tokens).logits
        check(ablated, by_hand)
        change = (ablated - plain).abs().max().item()
        print(f"1. head 0.1 ablated ({implementation}): logits move by up to {change:.3f}")


# --- 2. reading the attention pattern ----------------------------------------------------


def attention_patterns(gpt2: Any, net: hookbus.torch.Attachment, tokens: torch.Tensor) -> None:
    # Raw torch: the pattern by hand, from c_attn's output (queries, keys, values).
    qkv: Dict[int, torch.Tensor] = {}
    handles = [
        block.attn.c_attn.register_forward_hook(
            lambda m, a, out, layer=layer: qkv.__setitem__(layer, out)
        )
        for layer, block in enumerate(gpt2.transformer.h)
    ]
    with torch.no_grad():
        gpt2(tokens)
    for handle in handles:
        handle.remove()
    length = tokens.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    by_hand = {}
    for layer, out in qkv.items():
        q, k, _ = out.view(1, length, 3, HEADS, D_HEAD).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) / D_HEAD**0.5
        by_hand[layer] = scores.masked_fill(~causal, float("-inf")).softmax(-1)

    # eager: the pattern is softmax's output.
    gpt2.set_attn_implementation("eager")
    patterns: Dict[str, torch.Tensor] = {}

    def keep(ctx: hookbus.CallContext) -> None:
        patterns[ctx.name] = ctx.result

    with (
        torch.no_grad(),
        net.operations("transformer.h.*.attn", "softmax"),
        net.post("transformer.h.*.attn:softmax.0", keep),
    ):
        gpt2(tokens)
    for layer in by_hand:
        check(patterns[f"transformer.h.{layer}.attn:softmax.0"], by_hand[layer])

    # sdpa computes the pattern inside a fused kernel: work it out from the kernel's
    # inputs (a pre hook sees the call's arguments).
    gpt2.set_attn_implementation("sdpa")
    from_inputs: Dict[str, torch.Tensor] = {}

    def pattern_from_inputs(ctx: hookbus.CallContext) -> None:
        # (a padded batch would also pass attn_mask, to add to the scores)
        assert ctx.kwargs["attn_mask"] is None, "one unpadded prompt here"
        query, key = ctx.args[:2]
        scores = query @ key.transpose(-1, -2) * ctx.kwargs["scale"]
        if ctx.kwargs["is_causal"]:
            scores = scores.masked_fill(~causal, float("-inf"))
        from_inputs[ctx.name] = scores.softmax(-1)

    with (
        torch.no_grad(),
        net.operations("transformer.h.*.attn", SDPA),
        net.pre(f"transformer.h.*.attn:{SDPA}.0", pattern_from_inputs),
    ):
        gpt2(tokens)
    for layer in by_hand:
        check(from_inputs[f"transformer.h.{layer}.attn:{SDPA}.0"], by_hand[layer])
    row = patterns["transformer.h.0.attn:softmax.0"][0, 0, 3]
    print(f"2. pattern of head 0.0, query 3 (eager = sdpa): {row.numpy().round(2)}")


# --- 3. activation patching ----------------------------------------------------------------


def activation_patching(gpt2: Any) -> None:
    clean = torch.tensor([[11, 12, 13, 14, 15]])
    corrupt = torch.tensor([[11, 42, 13, 14, 15]])  # position 1 differs
    blocks = list(gpt2.transformer.h)  # not "transformer.h.*": * also matches dots
    with torch.no_grad(), hookbus.torch.capture(gpt2, blocks) as cache:
        clean_logits = gpt2(clean).logits[0, -1]
    with torch.no_grad():
        corrupt_logits = gpt2(corrupt).logits[0, -1]
    answer = int(clean_logits.argmax())

    def restored(logits: torch.Tensor) -> float:
        """How much of the clean answer's logit a patch brings back: 0 none, 1 all."""
        gap = clean_logits[answer] - corrupt_logits[answer]
        return float((logits[0, -1, answer] - corrupt_logits[answer]) / gap)

    print(f"3. patching clean into corrupt, restored share of logit {answer}:")
    print("   position " + " ".join(f"{p:5}" for p in range(clean.shape[1])))
    for layer, block in enumerate(gpt2.transformer.h):
        name = f"transformer.h.{layer}"
        row = []
        for position in range(clean.shape[1]):
            with torch.no_grad(), hookbus.torch.patch(gpt2, cache, name, positions=[position]):
                patched = gpt2(corrupt).logits
            # Raw torch: a forward hook that writes the stored position into the output.
            hook = writing(cache[name].output, position)
            handle = block.register_forward_hook(hook)
            with torch.no_grad():
                by_hand = gpt2(corrupt).logits
            handle.remove()
            check(patched, by_hand)
            row.append(round(restored(patched), 2) + 0.0)  # + 0.0: no "-0.00"
        print(f"   block {layer}  " + " ".join(f"{share:5.2f}" for share in row))
        if layer == len(gpt2.transformer.h) - 1:  # the last block: only the last position
            assert row == [0] * (clean.shape[1] - 1) + [1]
    # Without positions, patch skips the block's forward and returns the stored output.
    with torch.no_grad(), hookbus.torch.patch(gpt2, cache, "transformer.h.1"):
        check(gpt2(corrupt).logits[0, -1], clean_logits)


def writing(stored: torch.Tensor, position: int) -> Any:
    """A native forward hook that writes ``stored``'s ``position`` into the output."""

    def hook(module: nn.Module, args: Any, out: torch.Tensor) -> torch.Tensor:
        out = out.clone()
        out[:, position] = stored[:, position]
        return out

    return hook


# --- 4. steering during generate() -----------------------------------------------------


def steering(gpt2: Any, net: hookbus.torch.Attachment) -> None:
    prompt = torch.tensor([[5, 6, 7, 8]])
    direction = torch.randn(HEADS * D_HEAD, generator=torch.Generator().manual_seed(1)) * 4

    def generate() -> Any:
        return gpt2.generate(
            prompt, max_new_tokens=5, do_sample=False, pad_token_id=0,
            return_dict_in_generate=True, output_logits=True,
        )  # fmt: skip

    def steer(ctx: hookbus.CallContext) -> None:
        ctx.result = ctx.result + direction

    # step 0 is the prompt's forward; step 1 the first generated token's, and so on.
    with hookbus.torch.steps(gpt2) as step, net.post("transformer.h.0", step.only(steer, start=1)):
        steered = generate()

    # Raw torch: under the key-value cache a generated token's forward has length 1.
    def steer_new_tokens(m: nn.Module, a: Any, out: torch.Tensor) -> Any:
        return out + direction if out.shape[1] == 1 else None

    handle = gpt2.transformer.h[0].register_forward_hook(steer_new_tokens)
    by_hand = generate()
    handle.remove()
    plain = generate()
    assert torch.equal(steered.sequences, by_hand.sequences)
    for got, want in zip(steered.logits, by_hand.logits):
        check(got, want)
    check(steered.logits[0], plain.logits[0])  # the prompt's forward was not steered
    new = prompt.shape[1]
    print(f"4. generated {plain.sequences[0, new:].tolist()}, steered from the first "
          f"generated token on: {steered.sequences[0, new:].tolist()}")  # fmt: skip


# --- 5. a bounded capture ----------------------------------------------------------------


def bounded_capture(gpt2: Any) -> None:
    batches = [torch.randint(0, 100, (1, 8)) for _ in range(100)]

    def held_after(forwards: int, **options: Any) -> int:
        blocks = list(gpt2.transformer.h)
        with torch.no_grad(), hookbus.torch.capture(gpt2, blocks, **options) as cache:
            for tokens in batches[:forwards]:
                gpt2(tokens)
        return cache.nbytes()

    after_10, after_100 = held_after(10, keep="last"), held_after(100, keep="last")
    assert after_10 == after_100, "keep='last' holds one call per module"
    grows = held_after(10), held_after(20)
    assert grows[1] == 2 * grows[0], "keep='all' holds every call"

    # keep="last", and a sink that keeps the running mean of block 1's last position.
    total: List[Any] = [0, 0]

    def running_mean(name: str, call: hookbus.torch.Call) -> None:
        total[0] += call.output[0, -1]
        total[1] += 1

    with (
        torch.no_grad(),
        hookbus.torch.capture(gpt2, "transformer.h.0", keep="last") as last,
        hookbus.torch.capture(gpt2, "transformer.h.1", sink=running_mean) as sunk,
    ):
        for tokens in batches:
            gpt2(tokens)

    # Raw torch: hand-written hooks doing the same.
    by_hand: Dict[str, Any] = {"sum": 0}

    def keep_last(m: nn.Module, a: Any, out: torch.Tensor) -> None:
        by_hand["last"] = out.detach()

    def add_up(m: nn.Module, a: Any, out: torch.Tensor) -> None:
        by_hand["sum"] = by_hand["sum"] + out.detach()[0, -1]

    handles = [
        gpt2.transformer.h[0].register_forward_hook(keep_last),
        gpt2.transformer.h[1].register_forward_hook(add_up),
    ]
    with torch.no_grad():
        for tokens in batches:
            gpt2(tokens)
    for handle in handles:
        handle.remove()
    check(last["transformer.h.0"].output, by_hand["last"])
    check(total[0] / total[1], by_hand["sum"] / len(batches))
    assert (len(last["transformer.h.0"]), last["transformer.h.0"].count) == (1, 100)
    assert (len(sunk), sunk.nbytes()) == (0, 0)
    print(f"5. keep='last' holds {after_10} bytes after 10 forwards and {after_100} "
          f"after 100 (keep='all': {grows[0]} after 10, {grows[1]} after 20)")  # fmt: skip


def main() -> None:
    gpt2 = tiny_gpt2()
    tokens = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    with hookbus.torch.attach(gpt2, hookbus.EventBus()) as net:
        ablate_head(gpt2, net, tokens)
        attention_patterns(gpt2, net, tokens)
        activation_patching(gpt2)
        steering(gpt2, net)
    bounded_capture(gpt2)
    # Everything is put back: no native hook, no replaced forward.
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in gpt2.modules())
    assert all("forward" not in vars(m) for m in gpt2.modules())
    print("interpretability example: ok")


if __name__ == "__main__":
    main()
