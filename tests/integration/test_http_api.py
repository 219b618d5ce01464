"""The HTTP API on a real 3-node cluster: original Flux publish, REST produce/read with
forwarding, message-id deduplication, bad input, cluster/topic/group state, and /metrics."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from flux.cluster.launcher import NodeProcess
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.helpers import wait_until
from tests.integration.http_helpers import (
    call,
    create_everywhere,
    metrics_text,
    read_messages,
    running_cluster,
    stalled_bodies,
)

pytestmark = pytest.mark.integration


_CLUSTERS: dict[int, list[NodeProcess]] = {}


def _cluster_of(node: NodeProcess) -> list[NodeProcess]:
    return _CLUSTERS[id(node)]


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[NodeProcess]]:
    root = tmp_path_factory.mktemp("http-api")
    with running_cluster(root, 3, broker={"auto_create_topics": False}) as processes:
        for process in processes:
            _CLUSTERS[id(process)] = processes
        yield processes


def _create(node: NodeProcess, name: str, partitions: int = 3, **configs: str) -> None:
    create_everywhere(_cluster_of(node), name, partitions, **configs)


def test_flux_publish_then_read_from_every_broker(nodes: list[NodeProcess]) -> None:
    _create(nodes[0], "orders", partitions=3)
    status, answer = call(
        nodes[1], "POST", "/publish", {"id": "m-1", "message": "hello", "topic": "orders"}
    )
    assert status == 200, answer
    assert answer["duplicate"] is False
    partition, offset = answer["partition"], answer["offset"]
    for node in nodes:  # any broker answers; a non-leader forwards to the leader
        messages = read_messages(node, "orders", partition)
        assert [(m["offset"], m["value"], m["id"]) for m in messages] == [(offset, "hello", "m-1")]
    assert call(nodes[2], "GET", "/ping") == (200, {"pong": True})


def test_http_id_is_stored_once(nodes: list[NodeProcess]) -> None:
    _create(nodes[0], "dedup-http", partitions=2)
    first = call(
        nodes[0], "POST", "/publish", {"id": "same", "message": "one", "topic": "dedup-http"}
    )
    again = call(
        nodes[1], "POST", "/publish", {"id": "same", "message": "two", "topic": "dedup-http"}
    )
    rest = call(
        nodes[2],
        "POST",
        "/topics/dedup-http/messages",
        {"messages": [{"value": "three", "id": "same"}]},
    )
    assert first[0] == again[0] == rest[0] == 200, (first, again, rest)
    assert again[1]["duplicate"] is True and rest[1]["offsets"][0]["duplicate"] is True
    assert again[1]["offset"] == first[1]["offset"] == rest[1]["offsets"][0]["offset"]
    assert again[1]["partition"] == first[1]["partition"]
    stored = [m for p in range(2) for m in read_messages(nodes[0], "dedup-http", p)]
    assert [(m["id"], m["value"]) for m in stored] == [("same", "one")]


def test_ids_repeated_in_one_request_and_concurrent_publishes_are_stored_once(
    nodes: list[NodeProcess],
) -> None:
    """Records that meet in one append (a request's records, concurrent publishes) go in one
    batch: each id is still stored once, and every repeat gets its original's offset."""
    from concurrent.futures import ThreadPoolExecutor

    _create(nodes[0], "dedup-batch", partitions=1)
    status, answer = call(
        nodes[1],
        "POST",
        "/topics/dedup-batch/messages",
        {
            "messages": [
                {"value": "a", "id": "id-a"},
                {"value": "b", "id": "id-b"},
                {"value": "a again", "id": "id-a"},
                {"value": "plain"},
                {"value": "b again", "id": "id-b"},
            ]
        },
    )
    assert status == 200, answer
    offsets = [(o["offset"], o["duplicate"]) for o in answer["offsets"]]
    base = offsets[0][0]
    assert offsets == [
        (base, False), (base + 1, False), (base, True), (base + 2, False), (base + 1, True)
    ]  # fmt: skip

    def publish(index: int) -> tuple[int, dict]:
        body = {"id": "burst" if index % 2 else f"own-{index}", "message": f"m{index}",
                "topic": "dedup-batch"}  # fmt: skip
        return call(nodes[index % 3], "POST", "/publish", body)

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(publish, range(32)))
    assert all(status == 200 for status, _ in answers), answers
    burst = [a for i, (_, a) in enumerate(answers) if i % 2]
    assert len({a["offset"] for a in burst}) == 1  # every repeat names the one stored
    assert sum(not a["duplicate"] for a in burst) == 1
    own = [a["offset"] for i, (_, a) in enumerate(answers) if not i % 2]
    assert len(set(own)) == 16 and not any(
        a["duplicate"] for i, (_, a) in enumerate(answers) if not i % 2
    )
    stored = read_messages(nodes[0], "dedup-batch", 0)
    ids = [m["id"] for m in stored if m["value"] != "plain"]  # a plain one gets a made-up id
    assert sorted(ids) == sorted(["id-a", "id-b", "burst", *(f"own-{i}" for i in range(0, 32, 2))])
    by_offset = {m["offset"]: m for m in stored}
    assert by_offset[base]["value"] == "a" and by_offset[base + 2]["value"] == "plain"
    assert by_offset[burst[0]["offset"]]["id"] == "burst"


