"""The vectorised sweep path (simdl.explore.vector) answers what one-by-one ``simdl.predict`` answers."""

from __future__ import annotations

import importlib
import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np

import simdl
from simdl.costs.schedule import busy_time
from simdl.explore import vector
from simdl.explore.grid import Grid

sweep_mod = importlib.import_module("simdl.explore.sweep")  # the module, not simdl.explore.sweep()
ROOT = Path(__file__).resolve().parents[2]
# GPU presets with kernel models and CUDA memory columns (A100, H100, V100), a two-node preset,
# a parameter-server preset; DDP, FSDP, ZeRO and PS; several NIC rates, NIC counts and GPU counts.
AXES = dict(
    model=["resnet50", "vit_b_16"],
    strategy=["ddp", "fsdp-full", "fsdp-hybrid", "zero1", "zero3", "ps-sync"],
    cluster=["dgx-a100", "h100-hgx", "v100-dgx1", "a100-40gb-2node", "a10g-ps"],
    gpus=[4, 16, 64],
    precision=["bf16"],
    batch_size=[32],
    nic_Gb_per_s=[25, 200, 800],
    nics_per_node=[1, 4],
)
# Each point's row from ``run_one`` (one ``simdl.predict``) in a fresh process: no cache shared
# with the sweep's.
ONE_BY_ONE = """
import json, sys
from simdl.explore.sweep import run_one
print(json.dumps([run_one(p) for p in json.load(sys.stdin)]))
"""
RTOL = 1e-9


