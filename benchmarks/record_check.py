"""What checking a client's records costs before a leader stores them (the Produce path's
``_invalid_records``: ``flux.protocol.record_check.check_records`` on each batch), per
batch shape: ``alike`` (100 records of 100 bytes, no key), ``varying`` (100 records with a
16-byte key and a 50-250-byte value), ``header`` (100 records of 80-120 bytes with one header
each) and ``single`` (one record of 100 bytes). Record bytes are seeded, so every run checks
the same batches.

    python benchmarks/record_check.py [--shapes alike,varying,header,single] [--number 2000]
        [--reps 0]

Prints one JSON object: microseconds per batch for each shape (best of five timings). Timings on
a shared machine wander; instruction counts do not. For those, run one shape under callgrind
twice and take the difference, ``(I(110) - I(10)) / 100`` instructions per batch::

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python benchmarks/record_check.py --shapes varying --reps 110

``--reps N`` checks each batch N times and prints nothing else (no timing).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import timeit
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flux.cluster.kafka.produce import _invalid_records  # noqa: E402
from flux.protocol.records import RecordInput, build_batch  # noqa: E402


def _shapes(rng: random.Random) -> dict[str, Callable[[], list[RecordInput]]]:
    data = rng.randbytes
    return {
        "alike": lambda: [(None, data(100), ()) for _ in range(100)],
        "varying": lambda: [(data(16), data(50 + rng.randrange(200)), ()) for _ in range(100)],
        "header": lambda: [
            (None, data(80 + rng.randrange(40)), (("trace", data(16)),)) for _ in range(100)
        ],
        "single": lambda: [(None, data(100), ())],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="alike,varying,header,single")
    parser.add_argument("--reps", type=int, default=0)
    parser.add_argument("--number", type=int, default=2000, help="checks per timing")
    args = parser.parse_args()
    shapes = _shapes(random.Random(1))
    figures = {}
    for name in args.shapes.split(","):
        batch = build_batch(shapes[name](), base_timestamp_ms=1_700_000_000_000)
        if args.reps:
            for _ in range(args.reps):
                assert _invalid_records(batch) is None
            continue
        number = args.number
        best = min(timeit.repeat(lambda b=batch: _invalid_records(b), number=number, repeat=5))
        figures[name] = {"us_per_batch": round(best / number * 1e6, 2)}
    if not args.reps:
        print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
