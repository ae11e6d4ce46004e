"""A strategy added by a registry entry in this file alone predicts, sweeps, is recommended,
traces and reports, with no change to any other module (simdl.strategies.registry).

The toy is data parallelism without buckets: every rank runs forward and backward, then
all-reduces its gradients in ``toy_chunks`` equal calls after backward, then steps the
optimizer. With nothing overlapped it can be checked against DDP on the same cluster: the
same bytes on the wire, never faster.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import simdl
from simdl.errors import SimdlError
from simdl.strategies import registry
from simdl.strategies.optimizer_step import optimizer_task, uses_foreach
from simdl.strategies.options import check_fields
from simdl.strategies.plan import COMM, COMPUTE, Group, SpmdPlan, Task


@dataclass(frozen=True)
class ToyOptions:
    toy_chunks: int = 1
    """All-reduce calls the gradients are split into, after backward."""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.toy_chunks < 1:
            raise SimdlError(f"--toy-chunks {self.toy_chunks!r} must be an integer >= 1")


def _build(workload, cluster, config) -> SpmdPlan:
    n = workload.table.n_rows
    world = cluster.gpus
    grads = 4.0 * sum(p.numel for p in workload.table.params)
    tasks = [
        Task("forward", COMPUTE, "fwd", rows=(0, n), direction="fwd"),
        Task("backward", COMPUTE, "bwd", deps=(0,), rows=(0, n), direction="bwd"),
    ]
    for c in range(config.toy_chunks):
        tasks.append(
            Task(
                f"all_reduce[{c}]",
                COMM,
                "comm",
                deps=(len(tasks) - 1,),
                collective="all_reduce",
                comm_bytes=grads / config.toy_chunks,
                group="world",
            )
        )
    tasks.append(
        optimizer_task(
            workload.optimizer,
            workload.param_bytes,
            len(workload.table.params),
            (len(tasks) - 1,),
            foreach=uses_foreach(cluster),
        )
    )
    return SpmdPlan(
        strategy="toy",
        family="toy",
        tasks=tuple(tasks),
        world_size=world,
        data_parallel=world,
        groups={"world": Group("world", world, "world" if cluster.nodes > 1 else "intra")},
    )


def _timeline(workload, plan, options):
    from simdl.memory.timeline import replica_timeline

    return replica_timeline(workload, plan, options)


TOY = registry.StrategySpec(
    family="toy",
    names=("toy",),
    options=ToyOptions,
    build_plan=_build,
    memory_timeline=_timeline,
    predict_keys={
        "toy_chunks": registry.PredictKey(
            "toy_chunks",
            default_reason="one call, the toy's default",
            cli_type=int,
            help="all-reduce calls after backward",
        )
    },
    labels={"toy": ("toy", {})},
    variants=lambda v: ("toy",),
    echo=lambda config, plan: {"toy_chunks": config.toy_chunks},
)


@pytest.fixture(autouse=True)
def toy():
    registry.register(TOY)
    yield TOY
    registry.unregister("toy")


KW = dict(model="vgg16", gpus=4, cluster="a100-80gb-pcie", batch_size=32)


@pytest.mark.parametrize("engine", ["analytic", "sim"])
def test_the_toy_predicts_with_both_engines_and_never_beats_ddp(engine):
    toy = simdl.predict(strategy="toy", engine=engine, **KW)
    ddp = simdl.predict(strategy="ddp", engine=engine, **KW)
    assert toy.config["label"] == "toy" and toy.config["toy_chunks"] == 1
    assert toy.config["assumed"]["toy_chunks"] == "one call, the toy's default"
    # vgg16 has no buffers, so DDP sends exactly the gradients too
    assert math.isclose(toy.comm_bytes_per_iteration, ddp.comm_bytes_per_iteration, rel_tol=1e-9)
    assert toy.iteration_time_s >= ddp.iteration_time_s * 0.999
    assert toy.exposed_comm_time_s > ddp.exposed_comm_time_s
    assert toy.peak_memory_bytes > 0 and sum(toy.step_split_s.values()) == pytest.approx(toy.iteration_time_s)


def test_the_toys_own_keyword_is_taken_and_refused_elsewhere():
    four = simdl.predict(strategy="toy", toy_chunks=4, **KW)
    assert four.config["toy_chunks"] == 4 and "toy_chunks" not in four.config["assumed"]
    with pytest.raises(SimdlError, match=r"--toy-chunks 4 applies to toy; strategy 'ddp' does not take it"):
        simdl.predict(strategy="ddp", toy_chunks=4, **KW)
    with pytest.raises(SimdlError, match=r"--sharding 'full' applies to fsdp; strategy 'toy'"):
        simdl.predict(strategy="toy", sharding="full", **KW)
    with pytest.raises(SimdlError, match="must be an integer >= 1"):
        simdl.predict(strategy="toy", toy_chunks=0, **KW)


def test_the_toy_sweeps_and_is_recommended():
    rows = simdl.sweep(
        model="vgg16", strategy=["toy", "ddp"], gpus=[2, 4], cluster="a100-80gb-pcie", executor="serial", progress=False
    )
    rows = rows.to_dict("records") if hasattr(rows, "to_dict") else list(rows)
    assert sorted(r["label"] for r in rows) == ["ddp", "ddp", "toy", "toy"]
    assert all(not r["error"] for r in rows)
    rec = simdl.recommend("vgg16", cluster="a100-80gb-pcie", gpus=4, batch_sizes=[32], precisions=["fp32"], jobs=1)
    assert "toy" in rec.knobs["strategy"]  # the toy's variants joined the default candidates
    labels = {r["label"] for r in rec.ranked}
    assert {"toy", "ddp"} <= labels


def test_the_toy_traces_and_reports(tmp_path, capsys):
    from simdl.cli import main

    out = tmp_path / "trace.json"
    assert (
        main(
            [
                "trace",
                "--model",
                "vgg16",
                "--strategy",
                "toy",
                "--gpus",
                "2",
                "--cluster",
                "a100-80gb-pcie",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    names = {e.get("name") for e in json.loads(out.read_text())["traceEvents"]}
    assert "all_reduce[0]" in names and "backward" in names
    assert main(["predict", "--model", "vgg16", "--strategy", "toy", "--gpus", "2", "--cluster", "a100-80gb-pcie"]) == 0
    assert ", toy, 2 x" in capsys.readouterr().out
    assert main(["predict", "--strategy", "toy", "--bucket-cap-mb", "10"]) == 2
    assert "applies to ddp; strategy 'toy'" in capsys.readouterr().err
    # the toy's own keyword is a CLI option too, refused where it does not apply
    assert main(["predict", "--strategy", "toy", "--toy-chunks", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["toy_chunks"] == 3
    assert main(["predict", "--strategy", "ddp", "--toy-chunks", "3"]) == 2
    assert "--toy-chunks 3 applies to toy" in capsys.readouterr().err
    assert (
        main(
            [
                "sweep",
                "--model",
                "vgg16",
                "--strategy",
                "toy",
                "--toy-chunks",
                "1,2",
                "--gpus",
                "2",
                "--executor",
                "serial",
                "--no-progress",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.count("toy") >= 2


def test_the_validation_report_takes_a_toy_run(tmp_path):
    root = str(Path(__file__).resolve().parents[2])
    if root not in sys.path:
        sys.path.insert(0, root)
    from simdl.report.validation import build_report
    from validate.experiments import experiments

    run = next(r for r in experiments("smoke") if not r.is_ps)
    spec = dict(run.to_dict(), strategy="toy", sharding=None)
    rec = {
        "schema": "simdl-validation/1",
        "run_id": "toy-1",
        "profile": "smoke",
        "spec": spec,
        "label": "toy",
        "model_name": run.model_name,
        "oversubscribed": False,
        "processes": run.processes,
        "cores": 2,
        "cluster_profile": "cpu-local.yaml",
        "cluster_profile_sha256": "0" * 16,
        "status": "ok",
        "wall_s": 1.0,
        "host": {"hostname": "t", "cpu_cores": 2, "torch": "x", "cuda": False, "python": "3"},
        "predicted": {
            "kwargs": {},
            "analytic": {
                "iteration_time_s": 1.1,
                "total_time_s": 11.0,
                "peak_tensor_bytes": 97e6,
                "gpu_utilization": 0.8,
                "comm_bytes_per_iteration": 2e6,
            },
        },
        "measured": {
            "step_time_s": {"median": 1.0, "p10": 0.9, "p90": 1.1, "n": 5},
            "total_time_s": 11.0,
            "peak_allocated_bytes": 100e6,
            "busy_fraction": 0.7,
            "steps_per_rank": 8,
        },
    }
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    text = build_report(path, tmp_path / "report").read_text()
    assert "| toy |" in text or " toy " in text
