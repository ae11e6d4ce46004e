"""The GPU section of the validation report: records of ``python -m validate.gpu_check``.

Beside the results file the check writes ``kernels.jsonl.gz`` (one profiled step per
configuration: every kernel's name, calls and seconds) and ``run.json`` (device, versions,
flags, the calibration's outcome). This section gives

* the device and its software;
* predicted against measured per configuration: step time, ``max_memory_allocated``,
  ``max_memory_reserved`` and the device's used memory (NVML), signed errors
  (:func:`table`, also the table the check prints at its end);
* the kernel-level comparison: simdl's time per op class (the analytic row times of the
  workload table's rows, summed by class, and its optimizer step) against the profiled
  step's kernels sorted into the same groups by name (:mod:`.kernel_classes`), per
  configuration and pooled per group.
"""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

from .kernel_classes import GROUPS, kernel_groups, row_groups

MiB = 2**20


def is_gpu_record(r: dict) -> bool:
    return r.get("kind") == "gpu_check"


def read_kernels(path: Path) -> dict[str, dict]:
    """The kernel profiles of a ``kernels.jsonl.gz`` (one gzip member per configuration; a
    torn last member, from a killed run, is dropped with what follows it)."""
    out: dict[str, dict] = {}
    if not Path(path).exists():
        return out
    try:
        with gzip.open(path, "rb") as f:
            for line in f:
                rec = json.loads(line)
                out[rec["run_id"]] = rec
    except (EOFError, OSError, json.JSONDecodeError):
        pass
    return out


def _err(p, m):
    return None if p is None or not m else (p - m) / m


def _pct(x):
    return "-" if x is None else f"{100 * x:+.1f}%"


def _ms(x):
    return "-" if x is None else f"{1e3 * x:.2f}"


def _mib(x):
    return "-" if x is None else f"{x / MiB:.0f}"


def smi_used(state: dict | None, env: dict | None) -> tuple[float | None, str]:
    """The device's used memory as nvidia-smi's memory.used shows it, and how it was read.

    nvidia-smi's figure is NVML v2's ``used``; NVML v1's ``used`` also counts the memory the
    driver and firmware reserve (NVML API reference, nvmlMemory_t / nvmlMemory_v2_t). A record
    with v1 alone has that reserve taken out as NVML's total less CUDA's total (both in the
    run's environment), an estimate said so in the table's note."""
    state = state or {}
    if state.get("used_v2_bytes") is not None:
        return state["used_v2_bytes"], "NVML v2 used"
    used = state.get("used_bytes")
    if used is None or state.get("source") == "nvidia-smi":
        return used, "nvidia-smi memory.used"
    env = env or {}
    nvml_total, cuda_total = (env.get("nvml") or {}).get("total_bytes"), env.get("total_memory_bytes")
    if nvml_total and cuda_total and nvml_total >= cuda_total:
        return used - (nvml_total - cuda_total), "NVML v1 used less (NVML total - CUDA total)"
    return used, "NVML v1 used (driver reserve included)"


def _sides(r: dict, env: dict | None = None) -> dict:
    p = (r.get("predicted") or {}).get("analytic") or {}
    m = r.get("measured") or {}
    used, how = smi_used(m.get("device_state"), env)
    alloc = p.get("max_memory_allocated_bytes")
    return {
        "step": (p.get("iteration_time_s"), (m.get("step_time_s") or {}).get("median")),
        "alloc": (alloc if alloc is not None else p.get("peak_tensor_bytes"), m.get("peak_allocated_bytes")),
        "alloc_starred": alloc is None and p.get("peak_tensor_bytes") is not None,
        "reserved": (p.get("max_memory_reserved_bytes"), m.get("max_memory_reserved_bytes")),
        "device": (p.get("device_total_bytes", p.get("peak_memory_bytes")), used),
        "device_how": how,
    }


