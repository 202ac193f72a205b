"""hookbus.torch.stats in one process: exact streaming statistics, lifecycle, bad input.

Across ranks (reduce, gather) see test_distributed.py.
"""

from __future__ import annotations

import copy
import gc
import io
import pickle
import threading
import weakref
from typing import Any, Callable, Iterator, List, Tuple

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import hookbus
import hookbus.torch as ht


def exact(values: torch.Tensor) -> Tuple[int, torch.Tensor, torch.Tensor]:
    """count, mean and population variance of (N, F) values, by a float64 two-pass sum."""
    values = values.double()
    mean = values.mean(0)
    centred = values - mean
    m2 = (centred * centred).sum(0) - centred.sum(0) ** 2 / values.shape[0]
    return values.shape[0], mean, m2 / values.shape[0]


def assert_matches(stat: ht.Moments, values: torch.Tensor, rtol: float = 1e-10) -> None:
    count, mean, var = exact(values)
    assert stat.count == count
    scale = float(values.double().abs().max())
    torch.testing.assert_close(stat.mean, mean, rtol=1e-10, atol=1e-13 * scale)
    torch.testing.assert_close(stat.var, var, rtol=rtol, atol=1e-300)
    torch.testing.assert_close(stat.std, var.sqrt(), rtol=rtol, atol=1e-300)
    assert torch.equal(stat.min, values.double().amin(0))
    assert torch.equal(stat.max, values.double().amax(0))
    assert stat.mean.dtype == stat.var.dtype == stat.min.dtype == torch.float64


class Offset(nn.Module):
    """Outputs far from zero with a tiny spread: E[x^2] - E[x]^2 loses every digit."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.double() * 1e-3 + 1e6


class Twice(nn.Module):
    """Uses one Linear twice per forward."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(torch.relu(self.lin(x)))


# --- what it computes ------------------------------------------------------------------


def test_output_statistics_match_a_two_pass_computation_over_all_batches() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), Offset())
    with ht.stats(model, ["0", "2"]) as stats, ht.capture(model, ["0", "2"]) as cache:
        for rows in [1, 7, 3, 200, 2] * 40:  # 200 calls: several merges of pending rows
            model(torch.randn(rows, 6))
    for name in ("0", "2"):
        assert_matches(stats[name], torch.cat(cache[name].outputs))
    assert list(stats) == ["0", "2"]


def test_a_module_called_twice_per_forward_counts_both_calls() -> None:
    model = Twice()
    with ht.stats(model, "lin") as stats, ht.capture(model, "lin") as cache:
        model(torch.randn(3, 4))
    assert len(cache["lin"]) == 2
    assert stats["lin"].count == 6
    assert_matches(stats["lin"], torch.cat(cache["lin"].outputs))


