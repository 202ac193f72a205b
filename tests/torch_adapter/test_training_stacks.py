"""hookbus.torch in the training stacks ML engineers run, each checked against the unhooked run.

- activation checkpointing, non-reentrant and reentrant;
- a Hugging Face GPT-2 from a tiny random config with ``gradient_checkpointing_enable()``;
- EMA through ``torch.optim.swa_utils.AveragedModel``;
- DDP, FSDP2 (``fully_shard``) and FSDP1 on 2 gloo processes over 127.0.0.1, started
  once for all their tests (see stack_workers.py), each collective with a timeout.

The call counts asserted under checkpointing are the ones docs/torch.md states.
"""

from __future__ import annotations

import copy
import pickle
import socket
import warnings
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import stack_workers
import torch
import torch.multiprocessing as mp
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torch.utils.checkpoint import checkpoint

import hookbus
import hookbus.torch
from hookbus import CallContext

# --- activation checkpointing ---------------------------------------------------------


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = nn.Tanh()
        self.out = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.act(self.fc(x)))


class Checkpointed(nn.Module):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.reentrant = reentrant
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=self.reentrant)
        return self.head(x)


def _train_step(model: nn.Module, x: torch.Tensor) -> Tuple[torch.Tensor, List[torch.Tensor]]:
    model.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def _double(ctx: CallContext) -> None:
    ctx.result = ctx.result * 2


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_checkpointing_gives_the_numbers_of_the_unhooked_run_and_hook_edits_apply_again(
    reentrant: bool,
) -> None:
    x = torch.randn(3, 4, requires_grad=True)
    plain = Checkpointed(reentrant)
    expected_loss, expected_grads = _train_step(plain, x)
    # A post hook that edits an output must edit it again in the recomputation,
    # or the gradients would not match the forward: compare with eager + the same edit.
    eager = Checkpointed(reentrant)
    eager.forward = lambda x: eager.head(eager.blocks[1](eager.blocks[0](x)))  # type: ignore[method-assign]
    for model in (plain, eager):
        model.blocks[0].out.register_forward_hook(lambda m, a, o: o * 2)
    edited_loss, edited_grads = _train_step(plain, x)
    eager_loss, eager_grads = _train_step(eager, x)
    assert torch.allclose(edited_loss, eager_loss)
    assert all(torch.allclose(a, b) for a, b in zip(edited_grads, eager_grads))

    hooked = Checkpointed(reentrant)
    seen: List[Any] = []
    with hookbus.torch.attach(hooked, hookbus.EventBus()) as net:
        net.pre("*", lambda ctx: ctx.data.update(pre=True))
        net.post("*", lambda ctx: seen.append((ctx.name, ctx.data.get("pre"))))
        net.exception("*", lambda ctx: seen.append(("exception", ctx.name)))
        net.grad(nn.Linear, lambda ctx: None)
        loss, grads = _train_step(hooked, x)
        assert torch.equal(loss, expected_loss)
        assert all(torch.equal(a, b) for a, b in zip(grads, expected_grads))
        assert all(shared for name, shared in seen if name != "exception")
        assert not [entry for entry in seen if entry[0] == "exception"]
        with net.post("blocks.0.out", _double):
            loss, grads = _train_step(hooked, x)
        assert torch.allclose(loss, eager_loss)
        assert all(torch.allclose(a, b) for a, b in zip(grads, eager_grads))


def _recorded_calls(reentrant: bool) -> Dict[str, int]:
    model = Checkpointed(reentrant)
    with hookbus.torch.capture(model) as cache:
        _train_step(model, torch.randn(3, 4, requires_grad=True))
    return {name: len(cache[name]) for name in cache}


def test_what_a_capture_records_under_non_reentrant_checkpointing() -> None:
    # Recomputation stops as soon as the last tensor saved for backward is made
    # again: here inside each region's last Linear, which saves its input. That
    # module, and the region (blocks.N) around it, don't finish again; the
    # modules that finished before the stop are recorded twice.
    assert _recorded_calls(reentrant=False) == {
        "<root>": 1,
        "blocks.0": 1,
        "blocks.0.fc": 2,
        "blocks.0.act": 2,
        "blocks.0.out": 1,
        "blocks.1": 1,
        "blocks.1.fc": 2,
        "blocks.1.act": 2,
        "blocks.1.out": 1,
        "head": 1,
    }


