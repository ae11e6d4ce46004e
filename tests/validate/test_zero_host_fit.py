"""validate.zero_host_fit on the committed DeepSpeed records gives the strategies.zero costs
the profiles of those processors ship (each default is the fit of its records, not a number
typed in), and refuses to pool repeats of two processors."""

import re
from pathlib import Path

import pytest

from simdl.cluster.spec import load_cluster
from simdl.errors import SimdlError
from validate import zero_host_fit

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "lab" / "records"


@pytest.mark.slow
@pytest.mark.parametrize(
    "records, cluster, held",
    [
        ("deepspeed-cpu-zero.jsonl.xz", "cpu-local", 6),  # the Intel Xeon VM cpu-local was calibrated on
        ("deepspeed-cpu-zero-repeats.jsonl.xz", str(ROOT / "lab/profiles/cpu-epyc-zen4.yaml"), 9),  # AMD EPYC
    ],
)
def test_the_committed_records_refit_to_the_shipped_costs(capsys, records, cluster, held):
    assert zero_host_fit.main([str(RECORDS / records), "--cluster", cluster, "--fit", "resnet18/16"]) == 0
    out = capsys.readouterr().out
    got = re.search(r"param_overhead_us (\d+), module_overhead_us (\d+)", out)
    assert got, out
    zero = load_cluster(cluster).strategies.zero
    assert int(got[1]) == pytest.approx(zero.param_overhead.value * 1e6, abs=1)
    assert int(got[2]) == pytest.approx(zero.module_overhead.value * 1e6, abs=1)
    rows = [ln for ln in out.splitlines() if ln.startswith("held")]
    assert len(rows) == held and not any("resnet18 b16" in ln for ln in rows)  # the fit's model/batch is not held out


def test_records_of_two_processors_are_refused():
    with pytest.raises(SimdlError, match="records of 2 processors"):
        zero_host_fit.load_records(
            [str(RECORDS / f) for f in ("deepspeed-cpu-zero.jsonl.xz", "deepspeed-cpu-zero-repeats.jsonl.xz")]
        )
