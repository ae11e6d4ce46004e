"""PNG figures of a validation report (matplotlib, Agg backend: no display needed).

Each function takes the results records and an output directory, writes one PNG and
returns its file name (or None when there is nothing to draw).
"""

from __future__ import annotations

from pathlib import Path

from .metrics import METRIC_BY_KEY, pairs


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _colors(labels):
    plt = _plt()
    cmap = plt.get_cmap("tab10")
    return {lab: cmap(i % 10) for i, lab in enumerate(sorted(set(labels)))}


def parity(records: list[dict], out: Path, engine: str = "analytic") -> str | None:
    plt = _plt()
    keys = [k for k in ("step_time", "peak_memory", "total_time") if pairs(records, METRIC_BY_KEY[k], engine)]
    if not keys:
        return None
    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 4.6), squeeze=False)
    labels = [r["label"] for r in records if r.get("status") == "ok"]
    colors = _colors(labels)
    for ax, key in zip(axes[0], keys):
        metric = METRIC_BY_KEY[key]
        ps = pairs(records, metric, engine)
        scale = 2**20 if metric.unit == "B" else 1.0
        unit = "MiB" if metric.unit == "B" else metric.unit
        seen = set()
        for r, m, p, _ in ps:
            lab = r["label"]
            ax.scatter(
                m / scale,
                p / scale,
                color=colors[lab],
                label=None if lab in seen else lab,
                marker="o" if not r.get("oversubscribed") else "^",
                s=30,
            )
            seen.add(lab)
        vals = [v / scale for _, m, p, _ in ps for v in (m, p) if v > 0]
        lo, hi = min(vals) * 0.7, max(vals) * 1.4
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.fill_between(
            [lo, hi], [lo * 0.85, hi * 0.85], [lo * 1.15, hi * 1.15], color="grey", alpha=0.15, label="+-15%"
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel(f"measured ({unit})")
        ax.set_ylabel(f"predicted, {engine} ({unit})")
        ax.set_title(metric.title)
        ax.legend(fontsize=7)
    fig.suptitle("simdl vs real runs (triangles: oversubscribed runs)")
    fig.tight_layout()
    name = f"parity_{engine}.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def error_by_strategy(records: list[dict], out: Path, engine: str = "analytic") -> str | None:
    plt = _plt()
    keys = [k for k in ("step_time", "peak_memory") if pairs(records, METRIC_BY_KEY[k], engine)]
    if not keys:
        return None
    fig, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 4), squeeze=False)
    for ax, key in zip(axes[0], keys):
        by: dict[str, list[float]] = {}
        for r, _, _, e in pairs(records, METRIC_BY_KEY[key], engine):
            by.setdefault(r["label"], []).append(100 * e)
        labs = sorted(by)
        try:
            ax.boxplot([by[lab] for lab in labs], tick_labels=labs, showmeans=True)
        except TypeError:  # matplotlib < 3.9 calls it labels
            ax.boxplot([by[lab] for lab in labs], labels=labs, showmeans=True)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_ylabel("error, % (predicted - measured) / measured")
        ax.set_title(METRIC_BY_KEY[key].title)
        ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    name = f"error_by_strategy_{engine}.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def memory_over_time(records: list[dict], out: Path, limit: int = 6) -> str | None:
    """Measured live allocator bytes through the profiled step; the simulated timeline
    where the sim engine gave one, else the analytic peak as a line."""
    plt = _plt()
    chosen = [r for r in records if r.get("status") == "ok" and (r.get("measured") or {}).get("memory_timeline")]
    # one run per (model, strategy label) at the smallest world size, cheap ones first
    seen, picked = set(), []
    for r in sorted(chosen, key=lambda r: (r["spec"]["ranks"], r["spec"]["experiment"])):
        k = (r["spec"]["model"], r["label"])
        if k not in seen:
            seen.add(k)
            picked.append(r)
    picked = picked[:limit]
    if not picked:
        return None
    cols = min(3, len(picked))
    rows = -(-len(picked) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.4 * rows), squeeze=False)
    for ax in axes.flat[len(picked) :]:
        ax.axis("off")
    for ax, r in zip(axes.flat, picked):
        # Time as a fraction of each side's own step: the shapes compare even where the
        # step times differ; the legend gives each step's length.
        tl = r["measured"]["memory_timeline"]
        span = max(tl[-1][0], 1e-12)
        ax.plot(
            [t / span for t, _ in tl],
            [b / 2**20 for _, b in tl],
            lw=1,
            label=f"measured (profiler), step {span * 1e3:.3g} ms",
        )
        sim = (r.get("predicted") or {}).get("sim") or {}
        if isinstance(sim.get("memory_timeline"), list) and sim["memory_timeline"]:
            st = sim["memory_timeline"]
            try:
                sspan = max(float(sim.get("iteration_time_s") or 0), st[-1][0], 1e-12)
                ax.plot(
                    [p[0] / sspan for p in st],
                    [p[1] / 2**20 for p in st],
                    lw=1,
                    label=f"simulated, step {sspan * 1e3:.3g} ms",
                )
            except (TypeError, IndexError, KeyError):
                pass
        an = (r.get("predicted") or {}).get("analytic") or {}
        if an.get("peak_tensor_bytes"):
            ax.axhline(
                an["peak_tensor_bytes"] / 2**20, color="C3", ls="--", lw=1, label="predicted peak tensors (analytic)"
            )
        ax.set_title(f"{r['model_name'].rpartition(':')[2]} {r['label']} x{r['spec']['ranks']}", fontsize=9)
        ax.set_xlabel("fraction of the step")
        ax.set_ylabel("tensor memory (MiB)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    name = "memory_over_time.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def staleness_histograms(records: list[dict], out: Path) -> str | None:
    from ..strategies import registry

    plt = _plt()
    runs = [
        r
        for r in records
        if r.get("status") == "ok"
        and registry.is_client_server(r["spec"]["strategy"])
        and ((r.get("measured") or {}).get("staleness") or {}).get("histogram")
    ]
    if not runs:
        return None
    cols = min(3, len(runs))
    rows = -(-len(runs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat[len(runs) :]:
        ax.axis("off")
    for ax, r in zip(axes.flat, runs):
        # The steady state (pooled over repeats) is what the tables compare with the prediction;
        # every update, start and end included, is drawn as an outline beside it.
        every = r["measured"]["staleness"]
        steady = r["measured"].get("staleness_steady") or {}
        st = steady if steady.get("histogram") else every
        hist = {int(k): v for k, v in st["histogram"].items()}
        n = sum(hist.values())
        what = "steady state" if st is steady else "every update"
        ax.bar(
            list(hist),
            [v / n for v in hist.values()],
            width=0.8,
            alpha=0.7,
            label=f"measured, {what} (mean {st['mean']:.2f}, {n} updates)",
        )
        if st is steady:
            eh = {int(k): v for k, v in every["histogram"].items()}
            en = sum(eh.values())
            ks = sorted(eh)
            ax.bar(
                ks,
                [eh[k] / en for k in ks],
                width=0.8,
                fill=False,
                edgecolor="0.4",
                ls=":",
                label=f"measured, every update (mean {every['mean']:.2f})",
            )
        sim = (r.get("predicted") or {}).get("sim") or {}
        sh = sim.get("staleness_histogram")
        if isinstance(sh, dict) and sh:
            tot = sum(sh.values())
            ax.plot([int(k) for k in sh], [v / tot for v in sh.values()], "o-", color="C2", label="simulated")
        pm = (((r.get("predicted") or {}).get("analytic") or {}).get("staleness") or {}).get("mean")
        if pm is not None:
            ax.axvline(pm, color="C3", ls="--", label=f"analytic mean {pm:.2f}")
        ax.set_title(f"{r['model_name'].rpartition(':')[2]} {r['label']} ({r['spec']['ranks']} workers)", fontsize=9)
        ax.set_xlabel("staleness (updates)")
        ax.set_ylabel("fraction of updates")
        ax.legend(fontsize=7)
    fig.tight_layout()
    name = "staleness.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def exp1_times(records: list[dict], out: Path) -> str | None:
    """Study 1 Fig.-style bars: training time per model and strategy, measured vs predicted."""
    plt = _plt()
    runs = [r for r in records if r.get("status") == "ok" and r["spec"]["experiment"] == "exp1"]
    if not runs:
        return None
    ranks = sorted({r["spec"]["ranks"] for r in runs})
    fig, axes = plt.subplots(1, len(ranks), figsize=(6 * len(ranks), 4), squeeze=False)
    for ax, n in zip(axes[0], ranks):
        sub = [r for r in runs if r["spec"]["ranks"] == n]
        keys = [(r["model_name"].rpartition(":")[2], r["label"]) for r in sub]
        x = range(len(sub))
        ax.bar([i - 0.2 for i in x], [r["measured"]["step_time_s"]["median"] for r in sub], 0.4, label="measured")
        ax.bar(
            [i + 0.2 for i in x],
            [r["predicted"]["analytic"].get("iteration_time_s", 0) for r in sub],
            0.4,
            label="predicted (analytic)",
        )
        ax.set_xticks(list(x))
        ax.set_xticklabels([f"{m}\n{s}" for m, s in keys], fontsize=7, rotation=45)
        ax.set_ylabel("step time (s)")
        ax.set_title(f"experiment 1, {n} ranks")
        ax.legend(fontsize=8)
    fig.tight_layout()
    name = "exp1_step_time.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def write_all(records: list[dict], out: Path, engines: list[str]) -> list[str]:
    names = []
    for eng in engines:
        names += [parity(records, out, eng), error_by_strategy(records, out, eng)]
    names += [memory_over_time(records, out), staleness_histograms(records, out), exp1_times(records, out)]
    return [n for n in names if n]