def test_input_is_the_first_positional_tensor_argument() -> None:
    class TakesMask(nn.Module):
        def forward(self, scale: float, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return x * scale * mask

    model = nn.Sequential()
    model.add_module("m", TakesMask())
    xs = [torch.randn(4, 3) for _ in range(3)]
    with ht.stats(model, "m", of="input") as stats:
        for x in xs:
            model.m(2.0, x, torch.ones(3))
        model.m(2.0, x=xs[0], mask=torch.ones(3))  # no positional tensor: skipped, noted
    assert_matches(stats["m"], torch.cat(xs))
    assert stats.skipped == {"m": "no positional tensor argument"}
    assert "skipped: 'm' (no positional tensor argument)" in repr(stats)


def test_grad_statistics_are_those_of_the_output_gradients() -> None:
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    with (
        ht.stats(model, nn.Linear, of="grad") as stats,
        ht.capture(model, nn.Linear, grads=True) as cache,
    ):
        for rows in (2, 5, 1):
            (model(torch.randn(rows, 3)) ** 3).sum().backward()
        with torch.no_grad():
            model(torch.randn(9, 3))  # no backward: nothing to count
    for name in ("0", "2"):
        assert_matches(stats[name], torch.cat(cache[name].grads[:3]))


def test_grad_of_a_nested_output_watches_its_first_floating_point_tensor() -> None:
    class Pair(nn.Module):
        def forward(self, x: torch.Tensor) -> Any:
            return {"index": torch.arange(len(x)), "value": x * 2, "other": x * 3}

    model = nn.Sequential(Pair())
    x = torch.randn(5, 2, requires_grad=True)
    with ht.stats(model, "0", of="grad") as stats, ht.stats(model, "0") as outputs:
        out = model(x)
        (out["value"] * 5 + out["other"] * 7).sum().backward()
    assert_matches(stats["0"], torch.full((5, 2), 5.0))
    assert_matches(outputs["0"], (x * 2).detach())


@pytest.mark.parametrize(
    ("dim", "shape", "features"),
    [(-1, (2, 3, 4), (4,)), (1, (2, 3, 4), (3,)), (0, (2, 3, 4), (2,)), (None, (2, 3), ())],
)
def test_dim_is_the_feature_dimension_and_the_others_are_reduced(
    dim: Any, shape: Tuple[int, ...], features: Tuple[int, ...]
) -> None:
    model = nn.Sequential(nn.Identity())
    xs = [torch.randn(*shape) for _ in range(4)]
    with ht.stats(model, "0", dim=dim) as stats:
        for x in xs:
            model(x)
    stat = stats["0"]
    assert stat.shape == features
    assert stat.mean.shape == features
    if dim is None:
        flat = torch.cat([x.reshape(-1, 1) for x in xs])
        assert_matches(ht.Moments(stat.count, *(t.reshape(1) for t in (
            stat.mean, stat.m2, stat.min, stat.max))), flat)  # fmt: skip
    else:
        flat = torch.cat([x.movedim(dim, -1).reshape(-1, x.shape[dim]) for x in xs])
        assert_matches(stat, flat)


def test_offset_values_stay_exact_where_the_naive_formula_fails() -> None:
    model = nn.Sequential(Offset())
    torch.manual_seed(2)
    xs = [torch.randn(n, 3) for n in (5, 50, 1, 17)]
    with ht.stats(model, "0") as stats:
        for x in xs:
            model(x)
    values = torch.cat([Offset()(x) for x in xs])
    assert_matches(stats["0"], values)
    naive = (values * values).mean(0) - values.mean(0) ** 2
    assert not torch.allclose(naive, stats["0"].var, rtol=1e-3)  # the trap it avoids


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=12),
    offset=st.sampled_from([0.0, 1.0, -300.0, 1e5]),
    spread=st.sampled_from([1e-3, 1.0, 50.0]),
    seed=st.integers(0, 2**16),
)
def test_any_split_of_the_data_gives_the_statistics_of_all_of_it(
    sizes: List[int], offset: float, spread: float, seed: int
) -> None:
    generator = torch.Generator().manual_seed(seed)
    xs = [torch.randn(n, 3, generator=generator, dtype=torch.float64) * spread + offset
          for n in sizes]  # fmt: skip
    model = nn.Sequential(nn.Identity())
    with ht.stats(model, "0") as streamed:
        for x in xs:
            model(x)
    assert_matches(streamed["0"], torch.cat(xs))
    merged = ht.Moments.of(xs[0])
    for x in xs[1:]:
        merged = merged.merge(ht.Moments.of(x))
    # Merging two Stats meets the rounding of their stored means: exact to 1e-10
    # up to |mean| / std ~ 1e6, beyond which float32 data have no spread left.
    assert_matches(merged, torch.cat(xs), rtol=max(1e-10, 1e-15 * abs(offset) / spread))


