"""Write synthetic page views to a Flux topic for ``page_view_counts.py``.

    python examples/pipelines/produce_page_views.py --bootstrap 127.0.0.1:9092 \\
        [--topic page-views] [--events 10000] [--minutes 5]

Events are spread evenly over ``--minutes`` of event time ending now, over a handful of
pages (keyed by user, so one user's views stay in order), followed by one event two minutes
in the future so the pipeline's watermark passes every window and emits it.
"""

from __future__ import annotations

import argparse
import json
import random
import time

from flux.sdk import Admin, Message, Producer, TopicAlreadyExistsError

PAGES = ["/home", "/pricing", "/docs", "/blog", "/signup"]


def events(count: int, minutes: int, now_ms: int, seed: int = 7) -> list[dict[str, object]]:
    rng = random.Random(seed)
    start_ms = now_ms - minutes * 60_000
    return [
        {
            "page": rng.choice(PAGES),
            "user": f"u-{rng.randrange(100)}",
            "ts": start_ms + index * minutes * 60_000 // max(count, 1),
        }
        for index in range(count)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="page-views")
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--minutes", type=int, default=5)
    args = parser.parse_args()
    now_ms = int(time.time() * 1000)
    batch = events(args.events, args.minutes, now_ms)
    batch.append({"page": "/home", "user": "u-0", "ts": now_ms + 120_000})  # closes windows
    with Admin(args.bootstrap) as admin:
        try:
            admin.create_topic(args.topic, partitions=3)
        except TopicAlreadyExistsError:
            pass
    with Producer(args.bootstrap) as producer:
        producer.send(
            args.topic, [Message(json.dumps(event), key=str(event["user"])) for event in batch]
        )
    print(f"wrote {len(batch)} page views to {args.topic}")


if __name__ == "__main__":
    main()
