"""Pipelined connections (issue 15): while acks=all produce requests wait for their followers,
the same connection goes on reading and appending the next ones, in arrival order, and every
response still comes back in request order."""

from __future__ import annotations

import signal

import pytest
from flux.protocol.api import ApiKey, decode_response, encode_request
from flux.protocol.errors import ErrorCode
from flux.protocol.records import build_batch
from flux.sdk.wire import KafkaConnection

from tests.integration.cluster_helpers import create_topic, partitions
from tests.integration.helpers import wait_until

pytestmark = pytest.mark.integration

REQUESTS = 20


def _log_end_offset(conn: KafkaConnection, topic: str) -> int:
    """The leader's log end offset (ListOffsets with Kafka's debugging replica id)."""
    answer = conn.request(
        ApiKey.LIST_OFFSETS,
        5,
        {
            "replica_id": -2,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}
                    ],
                }
            ],
        },
    )
    return int(answer["topics"][0]["partitions"][0]["offset"])


def _produce_request(correlation_id: int, topic: str, value: bytes) -> bytes:
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 60000,
        "topic_data": [
            {
                "name": topic,
                "partition_data": [{"index": 0, "records": build_batch([(None, value, ())])}],
            }
        ],
    }
    return encode_request(ApiKey.PRODUCE, 7, correlation_id, "pipeline-test", body)


def test_acks_all_requests_pipeline_and_answer_in_order(cluster_factory) -> None:
    # A paused follower holds every acks=all request until it is thrown out of the ISR (10 s).
    nodes = cluster_factory(3, broker={"replica_lag_time_max_ms": 10000})
    answer = create_topic(nodes[0], "pipe", 1, 3, min_insync_replicas="2")
    assert answer["error_code"] == ErrorCode.NONE, answer
    wait_until(lambda: len(partitions(nodes[0], "pipe")[0]["isr_nodes"]) == 3, timeout_s=30)
    leader_id = partitions(nodes[0], "pipe")[0]["leader_id"]
    leader = next(node for node in nodes if node.node_id == leader_id)
    follower = next(node for node in nodes if node.node_id != leader_id)

    with KafkaConnection.from_bootstrap(leader.bootstrap_servers) as pipeline, \
            KafkaConnection.from_bootstrap(leader.bootstrap_servers) as probe:  # fmt: skip
        follower._signal(signal.SIGSTOP)
        try:
            sent = []
            for index in range(REQUESTS):
                correlation_id = 100 + index
                pipeline.send_raw(_produce_request(correlation_id, "pipe", b"v%02d" % index))
                sent.append((ApiKey.PRODUCE, correlation_id))
                if index % 5 == 4:  # quick requests in between must wait their turn too
                    correlation_id = 1000 + index
                    pipeline.send_raw(
                        encode_request(ApiKey.API_VERSIONS, 3, correlation_id, "t", {})
                    )
                    sent.append((ApiKey.API_VERSIONS, correlation_id))
            # Not one response read, no acks=all request complete: yet every batch is appended,
            # so the connection did not wait for one before reading the next.
            wait_until(lambda: _log_end_offset(probe, "pipe") == REQUESTS, timeout_s=5)
        finally:
            follower._signal(signal.SIGCONT)
        received = []
        for api_key, _ in sent:
            correlation_id, body = decode_response(
                api_key, _version(api_key), pipeline.receive_frame()
            )
            received.append((api_key, correlation_id, body))

    assert [(key, cid) for key, cid, _ in received] == sent
    produced = [body for key, _, body in received if key == ApiKey.PRODUCE]
    results = [body["responses"][0]["partition_responses"][0] for body in produced]
    assert all(result["error_code"] == ErrorCode.NONE for result in results), results
    # Appended in the order the requests arrived.
    assert [result["base_offset"] for result in results] == list(range(REQUESTS))


def _version(api_key: int) -> int:
    return 7 if api_key == ApiKey.PRODUCE else 3
