"""The validation report's tables shaped like the source studies': experiments 1 and 2, staleness bounds, ViT, strategies, ordering."""

from __future__ import annotations

from typing import Any

from ..strategies import registry
from .metrics import METRIC_BY_KEY, summary
from .validation_common import ORDER_TOLERANCE, _model, _ok, _pct, _triple, ordering


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
    lines = [
        "## Study 1, experiment 1: DDP and FSDP on CIFAR-10-shaped data",
        "",
        "Step time and peak memory per rank, measured / predicted / error, by model and strategy "
        "(the layout of the study's training-time table). `*`: oversubscribed.",
        "",
    ]
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
            r: dict[str, Any] | None = next(
                (x for x in runs if (_model(x), x["label"]) == (model, label) and x["spec"]["ranks"] == n), None
            )
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
    lines = [
        "## Study 1, experiment 2: parameter server, sync vs async",
        "",
        "Measured / predicted / error. Accuracy is measured only (simdl predicts none). `*`: oversubscribed.",
        "",
        "| model | mode | workers | step time | training time | peak memory | test accuracy | staleness mean (measured, every update / steady state / predicted) | data |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        if r.get("status") != "ok":
            lines.append(f"| {_model(r)} | {r['label']} | {r['spec']['ranks']} | failed | | | | | |")
            continue
        m = r["measured"]
        st = m.get("staleness") or {}
        steady = m.get("staleness_steady") or {}
        steady_mean = f"{steady['mean']:.2f}" if steady else "-"
        ps = (r["predicted"].get(engine) or {}).get("staleness") or {}
        acc = m.get("test_accuracy")
        lines.append(
            f"| {_model(r)} | {r['label']} | {r['spec']['ranks']}{_flag(r)} | "
            f"{' / '.join(_triple(r, 'step_time', engine))} | {' / '.join(_triple(r, 'total_time', engine))} | "
            f"{' / '.join(_triple(r, 'peak_memory', engine))} | "
            f"{'-' if acc is None else f'{100 * acc:.1f}%'} | "
            f"{st.get('mean', 0):.2f} / {steady_mean} / {ps.get('mean', 0):.2f} | "
            f"{m.get('data', '')} |"
        )
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
    asyn = {
        (_model(r), r["spec"]["ranks"], r["spec"]["batch_size"]): r
        for r in _ok(records)
        if _unbounded_stale(r["spec"]["strategy"])
    }
    lines = [
        "## Stale-synchronous bound",
        "",
        "How often the bound held a pull back (a worker more than the bound ahead of the slowest waits): "
        "measured by the server (every pull of the run), predicted by the SimPy engine. SSP / async: the step "
        "time of the SSP run over the async run of the same model, measured and predicted (sim).",
        "",
        "| model | mode | pulls held, measured | predicted (sim) | mean wait per pull, measured / predicted | "
        "SSP / async step, measured / predicted |",
        "|---|---|---|---|---|---|",
    ]
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
        lines.append(
            f"| {_model(r)} | {r['label']} | {h['held']}/{h['pulls']} ({100 * h['fraction']:.0f}%) | {pred} | "
            f"{wait_m} / {wait_p} | {ratio} |"
        )
    lines.append("")
    return lines


def vit_table(records: list[dict], engine: str) -> list[str]:
    runs = [r for r in records if r["spec"]["experiment"] == "vit"]
    if not runs:
        return []
    lines = [
        "## Study 2: ViT under FSDP at several batch sizes",
        "",
        "| model | sharding | ranks | batch/rank | step time | peak memory | bytes sent/step |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        if r.get("status") != "ok":
            lines.append(
                f"| {_model(r)} | {r['spec']['sharding']}{_mesh(r)} | {r['spec']['ranks']} | {r['spec']['batch_size']} | failed | | |"
            )
            continue
        lines.append(
            f"| {_model(r)} | {r['spec']['sharding']}{_mesh(r)} | {r['spec']['ranks']}{_flag(r)} | {r['spec']['batch_size']} | "
            f"{' / '.join(_triple(r, 'step_time', engine))} | {' / '.join(_triple(r, 'peak_memory', engine))} | "
            f"{' / '.join(_triple(r, 'comm_bytes', engine))} |"
        )
    lines.append("")
    return lines


def strategy_table(records: list[dict], engine: str) -> list[str]:
    lines = [
        "## Error by strategy",
        "",
        "| strategy | runs | step-time MAPE | step-time bias | memory MAPE | busy-fraction MAPE |",
        "|---|---|---|---|---|---|",
    ]
    labels = sorted({r["label"] for r in _ok(records)})
    for lab in labels:
        sub = [r for r in records if r.get("label") == lab]
        s = summary(sub, engine)
        lines.append(
            f"| {lab} | {s['step_time']['n']} | {_pct(s['step_time']['mape'])} | {_pct(s['step_time']['bias'], True)} | "
            f"{_pct(s['peak_memory']['mape'])} | {_pct(s['busy']['mape'])} |"
        )
    lines.append("")
    return lines


def ordering_table(records: list[dict], engine: str) -> list[str]:
    lines = [
        "## Ordering of strategies",
        "",
        f"Fastest / smallest first. Every pair of strategies whose measured values differ by more than "
        f"{100 * ORDER_TOLERANCE:.0f}% must be ordered the same way by the prediction (closer pairs are ties).",
        "",
        "| by | experiment, model, ranks, batch | measured | predicted | pairs judged | discordant pairs |",
        "|---|---|---|---|---|---|",
    ]
    for key, what in (("step_time", "time"), ("peak_memory", "memory")):
        for o in ordering(records, key, engine):
            g = o["group"]
            lines.append(
                f"| {what} | {g[0]}, {g[1]}, {g[2]}, {g[3]} | {' < '.join(o['measured'])} | "
                f"{' < '.join(o['predicted'])} | {o['pairs_judged']} | {', '.join(o['discordant']) or 'none'} |"
            )
    lines.append("")
    return lines


# Which run of a group the others are set against: the strategy a user would start from.
# The simplest label of each registered family (simdl.strategies.registry.labels order).
