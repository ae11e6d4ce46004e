"""Chrome trace export of a simulated run (opens in Perfetto and chrome://tracing).

Trace Event Format (Google, "Trace Event Format" document): complete events
``{"ph": "X", "ts": start_us, "dur": dur_us, "pid": ..., "tid": ...}`` with ``ts``/``dur`` in
microseconds, plus ``"ph": "M"`` metadata naming processes and threads. As vidur does,
so that a simulated step can be opened beside a torch.profiler trace of the real one.

Layout: one process per rank class (``rank 3`` or ``ranks 0-1023`` when one simulated
process stands for a symmetric class), one thread per stream (compute, comm,
comm_reduce; ``push/pull`` for PS workers); one ``links`` process with one thread per link
that carried traffic, its slices labelled with the link's utilisation.
"""

from __future__ import annotations

import json
from pathlib import Path

_LINK_PID = 1_000_000


def _label(members: tuple[int, ...]) -> str:
    if len(members) == 1:
        return f"rank {members[0]}"
    if members == tuple(range(members[0], members[-1] + 1)):
        return f"ranks {members[0]}-{members[-1]}"
    return f"ranks {members[0]},... ({len(members)})"


def chrome_trace(run, max_links: int | None = None) -> dict:
    """The trace of a :class:`~simdl.sim.engine.SimRun` as a JSON-ready dict."""
    events: list[dict] = []
    tids: dict[tuple[int, str], int] = {}

    def tid(pid: int, stream: str) -> int:
        key = (pid, stream)
        if key not in tids:
            tids[key] = len([k for k in tids if k[0] == pid]) + 1
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tids[key], "args": {"name": stream}})
        return tids[key]

    for c, members in enumerate(run.classes):
        events.append({"ph": "M", "name": "process_name", "pid": c, "args": {"name": _label(members)}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": c, "args": {"sort_index": c}})
    for r in run.records:
        events.append(
            {
                "ph": "X",
                "name": r.name,
                "cat": r.phase,
                "pid": r.cls,
                "tid": tid(r.cls, r.stream),
                "ts": r.start * 1e6,
                "dur": (r.end - r.start) * 1e6,
                "args": {"iteration": r.iteration},
            }
        )
    for w, it, s, e, kind in getattr(run, "transfers", ()):
        events.append(
            {
                "ph": "X",
                "name": kind,
                "cat": "comm",
                "pid": w,
                "tid": tid(w, "push/pull"),
                "ts": s * 1e6,
                "dur": (e - s) * 1e6,
                "args": {"iteration": it},
            }
        )
    segs = run.link_segments
    links = sorted(
        segs, key=lambda link: -run.link_bytes_per_iteration[link] if link < len(run.link_bytes_per_iteration) else 0
    )
    if max_links is not None:
        links = links[:max_links]
    if links:
        events.append({"ph": "M", "name": "process_name", "pid": _LINK_PID, "args": {"name": "links"}})
    for link in sorted(links):
        t = tid(_LINK_PID, run.link_names[link])
        for s, e, u in segs[link]:
            if e > s:
                events.append(
                    {
                        "ph": "X",
                        "name": f"{100 * u:.0f}%",
                        "cat": "link",
                        "pid": _LINK_PID,
                        "tid": t,
                        "ts": s * 1e6,
                        "dur": (e - s) * 1e6,
                        "args": {"utilization": round(u, 4)},
                    }
                )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "simdl": "simulated timeline",
            **{k: v for k, v in run.result.config.items() if isinstance(v, (str, int, float, bool))},
        },
    }


def write_chrome_trace(run, path: str | Path, max_links: int | None = None) -> int:
    """Write the trace; returns the number of events."""
    trace = chrome_trace(run, max_links)
    Path(path).write_text(json.dumps(trace))
    return len(trace["traceEvents"])
