"""Write the fits of simdl.calibrate.published into the presets: each fitted ``efficiency``
entry's value, kind and source, rewritten in place in simdl/cluster/data/clusters/*.yaml."""

from __future__ import annotations

import statistics
from pathlib import Path

from ..cluster.spec import CLUSTER_DIR
from .published_figures import BATCH, BUSBW_HELD_OUT, DOC

# ---------------------------------------------------------------------------- writing presets


def set_entry(
    text: str, section: str, key: str, value: float, kind: str, source: str, add_after: str | None = None
) -> str:
    """Replace ``section: key: {value, kind, source}`` in a preset's text, keeping the rest.
    A missing key raises KeyError unless ``add_after`` names an existing key of the section
    to insert it after (new optional keys, e.g. ``matmul_tf32`` after ``matmul``)."""
    lines = text.splitlines(keepends=True)
    try:
        s = next(i for i, ln in enumerate(lines) if ln.rstrip() == f"{section}:")
    except StopIteration:
        raise KeyError(section) from None
    end = next(
        (
            i
            for i in range(s + 1, len(lines))
            if lines[i].strip() and not lines[i].startswith(" ") and not lines[i].startswith("#")
        ),
        len(lines),
    )
    src = source.replace("\\", "\\\\").replace('"', '\\"')
    v = float(f"{value:.4g}")
    block = [f"  {key}:\n", f"    value: {v}\n", f"    kind: {kind}\n", f'    source: "{src}"\n']
    k = next((i for i in range(s + 1, end) if lines[i].rstrip() == f"  {key}:"), None)
    if k is None:
        if add_after is None:
            raise KeyError(f"{section}.{key}")
        a = next((i for i in range(s + 1, end) if lines[i].rstrip() == f"  {add_after}:"), None)
        if a is None:
            raise KeyError(f"{section}.{add_after}")
        lines[a + 4 : a + 4] = block
        return "".join(lines)
    if not (
        lines[k + 1].startswith("    value:")
        and lines[k + 2].startswith("    kind:")
        and lines[k + 3].startswith("    source:")
    ):
        raise ValueError(f"{section}.{key}: unexpected layout")
    lines[k : k + 4] = block
    return "".join(lines)


def updates(res: dict) -> dict[str, list[tuple[str, float, str, str]]]:
    """Preset file -> [(efficiency key, value, kind, source)]."""
    up: dict[str, list] = {}
    _polaris_updates(res["polaris"], up)
    _busbw_updates(res["busbw"], up)
    _compute_updates(res["compute"], up)
    return up


def _polaris_updates(pol: dict, up: dict[str, list]) -> None:
    """The inter-node bandwidth and latency from the Polaris fit, and its latency as a proxy
    for the other multi-node presets' networks."""
    q = pol["quality"]
    ho = pol["held_out_n8_from_n2"]
    hs = pol["held_out_small"]
    pol_src = (
        f"fit of the alpha-beta model (simdl.calibrate.published) to the {pol['n_rows']} Polaris nccl-tests rows "
        f">= 64 MiB ({DOC} s.2a: argonne-lcf/alcf-nccl-tests, 4 x A100-SXM4-40GB per node, Slingshot 11, setup 4, "
        "nccl 2.18 + 2.21, all_reduce + all_gather, 2 and 8 nodes; overhead fixed at the 9 us of the 0-byte rows): "
        f"bus {pol['bus_bandwidth_GB_per_s']:.4g} GB/s, alpha {pol['alpha_us']:.3g} us/step (the <= 1 KiB rows gave "
        f"1.64-1.8 us), R2 {q['r2']}, max |res| {q['max_abs_rel_error']:.1%}; held out: a 2-node fit predicts the 8-node "
        f"rows within {ho['max_abs_rel_error']:.1%}; the 1-16 MiB rows (NCCL's LL/LL128 protocols) are predicted "
        f"with median |err| {hs['median_abs_rel_error']:.0%}, max {hs['max_abs_rel_error']:.0%}"
    )
    e_inter = pol["bus_bandwidth_GB_per_s"] / 50.0
    up.setdefault("a100-40gb-2node", []).extend(
        [
            (
                "collective_bandwidth_inter",
                e_inter,
                "calibrated",
                f"{pol_src}; bus bandwidth / (2 NICs x 25 GB/s, the Polaris node) = {e_inter:.3f}",
            ),
            ("collective_latency_inter_us", pol["alpha_us"], "calibrated", pol_src),
        ]
    )
    for preset in ("dgx-a100", "h100-hgx", "v100-dgx1"):
        up.setdefault(preset, []).append(
            (
                "collective_latency_inter_us",
                pol["alpha_us"],
                "derived",
                f"alpha per ring step of the Polaris fit used as a proxy for this network; {pol_src}",
            )
        )