def test_what_a_capture_records_under_reentrant_checkpointing() -> None:
    # The reentrant mode recomputes the whole region: every module in it runs twice.
    assert _recorded_calls(reentrant=True) == {
        "<root>": 1,
        "blocks.0": 2,
        "blocks.0.fc": 2,
        "blocks.0.act": 2,
        "blocks.0.out": 2,
        "blocks.1": 2,
        "blocks.1.fc": 2,
        "blocks.1.act": 2,
        "blocks.1.out": 2,
        "head": 1,
    }


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_which_call_of_a_checkpointed_module_receives_its_gradient(reentrant: bool) -> None:
    # Non-reentrant: the forward call's tensors are in the graph, the gradient arrives there.
    # Reentrant: the forward runs under no_grad, only the recomputation's tensors are in the
    # graph, so the gradient arrives on the recomputed (last) call, as a tensor hook would.
    x = torch.randn(3, 4, requires_grad=True)
    model = Checkpointed(reentrant)
    grad_calls: List[int] = []
    with hookbus.torch.attach(model, hookbus.EventBus()) as net:
        net.grad("blocks.0.fc", lambda ctx: grad_calls.append(ctx.call_index))
        with hookbus.torch.capture(model, "blocks.0.fc", grads=True) as cache:
            _train_step(model, x)
    forward, recomputed = cache["blocks.0.fc"].calls
    receiving = 1 if reentrant else 0
    assert [forward.grad is not None, recomputed.grad is not None] == [
        receiving == 0,
        receiving == 1,
    ]
    assert grad_calls == [receiving]
    plain = Checkpointed(reentrant=False)
    with hookbus.torch.capture(plain, "blocks.0.fc", grads=True) as expected:
        _train_step(plain, x)
    received = (forward, recomputed)[receiving].grad
    assert torch.allclose(received, expected["blocks.0.fc"].calls[0].grad)


# --- Hugging Face GPT-2 with gradient checkpointing -------------------------------------


def _gpt2() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    with warnings.catch_warnings():  # transformers 5.x: renamed activation_checkpointing_enable
        warnings.simplefilter("ignore", FutureWarning)
        model.gradient_checkpointing_enable()
    model.train()
    model.config.use_cache = False
    return model


def _gpt2_step(model: nn.Module, ids: torch.Tensor) -> Tuple[float, List[torch.Tensor]]:
    model.zero_grad()
    torch.manual_seed(1)  # the same dropout masks in both runs
    loss = model(ids, labels=ids).loss
    loss.backward()
    return loss.item(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


def test_gpt2_with_gradient_checkpointing_hooked_matches_unhooked() -> None:
    ids = torch.randint(0, 100, (2, 12))
    plain = _gpt2()
    expected_loss, expected_grads = _gpt2_step(plain, ids)
    hooked = _gpt2()
    exceptions: List[str] = []
    with hookbus.torch.attach(hooked, hookbus.EventBus()) as net:
        net.exception("*", lambda ctx: exceptions.append(ctx.name))
        net.pre("transformer.h.*", lambda ctx: None)
        with hookbus.torch.capture(hooked, "transformer.h.0*", grads=True) as cache:
            loss, grads = _gpt2_step(hooked, ids)
    assert loss == expected_loss
    assert all(torch.equal(a, b) for a, b in zip(grads, expected_grads))
    assert exceptions == []
    # GradientCheckpointingLayer checkpoints the layer's forward, inside __call__:
    # the layer's own hooks fire once. Inside it, the recomputation stops early in
    # the last module that saves a tensor for backward (mlp.dropout, its mask): it
    # and mlp around it finish once, every module before them twice.
    calls = {name: len(cache[name]) for name in cache}
    assert calls == {
        "transformer.h.0": 1,
        "transformer.h.0.ln_1": 2,
        "transformer.h.0.attn": 2,
        "transformer.h.0.attn.c_attn": 2,
        "transformer.h.0.attn.c_proj": 2,
        "transformer.h.0.attn.resid_dropout": 2,
        "transformer.h.0.ln_2": 2,
        "transformer.h.0.mlp": 1,
        "transformer.h.0.mlp.c_fc": 2,
        "transformer.h.0.mlp.c_proj": 2,
        "transformer.h.0.mlp.act": 2,
        "transformer.h.0.mlp.dropout": 1,
    }
    first, again = cache["transformer.h.0.attn"].calls
    assert torch.equal(first.output[0], again.output[0])
    assert cache["transformer.h.0"].grad[0] is not None


# --- EMA -------------------------------------------------------------------------------


def test_ema_of_a_hooked_model_matches_the_ema_of_the_unhooked_one() -> None:
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    averaged = []
    for hooked in (False, True):
        model = copy.deepcopy(base)
        net = hookbus.torch.attach(model, hookbus.EventBus())
        if hooked:
            net.post(nn.Linear, lambda ctx: None)
            net.grad("2", lambda ctx: None)
        ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.9))  # a deepcopy
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        torch.manual_seed(1)
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.randn(5, 3)).pow(2).mean().backward()
            optimizer.step()
            ema.update_parameters(model)
        averaged.append(ema(torch.ones(2, 3)))
        assert not net.hooks() or hooked
        net.detach()
    assert torch.equal(averaged[0], averaged[1])


