"""The memory timeline's own invariants, and the strategy comparisons the studies report.

No torch: these run on the shipped workload tables in milliseconds.
"""

import numpy as np
import pytest

import simdl
from simdl.cluster import allocate, load_cluster
from simdl.memory.maxbatch import max_batch
from simdl.memory.model import estimate_memory, timeline_for
from simdl.memory.place import analytic_memory_curve
from simdl.memory.timeline import CATEGORIES, MemoryOptions, build_timeline
from simdl.strategies import StrategyConfig, build_plan
from simdl.workload.library import load_workload
from simdl.workload.workload import Workload

STRATEGIES = [
    ("ddp", {}),
    ("fsdp", {"sharding": "full"}),
    ("fsdp", {"sharding": "grad_op"}),
    ("fsdp", {"sharding": "hybrid"}),
    ("fsdp", {"sharding": "none"}),
]


def _plan(model="resnet50", strategy="ddp", gpus=16, cluster="dgx-a100", batch=32, optimizer="adam", **kw):
    table = load_workload(model, dataset="cifar10")
    ac = kw.pop("activation_checkpointing", False)
    wl = Workload(table=table, batch_size=batch, optimizer=optimizer, activation_checkpointing=ac)
    alloc = allocate(load_cluster(cluster), gpus)
    return wl, alloc, build_plan(wl, alloc, StrategyConfig(strategy, **kw))


@pytest.mark.parametrize("model", ["resnet50", "vit_b_16", "densenet121", "convnext_tiny"])
@pytest.mark.parametrize("strategy,kw", STRATEGIES)
def test_an_iteration_ends_where_it_began(model, strategy, kw):
    """Everything allocated in the iteration is freed by its end (steady state)."""
    wl, alloc, plan = _plan(model, strategy, **kw)
    lv = timeline_for(wl, plan, alloc).levels()
    np.testing.assert_allclose(lv[-1], lv[0], atol=1.0)
    assert (lv >= -1.0).all()


def test_first_iteration_creates_the_optimizer_state_at_the_step():
    wl, alloc, plan = _plan(strategy="ddp")
    first = build_timeline(wl, plan, MemoryOptions(first_iteration=True))
    steady = build_timeline(wl, plan, MemoryOptions())
    o = CATEGORIES.index("optimizer")
    assert first.levels()[0, o] == 0
    assert first.levels()[-1, o] == pytest.approx(steady.levels()[0, o])
    assert first.peak()[0] <= steady.peak()[0]


def test_fsdp_parameter_memory_falls_as_one_over_n_while_activations_stay():
    """ZeRO-3 / FSDP full sharding (Rajbhandari et al., SC'20, fig. 1): the sharded
    parameter, gradient and optimizer bytes scale as 1/N; activations do not."""
    rs = {
        n: simdl.predict(
            model="vit_b_16",
            strategy="fsdp",
            gpus=n,
            cluster="dgx-a100",
            sharding="full",
            dataset="imagenet",
            optimizer="adam",
        )
        for n in (2, 4, 8, 16)
    }
    for n in (4, 8, 16):
        a, b = rs[2].memory_breakdown_bytes, rs[n].memory_breakdown_bytes
        # 1/N up to the allocator's 512-byte rounding of each shard
        assert b["optimizer"] == pytest.approx(a["optimizer"] * 2 / n, rel=0.01)
        assert b["activations"] == pytest.approx(a["activations"], rel=0.02)
    assert rs[16].peak_tensor_bytes < rs[8].peak_tensor_bytes < rs[4].peak_tensor_bytes < rs[2].peak_tensor_bytes


def test_hybrid_sits_between_full_and_none():
    kw = dict(model="vit_b_16", strategy="fsdp", gpus=16, cluster="dgx-a100", optimizer="adam")
    full = simdl.predict(sharding="full", **kw).peak_tensor_bytes
    hybrid = simdl.predict(sharding="hybrid", **kw).peak_tensor_bytes
    none = simdl.predict(sharding="none", **kw).peak_tensor_bytes
    assert full < hybrid < none


def test_fsdp_cuts_memory_by_more_than_60_percent_on_a_parameter_heavy_model():
    """The source studies' headline: FSDP full sharding cuts per-GPU memory by over 60%."""
    kw = dict(model="vgg16", gpus=8, cluster="dgx-a100", optimizer="adam", batch_size=32)
    ddp = simdl.predict(strategy="ddp", **kw).peak_tensor_bytes
    fsdp = simdl.predict(strategy="fsdp", sharding="full", **kw).peak_tensor_bytes
    assert fsdp < 0.4 * ddp


def test_activation_checkpointing_trades_memory_for_recompute_time():
    plain = simdl.predict(model="resnet50", strategy="ddp", gpus=4, batch_size=128)
    ac = simdl.predict(model="resnet50", strategy="ddp", gpus=4, batch_size=128, activation_checkpointing=True)
    assert ac.memory_breakdown_bytes["activations"] < 0.6 * plain.memory_breakdown_bytes["activations"]
    assert ac.compute_time_s > plain.compute_time_s * 1.15
    wl, alloc, plan = _plan("resnet50", "fsdp", gpus=4, cluster="a100-80gb-nvlink", activation_checkpointing=True)
    assert any(t.name.startswith("recompute") and t.direction == "fwd" for t in plan.tasks)


def test_cpu_offload_keeps_only_unsharded_units_on_the_gpu():
    kw = dict(model="vit_b_16", strategy="fsdp", gpus=4, optimizer="adam")
    on = simdl.predict(cpu_offload=True, **kw).memory_breakdown_bytes
    off = simdl.predict(**kw).memory_breakdown_bytes
    assert on["optimizer"] == 0
    assert on["params"] < off["params"]


