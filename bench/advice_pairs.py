"""The advice pairs table (docs/advice.md): for each recorded before/after pair of
tests/advice/test_advice.py, the top finding on the 'before' run, its predicted saving (advise, on the
first repetition), the measured saving (median step of the 3 'before' runs minus that of the 3
'after' runs) and the runs' noise (the larger spread of the repetitions), and advise's time.

    python bench/advice_pairs.py [--json bench/advice_pairs.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from test_advice import PAIRS, _job_median, _name  # noqa: E402

from ctda_sql.advice.advise import advise  # noqa: E402
from ctda_sql.api import Warehouse  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp, Warehouse(Path(tmp) / "pairs.duckdb") as wh:
        for case, pair in PAIRS.items():
            for path in pair.before + pair.after:
                wh.ingest([path], run=_name(path), show_progress=False)
                wh.analyze(run=_name(path))
            before = [_job_median(wh, _name(p)) for p in pair.before]
            after = [_job_median(wh, _name(p)) for p in pair.after]
            started = time.perf_counter()
            document = advise(wh.con, run=_name(pair.before[0]), persist=False)
            seconds = time.perf_counter() - started
            top = document["findings"][0]
            measured = median(before) - median(after)
            noise = max(max(before) - min(before), max(after) - min(after))
            rows.append({"pair": case, "top_rule": top["rule"], "expected_rule": pair.rule,
                         "predicted_ms": round(top["saving_us"] / 1000, 2), "measured_ms": round(measured / 1000, 2),
                         "error": round((top["saving_us"] - measured) / measured, 3),
                         "noise_ms": round(noise / 1000, 2), "advise_s": round(seconds, 2)})
            print(" | ".join(str(v) for v in rows[-1].values()), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