def test_rest_produce_with_key_headers_and_offset_ranges(nodes: list[NodeProcess]) -> None:
    _create(nodes[0], "events", partitions=3)
    messages = [
        {"key": "user-7", "value": f"v{i}", "headers": {"kind": "click"}} for i in range(20)
    ]
    status, answer = call(nodes[1], "POST", "/topics/events/messages", {"messages": messages})
    assert status == 200, answer
    partitions = {o["partition"] for o in answer["offsets"]}
    assert len(partitions) == 1  # one key, one partition (Kafka's murmur2)
    [partition] = partitions
    assert [o["offset"] for o in answer["offsets"]] == list(range(20))
    status, page = call(
        nodes[2], "GET", f"/topics/events/partitions/{partition}/messages?offset=5&limit=4"
    )
    assert status == 200, page
    assert [(m["offset"], m["value"], m["key"], m["headers"]) for m in page["messages"]] == [
        (offset, f"v{offset}", "user-7", {"kind": "click"}) for offset in range(5, 9)
    ]
    assert page["next_offset"] == 9 and page["high_watermark"] == 20
    status, answer = call(
        nodes[0], "POST", "/topics/events/messages", {"value": "p2", "partition": 2}
    )
    assert status == 200 and answer["offsets"][0]["partition"] == 2


@pytest.mark.parametrize(
    ("path", "body", "status", "field"),
    [
        ("/publish", {"id": "x", "message": "m", "topic": "no-such-topic"}, 404, "topic"),
        ("/publish", {"id": "x", "message": "", "topic": "bad-input"}, 400, "message"),
        ("/publish", {"id": "x", "topic": "bad-input"}, 400, "message"),
        ("/publish", {"id": "x", "message": 5, "topic": "bad-input"}, 400, "message"),
        ("/publish", {"id": "x", "message": "x" * 2_000_000, "topic": "bad-input"}, 413, "message"),
        ("/publish", {"id": 7, "message": "m", "topic": "bad-input"}, 400, "id"),
        ("/publish", {"message": "m", "topic": "bad name!"}, 400, "topic"),
        ("/topics/bad-input/messages", {"messages": []}, 400, "messages"),
        ("/topics/bad-input/messages", {"value": "m", "partition": 9}, 400, "partition"),
        ("/topics/bad-input/messages", {"value": "m", "headers": {"h": 1}}, 400, "headers"),
        ("/subscribe", {"address": "not a url", "topics": ["bad-input"]}, 400, "address"),
        ("/subscribe", {"address": "ftp://x/y", "topics": ["bad-input"]}, 400, "address"),
        ("/subscribe", {"address": "http://127.0.0.1:1", "topics": []}, 400, "topics"),
        (
            "/subscribe",
            {"address": "http://127.0.0.1:1", "topics": ["bad-input"], "readOld": "yes"},
            400,
            "readOld",
        ),
        ("/subscribe", {"address": "http://127.0.0.1:1", "topics": ["nope"]}, 404, "topic"),
        ("/unsubscribe", {"address": "http://127.0.0.1:1", "topics": ["bad-input"]}, 404, "topics"),
        ("/topics", {"name": "t", "partitions": 0}, 400, "partitions"),
    ],
)
def test_bad_input_names_the_field_and_stores_nothing(
    nodes: list[NodeProcess], path: str, body: dict, status: int, field: str
) -> None:
    if call(nodes[0], "GET", "/topics/bad-input")[0] == 404:
        _create(nodes[0], "bad-input", partitions=1)
    answer = call(nodes[1], "POST", path, body)
    assert answer[0] == status, answer
    assert answer[1]["field"] == field, answer
    assert read_messages(nodes[0], "bad-input", 0) == []
    assert call(nodes[0], "GET", "/subscriptions")[1]["subscriptions"] == []
    assert call(nodes[0], "GET", "/topics/no-such-topic")[0] == 404


