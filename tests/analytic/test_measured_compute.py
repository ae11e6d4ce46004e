"""Compute profiles (measured row times), streaming-op and page-fault costs, and the host
collective load terms: what they change in a prediction, checked by hand."""

import json

import numpy as np
import pytest
import yaml
from simdl.analytic.costs import Rates, compute_task_time, device_rates, fresh_mapped_bytes, row_times
from simdl.analytic.measured import MeasuredModel, rows_digest

import simdl
from simdl.cluster import allocate, load_cluster
from simdl.cluster.spec import raw_preset
from simdl.errors import SimdlError
from simdl.strategies.plan import Task
from simdl.workload.library import load_workload


def _entry(table, batches, per_row_fwd, per_row_bwd):
    return {
        "model": table.model,
        "dataset": table.dataset,
        "input_shape": list(table.input_shape),
        "num_classes": table.num_classes,
        "rows_digest": rows_digest(table.names, table.types),
        "batches": list(batches),
        "fwd_s": [[per_row_fwd(b)] * table.n_rows for b in batches],
        "bwd_s": [[per_row_bwd(b)] * table.n_rows for b in batches],
    }


def test_rows_interpolate_linearly_and_extrapolate_along_the_nearest_line():
    t = load_workload("mnist_cnn", "mnist")
    m = MeasuredModel(_entry(t, (8, 32), lambda b: 1e-4 + 1e-5 * b, lambda b: 2e-4 + 2e-5 * b), "test")
    fwd, bwd = m.at(16)
    assert np.allclose(fwd, 1e-4 + 1e-5 * 16) and np.allclose(bwd, 2e-4 + 2e-5 * 16)
    assert np.allclose(m.at(64)[0], 1e-4 + 1e-5 * 64)  # beyond the range: the same line
    assert np.all(m.at(2)[0] >= 0)
    assert m.coverage(8) == "measured" and m.coverage(16) == "interpolated" and m.coverage(64) == "extrapolated"


def _profile_with_rows(tmp_path, table, batches=(8, 32), ranks_sharing=2):
    data = {
        "schema": "simdl-compute-profile/1",
        "precision": "fp32",
        "ranks_sharing_device": ranks_sharing,
        "source": "test",
        "models": [_entry(table, batches, lambda b: 1e-3 * b, lambda b: 2e-3 * b)],
    }
    (tmp_path / "p.compute.json").write_text(json.dumps(data))
    raw = raw_preset("cpu-local")
    raw["name"] = "p"
    raw["compute_profile"] = {"file": "p.compute.json", "kind": "calibrated", "source": "test"}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_a_profiled_model_uses_its_measured_rows_scaled_to_the_device_share(tmp_path):
    t = load_workload("mnist_cnn", "mnist")
    path = _profile_with_rows(tmp_path, t)
    spec = load_cluster(str(path))
    assert spec.compute_profile.endswith("p.compute.json")
    rt = row_times(t, 16, __import__("simdl.analytic.costs", fromlist=["x"]).device_rates(allocate(spec, 2), "fp32"))
    assert rt.fwd.sum() == pytest.approx(t.n_rows * 1e-3 * 16)
    r = simdl.predict(model="mnist_cnn", dataset="mnist", strategy="ddp", gpus=2, batch_size=16, cluster=str(path))
    assert r.config["compute_source"].startswith("compute profile (interpolated")
    # Four ranks on the same two cores get half the share each rank had when measured.
    raw = yaml.safe_load(path.read_text())
    raw["gpus_per_node"] = 4
    raw["compute_profile"]["file"] = spec.compute_profile
    (tmp_path / "p4.yaml").write_text(yaml.safe_dump(raw))
    r4 = simdl.predict(
        model="mnist_cnn", dataset="mnist", strategy="ddp", gpus=4, batch_size=16, cluster=str(tmp_path / "p4.yaml")
    )
    assert r4.compute_time_s > 1.9 * r.compute_time_s
    # Another model, or another precision, falls back to the roofline.
    other = simdl.predict(model="resnet18", strategy="ddp", gpus=2, cluster=str(path))
    assert other.config["compute_source"] == "roofline"
    bf16 = simdl.predict(
        model="mnist_cnn", dataset="mnist", strategy="ddp", gpus=2, batch_size=16, cluster=str(path), precision="bf16"
    )
    assert bf16.config["compute_source"] == "roofline"