def table(records: list[dict], env: dict | None = None) -> list[str]:
    """Predicted against measured, one row per configuration, and each figure's errors.
    ``env``: the run's environment (run.json), which says how the device figure was read."""
    lines = [
        "| configuration | status | step pred ms | step meas ms | step err | allocated pred / meas MiB | err | "
        "reserved pred / meas MiB | err | device pred / meas MiB | err |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    errs: dict[str, list[float]] = {"step": [], "alloc": [], "reserved": [], "device": []}
    how: set[str] = set()
    for r in records:
        s = _sides(r, env)
        ok = r.get("status") == "ok"
        cells = [f"`{r['run_id']}`", "ok" if ok else str(r.get("error") or r.get("status"))[:90]]
        se = _err(*s["step"]) if ok else None
        cells += [_ms(s["step"][0]), _ms(s["step"][1]) if ok else "-", _pct(se)]
        for key in ("step", "alloc", "reserved", "device"):
            e = _err(*s[key]) if ok else None
            if e is not None:
                errs[key].append(e)
            if key == "step":
                continue
            p, m = s[key]
            star = "*" if key == "alloc" and s["alloc_starred"] else ""
            cells += [f"{_mib(p)}{star} / {_mib(m)}", _pct(e)]
        if ok:
            how.add(s["device_how"])
        lines.append("| " + " | ".join(cells) + " |")
    n_ok = sum(r.get("status") == "ok" for r in records)
    lines += ["", f"{n_ok} of {len(records)} configurations measured."]
    names = {"step": "Step time", "alloc": "Max allocated", "reserved": "Max reserved", "device": "Device"}
    for key, e in errs.items():
        if e:
            within = sum(abs(x) <= 0.03 for x in e)
            lines.append(
                f"{names[key]}: MAPE {100 * statistics.fmean(abs(x) for x in e):.1f} %, signed mean "
                f"{100 * statistics.fmean(e):+.1f} %, max |err| {100 * max(abs(x) for x in e):.1f} %, "
                f"within 3 % in {within} of {len(e)}."
            )
    lines.append(
        "`*`: simdl's peak_tensor_bytes, where its Result has no max_memory_allocated_bytes (no CUDA "
        "allocator model on that device). Device: simdl's peak_memory_bytes (nvidia-smi's memory.used) "
        f"against the device's used memory after the timed steps, read as {', '.join(sorted(how)) or '-'}."
    )
    return lines


def error_pivot(records: list[dict]) -> list[str]:
    """Signed step-time error by model (rows) and image size / batch / precision (columns)."""
    cols: list[tuple] = []
    cells: dict[tuple, str] = {}
    for r in records:
        sp = r.get("spec") or {}
        col = (sp.get("image_size"), sp.get("batch_size"), sp.get("precision"))
        if col not in cols:
            cols.append(col)
        e = _err(*_sides(r)["step"]) if r.get("status") == "ok" else None
        cells[(r.get("model_name"), col)] = _pct(e) if e is not None else str(r.get("status", "-"))
    models = list(dict.fromkeys(r.get("model_name") for r in records))
    lines = ["| model | " + " | ".join(f"{c[0]} px b{c[1]} {c[2]}" for c in cols) + " |", "|---|" + "---|" * len(cols)]
    for m in models:
        lines.append(f"| {m} | " + " | ".join(cells.get((m, c), "-") for c in cols) + " |")
    return lines


def kernel_rows(records: list[dict], kernels: dict[str, dict]) -> list[dict]:
    """Per configuration: predicted and profiled seconds per group."""
    out = []
    for r in records:
        k = kernels.get(r["run_id"])
        p = (r.get("predicted") or {}).get("analytic") or {}
        if r.get("status") != "ok" or k is None or not p.get("by_op_class_s"):
            continue
        pred = row_groups(p["by_op_class_s"], (p.get("step_split_s") or {}).get("optimizer"))
        out.append(
            {
                "run_id": r["run_id"],
                "predicted": pred,
                "profiled": kernel_groups(k["kernels"]),
                "profiled_step_s": k.get("profiled_step_s"),
                "source": k.get("source", ""),
            }
        )
    return out


def kernel_tables(rows: list[dict]) -> list[str]:
    if not rows:
        return ["No kernel profiles beside the results file (kernels.jsonl.gz).", ""]
    groups = [g for g in GROUPS if any(r["predicted"].get(g) or r["profiled"].get(g) for r in rows)]
    lines = [
        "Per configuration, predicted / profiled milliseconds of one step per group (kernels: "
        f"{rows[0]['source']}); the last column is the profiled kernels' sum against the profiled step's "
        "wall time (under 100 %: the device waited for the host).",
        "",
        "| configuration | " + " | ".join(groups) + " | kernels / step |",
        "|---|" + "---|" * (len(groups) + 1),
    ]
    for r in rows:
        cells = [f"{_ms(r['predicted'].get(g))} / {_ms(r['profiled'].get(g))}" for g in groups]
        busy = sum(r["profiled"].values())
        ratio = f"{100 * busy / r['profiled_step_s']:.0f} %" if r.get("profiled_step_s") else "-"
        lines.append(f"| `{r['run_id']}` | " + " | ".join(cells) + f" | {ratio} |")
    lines += [
        "",
        "| group | configurations | predicted s (sum) | profiled s (sum) | signed error of the sums | "
        "MAPE per configuration |",
        "|---|---|---|---|---|---|",
    ]
    for g in groups:
        pairs = [(r["predicted"].get(g, 0.0), r["profiled"].get(g, 0.0)) for r in rows]
        both = [(p, m) for p, m in pairs if m > 0]
        sp, sm = sum(p for p, _ in pairs), sum(m for _, m in pairs)
        mape = statistics.fmean(abs(p - m) / m for p, m in both) if both else None
        lines.append(
            f"| {g} | {len(both)} | {sp:.4g} | {sm:.4g} | {_pct(_err(sp, sm))} | "
            f"{'-' if mape is None else f'{100 * mape:.1f}%'} |"
        )
    return lines + [""]


def _run_info(folder: Path) -> dict:
    try:
        return json.loads((folder / "run.json").read_text())
    except (OSError, ValueError):
        return {}


def _env_lines(info: dict) -> list[str]:
    env = info.get("env") or {}
    if not env:
        return []
    nv = env.get("nvml") or {}
    lines = [
        f"- device `{env.get('device')}`: torch {env.get('torch')}, CUDA {env.get('cuda')}, cuDNN "
        f"{env.get('cudnn')}, torchvision {env.get('torchvision')}, Python {env.get('python')}"
    ]
    if env.get("flags"):
        lines.append("- numerics flags as found: " + ", ".join(f"`{k}={v}`" for k, v in env["flags"].items()))
    if nv.get("max_sm_clock_MHz") is not None:
        lines.append(
            f"- idle clocks SM {nv.get('sm_clock_MHz')} / max {nv.get('max_sm_clock_MHz')} MHz, memory "
            f"{nv.get('mem_clock_MHz')} MHz ({nv.get('source')})"
        )
    cal = info.get("calibration") or {}
    if cal:
        lines.append(
            f"- calibration (`simdl calibrate --nproc-per-node 1 --quick --stages compute`, "
            f"{cal.get('models')}): {cal.get('status')}" + (f", {cal['wall_s']} s" if "wall_s" in cal else "")
        )
    return lines


def gpu_section(records: list[dict]) -> list[str]:
    gpu = [r for r in records if is_gpu_record(r)]
    if not gpu:
        return []
    lines = [
        "## GPU check (`python -m validate.gpu_check`)",
        "",
        "One device, no collective; every prediction was written to predictions.jsonl before the first "
        "measured step (each record's `predicted_at` against its `measured.first_step_at`), with the "
        "cluster profile above and its DataLoader cost set to 0: the check feeds one batch made on the "
        "device to every step.",
        "",
    ]
    for src in sorted({r.get("_source_file", "") for r in gpu}):
        folder = Path(src).parent
        mine = [r for r in gpu if r.get("_source_file", "") == src]
        info = _run_info(folder)
        lines += [f"### `{src}`", ""] + _env_lines(info) + [""] + table(mine, info.get("env")) + [""]
        lines += ["Step-time error (predicted - measured) / measured, by model and configuration:", ""]
        lines += error_pivot(mine) + [""]
        lines += ["#### Time per op class: simdl against the profiled kernels", ""]
        lines += kernel_tables(kernel_rows(mine, read_kernels(folder / "kernels.jsonl.gz")))
    return lines