def test_malformed_json_is_refused(nodes: list[NodeProcess]) -> None:
    for path in ("/publish", "/subscribe", "/topics/x/messages"):
        status, answer = call(nodes[0], "POST", path, raw=b'{"topic": ')
        assert status == 400 and answer["field"] == "body", (path, answer)
    _create(nodes[0], "json-check", partitions=1)
    status, answer = call(nodes[0], "GET", "/topics/json-check/partitions/0/messages?offset=-3")
    assert status == 400 and answer["field"] == "offset"
    status, answer = call(nodes[1], "GET", "/topics/json-check/partitions/0/messages?offset=7")
    assert status == 416 and answer["field"] == "offset"


def test_cluster_and_topic_state(nodes: list[NodeProcess]) -> None:
    _create(nodes[0], "state", partitions=2)
    status, cluster = call(nodes[2], "GET", "/cluster")
    assert status == 200
    assert sorted(b["id"] for b in cluster["brokers"]) == [1, 2, 3]
    state = next(t for t in cluster["topics"] if t["name"] == "state")
    assert [len(p["isr"]) for p in state["partitions"]] == [3, 3]
    status, topics = call(nodes[1], "GET", "/topics")
    assert "state" in {t["name"] for t in topics["topics"]}
    assert call(nodes[0], "GET", "/health")[0] == 200


