"""Links and flows: flow-level max-min fair bandwidth sharing on a SimPy timeline.

Every directed edge of the topology graph is a link with a capacity (bytes/s). A *flow*
moves ``nbytes`` at one rate ``r`` over a set of links; on link ``l`` it uses
``w[l] * r`` of the capacity (``w`` counts how many of the flow's edges cross the link,
divided by the efficiency those edges reach). A pipelined ring step pattern is one flow
whose edges all advance at the ring's pace, which is how NCCL's ring behaves: the slowest
edge sets the rate of every edge (see :mod:`simdl.sim.collectives`).

Rates are max-min fair (Bertsekas & Gallager, *Data Networks*, 2nd ed., section 6.5.2,
progressive filling): raise all unfrozen rates together until some link is full, freeze
the flows crossing it, repeat. They are recomputed whenever a flow starts or ends, so an
incast of N flows into one NIC gives each 1/N, and two collectives sharing a link slow
each other down for exactly as long as they overlap.

Delay lives here, not in sender or receiver (SimPy's ``latency.py`` example): a flow's
completion event fires after its last byte has drained *and* its latency has elapsed.

Changes that happen at the same simulated instant (e.g. 128 node-local collectives
launched together) are batched into one recomputation by deferring it to a zero-delay
event. A recomputation is incremental: only the flows connected through shared links to
one that started or ended get new rates, and only their links new loads (max-min fairness
splits over those components), so node-local collectives on different nodes do not
recompute each other.

Cost of one recomputation: O(P_c x r) for the P_c (flow, link) pairs of the changed
components, r the rounds of progressive filling (distinct bottleneck levels, at most the
number of flows), plus O(F) for the F flows in flight and O(L) numpy work on the L links
(drain accounting and the change log).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import simpy

# A flow whose remaining drain time is below this is finished (guards float round-off).
_EPS_TIME = 1e-15


@dataclass(eq=False)
class Flow:
    """One flow: a rate shared over ``links`` with demand weights ``weights`` per unit rate."""

    name: str
    links: np.ndarray  # link indices (unique)
    weights: np.ndarray  # capacity used per unit of rate on each link
    payload: np.ndarray  # payload bytes per link per byte of the flow (for link byte counts)
    remaining: float  # bytes still to drain
    latency: float
    done: simpy.Event
    rate: float = 0.0
    started: float = 0.0
    nbytes: float = 0.0
    tag: dict = field(default_factory=dict)
    group: object = None  # flows of one collective; without contention only they share links


@dataclass
class LinkStats:
    """Per-link totals over a window of the run."""

    bytes: np.ndarray
    busy_s: np.ndarray
    load_s: np.ndarray  # integral of (capacity used / capacity) dt: utilisation x time


def max_min_rates(
    capacity: np.ndarray, flow_of_pair: np.ndarray, link_of_pair: np.ndarray, weight_of_pair: np.ndarray, n_flows: int
) -> np.ndarray:
    """Max-min fair rates by progressive filling (Bertsekas & Gallager, section 6.5.2).

    ``capacity[l]``: capacity of link l; each (flow, link, weight) triple says the flow uses
    ``weight * rate`` of the link. Links are indexed 0..len(capacity)-1. Returns the rates.
    A flow that crosses no link with finite capacity gets ``inf``.
    """
    rate = np.full(n_flows, np.inf)
    if n_flows == 0 or len(flow_of_pair) == 0:
        return rate
    rem = capacity.astype(float).copy()
    unfrozen = np.ones(n_flows, dtype=bool)
    n_links = len(capacity)
    # Flows with no pair at all stay at inf; only flows with pairs take part.
    has_pair = np.zeros(n_flows, dtype=bool)
    has_pair[flow_of_pair] = True
    unfrozen &= has_pair
    active_pair = np.ones(len(flow_of_pair), dtype=bool)
    while unfrozen.any():
        wsum = np.bincount(link_of_pair[active_pair], weights=weight_of_pair[active_pair], minlength=n_links)
        with np.errstate(divide="ignore", invalid="ignore"):
            level = np.where(wsum > 0, np.maximum(rem, 0.0) / wsum, np.inf)
        t = float(level.min())
        if not np.isfinite(t):
            break
        bottleneck = level <= t * (1.0 + 1e-12)
        hit = active_pair & bottleneck[link_of_pair]
        freeze = np.zeros(n_flows, dtype=bool)
        freeze[flow_of_pair[hit]] = True
        freeze &= unfrozen
        rate[freeze] = t
        unfrozen &= ~freeze
        newly = freeze[flow_of_pair] & active_pair
        rem -= np.bincount(link_of_pair[newly], weights=weight_of_pair[newly] * t, minlength=n_links)
        active_pair &= ~newly
    return rate


class Network:
    """The links of a topology and the flows crossing them, on ``env``'s timeline."""

    def __init__(
        self,
        env: simpy.Environment,
        capacity: np.ndarray,
        names: list[str],
        record_segments: bool = True,
        contention: bool = True,
    ):
        self.env = env
        # contention=False: every collective (flow group) runs at the rates it would get alone
        # (the analytic model's assumption); a diagnostic that isolates what sharing costs.
        self.contention = contention
        self.capacity = np.asarray(capacity, dtype=float)
        self.names = list(names)
        n = len(self.capacity)
        self.flows: list[Flow] = []
        self._added: list[Flow] = []  # flows started since the last recomputation
        self._load = np.zeros(n)  # capacity used, bytes/s
        self._payload = np.zeros(n)  # payload bytes/s
        self._last = env.now
        self._version = 0
        self._pending = False
        self.bytes = np.zeros(n)
        self.busy_s = np.zeros(n)
        self.load_s = np.zeros(n)
        self.record_segments = record_segments
        # (time, links whose load changed, their new utilisation), for traces.
        self._changes: list[tuple[float, np.ndarray, np.ndarray]] = []
        self.recomputes = 0

    # ------------------------------------------------------------------ public

    def transfer(
        self,
        links,
        weights,
        nbytes: float,
        latency: float = 0.0,
        payload=None,
        name: str = "",
        tag: dict | None = None,
        group: object = None,
    ) -> simpy.Event:
        """Start a flow; the returned event fires when its bytes have drained and its
        latency has passed. ``links``/``weights`` may repeat a link (weights add up)."""
        done = self.env.event()
        links = np.asarray(links, dtype=np.int64)
        weights = np.asarray(weights, dtype=float)
        payload = weights if payload is None else np.asarray(payload, dtype=float)
        if nbytes <= 0 or len(links) == 0:
            self._after_latency(done, latency)
            return done
        if len(links) > 1 and not np.all(links[1:] > links[:-1]):  # not yet unique and sorted
            ul, inv = np.unique(links, return_inverse=True)
            w = np.bincount(inv, weights=weights, minlength=len(ul))
            p = np.bincount(inv, weights=payload, minlength=len(ul))
        else:
            ul, w, p = links, weights, payload
        flow = Flow(
            name,
            ul,
            w,
            p,
            float(nbytes),
            float(latency),
            done,
            started=self.env.now,
            nbytes=float(nbytes),
            tag=tag or {},
            group=group if group is not None else object(),
        )
        self._advance()
        self.flows.append(flow)
        self._added.append(flow)
        self._schedule_recompute()
        return done

    def stats(self) -> LinkStats:
        self._advance()
        return LinkStats(self.bytes.copy(), self.busy_s.copy(), self.load_s.copy())

    # ------------------------------------------------------------------ internals

    def _after_latency(self, done: simpy.Event, latency: float) -> None:
        if latency > 0:

            def arrive(_event: simpy.Event) -> None:
                done.succeed()

            self.env.timeout(latency).callbacks.append(arrive)
        else:
            done.succeed()

    def _advance(self) -> None:
        """Drain every flow at its current rate up to now and accumulate link statistics."""
        now = self.env.now
        dt = now - self._last
        if dt > 0:
            for f in self.flows:
                if f.rate > 0:
                    f.remaining -= f.rate * dt
            self.bytes += self._payload * dt
            self.busy_s += (self._load > 0) * dt
            with np.errstate(divide="ignore", invalid="ignore"):
                self.load_s += np.where(self.capacity > 0, self._load / self.capacity, 0.0) * dt
        self._last = now

    def _schedule_recompute(self) -> None:
        if not self._pending:
            self._pending = True
            self.env.timeout(0).callbacks.append(self._recompute)

    def _recompute(self, _event=None) -> None:
        self._pending = False
        self._advance()
        # Finish flows that have drained.
        keep = []
        gone = []
        # A drain time too small to move the clock (below the float spacing of ``now``) would
        # schedule a wake-up at the same instant again and again: such a flow is finished too.
        eps = max(_EPS_TIME, 4.0 * math.ulp(self.env.now))
        for f in self.flows:
            if f.remaining <= 0 or (f.rate > 0 and f.remaining / f.rate <= eps) or f.remaining <= 1e-12 * f.nbytes:
                self._after_latency(f.done, f.latency)
                gone.append(f)
            else:
                keep.append(f)
        self.flows = keep
        changed, self._added = gone + self._added, []
        self.recomputes += 1
        if self.contention:
            load, payload = self._share_changed(keep, changed)
        else:
            load, payload = self._share_alone(keep)
        if self.record_segments:
            self._record(load)
        self._load, self._payload = load, payload
        self._version += 1
        if keep:
            with np.errstate(divide="ignore"):
                t_next = min(f.remaining / f.rate if f.rate > 0 else np.inf for f in keep)
            if np.isfinite(t_next):
                version = self._version
                self.env.timeout(max(t_next, 0.0)).callbacks.append(lambda _e: self._wake(version))

    def _share_changed(self, flows: list[Flow], changed: list[Flow]) -> tuple[np.ndarray, np.ndarray]:
        """Max-min rates of the flows connected to a changed one (through shared links, at
        any distance); other flows keep their rates, and links they alone use keep their load.

        Max-min fairness splits over the connected components of the flow-link graph (a
        component's rates depend only on its own links), so this is the full computation's
        answer, up to the relative 1e-12 within which :func:`max_min_rates` treats two
        bottleneck levels as one.
        """
        n = len(self.capacity)
        if not flows:
            return np.zeros(n), np.zeros(n)
        touched = np.zeros(n, dtype=bool)
        for f in changed:
            touched[f.links] = True
        flow_of_pair = np.repeat(np.arange(len(flows)), [len(f.links) for f in flows])
        link_of_pair = np.concatenate([f.links for f in flows])
        hit = np.zeros(len(flows), dtype=bool)
        hit[flow_of_pair[touched[link_of_pair]]] = True
        if hit.all():  # one component (a world ring): every flow, every link, from scratch
            return self._share(flows, flow_of_pair, link_of_pair, None)
        while True:  # grow the set of links until no further flow crosses it
            grown = touched.copy()
            grown[link_of_pair[hit[flow_of_pair]]] = True
            if np.array_equal(grown, touched):
                break
            touched = grown
            hit[flow_of_pair[touched[link_of_pair]]] = True
        part = [f for f, h in zip(flows, hit.tolist()) if h]
        in_part = hit[flow_of_pair]
        return self._share(part, (np.cumsum(hit) - 1)[flow_of_pair[in_part]], link_of_pair[in_part], touched)

    def _share(self, part: list[Flow], fop: np.ndarray, lop: np.ndarray, touched) -> tuple[np.ndarray, np.ndarray]:
        """Max-min rates of the flows ``part`` (pairs ``fop``/``lop``) and the links' loads: new
        on the ``touched`` links (every link when None), kept elsewhere."""
        n = len(self.capacity)
        new_load: np.ndarray
        new_payload: np.ndarray
        if part:
            weight_of_pair = np.concatenate([f.weights for f in part])
            payload_of_pair = np.concatenate([f.payload for f in part])
            rates = max_min_rates(self.capacity, fop, lop, weight_of_pair, len(part))
            for f, r in zip(part, rates):
                f.rate = float(r)
            r_pair = rates[fop]
            finite = np.isfinite(r_pair)
            if not finite.all():
                lop, r_pair = lop[finite], r_pair[finite]
                weight_of_pair, payload_of_pair = weight_of_pair[finite], payload_of_pair[finite]
            new_load = np.bincount(lop, weights=weight_of_pair * r_pair, minlength=n)
            new_payload = np.bincount(lop, weights=payload_of_pair * r_pair, minlength=n)
        else:
            new_load, new_payload = np.zeros(n), np.zeros(n)
        if touched is None:
            return new_load, new_payload
        # Every link of the component is touched, and only its flows cross touched links.
        load, payload = self._load.copy(), self._payload.copy()
        load[touched] = new_load[touched]
        payload[touched] = new_payload[touched]
        return load, payload

    def _share_alone(self, flows: list[Flow]) -> tuple[np.ndarray, np.ndarray]:
        """contention=False: each collective's flows share links only among themselves."""
        n = len(self.capacity)
        if not flows:
            return np.zeros(n), np.zeros(n)
        rates = np.empty(len(flows))
        groups: dict = {}
        for k, f in enumerate(flows):
            groups.setdefault(f.group, []).append(k)
        for members in groups.values():
            sub = [flows[k] for k in members]
            rates[members] = max_min_rates(
                self.capacity,
                np.repeat(np.arange(len(sub)), [len(f.links) for f in sub]),
                np.concatenate([f.links for f in sub]),
                np.concatenate([f.weights for f in sub]),
                len(sub),
            )
        for f, r in zip(flows, rates):
            f.rate = float(r)
        flow_of_pair = np.repeat(np.arange(len(flows)), [len(f.links) for f in flows])
        link_of_pair = np.concatenate([f.links for f in flows])
        r_pair = rates[flow_of_pair]
        finite = np.isfinite(r_pair)
        w = np.concatenate([f.weights for f in flows])[finite] * r_pair[finite]
        p = np.concatenate([f.payload for f in flows])[finite] * r_pair[finite]
        return (
            np.bincount(link_of_pair[finite], weights=w, minlength=n),
            np.bincount(link_of_pair[finite], weights=p, minlength=n),
        )

    def _wake(self, version: int) -> None:
        if version == self._version and not self._pending:
            self._recompute()

    def _record(self, load: np.ndarray) -> None:
        changed = np.flatnonzero(load != self._load)
        if len(changed):
            self._changes.append((self.env.now, changed, load[changed] / self.capacity[changed]))

    @property
    def segments(self) -> dict[int, list[list]]:
        """link -> [[start, end, utilisation], ...]: the intervals each link carried load,
        rebuilt from the change log (kept as arrays during the run, which is cheaper)."""
        segs: dict[int, list[list]] = {}
        for now, idx, util in self._changes:
            for link, u in zip(idx.tolist(), util.tolist()):
                lst = segs.setdefault(link, [])
                if lst and lst[-1][1] is None:
                    if lst[-1][0] == now:
                        lst.pop()
                    else:
                        lst[-1][1] = now
                if u > 0:
                    lst.append([now, None, u])
        end = self._last
        for lst in segs.values():
            if lst and lst[-1][1] is None:
                lst[-1][1] = end
        return segs
