"""The validation report: simdl's predictions against real runs, as Markdown and PNG figures.

``simdl report RESULTS.jsonl -o report/ [--paper]`` reads the JSON lines written by
``python -m validate.run`` and writes ``report/README.md`` with tables shaped like the
source studies' (measured, predicted and error side by side), MAPE and max error per
metric, the accuracy goals (:data:`GOALS`), strategy-ordering checks, and figures (parity, error by
strategy, memory over time, staleness histograms). ``--paper`` appends simdl's
predictions of the studies' experiments at their own scale (:mod:`.paper`).
"""

from __future__ import annotations

import datetime as _dt
import math
import statistics
from pathlib import Path
from typing import Any

from ..band import LEVEL
from ..calibrate import host_load
from ..calibrate.jitter import noise_warning
from ..strategies import registry
from .metrics import (METRIC_BY_KEY, METRICS, engines_present, pairs, read_result_files, rel_error, repeat_floor,
                      summary)

# simdl's accuracy goals on the local profile (fractions; validate/README.md, "Results").
GOALS = {"step_mape": 0.05, "step_mape_stretch": 0.03, "step_max": 0.15, "memory_mean": 0.03, "staleness": 0.10}


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{100 * x:+.1f}%" if signed else f"{100 * x:.1f}%"


def _num(x: float | None, unit: str = "") -> str:
    if x is None:
        return "-"
    if unit == "B":
        return f"{x / 2**20:.1f} MiB"
    if unit == "s":
        return f"{x:.3g} s" if x < 100 else f"{x:.0f} s"
    return f"{x:.3g}"


def _rel(path: str) -> str:
    """A path relative to the working directory when it lies below it (reports get committed)."""
    import os

    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _ok(records):
    return [r for r in records if r.get("status") == "ok"]


def _model(r: dict) -> str:
    return r.get("model_name", r["spec"]["model"]).rpartition(":")[2]


def _triple(r: dict, key: str, engine: str = "analytic") -> tuple[str, str, str]:
    metric = METRIC_BY_KEY[key]
    pred = (r.get("predicted") or {}).get(engine) or {}
    m = metric.measured(r) if r.get("status") == "ok" else None
    p = metric.predicted(pred) if "error" not in pred else None
    return _num(m, metric.unit), _num(p, metric.unit), _pct(rel_error(p, m), signed=True)


def mape_table(records: list[dict], engine: str) -> list[str]:
    s = summary(records, engine)
    lines = [f"| metric | runs | MAPE | max abs error | mean signed error | measured (origin) | predicted ({engine}) |",
             "|---|---|---|---|---|---|---|"]
    for metric in METRICS:
        v = s[metric.key]
        lines.append(f"| {metric.title} | {v['n']} | {_pct(v['mape'])} | {_pct(v['max'])} | "
                     f"{_pct(v['bias'], True)} | {metric.measured_origin} | {metric.predicted_origin} |")
    return lines


def band_coverage(records: list[dict], engine: str = "analytic") -> dict:
    """How many measured steps fell inside their prediction's band (Result.iteration_time_band_s,
    simdl.band): ``{"inside", "runs", "without"}``, ``without`` the finished runs whose record
    has no band (predicted by a simdl without bands, or with a profile that has no calibration)."""
    metric = METRIC_BY_KEY["step_time"]
    inside = runs = without = 0
    for r, m, _, _ in pairs(records, metric, engine):
        b = ((r.get("predicted") or {}).get(engine) or {}).get("iteration_time_band_s")
        if not b:
            without += 1
            continue
        runs += 1
        inside += b[0] <= m <= b[1]
    return {"inside": inside, "runs": runs, "without": without}


def band_line(records: list[dict], engine: str) -> list[str]:
    c = band_coverage(records, engine)
    if not c["runs"]:
        return []
    return [f"Measured step inside the predicted {100 * LEVEL:.0f} % band: {c['inside']} of {c['runs']} runs "
            f"({100 * c['inside'] / c['runs']:.0f} %). The band comes from the profile's calibration (its held-out "
            f"step errors and step jitter, simdl.band), not from these runs."
            + (f" {c['without']} runs have no band (predicted before it existed)." if c["without"] else ""), ""]


ORDER_TOLERANCE = 0.03  # measured differences below 3% are ties (run-to-run noise on a shared CPU)


def ordering(records: list[dict], key: str, engine: str = "analytic", tol: float = ORDER_TOLERANCE) -> list[dict]:
    """Per (experiment, model, ranks, batch): do the predictions order the strategies as measured?

    Pairwise: every pair of strategies whose measured values differ by more than ``tol``
    must be ordered the same way by the prediction; closer pairs are ties and not judged.
    """
    metric = METRIC_BY_KEY[key]
    groups: dict[tuple, list] = {}
    for r, m, p, _ in pairs(records, metric, engine):
        sp = r["spec"]
        groups.setdefault((sp["experiment"], _model(r), sp["ranks"], sp["batch_size"]), []).append((r["label"], m, p))
    out = []
    for k, items in sorted(groups.items()):
        if len(items) < 2:
            continue
        discordant, judged = [], 0
        for i, (la, ma, pa) in enumerate(items):
            for lb, mb, pb in items[i + 1:]:
                if abs(ma - mb) <= tol * max(abs(ma), abs(mb)):
                    continue
                judged += 1
                if (ma < mb) != (pa < pb):
                    # A prediction that calls the pair equal (within ``tol``) orders it by a
                    # rounding of the model, not by a mechanism: say so, with the measured gap.
                    tie = abs(pa - pb) <= tol * max(abs(pa), abs(pb))
                    discordant.append(f"{la}/{lb}" + (f" (predicted within {100 * _gap(pa, pb):.1f}%, measured "
                                                      f"{100 * _gap(ma, mb):.1f}% apart)" if tie else ""))
        meas = [lab for lab, *_ in sorted(items, key=lambda t: t[1])]
        pred = [lab for lab, *_ in sorted(items, key=lambda t: t[2])]
        out.append({"group": k, "measured": meas, "predicted": pred, "match": not discordant,
                    "pairs_judged": judged, "discordant": discordant})
    return out


def _gap(a: float, b: float) -> float:
    """How far apart two positive values are: the larger over the smaller, less 1."""
    return max(a, b) / min(a, b) - 1