def _close(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or abs(a - b) <= RTOL * max(abs(a), abs(b))
    return a == b and type(a) is type(b)


def test_vectorised_rows_equal_one_by_one_predictions_field_by_field():
    points = list(Grid(AXES))
    rows = simdl.sweep(list(points), executor="serial", progress=False, as_frame=False)
    assert len(rows) == len(points) == 1080
    ok = [i for i, r in enumerate(rows) if r["error"] is None]
    # Most points went the vectorised way (PS plans and error rows do not).
    assert sweep_mod.last_run["vectorised"] > len(points) // 2
    rng = random.Random(50)
    sample = rng.sample(ok, 70) + rng.sample([i for i in range(len(rows)) if i not in ok], 10)
    r = subprocess.run(
        [sys.executable, "-c", ONE_BY_ONE],
        input=json.dumps([points[i] for i in sample]),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    seen = set()
    for i, want in zip(sample, json.loads(r.stdout)):
        got = rows[i]
        assert list(got) == list(want), points[i]
        for k in want:
            assert _close(got[k], want[k]), (points[i], k, got[k], want[k])
        if want["error"] is None:
            seen.add((want["strategy"], want["cluster"]))
    # The sample covered every strategy family and every preset.
    assert {s.split("-")[0].rstrip("0123") for s, _ in seen} >= {"ddp", "fsdp", "zero", "ps"}
    assert {c for _, c in seen} == set(AXES["cluster"])


def test_vector_path_off_gives_the_same_rows():
    axes = dict(
        model=["resnet18"],
        strategy=["ddp", "fsdp-full", "zero2"],
        gpus=[8, 32],
        cluster="dgx-a100",
        nic_Gb_per_s=[50, 400],
        inter_latency_us=[2, 10],
    )
    on = simdl.sweep(executor="serial", progress=False, as_frame=False, **axes)
    assert sweep_mod.last_run["vectorised"] > 0
    off = simdl.sweep(executor="serial", progress=False, as_frame=False, vector=False, **axes)
    assert sweep_mod.last_run["vectorised"] == 0
    assert len(on) == len(off) == 24
    for a, b in zip(on, off):
        assert list(a) == list(b)
        assert all(_close(a[k], b[k]) for k in b), a


def test_a_group_whose_template_does_not_check_out_is_answered_point_by_point(monkeypatch):
    points = list(
        Grid(dict(model="resnet18", strategy="ddp", gpus=16, cluster="dgx-a100", nic_Gb_per_s=[50, 100, 400]))
    )
    real = vector.spmd_timings

    def off_by_a_bit(*args):
        t = real(*args)
        return t._replace(iteration=t.iteration * (1 + 1e-6))

    monkeypatch.setattr(vector, "spmd_timings", off_by_a_bit)
    rows, vec = vector.run_group(points)
    assert not vec
    want = [sweep_mod.run_one(p) for p in points]
    assert rows == want


def test_union_lengths_equal_busy_time_column_by_column():
    rng = np.random.default_rng(7)
    for _ in range(300):
        n, k = int(rng.integers(0, 25)), int(rng.integers(1, 5))
        start = rng.random((n, k)).round(2)
        end = start + rng.random((n, k)).round(2) * (rng.random((n, k)) > 0.25)  # some empty
        got = vector.union_lengths(start, end)
        for j in range(k):
            want = busy_time(list(zip(start[:, j].tolist(), end[:, j].tolist())))
            assert got[j] == want or math.isclose(got[j], want, rel_tol=1e-15)


def test_points_differing_in_more_than_links_are_not_grouped():
    a = dict(model="resnet18", strategy="ddp", gpus=8, nic_Gb_per_s=100)
    assert vector.group_key(a) == vector.group_key(dict(a, nic_Gb_per_s=400, inter_latency_us=5))
    assert vector.group_key(a) != vector.group_key(dict(a, gpus=16))
    assert vector.group_key(a) != vector.group_key(dict(a, gpus=8.0))  # equal, but not the same point
    assert vector.group_key(a) != vector.group_key(dict(a, pcie_GB_per_s=16))  # the ZeRO plan reads PCIe
    assert vector.group_key(dict(a, engine="sim")) is None


def test_process_workers_answer_link_groups_as_the_serial_sweep_does(monkeypatch):
    axes = dict(
        model=["resnet18"],
        strategy=["ddp", "fsdp-full"],
        gpus=[8, 16, 32, 64],
        cluster="dgx-a100",
        batch_size=[16, 32],
        nic_Gb_per_s=[25, 50, 100, 200, 400],
        nics_per_node=[1, 2, 3, 4, 8, 16],
    )
    serial = simdl.sweep(executor="serial", progress=False, as_frame=False, vector=False, **axes)
    pools = []
    real = sweep_mod._run_processes
    monkeypatch.setattr(sweep_mod, "_run_processes", lambda *a, **k: pools.append(k) or real(*a, **k))
    rows = simdl.sweep(executor="process", jobs=2, progress=False, as_frame=False, **axes)
    assert pools  # the pool ran
    assert len(rows) == len(serial) == 480 > sweep_mod.SERIAL_BELOW + 1  # the pool runs (not serial)
    assert sweep_mod.last_run["vectorised"] > 400  # counted in the workers
    for a, b in zip(rows, serial):
        assert list(a) == list(b) and all(_close(a[k], b[k]) for k in b), b


def test_two_workers_give_the_serial_sweeps_rows_exactly():
    """Whole link groups per worker chunk: every row is the one the serial (grouped) sweep
    gives, to the last bit; a group is never split across chunks."""
    from simdl.explore import executors

    axes = dict(
        model=["resnet18", "vgg11"],
        strategy=["ddp", "fsdp-full", "zero2"],
        gpus=[8, 64],
        cluster="dgx-a100",
        batch_size=[16, 64],
        precision=["fp32", "bf16"],
        nic_Gb_per_s=[25, 100, 400],
        nics_per_node=[1, 4],
        inter_latency_us=[2, 10],
    )
    serial = simdl.sweep(executor="serial", progress=False, as_frame=False, **axes)
    pooled = simdl.sweep(executor="process", jobs=2, progress=False, as_frame=False, **axes)
    assert len(pooled) == len(serial) == 576 and sweep_mod.last_run["vectorised"] > 500
    assert pooled == serial and [list(r) for r in pooled] == [list(r) for r in serial]
    points = list(Grid(axes))
    groups = vector.link_groups(points)
    chunks = executors.group_chunks(groups, 2, 50, lambda g: executors._family(points[g[0]]))
    assert sorted(map(tuple, groups)) == sorted(tuple(g) for c in chunks for g in c)
    assert len(chunks) > 4 and all(sum(map(len, c)) >= 50 for c in chunks[:-1])


def _variants(cluster: str, gpus: int, **axes):
    from simdl.explore.linkcost import point_clusters

    points = [dict(p, cluster=cluster, gpus=gpus) for p in Grid(axes)]
    return point_clusters(points)


def test_collective_prices_over_arrays_equal_comm_costs_time(monkeypatch):
    """linkcost's closed forms against CommCosts.time, cluster by cluster: every collective,
    group scope and algorithm; the CPU profile's load and blocking factors with its regime
    curves set aside (both sides then take the alpha-beta branch)."""
    from simdl.costs.comm import CommCosts
    from simdl.explore import linkcost

    monkeypatch.setattr(CommCosts, "curve", lambda self, *a, **k: None)
    groups = [
        _variants("dgx-a100", 64, nic_Gb_per_s=[25, 400], nics_per_node=[1, 8], inter_latency_us=[2, 10]),
        _variants("cpu-local", 2, intra_bandwidth_GB_per_s=[1, 20], intra_latency_us=[1, 10]),
    ]
    for clusters in groups:
        for blocking in (False, True):
            for algorithm in ("auto", "ring", "tree"):
                first = CommCosts(clusters[0], algorithm, blocking=blocking)
                overhead = np.array([c.collective_overhead for c in clusters])
                for scope in ("intra", "inter", "world"):
                    bus = np.array([c.group_bus_bandwidth(scope) for c in clusters])
                    lat = np.array([c.group_latency(scope) for c in clusters])
                    for coll in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "send_recv"):
                        for nbytes, size in ((0, 8), (4096, 1), (4096, 8), (3e8, 64), (1 << 20, 2)):
                            got = linkcost._price(first, coll, nbytes, size, scope, overhead, bus, lat)
                            want = [CommCosts(c, algorithm, blocking).time(coll, nbytes, size, scope) for c in clusters]
                            assert got.tolist() == want, (coll, nbytes, size, scope, algorithm, blocking)


def test_a_profile_with_regime_curves_gives_the_rows_of_one_by_one_predictions():
    """cpu-local prices its collectives by regime curves (each point by its own CommCosts)
    and holds the training thread in FSDP2 (blocking factors and waits)."""
    axes = dict(
        model="resnet18",
        strategy=["ddp", "fsdp-full"],
        gpus=[1, 2],
        cluster="cpu-local",
        intra_bandwidth_GB_per_s=[1, 5, 20],
        intra_latency_us=[1, 10],
    )
    on = simdl.sweep(executor="serial", progress=False, as_frame=False, **axes)
    assert sweep_mod.last_run["vectorised"] > 12
    off = simdl.sweep(executor="serial", progress=False, as_frame=False, vector=False, **axes)
    assert on == off


def test_point_clusters_are_placed_once_per_link_variant_and_keep_errors():
    from simdl.errors import SimdlError
    from simdl.explore.linkcost import place, point_clusters

    p = dict(model="resnet18", strategy="ddp", gpus=16, cluster="dgx-a100", nic_Gb_per_s=100)
    a, b, c = point_clusters([p, dict(p, model="vgg16"), dict(p, nic_Gb_per_s=200)])
    assert a is b and a == place(p)  # what the cluster reads is the same: one object
    assert c != a and c == place(dict(p, nic_Gb_per_s=200))
    (bad,) = point_clusters([dict(p, nic_Gb_per_s=-1)])
    assert isinstance(bad, SimdlError)


def test_a_group_whose_last_point_does_not_check_out_is_answered_point_by_point(monkeypatch):
    points = list(
        Grid(dict(model="resnet18", strategy="ddp", gpus=16, cluster="dgx-a100", nic_Gb_per_s=[50, 100, 400]))
    )
    real = vector._rows_of

    def one_column_off(*args):
        rows = real(*args)
        rows[-1]["comm_time_s"] *= 1 + 1e-6  # the template's row is untouched
        return rows

    monkeypatch.setattr(vector, "_rows_of", one_column_off)
    rows, vec = vector.run_group(points)
    assert not vec
    assert rows == [sweep_mod.run_one(p) for p in points]


def test_a_group_with_rejected_links_and_points_in_other_key_orders_gives_the_rows_of_one_by_one():
    base = dict(model="resnet18", strategy="fsdp-full", gpus=32, cluster="dgx-a100")
    points = [
        dict(base, nic_Gb_per_s=100, inter_latency_us=5),
        dict(base, nic_Gb_per_s=-1, inter_latency_us=5),  # rejected: its own error row
        dict(base, inter_latency_us=2),  # no NIC rate: the preset's
        dict(inter_latency_us=10, nic_Gb_per_s=400, **base),  # the link keys first
        dict(base, nic_Gb_per_s=50, inter_latency_us=None),
    ]
    assert len({vector.group_key(p) for p in points}) == 1
    on, vectorised = vector.rows_by_groups(points)  # a sweep's grid would reject -1 before
    assert vectorised == len(points)
    off = [sweep_mod.run_one(p) for p in points]
    assert on == off and [list(r) for r in on] == [list(r) for r in off]
    assert on[1]["error"] and not any(r["error"] for i, r in enumerate(on) if i != 1)
