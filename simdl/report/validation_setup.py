"""The validation report's set-up and calibration sections: the hosts, profiles and calibration runs behind it."""

from __future__ import annotations

from pathlib import Path

from ..calibrate import host_load
from ..calibrate.jitter import noise_warning
from ..strategies import registry
from .validation_common import _model, _ok, _rel


def _calibration_section(records: list[dict]) -> list[str]:
    profiles = sorted({r.get("cluster_profile", "") for r in records if r.get("cluster_profile")})
    lines = ["## Cluster profile and calibration", ""]
    lines += _profile_digest_lines(records, profiles)
    warnings, fitted, calibs = _read_calibrations(profiles)
    lines += warnings
    lines.append("")
    if not fitted:
        lines += [
            "The profile holds no `kind: calibrated` value: the prediction used the **uncalibrated** "
            "cpu-local preset (most values `assumed`). Errors below measure the preset, not a fit. "
            "Rerun `python -m validate.run ... --cluster <fitted profile>` after `simdl calibrate`.",
            "",
        ]
    configs = [c for calib in calibs if isinstance(calib, dict) for c in calibration_configs(calib)]
    lines += _configs_table(configs, calibs)
    vals = _ok(records) or records
    lines += _overlap_lines(vals, configs) + _compute_profile_lines(configs)
    models = sorted({_model(r) for r in vals})
    batches = sorted({r["spec"]["batch_size"] for r in vals})
    worlds = sorted({r["spec"]["ranks"] for r in vals})
    lines += [
        f"Validation runs: models {', '.join(models)}; per-rank batch sizes "
        f"{', '.join(map(str, batches))}; world sizes {', '.join(map(str, worlds))}; full training loops.",
        "",
    ]
    return lines


def _profile_digest_lines(records: list[dict], profiles: list[str]) -> list[str]:
    """One line per profile path with the sha256 of each version of it the runs recorded."""
    from collections import Counter

    lines = []
    for p in profiles:
        # One path may name several versions of a profile (a sweep resumed after the file was
        # refitted): each digest with the runs it predicted.
        shas = Counter(
            r.get("cluster_profile_sha256") or "not recorded" for r in records if r.get("cluster_profile") == p
        )
        if len(shas) == 1:
            lines.append(f"- `{_rel(p)}` (sha256 {next(iter(shas))})")
        else:
            lines.append(
                f"- `{_rel(p)}` (sha256 "
                + ", ".join(f"{h}: {n} run{'s' if n != 1 else ''}" for h, n in shas.items())
                + ")"
            )
    return lines


def _read_profile(p: str) -> tuple[str, dict] | None:
    """A profile file's text and mapping, merged with the profile it extends; None if unreadable."""
    import yaml

    try:
        text = Path(p).read_text()
    except OSError:
        return None
    raw = yaml.safe_load(text) or {}
    if raw.get("extends"):
        # A variant of a shipped profile (e.g. for ranks run with other malloc settings)
        # holds only what it changes: judge the merged profile.
        from simdl.cluster.spec import raw_preset

        raw = raw_preset(Path(p))
        text = yaml.safe_dump(raw)
    return text, raw


def _read_calibrations(profiles: list[str]) -> tuple[list[str], bool, list]:
    """Each profile's noise warning, whether any holds a fitted value, and their calibration records."""
    # Every profile's calibration record: runs at 2 and 4 ranks are predicted with profiles
    # calibrated separately, each on its own configurations.
    warnings: list[str] = []
    fitted, calibs = False, []
    for p in profiles:
        read = _read_profile(p)
        if read is None:
            continue
        text, raw = read
        fitted = fitted or "kind: calibrated" in text
        sigma = (((raw.get("efficiency") or {}).get("compute_jitter")) or {}).get("value")
        why = noise_warning(sigma if isinstance(sigma, (int, float)) else None)
        if why:
            warnings.append(f"- **`{_rel(p)}`**: {why}.")
        calib = next((raw[k] for k in ("calibration", "provenance", "calibrated_from") if k in raw), None)
        if calib is not None:
            calibs.append(calib)
    return warnings, fitted, calibs


