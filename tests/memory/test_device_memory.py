"""The device total (nvidia-smi's figure) and the fit decision built on it (no torch)."""

from __future__ import annotations

import pytest

import simdl
from simdl.cluster import allocate, load_cluster, load_gpu
from simdl.cluster.spec import gpu_names, is_cpu_device_name
from simdl.errors import SimdlError
from simdl.memory.cuda import FIT_MARGIN, communicators
from simdl.memory.device import device_memory
from simdl.memory.maxbatch import max_batch
from simdl.strategies import StrategyConfig, build_plan
from simdl.workload.library import load_workload
from simdl.workload.workload import Workload

A100_40 = dict(model="vgg16", dataset="imagenet", cluster="dgx-a100", gpus=8)


@pytest.mark.parametrize(
    "strategy,kw", [("ddp", {}), ("fsdp", {"sharding": "full"}), ("fsdp", {"sharding": "grad_op"})]
)
def test_device_total_is_reserved_plus_context_plus_nccl(strategy, kw):
    r = simdl.predict(strategy=strategy, batch_size=32, **A100_40, **kw)
    parts = r.device_memory_bytes
    assert r.peak_memory_bytes == pytest.approx(sum(parts.values()))
    assert r.peak_memory_bytes == pytest.approx(
        r.max_memory_reserved_bytes + parts["cuda_context"] + parts["nccl_buffers"]
    )
    assert r.max_memory_reserved_bytes >= r.max_memory_allocated_bytes >= parts["tensors"]
    assert parts["nccl_buffers"] > 0 and parts["cuda_context"] > 0
    assert sum(r.memory_breakdown_bytes.values()) == pytest.approx(r.peak_memory_bytes)
    row = r.row()
    assert row["max_memory_reserved_bytes"] == r.max_memory_reserved_bytes
    assert row["device_memory_nccl_buffers_bytes"] == parts["nccl_buffers"]


def test_the_cpu_device_keeps_its_heap_model():
    r = simdl.predict(model="resnet18", strategy="ddp", cluster="cpu-local", gpus=2, batch_size=8)
    assert r.max_memory_allocated_bytes is None and r.max_memory_reserved_bytes is None
    assert r.peak_memory_bytes == pytest.approx(r.peak_tensor_bytes + r.memory_breakdown_bytes["other"])


@pytest.mark.parametrize(
    "cluster,gpus,cfg,expected",
    [
        ("dgx-a100", 1, {}, 0),
        ("dgx-a100", 8, {}, 1),
        ("a100-40gb-2node", 8, {"sharding": "hybrid"}, 2),
        ("dgx-a100", 8, {"sharding": "none"}, 1),
        ("dgx-a100", 8, {"sharding": "full"}, 1),
    ],
)
def test_nccl_communicators(cluster, gpus, cfg, expected):
    table = load_workload("resnet18", dataset="cifar10")
    wl = Workload(table=table, batch_size=8)
    alloc = allocate(load_cluster(cluster), gpus)
    name = "fsdp" if cfg else "ddp"
    plan = build_plan(wl, alloc, StrategyConfig(name, **cfg))
    assert communicators(plan, alloc) == expected


def test_every_cuda_gpu_file_has_a_device_memory_block():
    for name in gpu_names():
        if is_cpu_device_name(name):
            continue
        dm = device_memory(load_gpu(name))
        assert dm is not None, name
        assert dm.context_bytes.value > 100 * 2**20 and dm.cublas_workspace.value >= 8 * 2**20


def test_bad_device_memory_block_is_one_line_error(tmp_path):
    import yaml

    src = load_gpu("A100-SXM4-40GB").source_path
    raw = yaml.safe_load(open(src))
    raw["device_memory"]["nccl_bufsize"] = 4
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(raw))
    with pytest.raises(SimdlError, match="unknown key"):
        device_memory(load_gpu(str(p)))


def test_maxbatch_agrees_with_fits():
    kw = dict(model="vgg16", dataset="imagenet", cluster="dgx-a100", gpus=8, strategy="fsdp")
    b, r = max_batch(**kw)
    assert b > 1 and r.fits_in_memory
    assert simdl.predict(batch_size=b, **kw).fits_in_memory
    over = simdl.predict(batch_size=b + 1, **kw)
    assert not over.fits_in_memory
    assert over.peak_memory_bytes > (1 - FIT_MARGIN) * over.memory_capacity_bytes or any(
        "runs out of memory" in n for n in over.notes
    )


def test_allocator_options_reach_the_replay():
    from simdl.memory.allocator import AllocatorConfig
    from simdl.memory.model import estimate_memory

    wl = Workload(table=load_workload("vgg16", dataset="imagenet"), batch_size=64)
    alloc = allocate(load_cluster("a100-40gb-2node"), 8)
    plan = build_plan(wl, alloc, StrategyConfig("fsdp"))
    plain = estimate_memory(wl, plan, alloc)
    grown = estimate_memory(wl, plan, alloc, allocator=AllocatorConfig(expandable_segments=True))
    # expandable segments split any remainder >= 512 B, so no unsplit large remainder counts
    assert grown.max_allocated_bytes <= plain.max_allocated_bytes
    # VGG16's few large activations of distinct sizes leave holes in fixed segments; one
    # growing segment per stream tiles them (PyTorch's Note [Expandable Segments])
    assert grown.max_allocated_bytes <= grown.max_reserved_bytes < plain.max_reserved_bytes


