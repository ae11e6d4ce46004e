"""Fit the built-in presets' efficiencies and collective costs to published figures.

``python -m simdl.calibrate.published [--source published_hardware.md] [--write] [--json]``

The same models ``simdl calibrate`` fits on a live cluster, fitted to the public numbers
collected in ``docs/published_hardware.md`` (each row names its source):

* **Inter-node collectives** -- Polaris (ALCF) nccl-tests, 4 x A100-SXM4-40GB per node,
  Slingshot 11, all_reduce and all_gather against message size (1 MiB - 1 GiB), the
  README's recommended setup 4, NCCL 2.18 and 2.21: :class:`~.collectives.CollectiveFit`
  (alpha per ring step, bus bandwidth; the per-call overhead fixed at the 9 us the
  0-byte rows give). Held out: fit on the 2-node (8-rank) rows, predict the 8-node
  (32-rank) rows; and message sizes left out.
* **Large-message bus bandwidth** inside a node and across nodes (section 2b, 1b): the
  efficiency is the measured busbw over the preset's raw rate (the alpha-beta model's
  asymptote); where a source gives several rows for one system they are averaged and the
  spread reported.
* **Compute** -- DeepLearningExamples single-GPU ResNet-50 ImageNet throughput (section 3):
  simdl predicts one training step of its ``resnet50`` / ``imagenet`` workload table at the
  published batch (256) and precision with the preset's peaks, and ``efficiency.matmul`` is
  solved for so that the predicted images/s match (least squares over a GPU's rows, TF32 or
  FP32 and AMP together). Held out: the A100-80GB fit predicting V100 ResNet-50, and
  EfficientNet-B0/B4 on A100 80 GB (torchvision's efficientnet_b0/b4, traced on demand).

``--write`` rewrites the values, kinds and sources of the fitted ``efficiency`` entries in
``simdl/cluster/data/clusters/*.yaml`` in place (comments and other keys untouched).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import brentq, least_squares

from ..cluster.spec import load_cluster
from .collectives import CollectiveFit
from .published_figures import (  # noqa: F401  (re-exported: tests and callers import them from here)
    BATCH,
    BUSBW_HELD_OUT,
    BUSBW_POINTS,
    DEFAULT_SOURCE,
    DOC,
    POLARIS_OVERHEAD_S,
    _block_with,
    csv_blocks,
    polaris_rows,
    throughput_rows,
)
from .published_write import set_entry, updates, write  # noqa: F401

# ---------------------------------------------------------------------------- collective fits


LARGE = 64 * 2**20  # from here up NCCL runs its Simple protocol: the regime alpha-beta describes


def fit_polaris(rows: list[dict]) -> dict[str, Any]:
    """Fit on messages >= 64 MiB (bandwidth-bound, one NCCL protocol); held out: the 8-node rows
    from a 2-node fit, and the 1-16 MiB rows (where NCCL switches to its LL/LL128 protocols,
    which the alpha-beta model does not describe) predicted from the large-message fit."""
    kw: dict[str, Any] = dict(fit_overhead=False, overhead_s=POLARIS_OVERHEAD_S, loss="soft_l1", f_scale=0.1)
    large = [r for r in rows if r["bytes"] >= LARGE]
    small = [r for r in rows if r["bytes"] < LARGE]
    n2 = [r for r in large if r["nodes"] == "n2"]
    n8 = [r for r in large if r["nodes"] == "n8"]
    est2 = CollectiveFit(**kw).fit(n2)
    err8 = est2.predict(n8) / np.array([r["time_s"] for r in n8]) - 1.0
    est = CollectiveFit(**kw).fit(large)
    err_small = est.predict(small) / np.array([r["time_s"] for r in small]) - 1.0
    err_all = est.predict(rows) / np.array([r["time_s"] for r in rows]) - 1.0
    return {
        "alpha_us": est.alpha_s_ * 1e6,
        "bus_bandwidth_GB_per_s": est.bus_bandwidth_B_per_s_ / 1e9,
        "overhead_us": POLARIS_OVERHEAD_S * 1e6,
        "quality": est.quality_,
        "n_rows": len(large),
        "sizes": f"{LARGE >> 20} MiB-1 GiB",
        "by_size_abs_rel_error": _by_size(rows, err_all),
        "median_abs_rel_error_all_rows": float(np.median(np.abs(err_all))),
        "held_out_n8_from_n2": {
            "fit_alpha_us": est2.alpha_s_ * 1e6,
            "fit_bus_GB_per_s": est2.bus_bandwidth_B_per_s_ / 1e9,
            "max_abs_rel_error": float(np.max(np.abs(err8))),
            "median_abs_rel_error": float(np.median(np.abs(err8))),
            "n": len(n8),
        },
        "held_out_small": {
            "sizes": "1-16 MiB",
            "max_abs_rel_error": float(np.max(np.abs(err_small))),
            "median_abs_rel_error": float(np.median(np.abs(err_small))),
            "n": len(small),
        },
    }


def _by_size(rows, resid) -> dict[int, float]:
    out: dict[int, list[float]] = {}
    for r, e in zip(rows, resid):
        out.setdefault(r["bytes"], []).append(abs(float(e)))
    return {k: round(max(v), 4) for k, v in sorted(out.items())}


def fit_busbw() -> dict[str, Any]:
    out: dict[str, dict[str, Any]] = {}
    for (preset, scope), (pts, raw, src) in BUSBW_POINTS.items():
        ratio = statistics.mean(pts) / raw
        out[f"{preset}/{scope}"] = {
            "efficiency": ratio,
            "points_GB_per_s": pts,
            "raw_GB_per_s": raw,
            "spread": (max(pts) - min(pts)) / raw,
            "source": src,
        }
    held = []
    for label, key, measured, raw in BUSBW_HELD_OUT:
        pred = out[f"{key[0]}/{key[1]}"]["efficiency"] * raw
        held.append(
            {
                "row": label,
                "predicted_GB_per_s": pred,
                "measured_GB_per_s": measured,
                "rel_error": pred / measured - 1.0,
            }
        )
    return {"fits": out, "held_out": held}


# ---------------------------------------------------------------------------- compute fits

# DeepLearningExamples system -> (GPU file, a preset to take memory/launch values from).
SYSTEMS = {
    "DGX A100 (8x A100 80GB)": "a100-80gb-nvlink",
    "A100 80GB (DGX A100 nodes)": "a100-80gb-nvlink",
    "DGX A100 (8x A100 40GB)": "a100-40gb-2node",
    "DGX-1 (8x V100 16GB)": "v100-dgx1",
    "DGX-1 (8x V100 32GB)": "v100-dgx1",
}
PRECISION = {"TF32": "tf32", "AMP": "fp16-amp", "FP32": "fp32"}
MODEL = {
    "resnet50": "resnet50",
    "efficientnet-b0": "torchvision.models:efficientnet_b0",
    "efficientnet-b4": "torchvision.models:efficientnet_b4",
}


def _predict_throughput(preset: str, matmul: float, model: str, precision: str, batch: int = BATCH) -> float:
    """simdl's images/s for one GPU of ``preset`` with the matmul efficiency of ``precision``'s
    peak set to ``matmul``."""
    from ..analytic.costs import PEAK_KEY
    from ..predict import predict

    with tempfile.TemporaryDirectory() as td:
        p = Path(td) / "x.yaml"
        p.write_text(
            f"extends: {preset}\nname: fit\nefficiency:\n  matmul_{PEAK_KEY[precision]}: {{value: {matmul}, "
            "kind: assumed, source: fit trial}\n"
        )
        r = predict(
            model=model,
            dataset="imagenet",
            strategy="ddp",
            gpus=1,
            cluster=roofline_spec(str(p)),
            batch_size=batch,
            precision=precision,
            optimizer="momentum",
            loader_workers=1000,
        )
    return batch / r.iteration_time_s


def roofline_spec(preset: str):
    """The preset with its GPU's kernel model set aside: the matmul efficiencies solved here
    price GPU rows only on a GPU without a ``kernels:`` block (simdl.costs.gpu_profile)."""
    spec = load_cluster(preset)
    return dataclasses.replace(spec, gpu=dataclasses.replace(spec.gpu, kernels=None))


def solve_matmul(preset: str, row: dict) -> float | None:
    """The matmul efficiency (of the row's precision's peak) that makes simdl's images/s equal
    the published figure; None if even the peak is too slow (the rest of the model binds)."""
    f = lambda e: _predict_throughput(preset, e, MODEL[row["model"]], PRECISION[row["precision"]]) - row["img_per_s"]  # noqa: E731
    if f(1.0) < 0:
        return None
    return float(brentq(f, 0.01, 1.0, xtol=1e-4))


def fit_matmul(preset: str, rows: list[dict]) -> dict[str, Any]:
    """Per precision: least squares (relative images/s error) for one efficiency over that
    precision's rows (here one row each, so the fit reproduces it)."""
    out: dict[str, Any] = {}
    for prec in sorted({r["precision"] for r in rows}):
        sub = [r for r in rows if r["precision"] == prec]

        def resid(z, sub=sub):
            return np.array(
                [
                    _predict_throughput(preset, float(z[0]), MODEL[r["model"]], PRECISION[r["precision"]])
                    / r["img_per_s"]
                    - 1.0
                    for r in sub
                ]
            )

        sol = least_squares(resid, np.array([0.5]), bounds=([0.01], [1.0]), diff_step=1e-3)
        out[prec] = {
            "matmul": float(sol.x[0]),
            "rows": [_row(r) for r in sub],
            "max_abs_rel_error": float(np.max(np.abs(resid(sol.x)))),
        }
    return out