def _configs_table(configs: list[dict], calibs: list) -> list[str]:
    if configs:
        return [
            "Configurations the calibration measured (from each profile's `calibration` record):",
            "",
            "| stage | model | dataset | batch/rank | ranks | variant |",
            "|---|---|---|---|---|---|",
            *(
                f"| {c['stage']} | {c['model']} | {c.get('dataset') or '-'} | {c['batch']} | {c.get('ranks') or '-'} | "
                f"{c.get('variant') or '-'} |"
                for c in configs
            ),
            "",
        ]
    if calibs:
        return ["The profile's calibration record lists no model configurations.", ""]
    return ["No calibration configurations are recorded in the profile.", ""]


def _overlap_lines(vals: list[dict], configs: list[dict]) -> list[str]:
    """The validation runs whose model, dataset and batch size the calibration also measured."""
    if not configs:
        return []
    clash = sorted(
        {
            r["run_id"]
            for r in vals
            for c in configs
            if c["model"] == _model(r)
            and int(c["batch"]) == r["spec"]["batch_size"]
            and c.get("dataset") in (None, r["spec"]["dataset"])
        }
    )
    return [
        "Validation runs with a model, dataset and batch size the calibration also measured: "
        + (", ".join(f"`{c}`" for c in clash) if clash else "**none**")
        + ".",
        "",
    ]


def _compute_profile_lines(configs: list[dict]) -> list[str]:
    """Which models' per-row compute times come from the profile's compute profile."""
    profiled = sorted({(c["model"], c.get("dataset") or "?") for c in configs if c["stage"] == "compute profile"})
    if not profiled:
        return []
    return [
        "The per-row compute times of " + ", ".join(f"`{m}` ({d})" for m, d in profiled) + " come from the "
        "profile's compute profile: each row timed by `simdl calibrate` (compute stage, every rank "
        "at once, no communication) at the batch sizes listed above, and interpolated linearly in "
        "the batch to each validation run's batch size, which the calibration did not measure. "
        "Communication, overlap, copies, the optimizer and memory are predicted, not measured.",
        "",
    ]


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
        out += [
            {"stage": stage, "model": model, "dataset": dataset, "batch": b, "ranks": ranks} for b in sorted(batches)
        ]
    for key, v in (calib.get("strategy_steps_measured") or {}).items():
        if isinstance(v, dict) and v.get("model") and v.get("batch") and not v.get("skipped"):
            out.append(
                {
                    "stage": "strategies",
                    "model": v["model"],
                    "dataset": v.get("dataset"),
                    "batch": int(v["batch"]),
                    "ranks": ranks,
                    "variant": v.get("variant") or key.split("/")[0],
                }
            )
    return out


def _env_text(r: dict) -> str:
    from simdl.cluster.host import allocator_env_text

    return allocator_env_text((r.get("host") or {}).get("allocator_env") or {})


def _setup_section(records: list[dict]) -> list[str]:
    lines = ["## Setup", ""]
    lines += _host_lines(records) + _allocator_lines(records) + _other_host_lines(records)
    lines += _teardown_lines(records) + _host_load_lines(records) + _harness_lines(records)
    lines += _oversubscribed_lines(records)
    lines.append("")
    return lines


def _host_lines(records: list[dict]) -> list[str]:
    hosts = {(r.get("host") or {}).get("hostname", "?"): r.get("host") or {} for r in records}
    lines = []
    for name, h in hosts.items():
        # The processor, where the run recorded it (a VM keeps its hostname when it changes).
        cpus = sorted(
            {
                (r.get("host") or {}).get("cpu_model") or "not recorded"
                for r in records
                if (r.get("host") or {}).get("hostname", "?") == name
            }
        )
        lines.append(
            f"- host `{name}`: {h.get('cpu_cores', '?')} CPU cores ({', '.join(cpus)}), "
            f"torch {h.get('torch', '?')}, CUDA {'yes' if h.get('cuda') else 'no'}, "
            f"Python {h.get('python', '?')}"
        )
    return lines


def _allocator_lines(records: list[dict]) -> list[str]:
    # glibc malloc settings (where recorded; simdl.cluster.host.allocator_env): they
    # decide whether FSDP2's CPU steps fault their gradients in again every step.
    from collections import Counter

    lines = []
    envs = Counter(_env_text(r) for r in records)
    if any(envs):
        named = {e: f"`{e}`" if e else "glibc's defaults" for e in envs}
        lines.append(
            "- C allocator settings of the ranks: "
            + "; ".join(f"{named[e]} ({n} runs)" for e, n in sorted(envs.items()))
        )
    malloc = sorted({r["allocator_mismatch"] for r in records if r.get("allocator_mismatch")})
    if malloc:
        n = sum(1 for r in records if r.get("allocator_mismatch"))
        lines.append(
            f"- **Predicted with a profile timed under other malloc settings** ({n} of {len(records)} "
            "runs): " + "; ".join(malloc) + ". glibc's heap trimming moved the same runs by up to 40 % "
            "on the Zen 4 (validate/README), so their errors include it."
        )
    return lines