def _busbw_updates(busbw: dict, up: dict[str, list]) -> None:
    """Each preset scope's collective bandwidth from the large-message asymptote of its
    published bus bandwidths, with the held-out row it predicts where there is one."""
    for name, f in busbw["fits"].items():
        preset, scope = name.split("/")
        key = f"collective_bandwidth_{scope}"
        extra = ""
        for h, (_, k, _, _) in zip(busbw["held_out"], BUSBW_HELD_OUT):
            if f"{k[0]}/{k[1]}" == name:
                extra += (
                    f"; held out: predicts {h['row']} at {h['predicted_GB_per_s']:.0f} GB/s ({h['rel_error']:+.1%})"
                )
        up.setdefault(preset, []).append(
            (
                key,
                float(f"{f['efficiency']:.3g}"),
                "derived",
                f"large-message asymptote of the alpha-beta model: mean busbw {statistics.mean(f['points_GB_per_s']):.4g} "
                f"GB/s / raw {f['raw_GB_per_s']:g} GB/s ({DOC} s.1b/2b: {f['source']}; spread {f['spread']:.1%}){extra}",
            )
        )


# Presets without training-throughput rows of their own: why the A100-SXM4-80GB fit carries over.
_CARRIED_OVER = {
    "a100-80gb-pcie": "A100-SXM4-80GB fit carried over (same GA100 silicon; the 300 W limit may lower clocks): ",
    "a100-40gb-2node": "A100-SXM4-80GB fit carried over (same GA100 SMs and clocks): ",
    "h100-hgx": "A100-SXM4-80GB fit carried over (no H100 training-throughput rows in the sources): ",
    "a10g-ps": "A100-SXM4-80GB fit carried over (no A10/A10G training-throughput rows in the sources): ",
}


def _compute_held_out(held_out: list[dict]) -> str:
    """The source's sentence on the throughput rows the matmul fits predict without fitting them."""
    held = [h for h in held_out if "rel_error" in h]

    def errs(word):
        e = [h["rel_error"] for h in held if word in h["check"]]
        return f"{min(e):+.0%}..{max(e):+.0%}" if e else "n/a"

    return (
        f"held out: A100-40GB rows (2020 README, older container) {errs('A100-40GB')}, V100 AMP from the A100 "
        f"AMP value {errs('V100 AMP')}, EfficientNet-B0/B4 on A100 80GB {errs('efficientnet')} (depthwise "
        "convolutions reach far less of the peak than dense ones; B4 is likely trained above 224 px)"
    )


def _row_source(f: dict, prec: str, what: str, held_txt: str) -> str:
    """The source of a matmul efficiency solved from one published throughput row."""
    r = f[prec]["rows"][0]
    return (
        f"solved so that simdl's resnet50/imagenet step at batch {BATCH} ({what}) reproduces {r['system']} "
        f"{r['precision']} {r['img_per_s']:g} img/s ({DOC} s.3, NVIDIA DeepLearningExamples resnet50v1.5 README, "
        f"pytorch-21.03); {held_txt}"
    )


def _compute_updates(comp: dict, up: dict[str, list]) -> None:
    """The matmul efficiencies per precision solved from the published training throughputs:
    A100-SXM4-80GB's for the Ampere and later presets (FP32 from V100's), V100's for its own."""
    a80, v = comp["A100-SXM4-80GB"], comp["V100-SXM2"]
    held_txt = _compute_held_out(comp["held_out"])

    def row_src(f, prec, what):
        return _row_source(f, prec, what, held_txt)

    fp32_src = (
        f"V100 FP32 value carried over (CUDA-core FP32 path; no A100 FP32 training rows in the sources; FlagPerf "
        f"FP32 GEMM reaches 98% on A800, {DOC} s.1b): {row_src(v, 'FP32', 'fp32 peak')}"
    )
    for preset, kind in (
        ("a100-80gb-nvlink", "calibrated"),
        ("dgx-a100", "calibrated"),
        ("a100-80gb-pcie", "derived"),
        ("a100-40gb-2node", "derived"),
        ("h100-hgx", "derived"),
        ("a10g-ps", "derived"),
    ):
        why = _CARRIED_OVER.get(preset, "")
        up.setdefault(preset, []).extend(
            [
                ("matmul", v["FP32"]["matmul"], "derived", why + fp32_src),
                ("matmul_tf32", a80["TF32"]["matmul"], kind, why + row_src(a80, "TF32", "tf32 peak")),
                ("matmul_fp16", a80["AMP"]["matmul"], kind, why + row_src(a80, "AMP", "fp16 peak, AMP")),
                (
                    "matmul_bf16",
                    a80["AMP"]["matmul"],
                    "derived",
                    why
                    + "the fp16 (AMP) value: bf16 and fp16 tensor cores share the peak; "
                    + row_src(a80, "AMP", "fp16 peak, AMP"),
                ),
            ]
        )
    up.setdefault("v100-dgx1", []).extend(
        [
            ("matmul", v["FP32"]["matmul"], "calibrated", row_src(v, "FP32", "fp32 peak")),
            ("matmul_fp16", v["AMP"]["matmul"], "calibrated", row_src(v, "AMP", "fp16 peak, AMP")),
        ]
    )


def write(up: dict, folder: Path = CLUSTER_DIR) -> list[str]:
    written = []
    for preset, entries in up.items():
        path = folder / f"{preset}.yaml"
        text = path.read_text()
        last = "matmul"
        for key, value, kind, source in entries:
            try:
                text = set_entry(
                    text, "efficiency", key, value, kind, source, add_after=last if key.startswith("matmul_") else None
                )
                if key.startswith("matmul"):
                    last = key
            except KeyError:
                continue  # the preset has no such key (inherited or single-node): keys are kept as they are
        path.write_text(text)
        written.append(str(path))
    return written