def fit_compute(rows: list[dict], with_efficientnet: bool = True) -> dict[str, Any]:
    rn = [r for r in rows if r["model"] == "resnet50"]
    # Newest software only (pytorch-21.03 container); the 40 GB rows (2020 README) are held out.
    a100_80 = [r for r in rn if r["system"] == "DGX A100 (8x A100 80GB)" and r["img_per_s"] in (938.0, 2470.0)]
    a100_40 = [r for r in rn if r["system"] == "DGX A100 (8x A100 40GB)"]
    v100 = [r for r in rn if r["system"] == "DGX-1 (8x V100 16GB)" and r["img_per_s"] in (367.0, 1200.0)]
    out: dict[str, Any] = {
        "A100-SXM4-80GB": fit_matmul("a100-80gb-nvlink", a100_80),
        "V100-SXM2": fit_matmul("v100-dgx1", v100),
    }
    a80, v = out["A100-SXM4-80GB"], out["V100-SXM2"]
    held = []

    def check(label, preset, e, r, model="resnet50", batch=BATCH):
        try:
            pred = _predict_throughput(preset, e, MODEL.get(model, model), PRECISION[r["precision"]], batch=batch)
        except Exception as exc:  # noqa: BLE001 - tracing a new model needs torch: report and go on
            held.append({"check": label, **_row(r), "error": str(exc)[:200]})
            return
        held.append({"check": label, **_row(r), "predicted_img_per_s": pred, "rel_error": pred / r["img_per_s"] - 1.0})

    for r in a100_40:  # same GA100 SMs; the 40 GB rows come from a 2020 README (older container)
        check("A100-80GB fit -> A100-40GB resnet50 (2020 README)", "a100-40gb-2node", a80[r["precision"]]["matmul"], r)
    for r in rn:
        if r["system"].startswith("DGX-1") and r["precision"] == "AMP":  # fp16 tensor cores, Ampere -> Volta
            check("A100-80GB AMP fit -> V100 AMP resnet50", "v100-dgx1", a80["AMP"]["matmul"], r)
        if r["system"] == "DGX-1 (8x V100 32GB)":
            check("V100 16GB fit -> V100 32GB resnet50", "v100-dgx1", v[r["precision"]]["matmul"], r)
    if with_efficientnet:
        for r in rows:
            if r["model"] in ("efficientnet-b0", "efficientnet-b4") and r["system"].startswith("A100 80GB"):
                check(
                    "A100-80GB fit -> efficientnet (torchvision variant, 224 px)",
                    "a100-80gb-nvlink",
                    a80[r["precision"]]["matmul"],
                    r,
                    model=r["model"],
                    batch=BATCH if r["model"].endswith("b0") or r["precision"] == "AMP" else 64,
                )
    out["held_out"] = held
    for gpu, preset in (("A100-SXM4-80GB", "a100-80gb-nvlink"), ("V100-SXM2", "v100-dgx1")):
        for prec, f in out[gpu].items():
            for row in f["rows"]:
                row["solved_matmul"] = f["matmul"]
    return out


