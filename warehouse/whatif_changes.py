"""A what-if scenario: the changes `ctda-sql whatif` applies (kept free of heavy imports, so
the command line parses them without loading numpy or pyarrow)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .errors import CtdaError

ALGORITHMS = ("ring", "tree", "coherent")


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
        })

    def validate(self) -> None:
        if any(s.factor < 0 for s in self.scales):
            raise CtdaError("a --scale factor must be 0 or more (0 removes the work)")
        if self.bandwidth_scale <= 0:
            raise CtdaError("--comm-bandwidth-scale must be more than 0")
        if self.latency_us is not None and self.latency_us < 0:
            raise CtdaError("--comm-latency-us must be 0 or more")
        if self.allreduce is not None and self.allreduce not in ALGORITHMS:
            raise CtdaError(f"--allreduce must be one of {', '.join(ALGORITHMS)}")
        if self.world_size is not None and self.world_size < 1:
            raise CtdaError("--world-size must be 1 or more")


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