def test_tensors_that_are_not_floating_point_and_outputs_without_tensors_are_skipped() -> None:
    class Nothing(nn.Module):
        def forward(self, x: torch.Tensor) -> None:
            return None

    model = nn.Sequential(nn.Embedding(5, 2), Nothing())
    model.add_module("ids", nn.Identity())
    with ht.stats(model, "*") as stats:
        model(torch.tensor([1, 2]))
        model.ids(torch.tensor([1, 2]))
    assert list(stats) == ["0"]  # the embedding's float output
    assert stats.skipped == {
        "<root>": "no floating-point tensor in its output",
        "1": "no floating-point tensor in its output",
        "ids": "int64 output",
    }
    with pytest.raises(KeyError, match=r"'ids' was selected but has no statistics: its calls "
                       r"were skipped \(int64 output\)"):  # fmt: skip
        stats["ids"]


FLOAT8 = [
    getattr(torch, name)
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
                 "float8_e8m0fnu")
    if hasattr(torch, name)
]  # fmt: skip


@pytest.mark.parametrize("dtype", FLOAT8, ids=str)
def test_float8_outputs_are_reduced_exactly(dtype: torch.dtype) -> None:
    model = nn.Sequential(nn.Identity())
    batches = [(torch.randn(n, 3) * 4 + 8).to(dtype) for n in (5, 2, 7)]
    with ht.stats(model, "0") as st:
        for x in batches:
            assert model(x) is x  # the forward goes through untouched
    values = torch.cat([x.double() for x in batches])
    stat = st["0"]
    assert stat.count == 14
    torch.testing.assert_close(stat.mean, values.mean(0), rtol=1e-12, atol=0.0)
    torch.testing.assert_close(stat.var, values.var(0, correction=0), rtol=1e-9, atol=1e-12)
    assert torch.equal(stat.min, values.amin(0))
    assert torch.equal(stat.max, values.amax(0))
    assert st.skipped == {}


def test_a_float_dtype_without_arithmetic_is_skipped_with_a_note() -> None:
    dtype = getattr(torch, "float4_e2m1fn_x2", None)
    if dtype is None:
        pytest.skip("this torch has no float4_e2m1fn_x2")
    model = nn.Sequential(nn.Identity())
    with ht.stats(model, "0") as st:
        model(torch.empty(4, 2, dtype=dtype))
    assert "0" not in st
    assert st.skipped == {"0": "float4_e2m1fn_x2 output (torch has no arithmetic for it)"}


# --- lifecycle -------------------------------------------------------------------------


def test_stop_removes_every_hook_and_keeps_the_statistics_readable() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    stats = ht.stats(model, nn.Linear, of="grad")
    stats.start()
    assert stats.active
    assert model[0]._forward_hooks
    with pytest.raises(RuntimeError, match="already started"):
        stats.start()
    model(torch.ones(3, 2, requires_grad=True)).sum().backward()
    stats.stop()
    stats.stop()  # idempotent
    assert not stats.active
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    model(torch.ones(3, 2, requires_grad=True)).sum().backward()
    assert stats["0"].count == 3
    stats.start()  # continues
    model(torch.ones(2, 2, requires_grad=True)).sum().backward()
    stats.stop()
    assert stats["0"].count == 5


def test_pause_ignores_calls_until_resumed_and_nests() -> None:
    model = nn.Sequential(nn.Identity())
    with ht.stats(model, "0") as stats:
        model(torch.ones(1, 1))
        stats.pause()
        with stats.pause():
            model(torch.ones(5, 1))
        assert stats.paused
        model(torch.ones(5, 1))
        stats.resume()
        assert not stats.paused
        model(torch.ones(2, 1))
    assert stats["0"].count == 3
    with pytest.raises(RuntimeError, match="not paused"):
        stats.resume()


def test_reset_forgets_and_the_hooks_go_on() -> None:
    model = nn.Sequential(nn.Identity())
    with ht.stats(model, "0") as stats:
        model(torch.ones(4, 1))
        stats.reset()
        assert len(stats) == 0
        assert "0" not in stats
        model(torch.zeros(2, 1))
    assert stats["0"].count == 2
    assert float(stats["0"].max) == 0.0


