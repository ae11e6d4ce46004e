"""Built-in presets fitted to published figures (simdl.calibrate.published)."""

import pytest

from simdl.calibrate import published as P
from simdl.cluster import load_cluster

needs_source = pytest.mark.skipif(not P.DEFAULT_SOURCE.exists(), reason="published_hardware.md not found")


@needs_source
def test_polaris_fit_and_held_out_checks():
    blocks = P.csv_blocks(P.DEFAULT_SOURCE.read_text())
    rows = P.polaris_rows(blocks)
    assert {r["nodes"] for r in rows} == {"n2", "n8"} and {r["collective"] for r in rows} == {
        "all_reduce",
        "all_gather",
    }
    res = P.fit_polaris(rows)
    assert 30 < res["bus_bandwidth_GB_per_s"] < 40  # 2 x 200 Gb/s Slingshot: 50 GB/s raw
    assert res["quality"]["max_abs_rel_error"] < 0.10
    assert res["held_out_n8_from_n2"]["max_abs_rel_error"] < 0.15


@needs_source
def test_throughput_rows_are_read():
    rows = P.throughput_rows(P.csv_blocks(P.DEFAULT_SOURCE.read_text()))
    assert any(r["model"] == "resnet50" and r["img_per_s"] == 938.0 and r["precision"] == "TF32" for r in rows)


def test_matmul_efficiency_solve_reproduces_the_throughput():
    row = {"model": "resnet50", "system": "x", "precision": "TF32", "img_per_s": 938.0}
    e = P.solve_matmul("a100-80gb-nvlink", row)
    assert 0.05 < e < 1.0
    assert P._predict_throughput("a100-80gb-nvlink", e, "resnet50", "tf32") == pytest.approx(938.0, rel=1e-3)


def test_set_entry_rewrites_one_value_only():
    text = (
        '# c\nefficiency:\n  matmul:\n    value: 0.70\n    kind: assumed\n    source: "old"\n'
        '  memory_bandwidth:\n    value: 0.9\n    kind: assumed\n    source: "x"\n'
    )
    out = P.set_entry(text, "efficiency", "matmul", 0.29312, "calibrated", 'rows "a" b')
    assert '    value: 0.2931\n    kind: calibrated\n    source: "rows \\"a\\" b"\n' in out
    assert out.startswith("# c\n") and "value: 0.9" in out
    with pytest.raises(KeyError):
        P.set_entry(text, "efficiency", "collective_overhead_us", 1, "derived", "s")


@pytest.mark.parametrize("preset", ["a100-80gb-nvlink", "dgx-a100", "v100-dgx1", "a100-40gb-2node"])
def test_presets_say_where_fitted_values_come_from(preset):
    eff = load_cluster(preset).efficiency
    assert eff.matmul.kind in ("calibrated", "derived")
    assert "published_hardware.md" in eff.matmul.source


@pytest.mark.parametrize("precision, img_per_s", [("tf32", 938.0), ("fp16-amp", 2470.0)])
def test_per_precision_matmul_reproduces_the_fitted_rows(precision, img_per_s):
    from simdl.predict import predict

    # The roofline path these efficiencies price (GPUs without a kernels: block).
    r = predict(
        model="resnet50",
        dataset="imagenet",
        strategy="ddp",
        gpus=1,
        cluster=P.roofline_spec("a100-80gb-nvlink"),
        batch_size=256,
        precision=precision,
        optimizer="momentum",
        loader_workers=1000,
    )
    assert 256 / r.iteration_time_s == pytest.approx(img_per_s, rel=0.01)