# --- accelerate ----------------------------------------------------------------------------


def test_a_skip_still_skips_after_accelerate_wraps_the_forward_for_mixed_precision() -> None:
    # prepare() wraps the instance's forward, here hookbus's swap, in autocast and a
    # float32 conversion: the skip once went unseen and the model's forward ran.
    accelerate = pytest.importorskip("accelerate")
    from accelerate.state import AcceleratorState

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    net = hookbus.torch.attach(model, hookbus.EventBus())
    value = torch.full((1, 2), 7.0)
    handle = net.pre("<root>", lambda ctx: ctx.skip(value) if len(ctx.args[0]) == 1 else None)
    dtypes: List[Tuple[str, torch.dtype]] = []
    for name in ("0", "<root>"):
        net.post(name, lambda ctx: dtypes.append((ctx.name, ctx.result.dtype)))
    AcceleratorState._reset_state(reset_partial_state=True)  # a process-wide singleton
    try:
        prepared = accelerate.Accelerator(cpu=True, mixed_precision="bf16").prepare(model)
        x = torch.randn(3, 4)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            expected = model[2](model[1](model[0](x))).float()
        assert torch.equal(prepared(torch.ones(1, 4)), value)
        dtypes.clear()
        assert torch.equal(prepared(x), expected)
        # Inside the autocast the layers' outputs are bfloat16; the model's is float32.
        assert dtypes == [("0", torch.bfloat16), ("<root>", torch.float32)]
        handle.remove()
        net.detach()
        assert torch.equal(prepared(x), expected)  # accelerate's wrapper still runs
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)


# --- DataLoader workers ------------------------------------------------------------------


@pytest.mark.timeout(240)
def test_dataloader_spawn_workers_run_the_hooks_their_worker_init_fn_registers() -> None:
    import os

    dataset = stack_workers.AugmentedDataset()
    parent = hookbus.torch.attach(dataset.augment, hookbus.EventBus())
    parent.post("0", lambda ctx: dataset.seen.append("parent"))
    loader = torch.utils.data.DataLoader(
        dataset,  # pickled to the worker with its hooked module: it arrives unhooked
        batch_size=2,
        num_workers=1,
        multiprocessing_context="spawn",
        worker_init_fn=stack_workers.init_worker,
        timeout=120,
    )
    batches = list(loader)
    # default_collate turns each sample's one-item list into a tuple per position
    assert [batch["seen"] for batch in batches] == [[("worker 0: 0", "worker 0: 0")]] * 2
    assert all(int(pid) != os.getpid() for batch in batches for pid in batch["pid"])
    assert dataset[0]["seen"] == ["parent"]  # the parent's hook still runs in the parent
    parent.detach()


