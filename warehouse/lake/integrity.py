"""What is wrong with a lake's files, checked before a command reads or analyses it.

Readers (open_lake) read only what the check finds to be data and print one warning line per
damaged run and one for what they skip; analyze refuses a damaged run in one line, before it
changes anything (warehouse/lake/run.py).

- A rank is in the lake when its `traces` partition holds its file (an ingest publishes it
  last): the other partitions of a rank without one are left over (its traces deleted, or an
  ingest killed before it published them) and are not read; a run listed in runs.parquet
  with no rank at all is damaged likewise.
- Data is only the files the layout names (store.DATA_FILES): a stray `.parquet` beside
  them, such as a copy of another rank's file, is named and skipped, never read as data.
- A data file that is no Parquet file (garbled, truncated) is named before any read of it
  fails, and skipped: one bad events file does not stop every read of the lake.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ctda_sql.lake.store import (
    DATA_FILES,
    PARTITIONED,
    RANK_PARTITION,
    held_run_names,
    ingested_ranks,
    partition_files,
    pending_ingests,
    ranks_of,
    read_runs,
)

# Parquet files begin and end with these bytes; the 4 bytes before the end one give the
# footer's length
_MAGIC = b"PAR1"


@dataclass
class LakeCheck:
    """damaged: run -> what makes its results wrong; skipped: what is not read as data
    (relative paths); unreadable: data files that are no Parquet file; ranks: run -> the
    ranks in the lake (ingested_ranks)."""

    damaged: dict[str, list[str]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    unreadable: set[Path] = field(default_factory=set)
    ranks: dict[str, list[int]] = field(default_factory=dict)

    def data_files(self, lake: Path, table: str) -> list[Path]:
        """`table`'s files that readers read: the data files of the ranks in the lake that
        can be read."""
        return [f for run, ranks in self.ranks.items() for rank in ranks
                for f in partition_files(lake, table, run, rank) if f not in self.unreadable]


def is_parquet_file(path: Path) -> bool:
    """The file begins and ends as a Parquet file does, its footer within it: what a garbled
    or truncated file fails, read in two short reads (no footer parsed)."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < 12:
                return False
            head = handle.read(4)
            handle.seek(-8, os.SEEK_END)
            tail = handle.read(8)
    except OSError:
        return False
    return head == _MAGIC and tail[4:] == _MAGIC and int.from_bytes(tail[:4], "little") + 12 <= size


def check_lake(lake: Path, runs: list[str]) -> LakeCheck:
    """The damage of each run of `runs` (the runs runs.parquet lists), an unfinished ingest of
    any run the lake holds, and what is not data."""
    check = LakeCheck(ranks={run: ingested_ranks(lake, run) for run in runs})
    for run in runs:
        problems = _run_problems(lake, run, check)
        if problems:
            check.damaged[run] = problems
    held = set(runs) | set(held_run_names(lake))
    for run in pending_ingests(lake):
        if run in held:  # a mark of an ingest that published nothing, not even its run, is no run's
            check.damaged.setdefault(run, []).append(
                "an ingest of it did not finish, so its ranks may come from two recordings")
    check.skipped = _not_data(lake, set(runs))
    return check


def _run_problems(lake: Path, run: str, check: LakeCheck) -> list[str]:
    """What is wrong with one run's partitions; an unreadable file first (reading it would
    fail, whatever else is wrong)."""
    ingested = set(check.ranks[run])
    files = {table: {rank: partition_files(lake, table, run, rank) for rank in ranks_of(lake, table, run)}
             for table in PARTITIONED}
    bad = sorted(f for per_rank in files.values() for rank, found in per_rank.items() if rank in ingested
                 for f in found if not is_parquet_file(f))
    check.unreadable |= set(bad)
    problems = []
    if bad:
        problems.append(f"{_shown([str(f.relative_to(lake)) for f in bad])} cannot be read (not a Parquet file)")
    left_over = sorted({rank for per_rank in files.values() for rank, found in per_rank.items()
                        if found and rank not in ingested})
    if left_over:
        problems.append(f"rank(s) {', '.join(map(str, left_over))} have no traces partition, so their other "
                        "partitions are not read")
    elif not ingested:
        problems.append("it has no rank in the lake (no traces partition)")
    for table in ("events", "steps", "threads"):
        lacking = sorted(r for r in ingested if not files[table].get(r))
        if lacking:
            problems.append(f"rank(s) {', '.join(map(str, lacking))} have no {table} partition")
    return problems


def _not_data(lake: Path, listed: set[str]) -> list[str]:
    """Folders and files that readers skip: partitions of runs runs.parquet does not list,
    folders that are no rank=N partition, and files the layout does not name."""
    skipped = []
    for table in PARTITIONED:
        folder = lake / table
        if not folder.is_dir():
            continue
        for run_folder in sorted(folder.iterdir()):
            if not (run_folder.is_dir() and run_folder.name.startswith("run=")
                    and run_folder.name.removeprefix("run=") in listed):
                skipped.append(str(run_folder.relative_to(lake)))
                continue
            for rank_folder in sorted(run_folder.iterdir()):
                if not (rank_folder.is_dir() and RANK_PARTITION.fullmatch(rank_folder.name)):
                    skipped.append(str(rank_folder.relative_to(lake)))
                    continue
                skipped += [str(f.relative_to(lake)) for f in sorted(rank_folder.iterdir())
                            if not (f.is_file() and f.name in DATA_FILES[table])]
    return skipped


def _shown(names: list[str], most: int = 3) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def lake_problems(lake: Path, runs: list[str]) -> tuple[dict[str, list[str]], list[str]]:
    """(damaged, skipped) of check_lake."""
    check = check_lake(lake, runs)
    return check.damaged, check.skipped


def damage_message(lake: Path, run: str, problems: list[str]) -> str:
    return (f"lake {lake}: run {run}: {'; '.join(problems)}; ingest its traces again "
            "(with --replace) before trusting its results")


def warning_lines(lake: Path, check: LakeCheck) -> list[str]:
    """One line per damaged run and one naming what is skipped: what a reader of the lake is
    told on stderr."""
    lines = [damage_message(lake, run, problems) for run, problems in sorted(check.damaged.items())]
    if check.skipped:
        lines.append(f"lake {lake}: not read as data (no partition of a listed run, or a file the lake's "
                     f"layout does not name): {_shown(check.skipped)}")
    return lines


def lake_warnings(lake: Path) -> list[str]:
    return warning_lines(lake, check_lake(lake, [r["name"] for r in read_runs(lake)]))