def goals(records: list[dict], engine: str = "analytic") -> list[tuple[str, str, str, str]]:
    s = summary(records, engine)
    st, mem = s["step_time"], s["peak_memory"]
    rows = []

    def verdict(v, limit):
        return "-" if v is None else ("met" if v <= limit else "not met")

    rows.append(("step-time MAPE", "<= 5% (stretch 3%)", _pct(st["mape"]),
                 verdict(st["mape"], GOALS["step_mape"]) + (" (stretch met)" if st["mape"] is not None and st["mape"] <= GOALS["step_mape_stretch"] else "")))
    rows.append(("step-time max error", "<= 15%", _pct(st["max"]), verdict(st["max"], GOALS["step_max"])))
    rows.append(("peak-memory mean abs error", "<= 3%", _pct(mem["mape"]), verdict(mem["mape"], GOALS["memory_mean"])))
    # The goal names the asynchronous PS; stale-synchronous runs are judged the same way on a
    # row of their own (the same staleness mechanism, bounded), so neither hides the other.
    stale_pairs = pairs(records, METRIC_BY_KEY["staleness"], engine)
    for mode in (n for n in registry.names() if registry.is_stale(n)):
        what = f"{mode} staleness mean, worst run"
        errs = [abs(e) for r, *_, e in stale_pairs if r["spec"]["strategy"] == mode]
        worst = max(errs) if errs else None
        rows.append((what, "within 10% of measured", _pct(worst) + (f" ({len(errs)} runs)" if errs else ""),
                     verdict(worst, GOALS["staleness"])))
    for key, what in (("step_time", "time"), ("peak_memory", "memory")):
        o = ordering(records, key, engine)
        n_ok = sum(x["match"] for x in o)
        rows.append((f"strategy order by {what}", "matches in every model", f"{n_ok}/{len(o)} groups",
                     "-" if not o else ("met" if n_ok == len(o) else "not met")))
    return rows


def _calibration_section(records: list[dict]) -> list[str]:
    from collections import Counter

    import yaml

    profiles = sorted({r.get("cluster_profile", "") for r in records if r.get("cluster_profile")})
    lines = ["## Cluster profile and calibration", ""]
    for p in profiles:
        # One path may name several versions of a profile (a sweep resumed after the file was
        # refitted): each digest with the runs it predicted.
        shas = Counter(r.get("cluster_profile_sha256") or "not recorded" for r in records
                       if r.get("cluster_profile") == p)
        if len(shas) == 1:
            lines.append(f"- `{_rel(p)}` (sha256 {next(iter(shas))})")
        else:
            lines.append(f"- `{_rel(p)}` (sha256 " + ", ".join(f"{h}: {n} run{'s' if n != 1 else ''}" for h, n in shas.items()) + ")")
    # Every profile's calibration record: runs at 2 and 4 ranks are predicted with profiles
    # calibrated separately, each on its own configurations.
    fitted, calibs = False, []
    for p in profiles:
        try:
            text = Path(p).read_text()
        except OSError:
            continue
        raw = yaml.safe_load(text) or {}
        if raw.get("extends"):
            # A variant of a shipped profile (e.g. for ranks run with other malloc settings)
            # holds only what it changes: judge the merged profile.
            from simdl.cluster.spec import raw_preset

            raw = raw_preset(Path(p))
            text = yaml.safe_dump(raw)
        fitted = fitted or "kind: calibrated" in text
        sigma = (((raw.get("efficiency") or {}).get("compute_jitter")) or {}).get("value")
        why = noise_warning(sigma if isinstance(sigma, (int, float)) else None)
        if why:
            lines.append(f"- **`{_rel(p)}`**: {why}.")
        calib = next((raw[k] for k in ("calibration", "provenance", "calibrated_from") if k in raw), None)
        if calib is not None:
            calibs.append(calib)
    lines.append("")
    if not fitted:
        lines += ["The profile holds no `kind: calibrated` value: the prediction used the **uncalibrated** "
                  "cpu-local preset (most values `assumed`). Errors below measure the preset, not a fit. "
                  "Rerun `python -m validate.run ... --cluster <fitted profile>` after `simdl calibrate`.", ""]
    configs = [c for calib in calibs if isinstance(calib, dict) for c in calibration_configs(calib)]
    if configs:
        lines += ["Configurations the calibration measured (from each profile's `calibration` record):", "",
                  "| stage | model | dataset | batch/rank | ranks | variant |", "|---|---|---|---|---|---|"]
        lines += [f"| {c['stage']} | {c['model']} | {c.get('dataset') or '-'} | {c['batch']} | {c.get('ranks') or '-'} | "
                  f"{c.get('variant') or '-'} |" for c in configs]
        lines.append("")
    elif calibs:
        lines += ["The profile's calibration record lists no model configurations.", ""]
    else:
        lines += ["No calibration configurations are recorded in the profile.", ""]
    vals = _ok(records) or records
    clash = sorted({r["run_id"] for r in vals for c in configs
                    if c["model"] == _model(r) and int(c["batch"]) == r["spec"]["batch_size"]
                    and c.get("dataset") in (None, r["spec"]["dataset"])})
    if configs:
        lines += ["Validation runs with a model, dataset and batch size the calibration also measured: "
                  + (", ".join(f"`{c}`" for c in clash) if clash else "**none**") + ".", ""]
    profiled = sorted({(c["model"], c.get("dataset") or "?") for c in configs if c["stage"] == "compute profile"})
    if profiled:
        lines += ["The per-row compute times of " + ", ".join(f"`{m}` ({d})" for m, d in profiled) + " come from the "
                  "profile's compute profile: each row timed by `simdl calibrate` (compute stage, every rank "
                  "at once, no communication) at the batch sizes listed above, and interpolated linearly in "
                  "the batch to each validation run's batch size, which the calibration did not measure. "
                  "Communication, overlap, copies, the optimizer and memory are predicted, not measured.", ""]
    models = sorted({_model(r) for r in vals})
    batches = sorted({r["spec"]["batch_size"] for r in vals})
    worlds = sorted({r["spec"]["ranks"] for r in vals})
    lines += [f"Validation runs: models {', '.join(models)}; per-rank batch sizes "
              f"{', '.join(map(str, batches))}; world sizes {', '.join(map(str, worlds))}; full training loops.", ""]
    return lines