def _other_host_lines(records: list[dict]) -> list[str]:
    other = sorted({r["host_mismatch"] for r in records if r.get("host_mismatch")})
    if not other:
        return []
    n = sum(1 for r in records if r.get("host_mismatch"))
    return [
        f"- **Predicted with a profile of another processor** ({n} of {len(records)} runs): "
        + "; ".join(other)
        + ". Their errors measure the move between hosts as much as simdl."
    ]


def _teardown_lines(records: list[dict]) -> list[str]:
    torn = [r for r in records if r.get("teardown_error")]
    if not torn:
        return []
    # validate.run keeps a run whose ranks all wrote their records before one failed.
    return [
        f"- **A rank failed while tearing down** ({len(torn)} of {len(records)} runs: "
        + ", ".join(f"`{r['run_id']}`" for r in torn)
        + "): every rank had written its complete "
        "record first, so the measurements are used; the runs' `teardown_error` says what failed."
    ]


def _host_load_lines(records: list[dict]) -> list[str]:
    # validate.run measures what other processes took of the CPU before and
    # during each run (simdl.calibrate.host_load): on 2 cores one other job slows a run by a third.
    metered = [r for r in records if (r.get("host_cpu") or {}).get("others_cores") is not None]
    busy = [(r, host_load.busy_note(r)) for r in records if host_load.busy_note(r)]
    if busy:
        return [
            f"- **Other processes were busy** ({len(busy)} of {len(records)} runs, more than "
            f"{host_load.BUSY_CORES:g} of a core on average): "
            + "; ".join(f"`{r['run_id']}`: {why}" for r, why in busy)
            + ". Their measured times include that contention; simdl's predictions do not."
        ]
    if metered:
        worst = max((r["host_cpu"]["others_cores"] for r in metered), default=0.0)
        return [
            f"- Other processes' CPU, measured during {len(metered)} of {len(records)} runs: at most "
            f"{worst:.2f} cores on average (runs above {host_load.BUSY_CORES:g} would be listed here)."
        ]
    return []


def _harness_lines(records: list[dict]) -> list[str]:
    """How validate.run trains each strategy family, with the PS runs' recorded RPC transports."""
    # validate/train.py records the RPC transport of each PS run (uv: TensorPipe's default shm
    # transport's busy-polling reactor slows oversubscribed runs; older records ran shm).
    kinds = sorted(
        {
            str(t)
            for r in records
            if registry.is_client_server(str((r.get("spec") or {}).get("strategy", "")))
            and (t := (r.get("measured") or {}).get("transport")) is not None
        }
    )
    ps_transport = ("; transport as recorded per run: " + ", ".join(f"`{k}`" for k in kinds)) if kinds else ""
    return [
        "- DDP / FSDP: torchrun, gloo on CPU (NCCL on GPU); FSDP is FSDP2 `fully_shard` per block unit "
        "(the units simdl's plan assumes), full = reshard after forward, grad_op = keep, none = a "
        "world x 1 replicate x shard mesh.",
        f"- Parameter server: `torch.distributed.rpc` (TensorPipe{ps_transport}) with one server process holding the "
        "parameters, the SGD-momentum optimizer and a version counter; staleness = server version at "
        "application minus the version the worker pulled.",
        "- Every run: SGD(momentum 0.9), fp32, `DataLoader(num_workers=0)` over in-memory tensors, "
        "test accuracy after the last epoch, no checkpoints.",
    ]


def _oversubscribed_lines(records: list[dict]) -> list[str]:
    over = [r for r in records if r.get("oversubscribed")]
    if not over:
        return []
    return [
        f"- **Oversubscribed runs** ({len(over)} of {len(records)}): more processes than CPU cores "
        "(4-rank runs, and PS runs whose server is one more process). Allowed here because the "
        "prediction is given the same sharing: the cluster profile is a derived copy with one device "
        "slot per rank (named per run); marked with triangles in the parity plot and `*` in tables."
    ]