def test_reset_lets_the_next_forward_have_another_width() -> None:
    model = nn.Sequential(nn.Identity())
    with ht.stats(model, "0") as st:
        model(torch.ones(2, 4))
        st.reset()
        model(torch.full((3, 6), 2.0))  # raised inside the model's forward before the fix
    assert st["0"].count == 3
    assert st["0"].shape == (6,)
    assert torch.equal(st["0"].mean, torch.full((6,), 2.0, dtype=torch.float64))


def test_merge_adds_another_run_exactly() -> None:
    model = nn.Sequential(nn.Identity(), nn.Identity())
    xs = [torch.randn(n, 3) * 4 + 9 for n in (3, 8)]
    with ht.stats(model, "0") as first:
        model(xs[0])
    with ht.stats(model, ["0", "1"]) as second:
        model(xs[1])
    second.merge(first)
    assert_matches(second["0"], torch.cat(xs))
    assert_matches(second["1"], xs[1])
    with pytest.raises(ValueError, match="modules '1' are not selected here"):
        first.merge(second)
    with pytest.raises(ValueError, match="only statistics of the same kind combine"):
        first.merge(ht.stats(model, "0", of="input"))


def reduced_state(model: nn.Module, rows: int) -> dict[str, Any]:
    """A state_dict of statistics marked as reduced across ranks (what reduce() leaves)."""
    with ht.stats(model, "0") as st:
        model(torch.ones(rows, 2))
    state = st.state_dict()
    state["reduced"] = True
    return state


def test_merging_reduced_statistics_into_empty_ones_keeps_them_reduced() -> None:
    model = nn.Sequential(nn.Identity())
    reduced = ht.stats(model, "0")
    reduced.load_state_dict(reduced_state(model, 6))
    total = ht.stats(model, "0")
    total.merge(reduced)
    assert total["0"].count == 6
    assert "reduced across ranks" in repr(total)
    # Reducing again would count the 6 values once per rank.
    with pytest.raises(RuntimeError, match="reduced across ranks already"):
        total.reduce()
    # Reduced into reduced (epochs of a global run) stays reduced too.
    total.merge(reduced)
    assert total["0"].count == 12
    assert total.state_dict()["reduced"] is True


def test_merging_reduced_and_local_statistics_is_refused_both_ways() -> None:
    model = nn.Sequential(nn.Identity())
    reduced = ht.stats(model, "0")
    reduced.load_state_dict(reduced_state(model, 6))
    with ht.stats(model, "0") as local:
        model(torch.zeros(2, 2))
    with pytest.raises(ValueError, match=r"reduced across ranks.*local"):
        local.merge(reduced)
    with pytest.raises(ValueError, match=r"reduced across ranks.*local"):
        reduced.merge(local)
    assert local["0"].count == 2
    assert reduced["0"].count == 6


def test_state_dict_round_trips_exactly_through_torch_save() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    with ht.stats(model, "*") as stats:
        for _ in range(70):
            model(torch.randn(5, 3))
        model(torch.randn(1, 3))  # leaves pending rows: the state merges them
    buffer = io.BytesIO()
    torch.save(stats.state_dict(), buffer)
    buffer.seek(0)
    loaded = ht.stats(model, "*")
    loaded.load_state_dict(torch.load(buffer))
    assert list(loaded) == list(stats)
    for name in stats:
        a, b = stats[name], loaded[name]
        assert a.count == b.count
        for field in ("mean", "m2", "min", "max"):
            assert torch.equal(getattr(a, field), getattr(b, field))
    with pytest.raises(ValueError, match="of='output' dim=0, the others of='output' dim=-1"):
        ht.stats(model, "*", dim=0).load_state_dict(stats.state_dict())
    with pytest.raises(ValueError, match="not a Stats state_dict"):
        loaded.load_state_dict({"stats": {}})


def _save(st: ht.Stats) -> None:
    torch.save(st, io.BytesIO())