def test_a_profile_whose_rows_do_not_match_the_table_is_not_used(tmp_path):
    t = load_workload("mnist_cnn", "mnist")
    path = _profile_with_rows(tmp_path, t)
    data = json.loads((tmp_path / "p.compute.json").read_text())
    data["models"][0]["rows_digest"] = "0" * 16  # another version of the model
    (tmp_path / "p.compute.json").write_text(json.dumps(data))
    import simdl.analytic.measured as M

    M.load_compute_profile.cache_clear()
    r = simdl.predict(model="mnist_cnn", dataset="mnist", strategy="ddp", gpus=2, cluster=str(path))
    assert r.config["compute_source"] == "roofline"


def test_a_missing_or_malformed_compute_profile_is_a_one_line_error(tmp_path):
    raw = raw_preset("cpu-local")
    raw["compute_profile"] = "nowhere.compute.json"
    (tmp_path / "x.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(SimdlError, match="compute_profile file 'nowhere.compute.json' not found"):
        load_cluster(str(tmp_path / "x.yaml"))
    (tmp_path / "bad.compute.json").write_text('{"schema": "other"}')
    raw["compute_profile"] = "bad.compute.json"
    (tmp_path / "y.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(SimdlError, match="schema"):
        simdl.predict(model="mnist_cnn", dataset="mnist", strategy="ddp", gpus=2, cluster=str(tmp_path / "y.yaml"))


def test_copies_optimizer_and_fresh_buffers_are_priced_by_their_own_rates():
    rates = Rates(
        flops=1e12,
        memory_bandwidth=10e9,
        kernel_overhead=1e-6,
        activation_factor=1.0,
        stream_bandwidth=20e9,
        stream_call_overhead=2e-6,
        copy_bandwidth=5e9,
        page_fault_per_byte=0.25e-9,
        mmap_threshold=32 * 2**20,
    )
    rows = row_times(load_workload("mnist_cnn", "mnist"), 8, rates)
    opt = Task("optimizer:momentum", "compute", "opt", bytes=8e9, kernels=10)
    assert compute_task_time(opt, rows, rates) == pytest.approx(8e9 / 20e9 + 10 * 2e-6)
    big, small = 400 * 2**20, 16 * 2**20
    copy = Task("copy_out:fwd:x", "compute", "fwd", bytes=2e9, kernels=1, allocs=(big, small))
    assert fresh_mapped_bytes(copy.allocs, rates) == big  # only the buffer above the mmap threshold
    assert compute_task_time(copy, rows, rates) == pytest.approx(2e9 / 5e9 + 2e-6 + big * 0.25e-9)
    # GPU-like rates: no page faults, copies at the stream (or memory) bandwidth.
    gpu = Rates(flops=1e12, memory_bandwidth=10e9, kernel_overhead=1e-6, activation_factor=1.0)
    assert compute_task_time(copy, rows, gpu) == pytest.approx(2e9 / 10e9 + 1e-6)


def test_collective_load_terms_slow_every_spmd_collective(tmp_path):
    raw = raw_preset("cpu-local")
    base = tmp_path / "base.yaml"
    raw.pop("compute_profile", None)
    for k in (
        "collective_load_factor",
        "collective_load_factor_all_reduce",
        "collective_load_half_size_MiB",
        "collective_load_overhead_us",
    ):
        raw["efficiency"].pop(k, None)
    base.write_text(yaml.safe_dump(raw))
    raw["efficiency"]["collective_load_factor"] = {"value": 2.0, "kind": "assumed", "source": "test"}
    raw["efficiency"]["collective_load_factor_all_reduce"] = {"value": 3.0, "kind": "assumed", "source": "test"}
    raw["efficiency"]["collective_load_overhead_us"] = {"value": 1000, "kind": "assumed", "source": "test"}
    loaded = tmp_path / "loaded.yaml"
    loaded.write_text(yaml.safe_dump(raw))
    from simdl.analytic.costs import CommCosts

    a, b = CommCosts(allocate(str(base), 2)), CommCosts(allocate(str(loaded), 2))
    for op, n in (("all_reduce", 2**20), ("all_gather", 2**24), ("reduce_scatter", 2**16)):
        t0 = a.time(op, n, 2, "intra")
        o = a.parts(op, n, 2, "intra")[0]
        f = 3.0 if op == "all_reduce" else 2.0  # all_reduce's own factor where the profile has one
        assert b.time(op, n, 2, "intra") == pytest.approx(f * (t0 - o) + o + 1e-3)
    # With a half size the factors are for small messages: at h the slowdown is half of it.
    raw["efficiency"]["collective_load_half_size_MiB"] = {"value": 1, "kind": "assumed", "source": "test"}
    sized = tmp_path / "sized.yaml"
    sized.write_text(yaml.safe_dump(raw))
    c = CommCosts(allocate(str(sized), 2))
    for n, f in ((2**20, 1 + 2.0 / 2), (2**24, 1 + 2.0 / 17)):
        t0, o = a.time("all_reduce", n, 2, "intra"), a.parts("all_reduce", n, 2, "intra")[0]
        assert c.time("all_reduce", n, 2, "intra") == pytest.approx(f * (t0 - o) + o + 1e-3)
    del raw["efficiency"]["collective_load_half_size_MiB"]
    raw["efficiency"]["collective_load_factor_all_reduce"]["value"] = 0.9
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(SimdlError, match="collective_load_factor_all_reduce = 0.9; accepted: 1 <= value <= 10"):
        load_cluster(str(tmp_path / "bad.yaml"))
    raw["efficiency"]["collective_load_factor_all_reduce"]["value"] = 3.0
    raw["efficiency"]["collective_load_factor"]["value"] = 0.5
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(SimdlError, match="collective_load_factor = 0.5; accepted: 1 <= value <= 10"):
        load_cluster(str(tmp_path / "bad.yaml"))


def test_a_compute_jitter_out_of_range_is_a_one_line_error(tmp_path):
    raw = raw_preset("cpu-local")
    raw.pop("compute_profile", None)
    raw["efficiency"]["compute_jitter"] = {"value": -0.1, "kind": "assumed", "source": "test"}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(SimdlError, match=r"compute_jitter = -0.1 must be >= 0"):
        load_cluster(str(tmp_path / "bad.yaml"))
    raw["efficiency"]["compute_jitter"]["value"] = 3.0
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(
        SimdlError, match=r"compute_jitter = 3.0; accepted: 0 <= value <= 2 \(the spread of log\(step time\)"
    ):
        load_cluster(str(tmp_path / "bad.yaml"))


def test_overlap_and_per_class_bandwidths_change_only_what_they_name():
    """compute_memory_overlap 1 is the roofline's max, 0 the sum of FLOP and byte times; a
    class bandwidth reprices that class's rows and no others (checked against the formula)."""
    table = load_workload("resnet18", "cifar10")
    base = Rates(flops=1e11, memory_bandwidth=5e9, kernel_overhead=0.0, activation_factor=1.0)
    f = table.column("fwd_flops", 8) / 1e11
    b = (
        (table.per_sample["read_bytes"] + table.per_sample["write_bytes"]) * 8
        + table.fixed["read_bytes"]
        + table.fixed["write_bytes"]
    ) / 5e9
    assert np.allclose(row_times(table, 8, base).fwd, np.maximum(f, b))
    summed = Rates(
        flops=1e11, memory_bandwidth=5e9, kernel_overhead=0.0, activation_factor=1.0, compute_memory_overlap=0.0
    )
    assert np.allclose(row_times(table, 8, summed).fwd, f + b)
    half = Rates(
        flops=1e11, memory_bandwidth=5e9, kernel_overhead=0.0, activation_factor=1.0, compute_memory_overlap=0.5
    )
    assert np.allclose(row_times(table, 8, half).fwd, np.maximum(f, b) + 0.5 * np.minimum(f, b))
    norm = Rates(
        flops=1e11,
        memory_bandwidth=5e9,
        kernel_overhead=0.0,
        activation_factor=1.0,
        class_memory_bandwidth=(("norm", 1e9),),
    )
    got, ref = row_times(table, 8, norm).fwd, row_times(table, 8, base).fwd
    is_norm = table.op_classes == "norm"
    assert is_norm.sum() == 20  # resnet18's BatchNorm2d calls
    assert np.allclose(got[is_norm], ref[is_norm] * 5)
    assert np.array_equal(got[~is_norm], ref[~is_norm])


def _cpu_profile_with(tmp_path, **values):
    """cpu-local without its compute profile, with the given efficiency values (assumed), as
    (its raw dict, the path it was written to)."""
    raw = raw_preset("cpu-local")
    raw.pop("compute_profile", None)
    for k, v in values.items():
        raw["efficiency"][k] = {"value": v, "kind": "assumed", "source": "test"}
    (tmp_path / "ok.yaml").write_text(yaml.safe_dump(raw))
    return raw, tmp_path / "ok.yaml"


def _rejects(tmp_path, raw, match):
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(SimdlError, match=match):
        load_cluster(str(tmp_path / "bad.yaml"))


def test_profile_keys_for_overlap_and_class_bandwidths_load_and_reject_bad_values(tmp_path):
    raw, ok = _cpu_profile_with(tmp_path, compute_memory_overlap=0.25, memory_bandwidth_norm=0.5)
    eff = raw["efficiency"]
    c = load_cluster(str(ok))
    assert c.efficiency.compute_memory_overlap.value == 0.25
    assert c.efficiency.memory_bandwidth_by_class["norm"].value == 0.5
    assert c.efficiency.to_dict()["memory_bandwidth_norm"]["value"] == 0.5
    eff["compute_memory_overlap"]["value"] = 1.5
    _rejects(tmp_path, raw, r"compute_memory_overlap = 1.5; accepted: 0 <= value <= 1")
    eff["compute_memory_overlap"]["value"] = 0.0
    eff["memory_bandwidth_conv"] = {"value": 0.5, "kind": "assumed", "source": "test"}
    _rejects(tmp_path, raw, "memory_bandwidth_conv")


def test_conv_weight_term_and_class_call_costs_add_what_they_say():
    """conv_weight_grad_bandwidth adds batch x a conv row's weight bytes at that rate to its
    backward only; a class call cost adds its seconds to each of that class's rows."""
    table = load_workload("resnet18", "cifar10")
    base = Rates(flops=1e11, memory_bandwidth=5e9, kernel_overhead=0.0, activation_factor=1.0)
    ref = row_times(table, 8, base)
    conv = table.op_classes == "conv"
    w = Rates(
        flops=1e11, memory_bandwidth=5e9, kernel_overhead=0.0, activation_factor=1.0, conv_weight_grad_bandwidth=4e9
    )
    got = row_times(table, 8, w)
    weights = table.fixed["read_bytes"] * 8
    assert np.allclose(got.bwd[conv], ref.bwd[conv] + weights[conv] / 4e9)
    assert np.array_equal(got.fwd, ref.fwd) and np.array_equal(got.bwd[~conv], ref.bwd[~conv])
    calls = Rates(
        flops=1e11,
        memory_bandwidth=5e9,
        kernel_overhead=0.0,
        activation_factor=1.0,
        class_call_overhead=(("norm", 1e-4),),
    )
    got = row_times(table, 8, calls)
    norm = table.op_classes == "norm"
    assert np.allclose(got.fwd[norm], ref.fwd[norm] + 1e-4) and np.allclose(got.bwd[norm], ref.bwd[norm] + 1e-4)
    assert np.array_equal(got.fwd[~norm], ref.fwd[~norm])


def test_profile_keys_for_conv_weights_and_call_costs_load_and_reject_bad_values(tmp_path):
    raw, ok = _cpu_profile_with(tmp_path, conv_weight_grad_bandwidth=0.8, call_overhead_norm_us=120.0)
    eff = raw["efficiency"]
    c = load_cluster(str(ok))
    assert c.efficiency.call_overhead_by_class["norm"].value == pytest.approx(120e-6)
    assert c.efficiency.to_dict()["call_overhead_norm_us"]["value"] == pytest.approx(120.0)
    assert c.efficiency.to_dict()["conv_weight_grad_bandwidth"]["value"] == 0.8
    cluster = allocate(str(ok), 2)
    rates = device_rates(cluster, "fp32")
    assert rates.class_call_overhead == (("norm", pytest.approx(120e-6)),)
    assert rates.conv_weight_grad_bandwidth == pytest.approx(0.8 * cluster.per_rank_memory_bandwidth)
    eff["conv_weight_grad_bandwidth"]["value"] = 0
    _rejects(tmp_path, raw, "conv_weight_grad_bandwidth")
    eff["conv_weight_grad_bandwidth"]["value"] = 0.8
    eff["call_overhead_conv_us"] = {"value": 1.0, "kind": "assumed", "source": "test"}
    _rejects(tmp_path, raw, "call_overhead_conv_us")