def _row(r):
    return {"model": r["model"], "system": r["system"], "precision": r["precision"], "img_per_s": r["img_per_s"]}


def run(source: Path = DEFAULT_SOURCE, *, efficientnet: bool = True) -> dict[str, Any]:
    blocks = csv_blocks(Path(source).read_text())
    return {
        "polaris": fit_polaris(polaris_rows(blocks)),
        "busbw": fit_busbw(),
        "compute": fit_compute(throughput_rows(blocks), with_efficientnet=efficientnet),
    }


def format_results(res: dict) -> str:
    pol = res["polaris"]
    q = pol["quality"]
    lines = [
        f"Polaris inter-node (all_reduce+all_gather, setup 4, {pol['n_rows']} rows {pol['sizes']}): alpha "
        f"{pol['alpha_us']:.3g} us/step, bus {pol['bus_bandwidth_GB_per_s']:.4g} GB/s, overhead {pol['overhead_us']:g} us "
        f"(fixed); R2 {q['r2']} R2(log) {q['r2_log']} median|res| {q['median_abs_rel_error']:.1%} max|res| "
        f"{q['max_abs_rel_error']:.1%}; median |err| over all rows incl. 1-16 MiB {pol['median_abs_rel_error_all_rows']:.1%}",
        "  max |error| by size: "
        + ", ".join(f"{k >> 20} MiB {v:.0%}" for k, v in pol["by_size_abs_rel_error"].items()),
    ]
    h = pol["held_out_n8_from_n2"]
    lines.append(
        f"  held out 8 nodes from a 2-node fit (alpha {h['fit_alpha_us']:.3g} us, bus {h['fit_bus_GB_per_s']:.4g} GB/s): "
        f"median |err| {h['median_abs_rel_error']:.1%}, max {h['max_abs_rel_error']:.1%}"
    )
    h = pol["held_out_small"]
    lines.append(
        f"  held out {h['sizes']} rows ({h['n']}): median |err| {h['median_abs_rel_error']:.1%}, max {h['max_abs_rel_error']:.1%}"
    )
    for k, f in res["busbw"]["fits"].items():
        lines.append(
            f"busbw {k}: efficiency {f['efficiency']:.3f} (points {f['points_GB_per_s']} / {f['raw_GB_per_s']:g}, "
            f"spread {f['spread']:.1%})"
        )
    for h in res["busbw"]["held_out"]:
        lines.append(f"  held out: {h['row']}: predicted {h['predicted_GB_per_s']:.0f} GB/s ({h['rel_error']:+.1%})")
    for gpu in ("A100-SXM4-80GB", "V100-SXM2"):
        for prec, f in res["compute"][gpu].items():
            r = f["rows"][0]
            lines.append(
                f"matmul {gpu} {prec}: {f['matmul']:.4f} of the {PRECISION[prec]} peak ({r['system']} "
                f"{r['img_per_s']:g} img/s; fit error {f['max_abs_rel_error']:.1%})"
            )
    for h in res["compute"]["held_out"]:
        if "rel_error" in h:
            lines.append(
                f"  held out ({h['check']}): {h['model']} {h['system']} {h['precision']} "
                f"{h['img_per_s']:g} img/s, predicted {h['predicted_img_per_s']:.0f} ({h['rel_error']:+.1%})"
            )
        else:
            lines.append(f"  held out ({h['check']}): {h['model']} {h['precision']}: not evaluated: {h['error']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m simdl.calibrate.published", description=__doc__.splitlines()[0])
    p.add_argument("--source", default=str(DEFAULT_SOURCE), help=f"path to {DOC}")
    p.add_argument("--write", action="store_true", help="rewrite the preset YAML values in place")
    p.add_argument("--json", default=None, help="also write the full results as JSON here")
    p.add_argument("--no-efficientnet", action="store_true", help="skip the EfficientNet held-out check (needs torch)")
    a = p.parse_args(argv)
    res = run(Path(a.source), efficientnet=not a.no_efficientnet)
    print(format_results(res))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1, default=float) + "\n")
    if a.write:
        for path in write(updates(res)):
            print(f"rewrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
