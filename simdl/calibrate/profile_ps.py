"""The parameter-server stage's part of a calibrated profile: the ps_servers section (the
RPC link of one worker and of all of them at once, or the send/recv round trip) and, on a
shared host device, the one-way latency between two of its processes."""

from __future__ import annotations

import copy
from typing import Any

from .profile_context import CalibrationRun
from .profile_parts import _RPC_TRANSPORTS, _val


def pingpong_latency(run: CalibrationRun, ps: dict) -> dict[str, Any]:
    """One-way latency between two processes of this host: half the push/pull ping-pong
    (the collectives' send/recv ring sends and receives at once, which costs more than one hop)."""
    pp = ps["pingpong"]
    return _val(
        pp["latency_us"],
        f"{run.tag}: half the round trip of a {run.prov['backend']} "
        f"send then recv between two ranks (ping-pong, {pp['bytes_range'][0]}-"
        f"{pp['bytes_range'][1]} B), alpha-beta fit R2 {pp['quality']['r2']}",
    )


def _rpc_link(run: CalibrationRun, ps: dict, section: dict) -> None:
    tag = run.tag
    lo, hi = ps["bytes_range"]
    qa, qt = ps["quality"]["rpc_alone"], ps["quality"]["rpc_together"]
    how = (
        f"torch.distributed.rpc (TensorPipe {'/'.join(_RPC_TRANSPORTS)}) as validate/train.py runs its "
        f"server, fp32 tensors of {lo}-{hi} B received into fresh buffers"
    )
    alone = (
        f"{tag}: one worker's pushes and pulls, the others idle, {how}: t = latency + bytes / B_worker "
        f"+ fresh x receive_fault (x2 for a pull) + pull bytes x response_copy, fresh = bytes above the "
        f"mmap threshold (32 MiB), simdl.calibrate.ps; R2 {qa['r2']}, max |rel err| {qa['max_abs_rel_error']}"
    )
    if ps.get("server_side_measured", True):
        server_src = (
            f"{tag}: server side of the PS link: {ps['rpc_workers'][0]} workers push at once, then "
            f"pull at once (per repeat the slowest one's time = latency + workers x bytes / B + the "
            f"one-worker fit's fault and copy terms; no slower than one worker's link), {how}; "
            f"R2 {qt['r2']}, max |rel err| {qt['max_abs_rel_error']}"
        )
    else:
        server_src = (
            f"{tag}: server side of the PS link not measured (one worker: nothing to share the "
            f"server with), taken as one worker's link, so N workers at once take N times one "
            f"worker's transfer, as the 4-rank calibrations measured it (simdl.calibrate.ps); {how}"
        )
    section["nic_Gb_per_s"] = _val(ps["bandwidth_GB_per_s"] * 8, server_src)
    section["worker_link_Gb_per_s"] = _val(ps["worker_bandwidth_GB_per_s"] * 8, alone)
    section["latency_us"] = _val(ps["latency_us"], alone)
    section["receive_fault_ns_per_byte"] = _val(ps["receive_fault_ns_per_byte"], alone)
    section["response_copy_ns_per_byte"] = _val(ps["response_copy_ns_per_byte"], alone)


def ps_servers_section(run: CalibrationRun, ps: dict | None) -> dict[str, Any] | None:
    """The profile's ps_servers section: the base preset's, refitted where the ps stage measured."""
    base = run.base
    section = copy.deepcopy(base.get("ps_servers")) if base.get("ps_servers") else None
    if not ps:
        return section
    tag = run.tag
    lo, hi = ps["bytes_range"]
    section = section or {"count": 1}
    for k in ("worker_link_Gb_per_s", "receive_fault_ns_per_byte", "response_copy_ns_per_byte"):
        section.pop(k, None)
    if ps["transport"] == "rpc":
        _rpc_link(run, ps, section)
    else:
        q = ps["quality"]["roundtrip"]
        src = (
            f"{tag}: push+pull round trip {lo}-{hi} B between a worker and a server rank "
            f"({run.prov['backend']} send/recv), alpha-beta fit R2 {q['r2']}"
        )
        section["nic_Gb_per_s"] = _val(ps["bandwidth_GB_per_s"] * 8, src)
        section["latency_us"] = _val(ps["latency_us"], src)
    section["cpu_cores"] = _val(run.prov["cpu_count"] or 1, f"{tag}: os.cpu_count() on the server host", "measured")
    if ps["update_bandwidth_GB_per_s"]:
        uq = ps["quality"].get("update", {})
        section["update_bandwidth_GB_per_s"] = _val(
            ps["update_bandwidth_GB_per_s"],
            f"{tag}: momentum-SGD update on a flat fp32 tensor, 8 passes "
            f"streamed per parameter byte, fit R2 {uq.get('r2')}",
        )
    return section