@pytest.mark.parametrize(
    "how",
    [copy.copy, copy.deepcopy, pickle.dumps, _save],
    ids=["copy", "deepcopy", "pickle", "torch.save"],
)
def test_copying_or_saving_statistics_is_refused_pointing_to_state_dict(
    how: Callable[[ht.Stats], Any],
) -> None:
    model = nn.Sequential(nn.Identity())
    with ht.stats(model, "0") as st:
        model(torch.ones(2, 2))
    with pytest.raises(TypeError, match=r"cannot be copied or pickled.*state_dict\(\)"):
        how(st)
    assert st["0"].count == 2


def test_a_bus_the_model_is_attached_to_is_used_and_stays_attached() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(nn.Linear(2, 2))
    net = ht.attach(model, bus, prefix="net")
    with ht.stats(model, "net.0", bus=bus) as stats:
        model(torch.ones(2, 2))
        assert len(bus.hooks()) == 1
    assert list(stats) == ["net.0"]
    assert net.active
    assert bus.hooks() == []
    with bus.paused(), ht.stats(model, "net.0", bus=bus) as paused:  # the bus's rules apply
        model(torch.ones(2, 2))
    assert len(paused) == 0


def test_two_stats_on_one_bus_start_and_stop_independently() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(nn.Linear(2, 2))
    first = ht.stats(model, "0", bus=bus)
    second = ht.stats(model, "0", bus=bus)
    first.start()
    second.start()
    model(torch.ones(3, 2))
    first.stop()
    assert second.active
    model(torch.ones(5, 2))
    assert second.active
    second.stop()
    assert first["0"].count == 3
    assert second["0"].count == 8
    assert bus.hooks() == []
    first.start()  # either can start again
    model(torch.ones(1, 2))
    first.stop()
    assert first["0"].count == 4
    ht.attach(model, bus).detach()  # the last one out detached the model ("already attached")


def test_stats_leave_an_attachment_they_did_not_make_attached() -> None:
    bus = hookbus.EventBus()
    model = nn.Sequential(nn.Linear(2, 2))
    net = ht.attach(model, bus)
    with ht.stats(model, "0", bus=bus) as first:
        with ht.stats(model, "0", bus=bus):
            model(torch.ones(1, 2))
        assert net.active
        assert first.active
        model(torch.ones(1, 2))
    assert first["0"].count == 2
    assert net.active  # the user's attachment stays


@pytest.mark.parametrize("of", ["output", "input", "grad"])
def test_statistics_count_only_the_model_they_were_asked_for(of: str) -> None:
    bus = hookbus.EventBus()
    mine, other = nn.Sequential(nn.Linear(2, 2)), nn.Sequential(nn.Linear(2, 2))
    with ht.stats(mine, "0", of=of, bus=bus) as st, ht.stats(other, "0", of=of, bus=bus) as theirs:
        other(torch.ones(100, 2, requires_grad=True)).sum().backward()
        mine(torch.ones(3, 2, requires_grad=True)).sum().backward()
    assert st["0"].count == 3
    assert theirs["0"].count == 100


def test_the_statistics_hold_no_activation() -> None:
    model = nn.Sequential(nn.Linear(8, 8))
    with ht.stats(model, "0") as stats, ht.stats(model, "0", of="grad") as grads:
        x = torch.randn(4, 8, requires_grad=True)
        out = model(x)
        out.sum().backward()
        gone = weakref.ref(out)
        del out, x
        gc.collect()
        assert gone() is None
    assert stats["0"].count == grads["0"].count == 4


def test_stopped_statistics_do_not_keep_the_model_alive() -> None:
    # Statistics often outlive their model (calibrate, keep the numbers, drop the net).
    # Holding it also kept DDP's reducer, and with it gloo's process group, alive past
    # destroy_process_group(): an abort at exit in examples/distributed_stats.py.
    model = nn.Sequential(nn.Linear(2, 2))
    with ht.stats(model) as stats:
        model(torch.ones(3, 2))
    gone = weakref.ref(model)
    gc.disable()
    try:
        del model
        assert gone() is None
    finally:
        gc.enable()
    assert stats["0"].count == 3  # the numbers stay readable
    with pytest.raises(RuntimeError, match=r"model .* no longer exists"):
        stats.start()
    assert not stats.active


