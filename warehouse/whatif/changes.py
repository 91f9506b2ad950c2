"""A what-if scenario: the changes `ctda-sql whatif` applies (kept free of heavy imports, so
the command line parses them without loading numpy or pyarrow)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

from ctda_sql.core.errors import CtdaError

ALGORITHMS = ("ring", "tree", "coherent")
# bounds on the changes (docs/whatif.md): beyond them durations overflow or lose every digit
MAX_FACTOR = 1e6
MAX_LATENCY_US = 1e9
MAX_WORLD_SIZE = 1_000_000


@dataclass(frozen=True)
class Scale:
    """--scale [rankN[,M...]:][CATEGORY:]PATTERN=FACTOR: globs on event category and name,
    optionally only on some ranks."""
    name_glob: str
    factor: float
    category_glob: str | None = None
    ranks: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Scenario:
    scales: tuple[Scale, ...] = ()
    bandwidth_scale: float = 1.0
    latency_us: float | None = None
    allreduce: str | None = None
    world_size: int | None = None
    # every blocking host sync of the replayed steps lets the CPU go on at once (the GPU work
    # it waited for no longer holds it): `.item()` / `.cpu()` removed, or made non-blocking
    drop_syncs: bool = False

    @property
    def network_changed(self) -> bool:
        return (self.bandwidth_scale != 1.0 or self.latency_us is not None
                or self.allreduce is not None or self.world_size is not None)

    def as_json(self) -> str:
        return json.dumps({
            "scale": [{"category": s.category_glob, "pattern": s.name_glob, "factor": s.factor,
                       **({"ranks": list(s.ranks)} if s.ranks is not None else {})}
                      for s in self.scales],
            "comm_bandwidth_scale": self.bandwidth_scale, "comm_latency_us": self.latency_us,
            "allreduce": self.allreduce, "world_size": self.world_size,
            **({"drop_syncs": True} if self.drop_syncs else {}),
        })

    def validate(self) -> None:
        # NaN passes every `< 0` test and 1e308 overflows a step to inf: refuse both up front
        for s in self.scales:
            if not (math.isfinite(s.factor) and 0 <= s.factor <= MAX_FACTOR):
                raise CtdaError(f"a --scale factor must be a number from 0 to {MAX_FACTOR:g} "
                                f"(0 removes the work), not {s.factor!r}")
        if not (math.isfinite(self.bandwidth_scale) and 1 / MAX_FACTOR <= self.bandwidth_scale <= MAX_FACTOR):
            raise CtdaError(f"--comm-bandwidth-scale must be a number from {1 / MAX_FACTOR:g} to "
                            f"{MAX_FACTOR:g}, not {self.bandwidth_scale!r}")
        if self.latency_us is not None and not (math.isfinite(self.latency_us)
                                                and 0 <= self.latency_us <= MAX_LATENCY_US):
            raise CtdaError(f"--comm-latency-us must be a number from 0 to {MAX_LATENCY_US:g}, "
                            f"not {self.latency_us!r}")
        if self.allreduce is not None and self.allreduce not in ALGORITHMS:
            raise CtdaError(f"--allreduce must be one of {', '.join(ALGORITHMS)}")
        if self.world_size is not None and not 1 <= self.world_size <= MAX_WORLD_SIZE:
            raise CtdaError(f"--world-size must be from 1 to {MAX_WORLD_SIZE:,}")

    def check_ranks(self, ranks: set[int]) -> None:
        """A rank-scoped --scale must name ranks of the replayed runs."""
        missing = sorted({r for s in self.scales for r in (s.ranks or ())} - ranks)
        if missing:
            raise CtdaError(f"--scale names rank {', '.join(map(str, missing))}, which the replayed run(s) "
                            f"do not have; ranks: {', '.join(map(str, sorted(ranks)))}")


RANK_PREFIX = re.compile(r"^rank(\d+(?:,\d+)*):(?!:)")


def parse_scale(text: str, categories: set[str]) -> Scale:
    """'kernel:*gemm*=0.5' -> Scale; the prefix before ':' is a category only when it names one
    (or is a glob), so 'nccl:all_reduce' and 'aten::mm' stay whole names. A leading 'rank1:'
    or 'rank0,2:' limits the change to those ranks."""
    ranks = None
    scoped = RANK_PREFIX.match(text)
    if scoped and scoped.group(1) not in categories and f"rank{scoped.group(1)}" not in categories:
        ranks = tuple(sorted({int(r) for r in scoped.group(1).split(",")}))
        text = text[scoped.end():]
    pattern, sep, factor_text = text.rpartition("=")
    if not sep or not pattern:
        raise CtdaError(f"--scale {text!r} must look like PATTERN=FACTOR, e.g. 'aten::mm=0.5'")
    try:
        factor = float(factor_text)
    except ValueError:
        raise CtdaError(f"--scale {text!r}: factor {factor_text!r} is not a number") from None
    prefix, colon, rest = pattern.partition(":")
    if colon and rest and not rest.startswith(":") and (prefix in categories or "*" in prefix):
        return Scale(rest, factor, prefix, ranks)
    return Scale(pattern, factor, None, ranks)
