"""Replay a recorded allocation trace (``torch.cuda.memory._dump_snapshot`` pickle) through
simdl's caching-allocator model and compare the reserved memory.

With ``--snapshot FILE`` (a pickle recorded on a GPU with
``torch.cuda.memory._record_memory_history()`` then ``_dump_snapshot``): the trace's
requests (alloc / free_requested) are replayed through the model and its reserved peak
is set beside the one the recorded segment events imply.

Without one: no public snapshot pickle was found to read, so the trace is *generated*
in the documented format (torch/cuda/memory.py ``_snapshot``) from simdl's own replay of
a ResNet-50 DDP step on an A100 and read back: this checks the reader and writer and
times the replay; it is not a measurement of the allocator.

Run: ``python benchmarks/alloc_trace_replay.py [--snapshot FILE]``
"""

from __future__ import annotations

import argparse
import pickle
import resource
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simdl.memory.allocator.replay import replay  # noqa: E402
from simdl.memory.allocator.snapshot import load_snapshot, ops_from_trace, recorded_reserved, snapshot_of_replay  # noqa: E402

MiB = 2**20


def compare(snapshot: dict, label: str) -> None:
    for dev, trace in enumerate(snapshot["device_traces"]):
        if not trace:
            continue
        ops = ops_from_trace(trace)
        t, c = time.time(), time.process_time()
        r = replay(ops)
        took = time.process_time() - c
        rec_peak, _ = recorded_reserved(trace)
        print(
            f"{label} device {dev}: {len(ops)} requests; replayed in {took * 1e3:.0f} ms CPU "
            f"({(time.time() - t) * 1e3:.0f} ms wall)"
        )
        print(f"  max allocated (model) {r.max_allocated_bytes / MiB:10.1f} MiB")
        print(f"  max reserved  (model) {r.max_reserved_bytes / MiB:10.1f} MiB")
        if rec_peak:
            print(
                f"  max reserved  (trace) {rec_peak / MiB:10.1f} MiB   model error "
                f"{r.max_reserved_bytes / rec_peak - 1:+.2%}"
            )
        else:
            print("  the trace has no segment events (recorded after its segments were made?)")


def generated() -> dict:
    from simdl.cluster import allocate, load_cluster
    from simdl.memory.allocator.replay import ALLOC, Op
    from simdl.memory.cuda import workspaces
    from simdl.memory.device import device_memory
    from simdl.memory.model import memory_options, timeline_for
    from simdl.memory.sequence import allocation_sequence
    from simdl.strategies import StrategyConfig, build_plan
    from simdl.workload.library import load_workload
    from simdl.workload.workload import Workload

    table = load_workload("resnet50", dataset="imagenet")
    wl = Workload(table=table, batch_size=128, optimizer="momentum")
    alloc = allocate(load_cluster("dgx-a100"), 8)
    plan = build_plan(wl, alloc, StrategyConfig("ddp"))
    opts = memory_options(wl, plan, alloc)
    steady = timeline_for(wl, plan, alloc, opts)
    first = timeline_for(wl, plan, alloc, replace(opts, first_iteration=True))
    libs = workspaces(device_memory(alloc.spec.gpu), alloc)
    ops = [Op(ALLOC, ("library", i), int(s)) for i, (_, s) in enumerate(libs)]
    ops += allocation_sequence(steady, first, table, plan.details)
    snap, _ = snapshot_of_replay(ops)
    return snap


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--snapshot", help="a torch.cuda.memory._dump_snapshot pickle")
    args = ap.parse_args()
    c0 = time.process_time()
    if args.snapshot:
        compare(load_snapshot(args.snapshot), args.snapshot)
    else:
        print(
            "no recorded snapshot given: generating one in the _snapshot format from simdl's replay "
            "(resnet50 imagenet b=128 DDP, 8 x A100-80GB) and reading it back\n"
        )
        snap = generated()
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "resnet50.pickle"
            path.write_bytes(pickle.dumps(snap))
            print(
                f"wrote {path.stat().st_size / 1024:.0f} KiB, {len(snap['device_traces'][0])} trace entries, "
                f"{len(snap['segments'])} segments"
            )
            compare(load_snapshot(str(path)), "generated trace")
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(f"\nCPU {time.process_time() - c0:.2f} s, max RSS {ru.ru_maxrss / 1024:.0f} MiB; host shared with other jobs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