@pytest.fixture
def no_collector() -> Iterator[None]:
    """Only reference counting frees objects: a cycle then shows as a leak."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("of", ["output", "input", "grad"])
def test_stopped_and_dropped_statistics_go_at_once_with_their_buffers(
    of: str, no_collector: None
) -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    st = ht.stats(model, "0", of=of)
    st.start()
    model(torch.ones(3, 2, requires_grad=True)).sum().backward()
    with st.pause():
        pass
    st.stop()
    assert st["0"].count == 3
    gone = weakref.ref(st)
    del st
    assert gone() is None


def test_threads_calling_one_module_lose_no_call() -> None:
    model = nn.Sequential(nn.Identity())
    x = torch.randn(3, 2)
    with ht.stats(model, "0") as stats:

        def work() -> None:
            for _ in range(300):
                model(x)
                if _ % 50 == 0:
                    stats["0"]  # reads (and merges) while others add

        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert stats["0"].count == 4 * 300 * 3
    assert_matches(stats["0"], x.repeat(1200, 1))


# --- bad input -------------------------------------------------------------------------


def test_a_selector_that_matches_nothing_lists_close_names() -> None:
    model = nn.Sequential()
    model.add_module("encoder", nn.Linear(2, 2))
    with pytest.raises(ValueError, match="no module named 'encodr'; close names: 'encoder'"):
        ht.stats(model, "encodr")
    with pytest.raises(ValueError, match="no module of type Conv2d"):
        ht.stats(model, nn.Conv2d)
    assert model.encoder._forward_hooks == {}


def test_a_module_named_like_a_name_of_the_vocabulary_is_a_module() -> None:
    # As a TransformerLens model's HookPoints are: modules come first.
    points = nn.Sequential()
    points.add_module("hook_in", nn.Identity())
    with ht.stats(points, "hook_*") as seen:
        points(torch.ones(2, 3))
    assert list(seen) == ["hook_in"]
    assert seen["hook_in"].count == 2


def test_bad_of_and_dim_and_bus_say_what_is_accepted() -> None:
    model = nn.Sequential(nn.Identity())
    with pytest.raises(ValueError, match="'output', 'input', 'grad'"):
        ht.stats(model, of="outputs")
    with pytest.raises(TypeError, match=r"takes an int .* or None"):
        ht.stats(model, dim=1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"hookbus\.EventBus"):
        ht.stats(model, bus="bus")  # type: ignore[arg-type]


def test_dim_out_of_range_raises_at_the_first_forward_naming_module_and_shape() -> None:
    model = nn.Sequential(nn.Linear(3, 4))
    with (
        ht.stats(model, "0", dim=2),
        pytest.raises(ValueError, match=r"output of module '0': its shape is \(5, 4\)"),
    ):
        model(torch.ones(5, 3))
    with ht.stats(model, "0", dim=1) as stats:
        model(torch.ones(5, 3, 3).transpose(1, 2))  # (5, 3, 4): features 3
        with pytest.raises(ValueError, match=r"shape \(5, 4\), so \(4,\) features, but earlier"):
            model(torch.ones(5, 3))
    assert stats["0"].count == 20


def test_a_start_that_fails_halfway_leaves_no_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    stats = ht.stats(model, nn.Linear, of="grad")

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("no gradient hooks today")

    monkeypatch.setattr(ht.Attachment, "grad", refuse)
    with pytest.raises(RuntimeError, match="no gradient hooks today"):
        stats.start()
    assert not stats.active
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    monkeypatch.undo()
    with stats:
        model(torch.ones(1, 2, requires_grad=True)).sum().backward()
    assert stats["0"].count == 1
