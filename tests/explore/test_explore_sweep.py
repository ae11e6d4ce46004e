"""simdl.sweep: grids, what-if clusters, error rows, executors, output files, the CLI."""

from __future__ import annotations

import csv
import json
import sys
import types

import pytest

import simdl
from simdl.cli import main
from simdl.errors import SimdlError
from simdl.explore import derive_cluster, parse_set
from simdl.explore.grid import Grid, to_call
from simdl.explore.sweep import run_points


def run(args, capsys):
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------- grid and parsing


def test_grid_is_the_product_in_the_order_given():
    g = Grid({"model": "resnet18", "strategy": ["ddp", "fsdp-full"], "gpus": [1, 2, 4]})
    points = list(g)
    assert len(g) == len(points) == 6
    assert g.swept == ["strategy", "gpus"]
    assert points[0] == {"model": "resnet18", "strategy": "ddp", "gpus": 1}
    assert points[-1] == {"model": "resnet18", "strategy": "fsdp-full", "gpus": 4}


def test_strategy_labels_set_the_sharding():
    assert to_call({"strategy": "fsdp-grad_op", "sharding": "full"})[0] == {"strategy": "fsdp", "sharding": "grad_op"}
    assert to_call({"strategy": "ddp", "gpus": 2, "nic_Gb_per_s": 100}) == (
        {"strategy": "ddp", "gpus": 2},
        {"nic_Gb_per_s": 100},
    )


def test_set_parsing_types_values():
    axes = parse_set(["batch_size=32,64", "nic_Gb_per_s=25,100.5", "precision=fp32,bf16", "nodes=default,2"])
    assert axes == {
        "batch_size": [32, 64],
        "nic_Gb_per_s": [25, 100.5],
        "precision": ["fp32", "bf16"],
        "nodes": [None, 2],
    }


@pytest.mark.parametrize(
    "item, needle",
    [
        ("foo=1", "unknown key 'foo'"),
        ("gpus=two", "'two' is not an integer"),
        ("nic_Gb_per_s=fast", "'fast' is not a number"),
        ("batch_size", "key=v1,v2"),
        ("gpus=1,,2", "empty value"),
    ],
)
def test_bad_set_items_are_one_line_errors_naming_the_key(item, needle):
    with pytest.raises(SimdlError) as e:
        parse_set([item])
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "axes, needle",
    [
        ({"strategy": ["ddp", "fdsp"]}, "'fsdp'"),
        ({"precision": "fp8"}, "fp32"),
        ({"memory_format": ["contiguous", "nhwc"]}, "memory_format: unknown memory_format 'nhwc'"),
        ({"nic_Gb_per_s": [0]}, "nic_Gb_per_s"),
        ({"gpus": [0, 1]}, "gpus"),
        ({"straggler_factor": [1.5]}, "engine=sim"),
    ],
)
def test_bad_grid_values_fail_before_any_work(axes, needle):
    with pytest.raises(SimdlError) as e:
        simdl.sweep(as_frame=False, **axes)
    assert needle in str(e.value)


# ----------------------------------------------------------------------------- what-if clusters


def test_derive_cluster_replaces_numbers_and_says_so():
    base = derive_cluster("dgx-a100")
    c = derive_cluster("dgx-a100", nic_Gb_per_s=100, nics_per_node=1)
    assert c.inter_node.nic_bandwidth.value == pytest.approx(100e9 / 8)
    assert c.inter_node.nics == 1 and base.inter_node.nics == 8
    assert c.inter_node.nic_bandwidth.kind == "assumed" and "what-if" in c.inter_node.nic_bandwidth.source
    assert c.name == "dgx-a100[nic_Gb_per_s=100,nics_per_node=1]"
    assert derive_cluster("dgx-a100", nic_Gb_per_s=100, nics_per_node=1) is c  # memoised: engine caches stay warm
    r = simdl.predict(model="resnet50", strategy="ddp", gpus=32, cluster=c)
    assert r.config["cluster"] == c.name
    assert (
        r.iteration_time_s
        > simdl.predict(model="resnet50", strategy="ddp", gpus=32, cluster="dgx-a100").iteration_time_s
    )


