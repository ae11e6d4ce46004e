"""validate.deepspeed_cpu: prediction first, one line per run as it ends, failures kept, resume.

A fake launcher stands in for torchrun and DeepSpeed: it writes the rank files the real worker
writes (validate/deepspeed_worker.py), or fails for the stages it is told to.
"""

from __future__ import annotations

import json
import sys

import pytest

from validate import deepspeed_cpu as dc
from validate.run import Launched

pytestmark = pytest.mark.torch  # host_info reads torch's version


class FakeLauncher:
    def __init__(self, fail_stages=(), peak=300 * 2**20, step=0.25):
        self.fail_stages, self.peak, self.step, self.calls = set(fail_stages), peak, step, []

    def __call__(self, run, workdir, python, timeout_s):
        self.calls.append(run.run_id)
        workdir.mkdir(parents=True, exist_ok=True)
        if run.stage in self.fail_stages:
            (workdir / "rank1.error.txt").write_text("RuntimeError: gloo connection reset\n\ntraceback")
            return Launched(1, "fake", 0.1)
        for rank in range(run.ranks):
            rec = {
                "rank": rank,
                "steady_step_times_s": [self.step, self.step * (1 + 0.1 * rank)],
                "peak_allocated_bytes": self.peak + rank,
                "peak_rss_bytes": 1e9,
                "losses": [2.3, 2.2],
                "optimizer_class": "DeepSpeedZeroOptimizer",
                "deepspeed_version": "0.0-fake",
                "torch_version": "x",
                "backend": "gloo",
            }
            (workdir / f"rank{rank}.json").write_text(json.dumps(rec))
        return Launched(0, "fake", 0.1)


def _runs():
    return dc.matrix(["resnet18"], [0, 2, 3], [8], ranks=2, steps=10, warmup=2)


def test_each_run_is_predicted_measured_and_written_as_it_ends(tmp_path):
    out = tmp_path / "r.jsonl"
    fake = FakeLauncher(fail_stages={2})
    recs = dc.run_matrix(
        _runs(), out, cluster="cpu-local", python=sys.executable, timeout_s=60, resume=False, launcher=fake
    )
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["status"] for r in lines] == ["ok", "failed", "ok"] == [r["status"] for r in recs]
    assert "gloo connection reset" in lines[1]["failure"]
    ok = lines[0]
    pred = ok["prediction"]["analytic"]
    assert ok["prediction"]["kwargs"]["gpus"] == 2 and pred["strategy"] == "zero0"
    assert lines[2]["prediction"]["analytic"]["strategy"] == "zero3"
    # slowest rank per step, its median; peak: the larger rank
    assert ok["measured"]["steady_step_times_s"] == pytest.approx([0.25, 0.275])
    assert ok["measured"]["step_time_s"]["median"] == pytest.approx(0.2625)
    assert ok["measured"]["peak_allocated_bytes"] == 300 * 2**20 + 1
    assert ok["error"]["peak_allocated"] == pytest.approx(pred["peak_tensor_bytes"] / (300 * 2**20 + 1) - 1)
    assert ok["ds_config"]["zero_optimization"] == {"stage": 0}
    assert lines[2]["ds_config"]["zero_optimization"]["reduce_bucket_size"] == dc.BUCKET_ELEMENTS


def test_resume_skips_finished_runs_and_retry_failed_redoes_failures(tmp_path):
    out = tmp_path / "r.jsonl"
    dc.run_matrix(
        _runs(),
        out,
        cluster="cpu-local",
        python=sys.executable,
        timeout_s=60,
        resume=False,
        launcher=FakeLauncher(fail_stages={2}),
    )
    again = FakeLauncher()
    assert (
        dc.run_matrix(
            _runs(), out, cluster="cpu-local", python=sys.executable, timeout_s=60, resume=True, launcher=again
        )
        == []
        and again.calls == []
    )
    retry = FakeLauncher()
    recs = dc.run_matrix(
        _runs(),
        out,
        cluster="cpu-local",
        python=sys.executable,
        timeout_s=60,
        resume=True,
        retry_failed=True,
        launcher=retry,
    )
    assert [r["run"]["stage"] for r in recs] == [2] and recs[0]["status"] == "ok"
    assert len(out.read_text().splitlines()) == 4


def test_a_torn_last_line_is_skipped_on_resume(tmp_path):
    out = tmp_path / "r.jsonl"
    dc.run_matrix(
        _runs()[:1],
        out,
        cluster="cpu-local",
        python=sys.executable,
        timeout_s=60,
        resume=False,
        launcher=FakeLauncher(),
    )
    with open(out, "a") as f:
        f.write('{"run_id": "zero2-torn')  # a kill mid-write
    recs = dc.run_matrix(
        _runs(), out, cluster="cpu-local", python=sys.executable, timeout_s=60, resume=True, launcher=FakeLauncher()
    )
    assert [r["run"]["stage"] for r in recs] == [2, 3]


def test_existing_results_without_resume_are_refused(tmp_path):
    out = tmp_path / "r.jsonl"
    out.write_text('{"run_id": "x", "status": "ok"}\n')
    with pytest.raises(dc.SimdlError, match="--resume"):
        dc.run_matrix(
            _runs(),
            out,
            cluster="cpu-local",
            python=sys.executable,
            timeout_s=60,
            resume=False,
            launcher=FakeLauncher(),
        )


def test_bad_inputs_are_one_line_and_exit_2(tmp_path, capsys):
    assert dc.main(["-o", str(tmp_path / "r.jsonl"), "--stages", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "4 is not a ZeRO stage" in err and "0, 1, 2, 3" in err
    assert dc.main(["-o", str(tmp_path / "r.jsonl"), "--python", str(tmp_path / "nopython")]) == 2
    assert "--python" in capsys.readouterr().err


def test_an_interpreter_without_deepspeed_names_the_install(tmp_path):
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        with pytest.raises(dc.SimdlError, match="pip install deepspeed"):
            dc.check_deepspeed(sys.executable)
    else:
        assert dc.check_deepspeed(sys.executable)