def calibration_configs(calib: dict) -> list[dict]:
    """The model configurations a ``simdl calibrate`` record says it measured (best effort:
    compute-stage models and batches, and the whole-step strategy runs)."""
    out: list[dict] = []
    prov = calib.get("provenance") or {}
    ranks = prov.get("ranks")
    # Rows of the compute stage, per (model, dataset): one model may be measured on several
    # datasets ("model:dataset:b1,b2;..."), each with its own batch sizes.
    spec = ((prov.get("settings") or {}).get("compute_models")) or ""
    measured: dict[tuple[str, str | None], set[int]] = {}
    for part in str(spec).split(";"):
        # as simdl.calibrate.run.parse_profile_models: a model may be "package.module:factory"
        bits = part.strip().rsplit(":", 2)
        if len(bits) == 3 and bits[2]:
            measured.setdefault((bits[0], bits[1]), set()).update(int(b) for b in bits[2].split(",") if b.strip())
    if not measured:  # older records: batches per model only
        for model, batches in ((calib.get("compute") or {}).get("batches") or {}).items():
            measured.setdefault((model, None), set()).update(int(b) for b in batches or ())
    profiled = {(cp.get("model"), cp.get("dataset")) for cp in calib.get("compute_profiles") or ()}
    for cp in calib.get("compute_profiles") or ():  # profiles not named in the settings
        measured.setdefault((cp["model"], cp.get("dataset")), set()).update(int(b) for b in cp.get("batches") or ())
    for (model, dataset), batches in sorted(measured.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        # "compute profile": these rows are also the per-row times predictions use for this model
        stage = "compute profile" if (model, dataset) in profiled else "compute"
        out += [{"stage": stage, "model": model, "dataset": dataset, "batch": b, "ranks": ranks}
                for b in sorted(batches)]
    for key, v in (calib.get("strategy_steps_measured") or {}).items():
        if isinstance(v, dict) and v.get("model") and v.get("batch") and not v.get("skipped"):
            out.append({"stage": "strategies", "model": v["model"], "dataset": v.get("dataset"),
                        "batch": int(v["batch"]), "ranks": ranks, "variant": v.get("variant") or key.split("/")[0]})
    return out


def _env_text(r: dict) -> str:
    from simdl.cluster.host import allocator_env_text

    return allocator_env_text((r.get("host") or {}).get("allocator_env") or {})


def _setup_section(records: list[dict]) -> list[str]:
    hosts = {(r.get("host") or {}).get("hostname", "?"): r.get("host") or {} for r in records}
    lines = ["## Setup", ""]
    for name, h in hosts.items():
        # The processor, where the run recorded it (a VM keeps its hostname when it changes).
        cpus = sorted({(r.get("host") or {}).get("cpu_model") or "not recorded" for r in records
                       if (r.get("host") or {}).get("hostname", "?") == name})
        lines.append(f"- host `{name}`: {h.get('cpu_cores', '?')} CPU cores ({', '.join(cpus)}), "
                     f"torch {h.get('torch', '?')}, CUDA {'yes' if h.get('cuda') else 'no'}, "
                     f"Python {h.get('python', '?')}")
    # glibc malloc settings (where recorded; simdl.cluster.host.allocator_env): they
    # decide whether FSDP2's CPU steps fault their gradients in again every step.
    from collections import Counter

    envs = Counter(_env_text(r) for r in records)
    if any(envs):
        named = {e: f"`{e}`" if e else "glibc's defaults" for e in envs}
        lines.append("- C allocator settings of the ranks: "
                     + "; ".join(f"{named[e]} ({n} runs)" for e, n in sorted(envs.items())))
    malloc = sorted({r["allocator_mismatch"] for r in records if r.get("allocator_mismatch")})
    if malloc:
        n = sum(1 for r in records if r.get("allocator_mismatch"))
        lines.append(f"- **Predicted with a profile timed under other malloc settings** ({n} of {len(records)} "
                     "runs): " + "; ".join(malloc) + ". glibc's heap trimming moved the same runs by up to 40 % "
                     "on the Zen 4 (validate/README), so their errors include it.")
    other = sorted({r["host_mismatch"] for r in records if r.get("host_mismatch")})
    if other:
        n = sum(1 for r in records if r.get("host_mismatch"))
        lines += [f"- **Predicted with a profile of another processor** ({n} of {len(records)} runs): "
                  + "; ".join(other) + ". Their errors measure the move between hosts as much as simdl."]
    torn = [r for r in records if r.get("teardown_error")]
    if torn:
        # validate.run keeps a run whose ranks all wrote their records before one failed.
        lines += [f"- **A rank failed while tearing down** ({len(torn)} of {len(records)} runs: "
                  + ", ".join(f"`{r['run_id']}`" for r in torn) + "): every rank had written its complete "
                  "record first, so the measurements are used; the runs' `teardown_error` says what failed."]
    # validate.run measures what other processes took of the CPU before and
    # during each run (simdl.calibrate.host_load): on 2 cores one other job slows a run by a third.
    metered = [r for r in records if (r.get("host_cpu") or {}).get("others_cores") is not None]
    busy = [(r, host_load.busy_note(r)) for r in records if host_load.busy_note(r)]
    if busy:
        lines += [f"- **Other processes were busy** ({len(busy)} of {len(records)} runs, more than "
                  f"{host_load.BUSY_CORES:g} of a core on average): "
                  + "; ".join(f"`{r['run_id']}`: {why}" for r, why in busy)
                  + ". Their measured times include that contention; simdl's predictions do not."]
    elif metered:
        worst = max((r["host_cpu"]["others_cores"] for r in metered), default=0.0)
        lines += [f"- Other processes' CPU, measured during {len(metered)} of {len(records)} runs: at most "
                  f"{worst:.2f} cores on average (runs above {host_load.BUSY_CORES:g} would be listed here)."]
    over = [r for r in records if r.get("oversubscribed")]
    # validate/train.py records the RPC transport of each PS run (uv: TensorPipe's default shm
    # transport's busy-polling reactor slows oversubscribed runs; older records ran shm).
    kinds = sorted({str(t) for r in records
                    if registry.is_client_server(str((r.get("spec") or {}).get("strategy", "")))
                    and (t := (r.get("measured") or {}).get("transport")) is not None})
    ps_transport = ("; transport as recorded per run: " + ", ".join(f"`{k}`" for k in kinds)) if kinds else ""
    lines += ["- DDP / FSDP: torchrun, gloo on CPU (NCCL on GPU); FSDP is FSDP2 `fully_shard` per block unit "
              "(the units simdl's plan assumes), full = reshard after forward, grad_op = keep, none = a "
              "world x 1 replicate x shard mesh.",
              f"- Parameter server: `torch.distributed.rpc` (TensorPipe{ps_transport}) with one server process holding the "
              "parameters, the SGD-momentum optimizer and a version counter; staleness = server version at "
              "application minus the version the worker pulled.",
              "- Every run: SGD(momentum 0.9), fp32, `DataLoader(num_workers=0)` over in-memory tensors, "
              "test accuracy after the last epoch, no checkpoints."]
    if over:
        lines.append(f"- **Oversubscribed runs** ({len(over)} of {len(records)}): more processes than CPU cores "
                     "(4-rank runs, and PS runs whose server is one more process). Allowed here because the "
                     "prediction is given the same sharing: the cluster profile is a derived copy with one device "
                     "slot per rank (named per run); marked with triangles in the parity plot and `*` in tables.")
    lines.append("")
    return lines


def _flag(r: dict) -> str:
    return "*" if r.get("oversubscribed") else ""


def _mesh(r: dict) -> str:
    """' (2 x 2 mesh, one host)' for hybrid sharding with a shard group smaller than the
    world on one node (validate.experiments._hybrid_one_host); '' otherwise."""
    sp = r["spec"]
    g = sp.get("shard_group")
    if not g:
        return ""
    return f" ({sp['ranks'] // g} x {g} mesh{', one host' if sp.get('nodes', 1) == 1 else ''})"


def exp1_table(records: list[dict], engine: str) -> list[str]:
    runs = [r for r in records if r["spec"]["experiment"] == "exp1"]
    if not runs:
        return []
    ranks = sorted({r["spec"]["ranks"] for r in runs})
    lines = ["## Study 1, experiment 1: DDP and FSDP on CIFAR-10-shaped data", "",
             "Step time and peak memory per rank, measured / predicted / error, by model and strategy "
             "(the layout of the study's training-time table). `*`: oversubscribed.", ""]
    head = "| model | strategy | " + " | ".join(f"step {n} ranks | mem {n} ranks" for n in ranks) + " |"
    lines += [head, "|" + "---|" * (2 + 2 * len(ranks))]
    keys = []
    for run in runs:
        k = (_model(run), run["label"])
        if k not in keys:
            keys.append(k)
    for model, label in keys:
        cells = []
        for n in ranks:
            r: dict[str, Any] | None = next((x for x in runs if (_model(x), x["label"]) == (model, label)
                                   and x["spec"]["ranks"] == n), None)
            if r is None:
                cells += ["", ""]
            elif r.get("status") != "ok":
                cells += ["failed", "failed"]
            else:
                cells.append(" / ".join(_triple(r, "step_time", engine)) + _flag(r))
                cells.append(" / ".join(_triple(r, "peak_memory", engine)))
        mesh = next((_mesh(x) for x in runs if (_model(x), x["label"]) == (model, label) and _mesh(x)), "")
        lines.append(f"| {model} | {label}{mesh} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def exp2_table(records: list[dict], engine: str) -> list[str]:
    runs = [r for r in records if r["spec"]["experiment"] == "exp2"]
    if not runs:
        return []
    lines = ["## Study 1, experiment 2: parameter server, sync vs async", "",
             "Measured / predicted / error. Accuracy is measured only (simdl predicts none). `*`: oversubscribed.", "",
             "| model | mode | workers | step time | training time | peak memory | test accuracy | staleness mean (measured, every update / steady state / predicted) | data |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        if r.get("status") != "ok":
            lines.append(f"| {_model(r)} | {r['label']} | {r['spec']['ranks']} | failed | | | | | |")
            continue
        m = r["measured"]
        st = m.get("staleness") or {}
        steady = m.get("staleness_steady") or {}
        steady_mean = f"{steady['mean']:.2f}" if steady else "-"
        ps = ((r["predicted"].get(engine) or {}).get("staleness") or {})
        acc = m.get("test_accuracy")
        lines.append(f"| {_model(r)} | {r['label']} | {r['spec']['ranks']}{_flag(r)} | "
                     f"{' / '.join(_triple(r, 'step_time', engine))} | {' / '.join(_triple(r, 'total_time', engine))} | "
                     f"{' / '.join(_triple(r, 'peak_memory', engine))} | "
                     f"{'-' if acc is None else f'{100 * acc:.1f}%'} | "
                     f"{st.get('mean', 0):.2f} / {steady_mean} / {ps.get('mean', 0):.2f} | "
                     f"{m.get('data', '')} |")
    lines.append("")
    return lines


def _unbounded_stale(name: str) -> bool:
    """A strategy that trains on stale updates with no bound on them (the asynchronous PS)."""
    return registry.is_stale(name) and not registry.get(name).applies("staleness_bound", name)


def ssp_bound_table(records: list[dict]) -> list[str]:
    """ps-ssp runs: how often the staleness bound held a worker's pull back, measured by the
    server of validate/train.py against the SimPy engine's prediction (the analytic engine does
    not model the waits), and the step time against the async run of the same model."""
    runs = [r for r in _ok(records) if (r.get("measured") or {}).get("ssp_held_pulls")]
    if not runs:
        return []
    asyn = {(_model(r), r["spec"]["ranks"], r["spec"]["batch_size"]): r for r in _ok(records)
            if _unbounded_stale(r["spec"]["strategy"])}
    lines = ["## Stale-synchronous bound", "",
             "How often the bound held a pull back (a worker more than the bound ahead of the slowest waits): "
             "measured by the server (every pull of the run), predicted by the SimPy engine. SSP / async: the step "
             "time of the SSP run over the async run of the same model, measured and predicted (sim).", "",
             "| model | mode | pulls held, measured | predicted (sim) | mean wait per pull, measured / predicted | "
             "SSP / async step, measured / predicted |", "|---|---|---|---|---|---|"]
    for r in runs:
        h = r["measured"]["ssp_held_pulls"]
        sim = (r.get("predicted") or {}).get("sim") or {}
        st = sim.get("staleness") or {}
        pred = f"{100 * st['held_pulls']:.0f}%" if st.get("held_pulls") is not None else "-"
        wait_m = "-" if h.get("mean_wait_s") is None else f"{1e3 * h['mean_wait_s']:.0f} ms"
        wait_p = "-" if st.get("held_wait_s") is None else f"{1e3 * st['held_wait_s']:.0f} ms"
        ratio = "-"
        a = asyn.get((_model(r), r["spec"]["ranks"], r["spec"]["batch_size"]))
        if a:
            step = METRIC_BY_KEY["step_time"]
            ms, ma = step.measured(r), step.measured(a)
            ps_, pa = step.predicted(sim), step.predicted((a.get("predicted") or {}).get("sim") or {})
            mr = ms / ma if ms and ma else None
            pr = ps_ / pa if ps_ and pa else None
            ratio = f"{'-' if mr is None else f'{mr:.3f}'} / {'-' if pr is None else f'{pr:.3f}'}"
        lines.append(f"| {_model(r)} | {r['label']} | {h['held']}/{h['pulls']} ({100 * h['fraction']:.0f}%) | {pred} | "
                     f"{wait_m} / {wait_p} | {ratio} |")
    lines.append("")
    return lines


def vit_table(records: list[dict], engine: str) -> list[str]:
    runs = [r for r in records if r["spec"]["experiment"] == "vit"]
    if not runs:
        return []
    lines = ["## Study 2: ViT under FSDP at several batch sizes", "",
             "| model | sharding | ranks | batch/rank | step time | peak memory | bytes sent/step |",
             "|---|---|---|---|---|---|---|"]
    for r in runs:
        if r.get("status") != "ok":
            lines.append(f"| {_model(r)} | {r['spec']['sharding']}{_mesh(r)} | {r['spec']['ranks']} | {r['spec']['batch_size']} | failed | | |")
            continue
        lines.append(f"| {_model(r)} | {r['spec']['sharding']}{_mesh(r)} | {r['spec']['ranks']}{_flag(r)} | {r['spec']['batch_size']} | "
                     f"{' / '.join(_triple(r, 'step_time', engine))} | {' / '.join(_triple(r, 'peak_memory', engine))} | "
                     f"{' / '.join(_triple(r, 'comm_bytes', engine))} |")
    lines.append("")
    return lines


def strategy_table(records: list[dict], engine: str) -> list[str]:
    lines = ["## Error by strategy", "", "| strategy | runs | step-time MAPE | step-time bias | memory MAPE | busy-fraction MAPE |",
             "|---|---|---|---|---|---|"]
    labels = sorted({r["label"] for r in _ok(records)})
    for lab in labels:
        sub = [r for r in records if r.get("label") == lab]
        s = summary(sub, engine)
        lines.append(f"| {lab} | {s['step_time']['n']} | {_pct(s['step_time']['mape'])} | {_pct(s['step_time']['bias'], True)} | "
                     f"{_pct(s['peak_memory']['mape'])} | {_pct(s['busy']['mape'])} |")
    lines.append("")
    return lines


def ordering_table(records: list[dict], engine: str) -> list[str]:
    lines = ["## Ordering of strategies", "",
             f"Fastest / smallest first. Every pair of strategies whose measured values differ by more than "
             f"{100 * ORDER_TOLERANCE:.0f}% must be ordered the same way by the prediction (closer pairs are ties).", "",
             "| by | experiment, model, ranks, batch | measured | predicted | pairs judged | discordant pairs |",
             "|---|---|---|---|---|---|"]
    for key, what in (("step_time", "time"), ("peak_memory", "memory")):
        for o in ordering(records, key, engine):
            g = o["group"]
            lines.append(f"| {what} | {g[0]}, {g[1]}, {g[2]}, {g[3]} | {' < '.join(o['measured'])} | "
                         f"{' < '.join(o['predicted'])} | {o['pairs_judged']} | {', '.join(o['discordant']) or 'none'} |")
    lines.append("")
    return lines


# Which run of a group the others are set against: the strategy a user would start from.
# The simplest label of each registered family (simdl.strategies.registry.labels order).
RELATIVE_REFERENCE = tuple(next(iter(s.labels)) for s in registry.specs() if s.labels)


def relative_steps(records: list[dict], engine: str = "analytic") -> list[dict]:
    """Each run's step time over its group's reference run (:data:`RELATIVE_REFERENCE`: the same
    experiment, model, ranks and batch), measured and predicted, and the error of the predicted
    ratio.

    A sweep runs a model's strategies one after the other, minutes apart. A profile whose compute
    times went stale over hours (cpu-xeon-emr-b: the same run 11 % apart at the median two hours
    later, lab/CAMPAIGN.md) errs alike on both runs of a pair, and the ratio keeps what the
    prediction says about the strategies themselves: how much more one costs than the other.
    The noise of one run against the next stays in it. A check beside the goals, not one of them.
    """
    metric = METRIC_BY_KEY["step_time"]
    groups: dict[tuple, dict[str, tuple]] = {}
    for r, m, p, _ in pairs(records, metric, engine):
        sp = r["spec"]
        groups.setdefault((sp["experiment"], _model(r), sp["ranks"], sp["batch_size"]), {})[r["label"]] = (r, m, p)
    out = []
    for k, runs in sorted(groups.items()):
        ref = next((lab for lab in RELATIVE_REFERENCE if lab in runs), None)
        if ref is None:
            continue
        r0, m0, p0 = runs[ref]
        for lab, (r, m, p) in sorted(runs.items()):
            if lab == ref:
                continue
            measured, predicted = m / m0, p / p0
            out.append({"group": k, "label": lab, "reference": ref, "measured": measured, "predicted": predicted,
                        "error": predicted / measured - 1.0, "apart_s": _apart_s(r, r0)})
    return out


def _apart_s(a: dict, b: dict) -> float | None:
    """Seconds between two runs' starts (None when either is pooled from repeats or undated)."""
    if any((x.get("measured") or {}).get("repeats") for x in (a, b)):
        return None
    try:
        ta, tb = (_dt.datetime.fromisoformat(x["started"]) for x in (a, b))
    except (KeyError, TypeError, ValueError):
        return None
    return abs((ta - tb).total_seconds())


def relative_table(records: list[dict], engine: str = "analytic") -> list[str]:
    rows = relative_steps(records, engine)
    if not rows:
        return []
    errs = [abs(x["error"]) for x in rows]
    lines = ["## Strategy against strategy: step time relative to the model's reference run", "",
             f"Each run's step time over that of its group's reference run ({', '.join(RELATIVE_REFERENCE)}: the "
             "first the group has), measured and predicted. The two runs of a pair ran minutes apart, so a profile "
             "whose compute times went stale over hours errs alike on both and cancels out of the ratio; the "
             "noise of one run against the next does not. A bias that keeps its sign over sweeps is the model's "
             "(`python -m validate.relative` pools them). A check beside the goals, not one of them.", "",
             f"Ratio error over {len(rows)} pairs: MAPE {_pct(sum(errs) / len(errs))}, max {_pct(max(errs))}.", "",
             "| experiment, model, ranks, batch | strategy / reference | measured | predicted | error | runs apart |",
             "|---|---|---|---|---|---|"]
    for x in rows:
        g = x["group"]
        apart = "-" if x["apart_s"] is None else f"{x['apart_s'] / 60:.0f} min"
        lines.append(f"| {g[0]}, {g[1]}, {g[2]}, {g[3]} | {x['label']} / {x['reference']} | {x['measured']:.3f} | "
                     f"{x['predicted']:.3f} | {_pct(x['error'], True)} | {apart} |")
    lines.append("")
    return lines


def repeats_table(records: list[dict]) -> list[str]:
    """Runs made more than once the same way: each repeat's step median and the pooled one
    (simdl.report.metrics.pool_repeats), the run-to-run spread the errors above sit in."""
    reps = [r for r in _ok(records) if (r.get("measured") or {}).get("repeats")]
    if not reps:
        return []
    lines = ["## Repeated runs", "",
             "Runs made more than once with the same harness are pooled: their steady steps together give the "
             "median compared above, training time is the mean, steady-state staleness the pooled histogram "
             "(of the attempts that logged it). Memory, bytes, busy fraction and test accuracy are the latest "
             "attempt's; each repeat's accuracy is shown here (256 test images after one short epoch: mostly "
             "noise). Spread = slowest / fastest repeat median - 1. A repeat measured while other processes kept "
             f"more than {host_load.BUSY_CORES:g} of a core busy is left out of the pool when a quiet repeat of the "
             "run exists (listed as left out).",
             "", "| run | repeats (start: step median, test accuracy) | spread | pooled median | predicted |", "|---|---|---|---|---|"]
    by_repeat: dict[int, list[float]] = {}
    spreads, pooled_err = [], []
    for r in reps:
        m = r["measured"]
        meds = [x["step_median_s"] for x in m["repeats"] if x.get("step_median_s")]
        each = ", ".join(f"{(x.get('started') or '?')[11:16]}: {_num(x['step_median_s'], 's')}"
                         + (f" (acc. {_pct(x['test_accuracy'])})" if x.get("test_accuracy") is not None else "")
                         for x in m["repeats"])
        each += "".join(f"; left out {(x.get('started') or '?')[11:16]}: {_num(x.get('step_median_s'), 's')} "
                        f"({x.get('why')})" for x in m.get("repeats_excluded") or [])
        pred = ((r.get("predicted") or {}).get("analytic") or {}).get("iteration_time_s")
        if meds:
            spreads.append(max(meds) / min(meds) - 1)
        for k, x in enumerate(m["repeats"]):
            e = rel_error(pred, x.get("step_median_s"))
            if e is not None:
                by_repeat.setdefault(k, []).append(abs(e))
        e = rel_error(pred, m["step_time_s"].get("median"))
        if e is not None:
            pooled_err.append(abs(e))
        lines.append(f"| `{r['run_id']}` | {each} | {_pct(spreads[-1]) if meds else '-'} | "
                     f"{_num(m['step_time_s']['median'], 's')} | {_num(pred, 's')} |")
    lines.append("")
    if spreads:
        # How far the machine moves a measurement against how far the prediction is from it:
        # an error below the run-to-run spread cannot be told from noise.
        lines.append(f"Spread between repeats, over the {len(spreads)} runs: median "
                     f"{_pct(statistics.median(spreads))}, max {_pct(max(spreads))}.")
    floor = repeat_floor(reps)
    if floor:
        # What a prediction that matched one repeat exactly would score against the others:
        # the step-time error this machine lets one sweep check a model to.
        lines.append(f"Repeat against repeat, each repeat's step median as the prediction of another repeat of the "
                     f"same run ({floor['pairs']} ordered pairs over {floor['runs']} runs): MAPE {_pct(floor['mape'])}, "
                     f"max {_pct(floor['max'])}. An error against one sweep below this cannot be told from the machine's own "
                     "change between runs.")
    if by_repeat:
        per_repeat = "; ".join(f"repeat {k + 1} alone {_pct(sum(v) / len(v))} ({len(v)} runs)"
                               for k, v in sorted(by_repeat.items()))
        every = [e for v in by_repeat.values() for e in v]
        lines.append(f"Step-time MAPE of these runs (analytic), each repeat's median against the prediction: {per_repeat}; "
                     f"every repeat {_pct(sum(every) / len(every))}, max {_pct(max(every))} ({len(every)} medians); "
                     f"pooled {_pct(sum(pooled_err) / len(pooled_err)) if pooled_err else '-'}.")
        lines.append("")
    return lines


def drift_table(records: list[dict], engine: str = "analytic") -> list[str]:
    """Runs that re-measured a point of the profile's compute stage before and after
    (validate/probe.py): the machine's speed against its profile, and the step-time error
    with the prediction scaled by it -- how much of the error is the machine's drift. The
    prediction itself never saw the probe."""
    rows = []
    for r in _ok(records):
        pr = r.get("machine_probe") or {}
        if not pr.get("speed_ratio") or (r.get("measured") or {}).get("repeats"):
            continue
        m = (r.get("measured") or {}).get("step_time_s", {}).get("median")
        pred = (r.get("predicted") or {}).get(engine) or {}
        p = pred.get("iteration_time_s")
        e, e_adj = rel_error(p, m), rel_error(p * pr["speed_ratio"] if p else None, m)
        # The probe times a model's compute alone, so its ratio is scaled onto the prediction's
        # compute (the workload rows, step_split_s) too, the rest of the step left as predicted.
        c = (pred.get("step_split_s") or {}).get("compute")
        p_c = p + c * (pr["speed_ratio"] - 1.0) if p and c is not None else None
        if e is not None and e_adj is not None:
            rows.append((r, pr, m, p, e, e_adj, p_c, rel_error(p_c, m)))
    if not rows:
        return []

    def stats(errs):
        return (f"MAPE {_pct(sum(abs(x) for x in errs) / len(errs))}, max {_pct(max(abs(x) for x in errs))}, "
                f"bias {_pct(sum(errs) / len(errs), signed=True)}")

    ratios = sorted(pr["speed_ratio"] for _, pr, *_ in rows)
    lines = ["## The machine's speed against its profile", "",
             "Before and after each of these runs, one point the profile's compute stage measured (the run's model "
             "at a calibrated batch size, never the run's own configuration; `calibration/compute.py --probe`, the "
             "same build, warm-up and fastest-of-5 rule) was measured again. Speed ratio = mean probe step / "
             "calibrated step: above 1, the machine was slower than when it was calibrated. The prediction was made "
             "before the probes and does not use them; 'x ratio' scales the whole predicted step by the ratio "
             "(right only as far as the drift is the processor's and its memory's, not the links'); 'compute x "
             "ratio' scales only the prediction's compute (its `step_split_s` compute: the workload rows, what the "
             "probe times) and leaves the rest of the step as predicted.",
             "",
             f"{len(rows)} runs, step time as predicted: {stats([x[4] for x in rows])}; prediction x ratio: "
             f"{stats([x[5] for x in rows])}"
             + (f"; compute x ratio: {stats([x[7] for x in rows if x[7] is not None])}"
                if any(x[7] is not None for x in rows) else "")
             + f". Ratios {ratios[0]:.3f}-{ratios[-1]:.3f} (median {statistics.median(ratios):.3f}).", "",
             "| run | probe | calibrated | before | after | ratio | measured step | predicted | error | x ratio | error "
             "| compute x ratio | error |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r, pr, m, p, e, e_adj, p_c, e_c in rows:
        b, a = pr.get("before", {}).get("step_s"), pr.get("after", {}).get("step_s")
        lines.append(f"| `{r['run_id']}` | {pr['model']} b{pr['batch']} x{pr['ranks']} | "
                     f"{_num(pr['calibrated_step_s'], 's')} | {_num(b, 's')} | {_num(a, 's')} | "
                     f"{pr['speed_ratio']:.3f} | {_num(m, 's')} | {_num(p, 's')} | {_pct(e, signed=True)} | "
                     f"{_num(p * pr['speed_ratio'], 's')} | {_pct(e_adj, signed=True)} | {_num(p_c, 's')} | "
                     f"{_pct(e_c, signed=True)} |")
    lines.append("")
    return lines


def split_table(records: list[dict], engine: str = "analytic") -> list[str]:
    """Where the step goes, measured against predicted, for runs whose profiled step was split
    into groups (``busy_by_group_s``, validate/measure.py; older records lack it) and whose
    prediction carries ``step_split_s``. Shares of the step, not seconds: the profiler slows
    the profiled step, so its groups are divided by its own length."""
    rows = []
    for r in _ok(records):
        m, p = r.get("measured") or {}, (r.get("predicted") or {}).get(engine) or {}
        groups, split, length = m.get("busy_by_group_s"), p.get("step_split_s"), m.get("profiled_step_s")
        if not (groups and split and length and p.get("iteration_time_s")):
            continue
        step = p["iteration_time_s"]
        meas = {k: groups.get(k, 0.0) / length for k in ("compute", "copies", "optimizer")}
        meas["rest"] = max(1.0 - sum(meas.values()), 0.0)
        pred = {k: split.get(k, 0.0) / step for k in ("compute", "copies", "optimizer")}
        pred["rest"] = max(1.0 - sum(pred.values()), 0.0)
        faults = m.get("page_fault_bytes_per_step_per_rank")
        rows.append((r, step, meas, pred, max(faults) if faults else None))
    if not rows:
        return []
    with_faults = any(f is not None for *_, f in rows)
    lines = ["## Where the step goes", "",
             "Share of a step, measured / predicted. Measured: the profiled step's top-level ops on the training "
             "thread (torch.profiler, validate/measure.py), `compute` every op that is not a copy or inside the "
             "optimizer step, `copies` buffer copies (`copy_`, `_chunk_cat`, `cat`, ...: FSDP's and DDP's packing), "
             "`optimizer` the optimizer step, `rest` time in collective calls, waits, hooks and Python. Predicted: "
             f"the {engine} engine's `step_split_s` (compute = the workload's rows; rest = host time per unit, "
             "interference, blocking waits and exposed communication). A sum can be right with its split wrong; "
             "this table shows which. Caveats: the profiler slows a step unevenly (many small ops more than few "
             "large ones), and measured `copies` include the model's own copy ops (`.contiguous()`, `cat`), "
             "which a prediction counts in `compute`."
             + (" `faults`: the memory a steady step touched for the first time (minor page faults x the page "
                "size, median over the steady steps, the largest rank; runs that record faults), measured only: "
                "on a CPU host every faulted byte costs `host.page_fault_ns_per_byte`, and the prediction "
                "prices it only for buffers above the allocator's mmap threshold." if with_faults else ""), "",
             "| run | step (measured / predicted) | compute | copies | optimizer | rest |"
             + (" faults |" if with_faults else ""), "|---|---|---|---|---|---|" + ("---|" if with_faults else "")]
    for r, step, meas, pred, faults in rows:
        cells = " | ".join(f"{_pct(meas[k])} / {_pct(pred[k])}" for k in ("compute", "copies", "optimizer", "rest"))
        if with_faults:
            cells += f" | {_num(faults, 'B')}"
        lines.append(f"| {_model(r)} {r['label']} r{r['spec']['ranks']} b{r['spec']['batch_size']} | "
                     f"{_num(r['measured']['step_time_s']['median'], 's')} / {_num(step, 's')} | {cells} |")
    lines.append("")
    return lines


def runs_table(records: list[dict]) -> list[str]:
    # Several results files: each run says which one it came from, and when it started.
    files = len({r.get("_source_file") for r in records}) > 1
    extra = (" file | started |", "---|---|") if files else ("", "")
    lines = ["## Runs", "", "| run | status | processes | steps/rank | wall | data |" + extra[0],
             "|---|---|---|---|---|---|" + extra[1]]
    for r in records:
        m = r.get("measured") or {}
        status = r.get("status", "?") if r.get("status") == "ok" else f"failed: {str(r.get('error', '')).rsplit('; see ', 1)[0][:160]}"
        cells = f" `{_rel(r.get('_source_file', ''))}` | {str(r.get('started', '-'))[:16]} |" if files else ""
        lines.append(f"| `{r['run_id']}` | {status} | {r.get('processes', '?')}{_flag(r)} | {m.get('steps_per_rank', '-')} | "
                     f"{r.get('wall_s', 0):.0f} s | {m.get('data', '-')} |" + cells)
    lines.append("")
    return lines


def build_report(results: str | Path | list, out_dir: str | Path, paper: bool = False,
                 command: str | None = None, repeats: bool = False) -> Path:
    """Write ``out_dir/README.md`` and its PNG figures; return the Markdown path. ``results``:
    one results file, or several read as one sweep (:func:`read_result_files`; ``repeats``:
    a run in several files is a repeat, pooled)."""
    from . import figures

    paths = [results] if isinstance(results, (str, Path)) else list(results)
    records, replaced = read_result_files(paths, repeats=repeats)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    engines = engines_present(records) or ["analytic"]
    ok = _ok(records)
    profiles = sorted({r.get("profile", "?") for r in records})
    lines = [f"# simdl validation report ({', '.join(profiles)} profile)", "",
             f"Generated {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')} from "
             f"{', '.join(f'`{p}`' for p in paths)} ({len(ok)} runs finished, {len(records) - len(ok)} failed)."]
    if repeats:
        lines += ["", "A run found in more than one file is a repeat: its steady steps, training times and "
                  "staleness are pooled over the repeats, and the table of repeats lists each one."]
    if replaced:
        lines += ["", f"Runs in more than one file, each counted once with its record from the later file "
                  f"(its own measurement, prediction and profile): {', '.join(f'`{r}`' for r in sorted(replaced))}."]
    sweeps = sorted({str(r["sweep_command"]) for r in records if r.get("sweep_command")})
    if sweeps:
        lines += ["", "Runs made with: " + "; ".join(f"`{c}`" for c in sweeps)]
    repred = sorted({str(r["repredicted_from"]) for r in records if r.get("repredicted_from")})
    if repred:
        lines += ["", f"Predictions remade (`python -m validate.repredict`) with the profile below; the runs were "
                  f"first predicted with {', '.join(f'`{p}`' for p in repred)}."]
    if command:
        lines += ["", f"Report made with: `{command}`"]
    lines += ["", "Error = (predicted - measured) / measured. Every prediction was made from the run's "
              "configuration alone, before the run started (`validate/run.py`), with the cluster profile named below.", ""]
    sim_missing = [r for r in records if "error" in ((r.get("predicted") or {}).get("sim") or {"error": 1})]
    if sim_missing and "sim" not in engines:
        err = ((sim_missing[0].get("predicted") or {}).get("sim") or {}).get("error", "not run")
        lines += [f"The SimPy engine gave no prediction ({err}); only the analytic engine is compared.", ""]
    lines += _setup_section(records) + _calibration_section(records)
    for eng in engines:
        lines += [f"## Accuracy per metric ({eng} engine)", ""] + mape_table(records, eng) + [""] + band_line(records, eng)
    lines += ["## Goals (on the local profile, configurations not used in calibration)", ""]
    if "local" not in profiles:
        lines += [f"This report is of the {', '.join(profiles)} profile: the goals are judged on `local`; "
                  "they are shown here only to exercise the check.", ""]
    lines += [
              "| goal | target | achieved (analytic) | verdict |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in goals(records)] + [""]
    lines += exp1_table(records, "analytic") + exp2_table(records, "analytic") + ssp_bound_table(records)
    lines += vit_table(records, "analytic")
    lines += strategy_table(records, "analytic") + ordering_table(records, "analytic") + relative_table(records)
    lines += split_table(records)
    lines += repeats_table(records) + drift_table(records)
    from .gpu import gpu_section

    lines += gpu_section(records)
    names = figures.write_all(records, out, engines)
    if names:
        lines += ["## Figures", ""] + [f"![{n}]({n})" for n in names] + [""]
    lines += ["## Notes on the measurements", "",
              "- gloo has no reduce-scatter of its own: FSDP's reduce-scatter runs as an all-reduce of the full "
              "gradient buffer (seen in the profiler as `gloo:all_reduce`), so measured bytes for FSDP count "
              "all-reduce traffic where simdl plans a reduce-scatter.",
              "- Bytes sent per rank are derived from the measured collective payloads with ring factors "
              "(2(n-1)/n for all-reduce, (n-1)/n for all-gather); gloo's own algorithms may move more.",
              "- The profiled step (one per run, after warm-up) is excluded from the step-time statistics; "
              "its profiler overhead is in the training time.",
              "- The fixed warm-up does not always reach the steady state: a run whose first steady steps are "
              "still slow (ViT under FSDP, whose step settles over several steps) has a median above its "
              "settled step. The row 'step time, initial transient removed' cuts that start by the MSER rule "
              "(no parameter) to show how much of an error it is; the goals are judged on the fixed rule.",
              "- The training time holds the harness's profiled steps and the profiler's stop, which a user's "
              "training does not have and simdl does not predict. Runs that record every step's time record what they added, "
              "and the row 'training time without the harness's profiling' takes it out. The warm-up steps stay "
              "in that row, and simdl does not predict them either (the prediction is iterations x step).",
              "- Process RSS (`peak_rss_bytes` in the JSONL) includes the profiler's own buffers and is not compared.", ""]
    lines += runs_table(records)
    if paper:
        from .paper import paper_tables

        lines += [paper_tables()]
    md = out / "README.md"
    md.write_text("\n".join(lines) + "\n")
    return md