def _samples(text: str, name: str) -> dict[tuple, float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def test_metrics_parse_and_lag_matches(nodes: list[NodeProcess]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    _create(nodes[0], "lagged", partitions=2)
    for partition, count in ((0, 30), (1, 12)):
        status, _ = call(
            nodes[0],
            "POST",
            "/topics/lagged/messages",
            {"messages": [{"value": f"m{i}", "partition": partition} for i in range(count)]},
        )
        assert status == 200
    bootstrap = ",".join(n.bootstrap_servers for n in nodes)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lag-check"})
    try:
        committed = consumer.commit(
            offsets=[TopicPartition("lagged", 0, 10), TopicPartition("lagged", 1, 12)],
            asynchronous=False,
        )
        assert all(tp.error is None for tp in committed)
    finally:
        consumer.close()
    expected = {("lagged", "0"): 30 - 10, ("lagged", "1"): 0}

    def lag_figures() -> dict | None:
        figures = {}
        for node in nodes:
            for labels, value in _samples(metrics_text(node), "flux_consumer_lag").items():
                labels = dict(labels)
                if labels["group"] == "lag-check":
                    figures[(labels["topic"], labels["partition"])] = value
        return figures if figures == expected else None

    assert wait_until(lag_figures, timeout_s=30) == expected
    text = metrics_text(nodes[0])
    families = {family.name for family in text_string_to_metric_families(text)}
    for name in (
        "flux_partition_high_watermark",
        "flux_partition_log_end_offset",
        "flux_partition_isr_size",
        "flux_broker_under_replicated_partitions",
        "flux_cluster_offline_partitions",
        "flux_http_requests",
        "flux_http_request_seconds",
        "flux_kafka_requests",
        "flux_push_deliveries",
        "flux_memory_topic_bytes",
    ):
        assert name in families, name
    high_watermarks = {}
    for node in nodes:
        for labels, value in _samples(metrics_text(node), "flux_partition_high_watermark").items():
            labels = dict(labels)
            if labels["topic"] == "lagged":
                high_watermarks[labels["partition"]] = value
    assert high_watermarks == {"0": 30, "1": 12}
    status, group = call(nodes[1], "GET", "/groups/lag-check")
    assert status == 200, group
    assert {(o["partition"], o["lag"]) for o in group["offsets"]} == {(0, 20), (1, 0)}

    # What operators alert on (docs/monitoring.md): per-topic traffic, log sizes, ISR changes,
    # request latency per API, the controller's leadership and term.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bytes-out"})
    try:
        consumer.assign([TopicPartition("lagged", p, 0) for p in (0, 1)])
        read = 0
        deadline = time.monotonic() + 30
        while read < 42 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            read += message is not None and message.error() is None
        assert read == 42
    finally:
        consumer.close()
    texts = [metrics_text(node) for node in nodes]
    families = {family.name for family in text_string_to_metric_families(texts[0])}
    for name in (
        "flux_partition_log_size_bytes",
        "flux_topic_bytes_in",
        "flux_topic_messages_in",
        "flux_topic_bytes_out",
        "flux_isr_shrinks",
        "flux_isr_expands",
        "flux_kafka_request_seconds",
        "flux_controller_active",
        "flux_controller_raft_term",
        "flux_controller_metadata_version",
    ):
        assert name in families, name

    def total(name: str, topic: str | None = None) -> float:
        return sum(
            value
            for text in texts
            for labels, value in _samples(text, name).items()
            if topic is None or dict(labels).get("topic") == topic
        )

    assert total("flux_topic_messages_in_total", "lagged") == 42
    assert total("flux_topic_bytes_in_total", "lagged") > 42 * 2
    assert total("flux_topic_bytes_out_total", "lagged") >= total(
        "flux_topic_bytes_in_total", "lagged"
    )
    assert total("flux_partition_log_size_bytes", "lagged") > 0
    assert total("flux_controller_active") == 1  # one active controller among the three
    assert total("flux_controller_raft_term") >= 3  # each controller's term, at least 1


#: Requests aiohttp's parser refuses (answered 400 before any route): a header line without a
#: colon, a Content-Length that is not a number, a request line longer than 8190 bytes, a chunk
#: size that is not hexadecimal.
_MALFORMED = (
    b"GET /ping HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n",
    b"POST /publish HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /publish HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
)


def _answer_to(address: str, payload: bytes) -> bytes:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(payload)
        answer = b""
        while chunk := connection.recv(65536):  # the server closes after a parse error
            answer += chunk
    return answer


def _log_since(node: NodeProcess, offset: int) -> str:
    """What the node logged after ``offset`` bytes (``log_path.stat().st_size`` earlier)."""
    with node.log_path.open("rb") as log_file:
        log_file.seek(offset)
        return log_file.read().decode(errors="replace")


def test_malformed_requests_get_400_one_log_line_and_a_count(nodes: list[NodeProcess]) -> None:
    """Each malformed request is answered 400 and counted; the log gets one WARNING line for
    them (rate-limited), never aiohttp's ERROR with a traceback each; the broker serves on."""
    node = nodes[2]

    def malformed() -> float:
        return sum(_samples(metrics_text(node), "flux_http_malformed_requests_total").values())

    log_before = node.log_path.stat().st_size
    counted_before = malformed()
    for payload in _MALFORMED * 5:
        answer = _answer_to(node.ready["broker_http"], payload)
        assert answer.split(b" ", 2)[1] == b"400", answer[:200]
    assert call(node, "GET", "/ping") == (200, {"pong": True})
    assert malformed() - counted_before == 4 * 5
    log = _log_since(node, log_before)
    assert "Error handling request" not in log and "Traceback" not in log, log[-3000:]
    lines = [line for line in log.splitlines() if "malformed HTTP request from 127.0.0.1" in line]
    assert 1 <= len(lines) <= 3, lines  # one per 10 s at most
    assert " WARNING " in lines[0] and "answered 400" in lines[0]


def test_the_controller_port_logs_a_malformed_request_as_one_line(
    nodes: list[NodeProcess],
) -> None:
    node = nodes[1]
    log_before = node.log_path.stat().st_size
    for payload in _MALFORMED:
        answer = _answer_to(node.ready["controller_http"], payload)
        assert answer.split(b" ", 2)[1] == b"400", answer[:200]
    assert call(node, "GET", "/health")[0] == 200
    log = _log_since(node, log_before)
    assert "Error handling request" not in log and "Traceback" not in log, log[-3000:]
    assert "flux.controller.http" in log and "malformed HTTP request from 127.0.0.1" in log, log


def test_a_body_that_stops_arriving_is_answered_408_and_closed(tmp_path) -> None:
    """Headers in, body never complete: after ``broker.request_timeout_ms`` the request is
    answered 408 naming the body and the connection closed (before, the handler waited
    for ever). A chunked body whose later chunk is malformed is the same to aiohttp's parser.
    Every reader of bodies on a node's ports: the JSON routes, the schema registry, the
    controller's port."""
    with running_cluster(tmp_path, 1, broker={"request_timeout_ms": 1500}) as (node,):
        targets = (
            (node.ready["broker_http"], "/publish", b'"field": "body"'),
            (node.ready["broker_http"], "/schemas/subjects/s-value/versions", b'"error_code": 408'),
            (node.ready["controller_http"], "/controller/topics", b'"error_code": 7'),
        )
        log_before = node.log_path.stat().st_size
        for address, path, marker in targets:
            for status, answer, took in stalled_bodies(address, path):
                assert status == b"408", (path, answer[:300])
                # Not reused: closed once aiohttp has read the rest of the body (10 s at most).
                assert b"Connection: close" in answer, answer[:300]
                assert marker in answer and b"did not arrive within 1.5 s" in answer, answer
                assert 1.0 < took < 10.0, (path, took)
        assert call(node, "GET", "/ping") == (200, {"pong": True})
        log = _log_since(node, log_before)
        assert "Traceback" not in log, log[-3000:]
