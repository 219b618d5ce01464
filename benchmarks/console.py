"""How fast the web console renders big clusters, in headless Chromium (Debian's, selenium).

A 3-node cluster (replication factor 3) gets ``--topics`` topics of one partition, a topic of
``--partitions`` partitions holding ``--records`` records spread over them, and a consumer
group with an offset committed on each of those partitions. Then, for each page (cluster,
topics list, the big topic, its messages, the group), the time from asking for the page (a
first load, or a change of the address's fragment inside the open page) until it is drawn
with the cluster's data (the page marks ``document.body.dataset.rendered``); median of
``--repeat`` renders each. Prints one JSON object.

    python benchmarks/console.py [--topics 1000] [--partitions 1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flux.cluster.launcher import running_local_cluster  # noqa: E402
from flux.protocol.api import ApiKey  # noqa: E402
from flux.sdk.wire import KafkaConnection  # noqa: E402

BIG = "big"
GROUP = "console-bench"


def _create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    with KafkaConnection.from_bootstrap(bootstrap, timeout_s=60) as conn:
        for start in range(0, len(names), 200):
            answer = conn.request(
                ApiKey.CREATE_TOPICS,
                7,
                {
                    "topics": [
                        {"name": name, "num_partitions": partitions, "replication_factor": 3}
                        for name in names[start : start + 200]
                    ],
                    "timeout_ms": 60000,
                },
            )
            errors = [t for t in answer["topics"] if t["error_code"] != 0]
            assert not errors, errors[:3]


def _fill(bootstrap: str, partitions: int, records: int) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for index in range(records):
        producer.produce(BIG, value=json.dumps({"n": index}), partition=index % partitions)
        if index % 10000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        consumer.commit(
            offsets=[TopicPartition(BIG, p, 1) for p in range(partitions)], asynchronous=False
        )
    finally:
        consumer.close()


def _driver() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument("--window-size=1400,1000")
    return webdriver.Chrome(
        service=Service(shutil.which("chromedriver") or "chromedriver"), options=options
    )


def _render_ms(driver: Any, fragment: str) -> float:
    """Ask for ``fragment`` inside the open page; ms until it is drawn."""
    before = driver.execute_script("return document.body.dataset.rendered || ''")
    started = driver.execute_script(
        "const t = Date.now(); location.hash = arguments[0]; return t", fragment
    )
    deadline = time.monotonic() + 60
    while True:
        rendered = driver.execute_script("return document.body.dataset.rendered || ''")
        if rendered and rendered != before:
            return float(int(rendered) - started)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{fragment} not drawn in 60 s")
        time.sleep(0.005)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="flux-console-bench-") as directory:
        with running_local_cluster(
            Path(directory), 3, extra={"node": {"log_level": "WARNING"}}
        ) as nodes:
            bootstrap = ",".join(node.bootstrap_servers for node in nodes)
            started = time.perf_counter()
            _create_topics(bootstrap, [f"topic-{i:05d}" for i in range(args.topics)], 1)
            _create_topics(bootstrap, [BIG], args.partitions)
            _fill(bootstrap, args.partitions, args.records)
            setup_s = time.perf_counter() - started
            driver = _driver()
            try:
                base = f"http://{nodes[0].ready['broker_http']}/ui/"
                first = time.perf_counter()
                driver.get(base + "#/topics")
                while not driver.execute_script("return document.body.dataset.rendered || ''"):
                    time.sleep(0.005)
                first_load_ms = (time.perf_counter() - first) * 1000
                # The page's own account: from the navigation's start (performance.timeOrigin)
                # to the HTML's arrival, the scripts' run (DOMContentLoaded) and the drawing.
                first_load_page = driver.execute_script(
                    "const n = performance.getEntriesByType('navigation')[0];"
                    "const r = Number(document.body.dataset.rendered) - performance.timeOrigin;"
                    "return {response_end_ms: n.responseEnd, dom_content_loaded_ms:"
                    " n.domContentLoadedEventEnd, rendered_ms: r, resources:"
                    " performance.getEntriesByType('resource').map("
                    "e => [e.name.replace(location.origin, ''), Math.round(e.startTime),"
                    " Math.round(e.responseEnd)])}"
                )
                pages = {
                    "cluster": "#/cluster",
                    "topics": "#/topics",
                    "big_topic": f"#/topics/{BIG}",
                    "big_topic_messages": f"#/topics/{BIG}/messages?partition=7",
                    "group": f"#/groups/{GROUP}",
                }
                figures: dict[str, Any] = {}
                for name, fragment in pages.items():
                    runs = []
                    for _ in range(args.repeat):
                        runs.append(_render_ms(driver, fragment))
                        _render_ms(driver, "#/subscriptions")  # leave, so the next is a change
                    figures[name] = {"median_ms": statistics.median(runs), "runs_ms": runs}
                _render_ms(driver, "#/topics")
                rows = {
                    "topics": driver.execute_script(
                        "return document.querySelectorAll('#topics tbody tr').length"
                    ),
                }
                _render_ms(driver, f"#/groups/{GROUP}")
                rows["group_partitions"] = driver.execute_script(
                    "return document.querySelectorAll('#offsets tbody tr').length"
                )
            finally:
                driver.quit()
    print(
        json.dumps(
            {
                "cluster": {"nodes": 3, "replication_factor": 3},
                "topics": args.topics + 1,
                "big_topic_partitions": args.partitions,
                "records": args.records,
                "setup_s": round(setup_s, 1),
                "first_load_topics_ms": round(first_load_ms, 1),
                "first_load_page": first_load_page,
                "rows_drawn": rows,
                "render": figures,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