def test_derive_cluster_scales_an_nvlink_mesh():
    base = derive_cluster("v100-dgx1")  # the irregular DGX-1 mesh: the wiring stays, each link slows down
    m = derive_cluster("v100-dgx1", intra_bandwidth_GB_per_s=75)
    assert m.intra_node.mesh.links == base.intra_node.mesh.links
    assert m.intra_node.mesh.per_link.value == pytest.approx(base.intra_node.mesh.per_link.value / 2)
    c = derive_cluster("a100-80gb-nvlink", intra_bandwidth_GB_per_s=150)  # fully connected, no mesh listed
    assert c.intra_node.bandwidth.value == pytest.approx(150e9)
    slow = simdl.predict(model="vgg16", strategy="ddp", gpus=4, cluster=c)
    fast = simdl.predict(model="vgg16", strategy="ddp", gpus=4, cluster="a100-80gb-nvlink")
    assert slow.comm_time_s > fast.comm_time_s


@pytest.mark.parametrize(
    "cluster, key, needle",
    [
        ("a100-80gb-nvlink", "nic_Gb_per_s", "single-node"),
        ("dgx-a100", "ps_nic_Gb_per_s", "no parameter-server"),
        ("dgx-a100", "nvlink_speed", "unknown cluster override"),
    ],
)
def test_derive_cluster_errors(cluster, key, needle):
    with pytest.raises(SimdlError) as e:
        derive_cluster(cluster, **{key: 100})
    assert needle in str(e.value)


# ----------------------------------------------------------------------------- rows


def test_invalid_points_become_error_rows_not_an_abort():
    rows = simdl.sweep(
        model="resnet18", strategy=["ddp", "ps-sync"], gpus=[4, 8], cluster="a100-80gb-nvlink", as_frame=False
    )
    assert len(rows) == 4
    ok = [r for r in rows if r["error"] is None]
    assert [(r["strategy"], r["gpus"]) for r in ok] == [("ddp", 4)]
    by = {(r["strategy"], r["gpus"]): r["error"] for r in rows}
    assert "parameter-server" in by[("ps-sync", 4)]
    assert "single-node" in by[("ddp", 8)]
    assert all(r["label"] for r in rows)


def test_dataframe_columns_and_values_match_predict():
    pd = pytest.importorskip("pandas")
    df = simdl.sweep(
        model="resnet50", strategy=["ddp", "fsdp-full"], gpus=[8, 16], cluster="dgx-a100", nic_Gb_per_s=[25, 400]
    )
    assert isinstance(df, pd.DataFrame) and len(df) == 8
    assert list(df.columns[:6]) == ["model", "strategy", "gpus", "cluster", "nic_Gb_per_s", "label"]
    assert df.columns[-1] == "error" and df["error"].isna().all()
    one = df[(df.strategy == "fsdp-full") & (df.gpus == 16) & (df.nic_Gb_per_s == 25)].iloc[0]
    r = simdl.predict(model="resnet50", strategy="fsdp", gpus=16, cluster=derive_cluster("dgx-a100", nic_Gb_per_s=25))
    assert one.iteration_time_s == pytest.approx(r.iteration_time_s)
    assert one.peak_memory_bytes == pytest.approx(r.peak_memory_bytes)
    assert one.label == "fsdp-full"
    assert one.gpu_hours == pytest.approx(r.total_time_s * 16 / 3600)
    # more network bandwidth is never slower
    for (s, g), grp in df.groupby(["strategy", "gpus"]):
        t = grp.sort_values("nic_Gb_per_s").iteration_time_s.tolist()
        assert t == sorted(t, reverse=True)


