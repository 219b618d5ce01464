"""Every crash, hang or server error the fuzzer found, as the literal bytes that caused it
(``flux.chaos.fuzz``; found with ``benchmarks/fuzz.py``, seed and index in each comment). Each
must now be answered with an error or a closed connection, and the node must keep serving."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
import urllib.error
import urllib.request

import aiohttp
import pytest
from flux.protocol.api import ApiKey, encode_request
from flux.protocol.errors import ErrorCode
from flux.protocol.records import build_batch
from flux.sdk.wire import KafkaConnection

pytestmark = pytest.mark.integration

_PROBE = struct.pack(">ihhih", 10, ApiKey.API_VERSIONS, 0, -424242, -1)
CASE_TIMEOUT_S = 10.0

#: Kafka frames (size prefix included): name -> bytes.
KAFKA_REGRESSIONS: dict[str, bytes] = {
    # seed 1 index 1461: Metadata v8 asking for topic "" (then trailing bytes). The handler
    # turned "" into a null name, which a v8 answer cannot encode: internal error, connection
    # closed. Now: INVALID_TOPIC_EXCEPTION for "".
    "metadata_v8_empty_topic_name": bytes.fromhex(
        "00000024000300081a87afcf000666757a7a2d3100000001000066757a7a2d6865616c7468000000"
    ),
    # seed 1 index 2729: the same through a flexible version (compact string of length 0).
    "metadata_v9_empty_compact_topic_name": bytes.fromhex(
        "000000180003000900000aa9000666757a7a2d310002010000000100"
    ),
    # seed 2 index 499: CreateTopics v7 whose third topic is named with 32767 "x": the
    # controller's error message quotes the name and no longer fits a Kafka string (internal
    # error, connection closed). Now the message is cut and the request answered.
    "create_topics_v7_error_message_too_long": bytes.fromhex(
        "000080b300130007000001f3000666757a7a2d3200040f66757a7a2d736372617463682d30ffffffff00"
        "0301020f636c65616e75702e706f6c696379027800000f66757a7a2d736372617463682d31ffffffffff"
        "ff0102146d696e2e696e73796e632e7265706c69636173053130303000000f66757a7a2d736372617463"
        "682d3200000001ffff01030d726574656e74696f6e2e6d73023200146d696e2e696e73796e632e726570"
        "6c69636173808002"
    )
    + b"x" * 32767
    + bytes.fromhex("0000000000c30000"),
    # seed 10 (kafka, nine cases in the first minutes): Produce v10 to partition -5 of an
    # existing topic. Answering its error, the handler looked up partitions[-5] for KIP-951's
    # current leader (IndexError with fewer partitions; a wrong partition's leader with more):
    # internal error. Now: UNKNOWN_TOPIC_OR_PARTITION and no leader named.
    "produce_v10_negative_partition": bytes.fromhex(
        "000000810000000a000000070007726567726573730000ffff000003e802087265677265737302ffffff"
        "fb5700000000000000000000004affffffff02e2e5b0e70000000000000000018bcfe568000000018bcf"
        "e56800ffffffffffffffffffffffffffff000000013000000001246e6567617469766520706172746974"
        "696f6e00000000"
    ),
    # seed 10 (kafka, 22 cases): CreateAcls with a resource name of more than 4096
    # characters passed the broker's checks and was refused only when the controller applied
    # the record: a traceback and an HTTP 500 in the controller for each. Now the broker
    # answers INVALID_REQUEST for it.
    "create_acls_v1_resource_name_too_long": bytes.fromhex(
        "000013b1001e00010000000900077265677265737300000001021388"
    )
    + b"x" * 5000
    + bytes.fromhex("030009557365723a66757a7a00012a0303"),
    # seed 20261126 index 311: TxnOffsetCommit v1 committing partition -1 (after a mutation
    # that appended trailing bytes): the commit record refused it with an exception that
    # escaped the handler (internal error). Now: UNKNOWN_TOPIC_OR_PARTITION for it.
    "txn_offset_commit_partition_minus_one": bytes.fromhex(
        "00000097001c000100000137000d66757a7a2d3230323631313236000a66757a7a2d74786e2d31000c"
        "66757a7a2d67726f75702d30ffffffffffffffffffff00000001000e66757a7a2d736372617463682d30"
        "00000002000000010000000000000011000a642e65357a6731386f6fffffffff0000000000000000000765"
        "6f6e2e6434765ed7ccce5d0b4414f69c4b24f607f8f97917b013856a07"
    ),
    # seed 20261126 (the CI slice, on a fast run): JoinGroup v4 from a client whose id is
    # 32767 "x" and no member id yet. The new member id (client id + "-" + UUID) did not fit
    # the response's string (internal error, connection closed). Now its prefix is cut.
    # seed 24 index 786310 (and 23 more cases): AlterConfigs v0 of broker "4242" with a config
    # name of 32767 "x". The controller proposed the record, every node's state machine refused
    # it (strings in records stop at 4096 characters), and the controller's endpoint let the
    # refusal escape: a traceback and HTTP 500 for each, and the client waited past 10 s. Now
    # the controller checks records before proposing and answers INVALID_REQUEST.
    "alter_configs_v0_config_name_too_long": encode_request(
        ApiKey.ALTER_CONFIGS,
        0,
        7,
        "fuzz-24",
        {
            "resources": [
                {
                    "resource_type": 4,
                    "resource_name": "4242",
                    "configs": [
                        {"name": "min.insync.replicas", "value": "compact"},
                        {"name": "x" * 32767, "value": "60"},
                    ],
                }
            ],
            "validate_only": False,
        },
    ),
    "join_group_v4_longest_client_id": bytes.fromhex("0000803a000b0004000000077fff")
    + b"x" * 32767
    + bytes.fromhex(
        "000c66757a7a2d67726f75702d39000075300000753000000008636f6e73756d657200000001000572"
        "616e676500000000"
    ),
}

#: Record batches the broker appended although consumers cannot read them (or that take
#: offsets the client never learns), as found in the canary's log: name -> records bytes.
#: Each is produced (v8, acks=all) to a fresh topic and must be refused with nothing appended.
POISON_BATCHES: dict[str, bytes] = {
    # seed 1 index 994: CRC-valid batch whose records do not decode ("malformed record: index
    # out of range"): it was stored, and every later fetch of the partition failed to decode.
    "records_do_not_decode": bytes.fromhex(
        "0000000000000027000000500000000002c2ee4e220000000000000000018bcfe56be20000018bcfe56b"
        "e2ffffffffffffffffffffffffffff001000003c0000000130236b313a3939342330206ae00f59a0afef"
        "82e8d1d8e9c44c00"
    ),
    # seed 1 index 2305: the same, two records.
    "records_do_not_decode_2": bytes.fromhex(
        "00000000000000390000008400000000028abc54740000000000010000018bcfe571010000018bcfe571"
        "01ffffffffffffffffffffffffffff0000000356000000014a236b313a32333035233020b5b224a534ef"
        "462dcade10b77601beb54c9601e1143a0141981b004c0000020140236b313a3233303523312052"
        "4d0425869602b20fa0d99d4122df24a135c46daa00"
    ),
    # seed 2 index 2787: two batches for one partition. Both were appended but the answer
    # named only the first one's offset (Kafka refuses this for Produce v3+).
    "two_batches_one_partition": bytes.fromhex(
        "000000000000000000000059ffffffff02a6eaf5da0000000000000000018bcfe572e30000018bcfe572"
        "e3ffffffffffffffffffffffffffff000000014e000000027d34236b323a32373837233020e832ddf3b7"
        "8450400bc3fcf485897002026806ddbc3e"
    )
    * 2,
}

_JSON = {"Content-Type": "application/json"}

#: HTTP requests: name -> (method, path, headers, body). Each was answered 500 (an exception
#: escaped the handler, with a traceback in the log); now 400. Topic "regress" exists.
HTTP_REGRESSIONS: dict[str, tuple[str, str, dict[str, str], bytes | None]] = {
    # seed 3: a charset Python does not know (LookupError).
    "publish_unknown_charset": (
        "POST",
        "/publish",
        {"Content-Type": "application/json; charset=bogus-charset"},
        b"{}",
    ),
    # seed 3: a lone surrogate parses, then fails to encode (UnicodeEncodeError).
    "publish_lone_surrogate": (
        "POST",
        "/publish",
        _JSON,
        b'{"message": "\\ud800", "topic": "fuzz"}',
    ),
    "produce_lone_surrogate_in_header": (
        "POST",
        "/topics/regress/messages",
        _JSON,
        b'{"messages": [{"value": "x", "headers": {"h": "\\ud800"}}]}',
    ),
    # seed 3: nesting deeper than the JSON parser's recursion limit (RecursionError).
    "publish_deep_nesting": (
        "POST",
        "/publish",
        _JSON,
        b'{"message": ' + b"[" * 100_000 + b"]" * 100_000 + b', "topic": "x"}',
    ),
    # seed 4 index 424: records that are not a list (TypeError).
    "internal_produce_records_not_a_list": (
        "POST",
        "/internal/produce/regress/0",
        _JSON,
        b'{"records": 5}',
    ),
}


def _answered_or_closed(port: int, data: bytes) -> str:
    """Send ``data`` and a probe; 'answered' once the probe is answered, 'closed' if the broker
    closes first. A hang fails the test (socket timeout)."""
    with socket.create_connection(("127.0.0.1", port), timeout=CASE_TIMEOUT_S) as sock:
        sock.sendall(data + _PROBE)
        buffer = b""
        deadline = time.monotonic() + CASE_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                return "closed"
            if not chunk:
                return "closed"
            buffer += chunk
            while len(buffer) >= 8:
                (size,) = struct.unpack(">i", buffer[:4])
                if len(buffer) < 4 + size:
                    break
                (correlation_id,) = struct.unpack(">i", buffer[4:8])
                buffer = buffer[4 + size :]
                if correlation_id == -424242:
                    return "answered"
    raise AssertionError("no answer and no close: a hang")


def _wait_coordinator(port: int, group: str) -> None:
    with KafkaConnection("127.0.0.1", port) as connection:
        for _ in range(200):
            answer = connection.request(ApiKey.FIND_COORDINATOR, 1, {"key": group, "key_type": 0})
            if answer["error_code"] == 0:
                return
            time.sleep(0.05)
    raise AssertionError(f"no coordinator for {group}")


def _still_serving(port: int) -> None:
    with KafkaConnection("127.0.0.1", port) as connection:
        answer = connection.request(
            ApiKey.API_VERSIONS,
            3,
            {"client_software_name": "regression", "client_software_version": "1"},
        )
        assert answer["error_code"] == 0
        metadata = connection.request(ApiKey.METADATA, 12, {"topics": None})
        assert metadata["brokers"]


@pytest.mark.parametrize("name", sorted(KAFKA_REGRESSIONS))
def test_kafka_regression(broker, name: str) -> None:
    _ensure_topic(broker, "regress")
    if name.startswith("txn_offset_commit"):
        _wait_coordinator(broker.kafka_port, "fuzz-group-0")  # else it never gets that far
    if name.startswith("join_group"):
        _wait_coordinator(broker.kafka_port, "fuzz-group-9")
    # Each of these is a request the broker can answer (with errors): closing the connection
    # was the bug (an internal error).
    assert _answered_or_closed(broker.kafka_port, KAFKA_REGRESSIONS[name]) == "answered"
    tail = broker.log_tail(400)
    assert "internal error" not in tail and "rejected metadata command" not in tail
    assert "Error handling request" not in tail, tail  # an exception out of an HTTP handler
    assert broker.is_running()
    _still_serving(broker.kafka_port)


def _ensure_topic(broker, name: str) -> None:
    request = urllib.request.Request(
        f"http://{broker.ready['broker_http']}/topics",
        data=b'{"name": "%s", "partitions": 1, "replication_factor": 1}' % name.encode(),
        headers=_JSON,
        method="POST",
    )
    try:
        urllib.request.urlopen(request, timeout=CASE_TIMEOUT_S).close()
    except urllib.error.HTTPError as error:
        assert error.code == 409, error  # already there
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # until this broker leads it
        try:
            with urllib.request.urlopen(
                f"http://{broker.ready['broker_http']}/topics/{name}", timeout=CASE_TIMEOUT_S
            ) as response:
                if b"high_watermark" in response.read():
                    return
        except urllib.error.HTTPError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{name} has no leader")


@pytest.mark.parametrize("name", sorted(HTTP_REGRESSIONS))
def test_http_regression(broker, name: str) -> None:
    _ensure_topic(broker, "regress")
    method, path, headers, body = HTTP_REGRESSIONS[name]
    request = urllib.request.Request(
        f"http://{broker.ready['broker_http']}{path}", data=body, headers=headers, method=method
    )
    try:
        with urllib.request.urlopen(request, timeout=CASE_TIMEOUT_S) as response:
            status = response.status
    except urllib.error.HTTPError as error:
        status = error.code
    assert status < 500, f"{name}: {status}"
    assert broker.is_running()
    _still_serving(broker.kafka_port)


@pytest.mark.parametrize("name", sorted(POISON_BATCHES))
def test_poison_batch_is_refused_and_not_appended(broker, name: str) -> None:
    topic = f"poison-{name.replace('_', '-')}"
    with KafkaConnection("127.0.0.1", broker.kafka_port) as connection:
        created = connection.request(
            ApiKey.CREATE_TOPICS,
            4,
            {
                "topics": [
                    {
                        "name": topic,
                        "num_partitions": 1,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    }
                ],
                "timeout_ms": 15000,
                "validate_only": False,
            },
        )
        assert created["topics"][0]["error_code"] == 0
        answer = _produce(connection, topic, POISON_BATCHES[name])
        assert answer["error_code"] in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD), answer
        # A valid batch lands at offset 0: nothing of the poison was appended.
        valid = _produce(connection, topic, build_batch([(None, b"after")]))
        assert (valid["error_code"], valid["base_offset"]) == (0, 0)
    assert broker.is_running()


def _produce(connection: KafkaConnection, topic: str, records: bytes) -> dict:
    for _ in range(50):
        response = connection.request(
            ApiKey.PRODUCE,
            8,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout_ms": 5000,
                "topic_data": [
                    {"name": topic, "partition_data": [{"index": 0, "records": records}]}
                ],
            },
        )
        answer = response["responses"][0]["partition_responses"][0]
        if answer["error_code"] not in (
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            ErrorCode.LEADER_NOT_AVAILABLE,
        ):
            return answer
        time.sleep(0.1)  # the new topic's leader is not known to this broker yet
    raise AssertionError(f"{topic} never got a leader")


def test_produce_link_deeply_nested_frame_is_refused(broker) -> None:
    """Seed 4: a text frame nested past the JSON parser's recursion limit on the forwarded-
    produce link escaped its handler (RecursionError); now the link just closes."""

    async def send() -> aiohttp.WSMsgType:
        async with aiohttp.ClientSession() as session:
            url = f"http://{broker.ready['broker_http']}/internal/produce-link"
            async with session.ws_connect(url) as socket:
                await socket.send_str('{"id": ' + "[" * 50_000)
                message = await socket.receive(timeout=CASE_TIMEOUT_S)
                return message.type

    assert asyncio.run(send()) in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
    assert "RecursionError" not in broker.log_tail(200)
    assert broker.is_running()
    _still_serving(broker.kafka_port)


def test_deleting_a_topic_with_the_longest_legal_name_keeps_the_log_directory(broker) -> None:
    """Seed 10 (kafka): a 249-character topic name (legal in Kafka) was created by Metadata
    auto-creation, deleted and created again by mutated requests. Renaming its directory for
    deletion failed (ENAMETOOLONG; the directory stayed), and at the second creation the same
    failure took the broker's whole log directory offline: every replica of the broker, one
    broker after the other, until the cluster had no leaders. The doomed directory's name now
    cuts the topic part, as Kafka does."""
    long_name = "x" * 249
    _ensure_topic(broker, "regress")
    with KafkaConnection("127.0.0.1", broker.kafka_port) as connection:
        for round_number in range(2):  # create, delete, create again
            created = connection.request(
                ApiKey.CREATE_TOPICS,
                4,
                {
                    "topics": [
                        {
                            "name": long_name,
                            "num_partitions": 1,
                            "replication_factor": 1,
                            "assignments": [],
                            "configs": [],
                        }
                    ],
                    "timeout_ms": 15000,
                    "validate_only": False,
                },
            )
            assert created["topics"][0]["error_code"] == 0
            _produce(connection, long_name, build_batch([(None, b"v")]))
            if round_number == 0:
                deleted = connection.request(
                    ApiKey.DELETE_TOPICS, 4, {"topic_names": [long_name], "timeout_ms": 15000}
                )
                assert deleted["responses"][0]["error_code"] == 0
                deadline = time.monotonic() + 10
                while "removed replica x" not in broker.log_tail(50):
                    assert time.monotonic() < deadline, "the topic was never removed"
                    time.sleep(0.05)
        answer = _produce(connection, "regress", build_batch([(None, b"after")]))
    assert "is offline after an I/O error" not in broker.log_tail(400)
    assert answer["error_code"] == 0, answer
