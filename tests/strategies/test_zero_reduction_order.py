"""The order in which DeepSpeed 0.19.8 reduces gradients, stage by stage, as the ZeRO plans
lay it out (simdl.strategies.zero_plan), and what stage 1's order costs on a CPU rank.

Source (deepspeed/runtime/zero/stage_1_and_2.py, 0.19.8): stages 2-3 reduce from the gradient
hooks, in backward order (reduce_independent_p_g_buckets_and_remove_grads; stage3.py
reduce_ready_partitions_and_remove_grads); stage 1 without overlap_comm installs the hooks
(contiguous_gradients) but process_gradients reduces nothing, and engine.allreduce_gradients
calls reduce_gradients after backward, which loops over bit16_groups in registration order,
filling the ipg buckets from the first parameter on (stage 0's buffered_allreduce_fallback
likewise walks module.parameters(), engine.py).
"""

import pytest

import simdl
from simdl.cluster import allocate, load_cluster
from simdl.strategies import StrategyConfig, build_plan
from simdl.strategies.zero_plan import ipg_buckets
from simdl.workload.library import load_workload
from simdl.workload.workload import Workload


def _plan(strategy, cluster="a100-40gb-2node", gpus=8, model="vit_b_16", dataset="imagenet", **knobs):
    wl = Workload(table=load_workload(model, dataset=dataset), batch_size=8, optimizer="adam", precision="fp32")
    return wl, build_plan(wl, allocate(load_cluster(cluster), gpus, None), StrategyConfig(name=strategy, **knobs))


def _names(plan):
    return [t.name for t in plan.tasks]


def _first(names, prefix):
    return next(i for i, n in enumerate(names) if n.startswith(prefix))


def _last(names, prefix):
    return max(i for i, n in enumerate(names) if n.startswith(prefix))


CAP = int(5e6)


def test_stage_1_fills_its_buckets_in_registration_order_after_backward():
    wl, z1 = _plan("zero1", reduce_bucket_size=CAP)
    numels = [int(p.numel) for p in wl.table.params]
    forward = ipg_buckets(numels, CAP, backward=False)
    assert forward[0][0] == 0  # the first registered parameter opens the first bucket
    assert z1.facts.bucket_elements == tuple(sum(numels[i] for i in b) for b in forward)
    names = _names(z1)
    # the loop, then every bucket's copy-in and all-reduce, all after the last backward segment
    assert _first(names, "ipg_copy_in:bucket") > _last(names, "backward")
    assert [n for n in names if n.startswith("all_reduce:bucket")] == [
        f"all_reduce:bucket{k}" for k in range(len(forward))
    ]


@pytest.mark.parametrize("strategy, knobs", [("zero2", {}), ("zero3", {}), ("zero1", {"overlap_comm": True})])
def test_hooks_reduce_in_backward_order_inside_backward(strategy, knobs):
    wl, plan = _plan(strategy, reduce_bucket_size=CAP, **knobs)
    numels = [int(p.numel) for p in wl.table.params]
    backward = ipg_buckets(numels, CAP, backward=True)
    assert backward[0][0] == len(numels) - 1  # the last registered parameter's gradient comes first
    assert plan.facts.bucket_elements == tuple(sum(numels[i] for i in b) for b in backward)
    coll = "reduce_scatter" if strategy == "zero3" else "all_reduce"
    names = _names(plan)
    assert _first(names, f"{coll}:bucket") < _last(names, "backward")
    # each bucket is reduced right after the backward segment that completes its gradients
    for k, row in enumerate(plan.facts.bucket_ready_rows):
        i = names.index(f"{coll}:bucket{k}")
        seg = max(j for j in range(i) if names[j].startswith("backward["))
        assert plan.tasks[seg].rows[0] == row
    assert not any(t.refaults for t in plan.tasks)


def test_stage_0_reduces_one_flattened_bucket_after_backward():
    _, z0 = _plan("zero0", reduce_bucket_size=CAP)
    names = _names(z0)
    assert [n for n in names if n.startswith("all_reduce:bucket")] == ["all_reduce:bucket0"]
    assert _first(names, "all_reduce:bucket") > _last(names, "backward")
    assert names.index("unflatten:bucket0") > names.index("all_reduce:bucket0")


def test_on_a_cpu_rank_stage_1_does_stage_2s_work_in_another_place_and_one_pass_more():
    # One bucket (5e7 elements > ResNet-18's 11.7 M), fp32, overlap_comm off: stage 2's hooks
    # copy each gradient into the bucket during backward, stage 1's loop after it, and both
    # reduce the one bucket once its last gradient is in; a CPU rank overlaps nothing (gloo
    # blocks), so the two steps differ only by stage 1's extra pass: its hooks fire without
    # reducing and its loop's own calls (benchmarks/zero1_vs_zero2_cpu.py measures the shared
    # reduction work alike: 19.5-21.0 ms in stage 1, 20.3-22.1 ms in stage 2).
    kw = dict(model="resnet18", dataset="cifar10", gpus=2, reduce_bucket_size=50_000_000)
    _, z1 = _plan("zero1", cluster="cpu-local", **kw)
    _, z2 = _plan("zero2", cluster="cpu-local", **kw)
    assert z1.facts.bucket_elements == z2.facts.bucket_elements  # one bucket of every gradient
    names = _names(z1)
    assert names.index("ipg_copy_in:bucket0") > _last(names, "backward")  # stage 1: after backward
    args = dict(kw, cluster="cpu-local", batch_size=16, optimizer="adam", loader_workers=0)
    t1 = simdl.predict(strategy="zero1", **args).iteration_time_s
    t2 = simdl.predict(strategy="zero2", **args).iteration_time_s
    # what stage 1 adds is its extra pass over the parameters (strategies.zero.stage1_loop_overhead_us)
    extra = load_cluster("cpu-local").strategies.zero.loop_overhead.value * len(_params())
    assert t1 - t2 == pytest.approx(extra, rel=1e-6)


def _params():
    return load_workload("resnet18", dataset="cifar10").params
