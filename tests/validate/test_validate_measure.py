"""validate/measure.py on hand-made profiler events: peak, busy fraction, collective bytes."""

from __future__ import annotations

import math

import pytest

from simdl.memory.measured import Allocation
from validate import measure


class Ev:
    def __init__(self, name, start, dur=0, thread=1, nbytes=0, shapes=(), dtypes=()):
        self._n, self._s, self._d, self._t, self._b = name, start, dur, thread, nbytes
        self._shapes, self._dtypes = list(shapes), list(dtypes)

    def name(self):
        return self._n

    def start_ns(self):
        return self._s

    def duration_ns(self):
        return self._d

    def start_thread_id(self):
        return self._t

    def nbytes(self):
        return self._b

    def device_type(self):
        return "DeviceType.CPU"

    def shapes(self):
        return self._shapes

    def dtypes(self):
        return self._dtypes


def test_analyse_profile():
    events = [
        Ev(measure.MEASURED_STEP, 100, dur=100),
        Ev("aten::conv2d", 110, dur=30),
        Ev("aten::convolution", 115, dur=20),  # nested: counted once
        Ev("aten::mm", 160, dur=20),
        Ev("aten::add", 170, dur=5, thread=2),  # another thread: not the training thread
        Ev("gloo:all_reduce", 170, dur=10, thread=3, shapes=[[[1000]]], dtypes=["float"]),
        Ev("gloo:all_gather", 180, dur=10, thread=3, shapes=[[[250]]], dtypes=["float"]),
        Ev(measure.MEMORY_STEP, 300, dur=100),
    ]
    allocs = [
        Allocation(10, None, 1000, False),  # model built before the step: counted in the baseline
        Allocation(110, 150, 300, False),
        Allocation(120, None, 200, False),
        Allocation(320, 330, 700, True),  # in the memory-only step: its free repaired
        Allocation(450, None, 5000, False),  # after the steps: not in the peak
    ]
    a = measure.analyse_profile(events, world=2, allocs=allocs)
    assert a["allocated_at_step_start_bytes"] == 1000
    assert a["peak_allocated_bytes_steps"] == [1500, 1900]
    assert a["peak_allocated_bytes"] == 1900
    assert math.isclose(a["busy_fraction"], 0.5)
    # all_reduce 4000 B payload x 2(n-1)/n = 4000; all_gather 250 x 4 B x 2 ranks = 2000 x 1/2 = 1000
    assert a["comm_payload_bytes_per_step"] == 6000
    assert a["comm_sent_bytes_per_step"] == 5000
    assert a["collectives_per_step"] == 2
    assert a["memory_timeline"][0] == [0.0, 1000]


def test_busy_time_is_split_into_compute_copies_optimizer_and_collective_calls():
    MS = 1_000_000  # ns
    events = [
        Ev(measure.MEASURED_STEP, 0 * MS, dur=1000 * MS),
        Ev("aten::linear", 10 * MS, dur=100 * MS),
        Ev("aten::mm", 20 * MS, dur=80 * MS),  # nested in linear: counted once, as compute
        Ev("aten::_chunk_cat", 120 * MS, dur=50 * MS),  # FSDP2 packs the reduce-scatter input
        Ev("c10d::_reduce_scatter_base_", 170 * MS, dur=200 * MS),  # a blocking collective call
        Ev("aten::copy_", 400 * MS, dur=30 * MS),
        Ev("Optimizer.step#SGD.step", 500 * MS, dur=100 * MS),
        Ev("aten::add_", 510 * MS, dur=40 * MS),  # in the optimizer's range
        Ev("aten::copy_", 560 * MS, dur=20 * MS),  # a copy inside the optimizer counts as the optimizer
        Ev("aten::add_", 700 * MS, dur=10 * MS),  # outside: compute
        Ev("aten::copy_", 800 * MS, dur=10 * MS, thread=2),  # another thread: not counted
    ]
    a = measure.analyse_profile(events, world=2, allocs=[])
    g = a["busy_by_group_s"]
    assert g == {"compute": 0.110, "copies": 0.080, "optimizer": 0.060, "collective_calls": 0.200}
    # the busy fraction is unchanged: aten ops only, collective calls are not busy
    assert math.isclose(a["busy_fraction"], (100 + 50 + 30 + 40 + 20 + 10) / 1000)
    # calibration's strategy stage splits its profiled step the same way
    from simdl.calibrate.step_groups import marked_step_groups

    c = marked_step_groups(events, measure.MEASURED_STEP)
    assert c == {"length_s": 1.0, "busy_by_group_s": g}
    with pytest.raises(RuntimeError, match="no calib"):
        marked_step_groups(events, "calib::step")


def test_stats_and_staleness():
    s = measure.step_stats([1.0, 2.0, 3.0, 4.0])
    assert s["median"] == 2.5 and s["n"] == 4 and s["p10"] < s["p90"]
    st = measure.staleness_summary([0, 1, 1, 3])
    assert st["mean"] == 1.25 and st["histogram"] == {"0": 1, "1": 2, "3": 1} and st["max"] == 3
    assert measure.staleness_summary([])["n"] == 0


def test_collectives_of_a_two_by_two_hsdp_mesh_are_counted_over_their_groups():
    """Events as torch 2.14 records one unit of FSDP2 on a (2, 2) replicate x shard mesh of 4
    gloo ranks (/tmp probe, 2026-11-27): each c10d call on the training thread, then the
    backend's collective on a worker thread of its process group."""
    f = ["float"]
    events = [
        Ev(measure.MEASURED_STEP, 0, dur=1000),
        Ev("c10d::_allgather_base_", 10, dur=5, shapes=[[8320], [4160]]),
        Ev("gloo:all_gather", 11, dur=3, thread=2, shapes=[[4160]], dtypes=f),
        Ev("c10d::_reduce_scatter_base_", 20, dur=5, shapes=[[4160], [8320]]),
        Ev("gloo:all_reduce", 21, dur=3, thread=2, shapes=[[8320]], dtypes=f),  # gloo's reduce-scatter
        Ev("c10d::allreduce_", 30, dur=5, shapes=[[], []]),
        Ev("gloo:all_reduce", 31, dur=3, thread=4, shapes=[[4160]], dtypes=f),  # over the replicas
    ]
    calls = [e for e in events if e.name().startswith("c10d::")]
    backend = [e for e in events if e.name().startswith("gloo:")]
    assert measure.group_sizes(calls, backend, 4) == [2, 2, 2]
    a = measure.analyse_profile(events, world=4, allocs=[])
    # all-gather 2 x 4160 x 4 B x 1/2; all-reduces 8320 x 4 B and 4160 x 4 B, each x 2(n-1)/n = 1
    assert a["comm_payload_bytes_per_step"] == 4 * (8320 + 8320 + 4160)
    assert a["comm_sent_bytes_per_step"] == 4 * (4160 + 8320 + 4160)
    # a full-world mesh, and DDP's all-reduce, stay over the world
    assert measure.group_sizes(
        [Ev("c10d::_allgather_base_", 0, shapes=[[400], [100]]), Ev("c10d::allreduce_", 1)], backend[:2], 4
    ) == [4, 4]
    # a broadcast beside a 2-rank reduce-scatter stays over the world; only the all-reduce is HSDP's
    assert measure.group_sizes(calls[1:2] + [Ev("c10d::broadcast_", 40)], backend[1:], 4) == [2, 4]
    # unpaired (counts differ): every collective over the world, as before
    assert measure.group_sizes(calls[:1], backend, 4) == [4, 4, 4]