# --- DDP, FSDP2 and FSDP1 on 2 gloo processes --------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> List[Dict[str, Any]]:
    """The facts each rank reported, for every scenario of stack_workers."""
    if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
        pytest.skip("this torch build has no torch.distributed with gloo")
    out_dir = tmp_path_factory.mktemp("ranks")
    base = stack_workers.make_model()
    net = hookbus.torch.attach(base, hookbus.EventBus())
    net.post("*", lambda ctx: None)
    with hookbus.torch.capture(base, nn.Linear):
        # Passed to mp.spawn while hooked: the children get inert copies.
        context = mp.start_processes(
            stack_workers.run,
            args=(_free_port(), str(out_dir), base),
            nprocs=2,
            join=False,
            start_method="spawn",
        )
    net.detach()
    try:
        for _ in range(6):  # 6 x 20 s at most; a hang fails the tests instead
            if context.join(timeout=20):
                break
        else:
            pytest.fail("the 2 gloo processes did not finish in 120 s")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    results = []
    for rank in range(2):
        with Path(out_dir, f"rank{rank}.pkl").open("rb") as file:
            results.append(pickle.load(file))
    return results


def _scenario(ranks: List[Dict[str, Any]], name: str) -> List[Dict[str, Any]]:
    facts = [rank[name] for rank in ranks]
    for rank, fact in enumerate(facts):
        assert "error" not in fact, f"rank {rank}, {name}:\n{fact['error']}"
    return facts


@pytest.mark.timeout(240)
@pytest.mark.filterwarnings("ignore:hookbus.torch. capture:RuntimeWarning")  # ran nothing
def test_a_hooked_model_passed_to_mp_spawn_arrives_without_hooks(
    ranks: List[Dict[str, Any]],
) -> None:
    for rank in ranks:
        assert rank["received"]["hook_dicts"] > 0  # the inert stand-ins travelled
        assert rank["received"]["after_first_call"] == 0  # and left at the first call


@pytest.mark.timeout(240)
def test_ddp_hooked_matches_unhooked_with_bare_names(ranks: List[Dict[str, Any]]) -> None:
    for fact in _scenario(ranks, "ddp"):
        assert fact["names"] == ["<root>", "0", "1", "2", "3", "4"]
        assert fact["raw"] == "module.0"
        assert fact["loss_difference"] == 0.0
        assert fact["parameter_difference"] == 0.0
        assert fact["seen"] == ["0", "2", "4", "grad 2"]
        assert fact["captured_calls"] == 2
        assert fact["captured_grad_shape"] == (6, 2)


@pytest.mark.timeout(240)
def test_ddp_warns_once_when_a_post_hook_cuts_the_graph(ranks: List[Dict[str, Any]]) -> None:
    for fact in _scenario(ranks, "ddp_graph_cut"):
        cut = fact["zeros_like find_unused=False"]["warnings"]
        assert len(cut) == 1
        assert "find_unused_parameters=True" in cut[0]
        assert "ctx.result * 0" in cut[0]
        assert fact["times_zero find_unused=False"] == {"warnings": [], "steps": 2}
        assert fact["zeros_like find_unused=True"] == {"warnings": [], "steps": 2}


@pytest.mark.timeout(240)
def test_fsdp2_hooked_matches_unhooked_and_hooks_see_shards_after_sharding(
    ranks: List[Dict[str, Any]],
) -> None:
    for fact in _scenario(ranks, "fsdp2"):
        assert fact["names"] == ["<root>", "0", "1", "2", "3", "4"]
        assert fact["loss_difference"] == 0.0
        assert fact["parameter_difference"] == 0.0
        assert fact["seen"] == ["0", "2", "4", "grad 2"]
        assert fact["weights"] == {
            "registered before fully_shard": ("Parameter", (8, 4)),
            "registered after fully_shard": ("DTensor", (4, 4)),
        }


@pytest.mark.timeout(240)
def test_fsdp1_hooked_matches_unhooked_with_bare_names(ranks: List[Dict[str, Any]]) -> None:
    for fact in _scenario(ranks, "fsdp1"):
        assert fact["names"] == ["<root>", "0", "1", "2", "3", "4"]
        assert fact["raw"] == "_fsdp_wrapped_module.2._fsdp_wrapped_module"
        assert fact["loss_difference"] == 0.0
        assert fact["seen"] == ["0", "2", "4", "grad 2"]