def test_memory_format_is_a_sweep_axis_like_precision():
    kw = dict(model="resnet50", strategy="ddp", gpus=1, cluster="dgx-a100", dataset="imagenet", batch_size=64)
    rows = simdl.sweep(**kw, precision="bf16", memory_format=["contiguous", "channels_last"], as_frame=False)
    assert [r["memory_format"] for r in rows] == ["contiguous", "channels_last"]
    for r in rows:
        assert (
            r["iteration_time_s"]
            == simdl.predict(**kw, precision="bf16", memory_format=r["memory_format"]).iteration_time_s
        )
    assert rows[1]["iteration_time_s"] < rows[0]["iteration_time_s"]


def test_process_pool_gives_the_same_rows_as_serial():
    axes = dict(
        model=["resnet18", "vgg16"],
        strategy=["ddp", "fsdp-full", "fsdp-grad_op"],
        gpus=[1, 2, 4, 8, 16, 32],
        batch_size=[16, 32, 64],
        cluster="dgx-a100",
        nic_Gb_per_s=[100, 400],
        precision=["fp32", "bf16"],
    )
    points = list(Grid(axes))
    assert len(points) > 400  # above SERIAL_BELOW: the pool really runs
    pooled = run_points(points, jobs=2, executor="process", progress=False)
    serial = run_points(points, executor="serial", progress=False)
    assert pooled == serial


def test_explicit_configurations_and_sim_engine():
    rows = simdl.sweep(
        [
            {"model": "resnet18", "strategy": "ddp", "gpus": 2},
            {
                "model": "resnet18",
                "strategy": "ps-async",
                "gpus": 4,
                "cluster": "a10g-ps",
                "engine": "sim",
                "straggler_factor": 2.0,
                "iterations": 3,
            },
        ],
        as_frame=False,
    )
    assert [r["error"] for r in rows] == [None, None]
    assert rows[1]["engine"] == "sim" and rows[1]["staleness_mean"] > 0


# ----------------------------------------------------------------------------- executors


@pytest.mark.parametrize("name", ["dask", "ray"])
def test_missing_executor_extra_is_a_clean_error(name, monkeypatch):
    monkeypatch.setitem(sys.modules, name, None)  # import fails as if not installed
    with pytest.raises(SimdlError) as e:
        simdl.sweep(model="resnet18", gpus=[1, 2], executor=name, as_frame=False)
    msg = str(e.value)
    assert f"simdl[{name}]" in msg and "\n" not in msg


def test_unknown_executor():
    with pytest.raises(SimdlError, match="unknown executor"):
        simdl.sweep(model="resnet18", executor="mpi", as_frame=False)


def test_dask_executor_plumbing_with_a_stand_in(monkeypatch):
    fake = types.ModuleType("dask")
    calls = []

    def delayed(f):
        return lambda chunk: (f, chunk)

    def compute(*tasks, scheduler=None):
        calls.append((len(tasks), scheduler))
        return tuple(f(chunk) for f, chunk in tasks)

    fake.delayed, fake.compute = delayed, compute
    monkeypatch.setitem(sys.modules, "dask", fake)
    monkeypatch.setitem(sys.modules, "distributed", None)
    rows = simdl.sweep(
        model=["resnet18", "mnist_cnn"],
        gpus=[1, 2, 4, 8],
        strategy=["ddp", "fsdp-full"],
        executor="dask",
        jobs=2,
        as_frame=False,
    )
    assert len(rows) == 16 and calls and calls[0][1] == "processes"
    assert rows == simdl.sweep(
        model=["resnet18", "mnist_cnn"],
        gpus=[1, 2, 4, 8],
        strategy=["ddp", "fsdp-full"],
        executor="serial",
        as_frame=False,
    )


def test_ray_executor_plumbing_with_a_stand_in(monkeypatch):
    fake = types.ModuleType("ray")
    fake.is_initialized = lambda: True

    class Ref:
        def __init__(self, value):
            self.value = value

    def remote(f):
        return types.SimpleNamespace(remote=lambda chunk: Ref(f(chunk)))

    fake.remote = remote
    fake.wait = lambda pending, num_returns=1: (pending[:num_returns], pending[num_returns:])
    fake.get = lambda ref: ref.value
    monkeypatch.setitem(sys.modules, "ray", fake)
    rows = simdl.sweep(model="resnet18", gpus=[1, 2, 4], strategy=["ddp", "fsdp-full"], executor="ray", as_frame=False)
    assert [r["gpus"] for r in rows] == [1, 1, 2, 2, 4, 4] and all(r["error"] is None for r in rows)


