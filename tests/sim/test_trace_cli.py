"""Chrome trace, plot and the CLI subcommands."""

import json

from simdl.cli import main
from simdl.predict import predict
from simdl.sim.trace import chrome_trace


def test_chrome_trace_events():
    run = predict("resnet18", "ddp", 4, engine="sim", return_run=True)
    trace = chrome_trace(run)
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert xs and all(e["dur"] >= 0 and "ts" in e and "pid" in e and "tid" in e for e in xs)
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"compute", "comm"} <= names
    assert any(n.startswith("gpu:") for n in names)  # link tracks
    # ts/dur in microseconds: the last event ends near 3 iterations of ~1.8 ms.
    end = max(e["ts"] + e["dur"] for e in xs)
    assert 3 * run.result.iteration_time_s * 1e6 * 0.5 < end < 10 * run.result.iteration_time_s * 1e6


def test_cli_trace_and_plot(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["trace", "--model", "resnet18", "--strategy", "fsdp", "--gpus", "2", "-o", str(out)]) == 0
    assert json.loads(out.read_text())["traceEvents"]
    png = tmp_path / "p.png"
    assert (
        main(
            [
                "plot",
                "--model",
                "mnist_cnn",
                "--strategy",
                "ps-async",
                "--cluster",
                "a10g-ps",
                "--gpus",
                "2",
                "-o",
                str(png),
            ]
        )
        == 0
    )
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_cli_sim_options_need_sim_engine(capsys):
    assert main(["predict", "--jitter", "lognormal:0.1"]) == 2
    assert "--engine sim" in capsys.readouterr().err
    assert main(["predict", "--engine", "sim", "--straggler", "rank=0,factor=2", "--seed", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["engine"] == "sim"
