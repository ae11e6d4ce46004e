"""Heterogeneity: per-rank speed factors and seeded random jitter of compute time.

Syntax (CLI and Python, validated here with one-line :class:`SimdlError` messages):

  --straggler rank=0,factor=1.5      rank 0's compute takes 1.5x as long (repeatable)
  --straggler rank=4-7,factor=2      a range of ranks (inclusive)
  --jitter lognormal:0.1             each compute task's time x a lognormal factor with
                                     sigma 0.1 and mean 1 (mu = -sigma^2/2)
  --jitter normal:0.05               x max(N(1, 0.05), 0.05)
  --jitter uniform:0.2               x U(1 - 0.2, 1 + 0.2)
  --jitter none                      no jitter
  --seed 0                           the jitter's seed

Without --jitter, a parameter-server plan on a cluster whose profile measured
``efficiency.compute_jitter`` (simdl.calibrate.jitter) gets a lognormal of that sigma drawn
once per worker and step: it is the spread of whole steps that was measured, so every
compute task of the step takes the same draw (``per_step``). Other plans get none by
default: their profile's step parameters were fitted to measured lockstep steps, which
already pay for the ranks' spread.

A factor multiplies the duration of every compute task (forward, backward, optimizer,
copies) of the rank; communication is governed by the links. Jitter draws come from a
``numpy.random.Generator`` (PCG64) seeded by ``(seed, rank, iteration)``, so a draw does not
depend on the order in which the simulator happens to execute ranks: same seed, same
result, bit for bit. Mean-one jitter keeps the expected compute time unchanged, so what it
costs a synchronous strategy is the expected maximum over ranks (the straggler effect).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import SimdlError

JITTERS = ("none", "lognormal", "normal", "uniform")


@dataclass(frozen=True)
class Heterogeneity:
    factors: tuple[tuple[int, float], ...] = ()  # (rank, factor), ranks unique
    jitter: str = "none"
    jitter_param: float = 0.0
    seed: int = 0
    per_step: bool = False  # one draw per rank and step, shared by the step's compute tasks
    source: str = ""  # where the jitter comes from, for the result's notes
    _factor_map: dict = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.jitter not in JITTERS:
            raise SimdlError(f"--jitter {self.jitter!r}: unknown distribution; accepted: {', '.join(JITTERS)}")
        if self.jitter != "none" and not (self.jitter_param >= 0):
            raise SimdlError(f"--jitter {self.jitter}:{self.jitter_param}: the spread must be >= 0")
        if self.jitter == "uniform" and self.jitter_param >= 1:
            raise SimdlError(f"--jitter uniform:{self.jitter_param}: the half-width must be < 1")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise SimdlError(f"--seed {self.seed!r} must be an integer >= 0")
        self._factor_map.update(dict(self.factors))

    @property
    def jittered(self) -> bool:
        return self.jitter != "none" and self.jitter_param > 0

    def factor(self, rank: int) -> float:
        return self._factor_map.get(rank, 1.0)

    def check_ranks(self, world: int) -> None:
        for r, _ in self.factors:
            if r >= world:
                raise SimdlError(f"--straggler rank={r}: no such rank; accepted: 0..{world - 1}")

    def classes(self, world: int) -> list[tuple[int, ...]]:
        """Ranks that behave identically, so that one process can stand for each set.

        Without jitter, ranks with the same speed factor are interchangeable: every rank
        runs the same plan, and collectives end at the same time for all members. With
        jitter every rank draws its own times, so every rank is its own class.
        """
        if self.jittered:
            return [(r,) for r in range(world)]
        by_factor: dict[float, list[int]] = {}
        for r in range(world):
            by_factor.setdefault(self.factor(r), []).append(r)
        return [tuple(v) for _, v in sorted(by_factor.items(), key=lambda kv: kv[1][0])]

    def draws(self, rank: int, iteration: int, n: int) -> np.ndarray:
        """``n`` multiplicative jitter factors for ``rank`` in ``iteration`` (ones without jitter)."""
        if not self.jittered:
            return np.ones(n)
        rng = np.random.Generator(np.random.PCG64([self.seed, rank, iteration]))
        s = self.jitter_param
        k = 1 if self.per_step else n
        if self.jitter == "lognormal":
            d = rng.lognormal(-s * s / 2.0, s, k)
        elif self.jitter == "normal":
            d = np.maximum(rng.normal(1.0, s, k), 0.05)
        else:
            d = rng.uniform(1.0 - s, 1.0 + s, k)
        return np.full(n, d[0]) if self.per_step else d


def _parse_ranks(text: str, spec: str) -> list[int]:
    try:
        if "-" in text:
            lo, hi = (int(x) for x in text.split("-", 1))
        else:
            lo = hi = int(text)
    except ValueError:
        raise SimdlError(f"--straggler {spec!r}: rank {text!r} is not an integer or a range A-B") from None
    if lo < 0 or hi < lo:
        raise SimdlError(f"--straggler {spec!r}: rank range {text!r} must be 0 <= A <= B")
    return list(range(lo, hi + 1))


def parse_straggler(spec: str) -> list[tuple[int, float]]:
    """``'rank=0,factor=1.5'`` or ``'rank=4-7,factor=2'`` -> [(rank, factor), ...]."""
    fields: dict[str, str] = {}
    for part in str(spec).split(","):
        key, eq, value = part.partition("=")
        key = key.strip()
        if not eq or key not in ("rank", "factor"):
            raise SimdlError(f"--straggler {spec!r}: expected rank=R,factor=F (R an integer or A-B, F > 0)")
        fields[key] = value.strip()
    if set(fields) != {"rank", "factor"}:
        raise SimdlError(f"--straggler {spec!r}: expected rank=R,factor=F (R an integer or A-B, F > 0)")
    try:
        factor = float(fields["factor"])
    except ValueError:
        factor = -1.0
    if not factor > 0 or factor == float("inf"):
        raise SimdlError(f"--straggler {spec!r}: factor {fields['factor']!r} must be a number > 0")
    return [(r, factor) for r in _parse_ranks(fields["rank"], spec)]


def parse_jitter(spec: str | None) -> tuple[str, float]:
    """``'lognormal:0.1'`` -> ('lognormal', 0.1); None / 'none' -> ('none', 0.0)."""
    if spec is None or str(spec).strip() in ("", "none"):
        return "none", 0.0
    name, colon, value = str(spec).partition(":")
    name = name.strip()
    if name not in JITTERS or not colon:
        raise SimdlError(
            f"--jitter {spec!r}: expected DIST:SPREAD with DIST one of lognormal, normal, uniform "
            "(e.g. lognormal:0.1), or none"
        )
    try:
        s = float(value)
    except ValueError:
        raise SimdlError(f"--jitter {spec!r}: spread {value!r} is not a number") from None
    if not s >= 0 or s == float("inf"):
        raise SimdlError(f"--jitter {spec!r}: spread must be a finite number >= 0")
    return name, s


def build(straggler=None, jitter=None, seed: int = 0, default=None) -> Heterogeneity:
    """From CLI-style values: ``straggler`` a string, a list of strings, or (rank, factor) pairs.
    ``default``: ``(sigma, source)`` of a per-step lognormal used when ``jitter`` is None."""
    specs = [] if straggler is None else ([straggler] if isinstance(straggler, str) else list(straggler))
    factors: dict[int, float] = {}
    for s in specs:
        pairs = parse_straggler(s) if isinstance(s, str) else [tuple(s)]
        for r, f in pairs:
            if r in factors:
                raise SimdlError(f"--straggler: rank {r} is given twice")
            factors[int(r)] = float(f)
    if jitter is None and default is not None:
        sigma, source = default
        return Heterogeneity(
            tuple(sorted(factors.items())), "lognormal", float(sigma), seed, per_step=True, source=source
        )
    if isinstance(jitter, tuple):
        name, param = jitter
    else:
        name, param = parse_jitter(jitter)
    return Heterogeneity(tuple(sorted(factors.items())), name, float(param), seed)