def test_mixed_precision_halves_activations_and_keeps_fp32_masters():
    """16-bit activations, but the max-pool's int64 indices stay (simdl.memory.rowdtypes)."""
    fp32 = simdl.predict(model="resnet50", strategy="ddp", gpus=4, batch_size=128).memory_breakdown_bytes
    bf16 = simdl.predict(
        model="resnet50", strategy="ddp", gpus=4, batch_size=128, precision="bf16"
    ).memory_breakdown_bytes
    assert bf16["params"] == fp32["params"] and bf16["optimizer"] == fp32["optimizer"]
    assert 0.5 * fp32["activations"] < bf16["activations"] < 0.7 * fp32["activations"]


def test_tensor_and_process_peaks_are_told_apart():
    r = simdl.predict(model="resnet50", strategy="ddp", gpus=4)
    bd = r.memory_breakdown_bytes
    assert r.peak_tensor_bytes == pytest.approx(sum(v for k, v in bd.items() if k != "other"))
    assert r.peak_memory_bytes == pytest.approx(r.peak_tensor_bytes + bd["other"])
    assert bd["other"] > load_cluster("a100-80gb-nvlink").memory.context_bytes.value - 1


def test_maxbatch_is_the_largest_batch_that_fits():
    kw = dict(model="resnet50", strategy="ddp", gpus=4, cluster="a10g-ps", dataset="imagenet")
    b, r = max_batch(**kw)
    assert b > 1 and r.fits_in_memory
    assert not simdl.predict(batch_size=b + 1, **kw).fits_in_memory


def test_memory_curve_is_placed_in_time_on_the_schedule():
    wl, alloc, plan = _plan("resnet50", "fsdp", gpus=4, cluster="a100-80gb-nvlink", sharding="full")
    times, levels = analytic_memory_curve(wl, alloc, plan)
    assert len(times) == len(levels) and np.all(np.diff(times) >= 0)
    r = simdl.predict(model="resnet50", strategy="fsdp", gpus=4, optimizer="adam")
    assert times[-1] == pytest.approx(r.iteration_time_s, rel=0.05)
    # Activations peak near the forward/backward boundary, not at the ends.
    act = levels[:, CATEGORIES.index("activations")]
    k = int(np.argmax(act))
    assert 0.2 < times[k] / times[-1] < 0.8


def test_estimate_is_fast_enough_for_sweeps():
    import time

    wl, alloc, plan = _plan("efficientnet_v2_l", "fsdp", gpus=8, sharding="full")
    estimate_memory(wl, plan, alloc)
    t0 = time.perf_counter()
    for _ in range(200):
        estimate_memory(wl, plan, alloc)
    assert (time.perf_counter() - t0) / 200 < 2e-3


def test_memplot_writes_a_png(tmp_path):
    from simdl.cli import main

    out = tmp_path / "mem.png"
    assert main(["memplot", "--model", "resnet18", "--strategy", "fsdp", "--gpus", "2", "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_memory_draws_each_simulated_rank(tmp_path, capsys):
    """`simdl plot --memory`: per-rank memory over time from the simulator."""
    from simdl.cli import main

    out = tmp_path / "mem.png"
    assert main(["plot", "--memory", "--model", "resnet18", "--strategy", "fsdp", "--gpus", "2", "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "rank class" in capsys.readouterr().out


@pytest.mark.parametrize("command", [["plot", "--memory"], ["memplot"]])
@pytest.mark.parametrize("output,needle", [("mem.txt", ".png"), ("no/such/dir/mem.png", "does not exist")])
def test_memory_plots_reject_bad_output_in_one_line(command, output, needle, tmp_path, capsys):
    from simdl.cli import main

    path = str(tmp_path / output) if output.endswith(".txt") else output
    code = main([*command, "--model", "resnet18", "--gpus", "2", "-o", path])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("simdl: error:") and needle in err


def test_gloo_collectives_add_one_unit_buffer_while_they_run():
    """gloo clones a reduce-scatter's input and gathers into a flat temporary
    (simdl.collectives.backends); NCCL does neither. The scratch lives only during the
    call: the iteration still ends where it began, and the peak grows by at most one unit."""
    from dataclasses import replace

    from simdl.memory.model import memory_options

    wl, alloc, plan = _plan("vgg16", "fsdp", gpus=2, cluster="cpu-local", sharding="full", optimizer="momentum")
    gloo = timeline_for(wl, plan, alloc)
    nccl = build_timeline(
        wl, plan, replace(memory_options(wl, plan, alloc), all_gather_scratch=0.0, reduce_scatter_scratch=0.0)
    )
    assert any("scratch" in lab and "convolution" not in lab for lab in gloo.labels)
    assert not any("all-gather scratch" in lab or "reduce-scatter scratch" in lab for lab in nccl.labels)
    np.testing.assert_allclose(gloo.levels()[-1], gloo.levels()[0], atol=1.0)
    largest_unit = max(plan.details["unit_bytes"])
    assert nccl.peak()[0] < gloo.peak()[0] <= nccl.peak()[0] + largest_unit + 1


def test_fsdp_none_keeps_an_unsharded_copy_beside_the_whole_shard():
    """FSDP2's no-shard stand-in (HSDP, one rank per shard): parameters twice at the start
    of backward, unlike DDP's single copy."""
    wl, alloc, plan = _plan("vgg16", "fsdp", gpus=4, cluster="a100-80gb-nvlink", sharding="none", optimizer="momentum")
    tl = timeline_for(wl, plan, alloc)
    p = CATEGORIES.index("params")
    assert tl.levels()[:, p].max() == pytest.approx(2 * wl.param_bytes + wl.table.buffer_bytes, rel=1e-6)