# ----------------------------------------------------------------------------- CLI


def test_cli_sweep_writes_csv_and_plot(tmp_path, capsys):
    out, png = tmp_path / "r.csv", tmp_path / "r.png"
    code, stdout, err = run(
        [
            "sweep",
            "--model",
            "resnet50",
            "--strategy",
            "ddp,fsdp-full,ps-sync",
            "--gpus",
            "8,16,32",
            "--cluster",
            "dgx-a100",
            "--set",
            "nic_Gb_per_s=25,400",
            "-o",
            str(out),
            "--plot",
            str(png),
            "--no-progress",
        ],
        capsys,
    )
    assert code == 0, err
    rows = list(csv.DictReader(open(out)))
    assert len(rows) == 18
    assert {r["error"] != "" for r in rows if r["strategy"] == "ps-sync"} == {True}
    assert all(r["error"] == "" for r in rows if r["strategy"] != "ps-sync")
    assert "18 configurations" in err and "configs/s" not in err and "/s" in err and "6 rejected" in err
    assert png.stat().st_size > 10_000


def test_cli_sweep_prints_a_table_and_jsonl(tmp_path, capsys):
    code, out, _ = run(["sweep", "--model", "resnet18", "--gpus", "1,2", "--strategy", "ddp", "--no-progress"], capsys)
    assert code == 0 and "ddp" in out and "step" in out
    path = tmp_path / "r.jsonl"
    code, _, _ = run(["sweep", "--model", "resnet18", "--gpus", "1,2", "-o", str(path), "--no-progress"], capsys)
    lines = [json.loads(x) for x in open(path)]
    assert [d["gpus"] for d in lines] == [1, 2]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--set", "warp=1"], "unknown key 'warp'"),
        (["--gpus", "1,x"], "'x' is not an integer"),
        (["--gpus", "2", "--set", "gpus=4"], "already given"),
        (["--set", "nic_Gb_per_s=100"], "single-node"),  # every point fails the same way: one line
        (["--executor", "dask"], "simdl[dask]"),
        (["-o", "out.xlsx"], ".csv or .jsonl"),
        (["--set", "memory_format=nchw"], "accepted: channels_last, contiguous"),
    ],
)
def test_cli_sweep_errors_are_one_line_exit_2(args, needle, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "dask", None)
    code, out, err = run(["sweep", "--no-progress", *args], capsys)
    assert code == 2 and needle in err and err.count("\n") == 1, err


def test_cli_sweep_list_keys(capsys):
    code, out, _ = run(["sweep", "--list-keys"], capsys)
    assert code == 0
    for key in (
        "batch_size",
        "nic_Gb_per_s",
        "intra_bandwidth_GB_per_s",
        "straggler_factor",
        "precision",
        "memory_format",
    ):
        assert key in out


def test_dask_executor_on_a_local_cluster():
    """A real dask.distributed LocalCluster (two worker processes): the sweep goes to the
    running Client, its chunks run as the cluster's tasks, and its rows are the serial sweep's."""
    distributed = pytest.importorskip("distributed")
    grid = dict(model=["resnet18", "mnist_cnn"], gpus=[1, 2, 4], strategy=["ddp", "fsdp-full"], as_frame=False)
    with (
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
        distributed.get_task_stream(client) as stream,
    ):
        rows = simdl.sweep(executor="dask", jobs=2, **grid)
    assert any(str(t["key"]).startswith("run_chunk") for t in stream.data)
    assert len(rows) == 12 and all(r["error"] is None for r in rows)
    assert rows == simdl.sweep(executor="serial", **grid)