@pytest.mark.parametrize("strategy", ["ddp", "fsdp", "zero0", "zero1", "zero2", "zero3"])
def test_the_replay_allocates_every_live_tensor(strategy):
    """The allocator's peak is at least the live tensors' (it rounds them up, never down):
    a buffer the strategy holds from the start (DeepSpeed's flat partitions, stage 3's ipg
    bucket) missing from the allocation sequence would put it below."""
    r = simdl.predict(
        model="resnet50",
        strategy=strategy,
        gpus=8,
        cluster="a100-40gb-2node",
        dataset="imagenet",
        batch_size=4,
        optimizer="adam",
    )
    assert r.peak_tensor_bytes <= r.max_memory_allocated_bytes <= 1.05 * r.peak_tensor_bytes + 64 * 2**20
    assert r.peak_memory_bytes >= r.max_memory_reserved_bytes >= r.max_memory_allocated_bytes


H200 = dict(model="resnet18", strategy="ddp", gpus=1, cluster="h200", dataset="imagenet")


@pytest.mark.parametrize("given,major", [("13.0", "13"), ("12.8", "12"), (13, "13"), ("11", "11"), (12.4, "12")])
def test_cuda_versions_are_read_as_their_major(given, major):
    from simdl.memory.device import cuda_major

    assert cuda_major(given) == major


@pytest.mark.parametrize("bad", ["cu130", "", "thirteen", True, None, "1234"])
def test_a_bad_cuda_version_is_a_one_line_error(bad):
    from simdl.memory.device import cuda_major

    with pytest.raises(SimdlError, match="accepted: a CUDA version") as e:
        cuda_major(bad, "--cuda")
    assert "\n" not in str(e.value)


def test_cuda_sets_the_context_and_is_said_when_assumed():
    default = simdl.predict(**H200)
    assert default.config["cuda"] == device_memory(load_gpu("H200")).cuda
    assert "default_cuda" in default.config["assumed"]["cuda"]
    given = simdl.predict(**H200, cuda="13.0")
    assert given.config["cuda"] == "13" and "cuda" not in given.config["assumed"]
    ctx = device_memory(load_gpu("H200"), "13").context_bytes.value
    assert given.device_memory_bytes["cuda_context"] == ctx
    # The context is outside the allocator: reserved is the same, the total moves by the difference.
    assert given.max_memory_reserved_bytes == default.max_memory_reserved_bytes
    assert given.peak_memory_bytes - default.peak_memory_bytes == pytest.approx(
        ctx - default.device_memory_bytes["cuda_context"]
    )
    assert any("CUDA 13 (given" in n for n in given.notes)


def test_a_cuda_version_the_gpu_file_lacks_names_those_it_has():
    with pytest.raises(SimdlError, match=r"CUDA '10'.*accepted: 11, 12, 13"):
        simdl.predict(**H200, cuda="10")


def test_a_cluster_file_can_give_the_cuda_version(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("extends: h200\nname: mine\ncuda: 13.0\n")
    r = simdl.predict(**{**H200, "cluster": str(f)})
    assert r.config["cuda"] == "13" and "cuda" not in r.config["assumed"]
    f.write_text("extends: h200\nname: mine\ncuda: cu13\n")
    with pytest.raises(SimdlError, match="cuda 'cu13'|cuda: 'cu13'|'cu13'"):
        load_cluster(str(f))


def test_the_fit_test_uses_the_memory_cuda_gives_processes():
    """Where the GPU file measures CUDA's total, capacity and the fit limit are that, not the
    datasheet's memory_GiB."""
    dm = device_memory(load_gpu("H200"))
    assert dm.cuda_total is not None and dm.cuda_total.value < load_gpu("H200").memory_bytes.value
    r = simdl.predict(**H200)
    assert r.memory_capacity_bytes == dm.cuda_total.value
    # A file without the measurement keeps memory_GiB.
    a100 = simdl.predict(**{**H200, "cluster": "dgx-a100"})
    assert device_memory(load_gpu("A100-SXM4-80GB")).cuda_total is None
    assert a100.memory_capacity_bytes == load_gpu("A100-SXM4-80GB").memory_bytes.value


def test_cli_cuda_flag(capsys):
    from simdl.cli import main

    assert main(["predict", "--model", "resnet18", "--cluster", "h200", "--gpus", "1", "--cuda", "13.0", "--json"]) == 0
    assert '"cuda": "13"' in capsys.readouterr().out
    assert main(["predict", "--model", "resnet18", "--cluster", "h200", "--gpus", "1", "--cuda", "x13"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "x13" in err and "accepted" in err
