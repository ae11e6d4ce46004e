"""The published figures simdl.calibrate.published fits the presets to: where they are
(docs/published_hardware.md, csv blocks each row with its source), how they are read, and the
few figures quoted directly here with their sources."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

DEFAULT_SOURCE = Path(__file__).resolve().parents[2] / "docs" / "published_hardware.md"
DOC = "published_hardware.md"
POLARIS_OVERHEAD_S = 9e-6  # 0-byte all_gather rows, nccl 2.18 setup 4 (quoted in the presets' sources)
BATCH = 256  # DeepLearningExamples configs.yml, resnet50 DGXA100 AMP and TF32 (and DGX1V AMP)


# ---------------------------------------------------------------------------- reading the figures


def csv_blocks(text: str) -> list[list[dict[str, str]]]:
    """Every ```csv fenced block of the markdown file as a list of row dicts."""
    out = []
    for block in re.findall(r"```csv\n(.*?)```", text, flags=re.S):
        out.append(list(csv.DictReader(io.StringIO(block))))
    return out


def _block_with(blocks, column: str) -> list[dict[str, str]]:
    for b in blocks:
        if b and column in b[0]:
            return b
    raise ValueError(f"{DOC}: no table with a {column!r} column")


def polaris_rows(blocks, setup: str = "4") -> list[dict[str, Any]]:
    rows = []
    for r in _block_with(blocks, "time_us_oop"):
        if r["setup_id"] != setup:
            continue
        ranks = int(r["ranks"])
        rows.append(
            {
                "collective": r["collective"],
                "bytes": int(r["size_B"]),
                "group_size": ranks,
                "time_s": float(r["time_us_oop"]) * 1e-6,
                "nodes": r["nodes"],
                "nccl": r["nccl"],
                "busbw_GB_per_s": float(r["busbw_GBps_oop"]),
            }
        )
    return rows


def throughput_rows(blocks) -> list[dict[str, Any]]:
    return [
        {
            "model": r["model"],
            "system": r["system"],
            "precision": r["precision"],
            "img_per_s": float(r["img_per_s"]),
            "source": r["source"],
        }
        for r in _block_with(blocks, "img_per_s")
    ]


# Large-message busbw points (GB/s) from section 1b/2b, per preset and scope, against the
# preset's raw rate per rank for that scope (simdl.cluster.allocate: intra = port rate,
# world across nodes = NICs x NIC rate).
BUSBW_POINTS = {
    ("dgx-a100", "intra"): (
        [232.3, 232.54],
        300.0,
        "8 x A100 NVSwitch all_reduce busbw 232.3 GB/s (FlagPerf interconnect-MPI_intraserver, "
        "464.65/2) and 232.54 GB/s (nccl-tests#175)",
    ),
    ("a100-80gb-nvlink", "intra"): (
        [208.0],
        300.0,
        "2 A100 on an NV12 link, all_reduce busbw 208 GB/s (nccl-tests#178)",
    ),
    ("a100-40gb-2node", "intra"): (
        [208.0],
        300.0,
        "2 A100 on an NV12 link, all_reduce busbw 208 GB/s (nccl-tests#178); direct NVLink as in this mesh",
    ),
    ("dgx-a100", "inter"): (
        [86.0],
        100.0,
        "2 nodes x 8 A100, 4 x HDR 200 Gb/s: all_reduce busbw 86 GB/s (nccl-tests#175), of 4 x 25 GB/s",
    ),
    ("v100-dgx1", "inter"): (
        [12.2 / 12.5 * 50.0, 48.0],
        50.0,
        "V100 servers with 1 x EDR: 12.2 of 12.5 GB/s (nccl-tests#29), scaled to DGX-1's 4 x EDR, and "
        "the maintainer's 48 GB/s for DGX-1 with 4 IB (nccl-tests#29)",
    ),
}
# Held-out single points: predicted by the fitted ratio of the system named.
BUSBW_HELD_OUT = (
    (
        "HPE Apollo 6500 8 x A100-SXM4-80GB NVLink all_reduce ~200 GB/s (nccl-tests#149)",
        ("dgx-a100", "intra"),
        200.0,
        300.0,
    ),
    (
        "3 servers x 8 A100-SXM4-40GB, 4 x HDR: all_reduce 84.8 GB/s avg (nccl-tests#119)",
        ("dgx-a100", "inter"),
        84.8,
        100.0,
    ),
)
