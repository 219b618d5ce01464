"""AlterConfigs (API 33) and IncrementalAlterConfigs (API 44) against a real broker, from
confluent-kafka, kafka-python, flux.sdk and raw requests of every version: values change,
AlterConfigs replaces the whole set of overrides, bad input gets a per-resource error naming
the key, and the broker keeps serving."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flux.protocol.api import ApiKey
from flux.protocol.errors import ErrorCode
from flux.sdk.admin import Admin
from flux.sdk.errors import ConfigurationError, InvalidConfigError, UnknownTopicError
from flux.sdk.wire import KafkaConnection

from tests.integration.helpers import create_topic, produce_values, read_values

pytestmark = pytest.mark.integration

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8


@pytest.fixture
def conn(broker) -> Iterator[KafkaConnection]:
    with KafkaConnection.from_bootstrap(broker.bootstrap_servers) as connection:
        yield connection


def _overrides(conn: KafkaConnection, topic: str) -> dict[str, str]:
    """The topic's configs whose source is the topic itself (DescribeConfigs v4)."""
    answer = conn.request(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {
                    "resource_type": RESOURCE_TOPIC,
                    "resource_name": topic,
                    "configuration_keys": None,
                }
            ]
        },
    )
    (result,) = answer["results"]
    assert result["error_code"] == ErrorCode.NONE, result
    return {c["name"]: c["value"] for c in result["configs"] if c["config_source"] == 1}


def _alter(
    conn: KafkaConnection,
    resources: list[tuple[int, str, dict[str, str | None]]],
    *,
    version: int = 2,
    validate_only: bool = False,
) -> list[dict]:
    answer = conn.request(
        ApiKey.ALTER_CONFIGS,
        version,
        {
            "resources": [
                {
                    "resource_type": kind,
                    "resource_name": name,
                    "configs": [{"name": k, "value": v} for k, v in configs.items()],
                }
                for kind, name, configs in resources
            ],
            "validate_only": validate_only,
        },
    )
    return answer["responses"]


def test_confluent_alter_configs_replaces_the_overrides(broker, conn) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    assert create_topic(conn, "replaced", retention_ms="60000", segment_bytes="1048576") == 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        "replaced",
        set_config={"retention.ms": "120000", "cleanup.policy": "compact,delete"},
    )
    with pytest.warns(DeprecationWarning, match="alter_configs"):  # confluent prefers API 44
        futures = admin.alter_configs([resource])
    assert futures[resource].result(timeout=30) is None

    described = admin.describe_configs([resource])[resource].result(timeout=30)
    assert described["retention.ms"].value == "120000"
    assert described["retention.ms"].source == 1  # DYNAMIC_TOPIC_CONFIG
    assert described["cleanup.policy"].value == "compact,delete"
    # segment.bytes was not named: AlterConfigs deleted its override.
    assert described["segment.bytes"].is_default
    assert _overrides(conn, "replaced") == {
        "retention.ms": "120000",
        "cleanup.policy": "compact,delete",
    }

    # validate_only checks without changing anything.
    checked = ConfigResource(
        ConfigResource.Type.TOPIC, "replaced", set_config={"retention.ms": "5"}
    )
    with pytest.warns(DeprecationWarning):
        futures = admin.alter_configs([checked], validate_only=True)
    assert futures[checked].result(timeout=30) is None
    assert _overrides(conn, "replaced")["retention.ms"] == "120000"


def test_confluent_incremental_alter_configs_keeps_what_it_does_not_name(broker, conn) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    assert create_topic(conn, "edited", retention_ms="60000", segment_bytes="1048576") == 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        "edited",
        incremental_configs=[
            ConfigEntry("retention.ms", "70000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
            ),
            ConfigEntry("segment.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
        ],
    )
    assert admin.incremental_alter_configs([resource])[resource].result(timeout=30) is None
    assert _overrides(conn, "edited") == {
        "retention.ms": "70000",
        "cleanup.policy": "delete,compact",
    }


def test_invalid_values_are_invalid_config_naming_the_key_and_serving_goes_on(broker, conn) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource

    assert create_topic(conn, "guarded", retention_ms="60000") == 0
    produce_values(conn, "guarded", [b"before"])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})

    def refused(name: str, configs: dict[str, str]) -> KafkaError:
        resource = ConfigResource(ConfigResource.Type.TOPIC, name, set_config=configs)
        with pytest.warns(DeprecationWarning):
            future = admin.alter_configs([resource])[resource]
        with pytest.raises(KafkaException) as raised:
            future.result(timeout=30)
        return raised.value.args[0]

    bad_value = refused("guarded", {"retention.ms": "soon"})
    assert bad_value.code() == KafkaError.INVALID_CONFIG
    assert "retention.ms" in bad_value.str() and "soon" in bad_value.str()
    unknown_key = refused("guarded", {"retention.ms": "1", "no.such.config": "1"})
    assert unknown_key.code() == KafkaError.INVALID_CONFIG
    assert "no.such.config" in unknown_key.str()
    missing = refused("no-such-topic", {"retention.ms": "1"})
    assert missing.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # All or nothing: the valid retention.ms of the refused requests was not applied.
    assert _overrides(conn, "guarded") == {"retention.ms": "60000"}

    # The connection that sent the bad requests and the raw one both keep serving.
    produce_values(conn, "guarded", [b"after"])
    assert [value for _, value in read_values(conn, "guarded")] == [b"before", b"after"]
    topics = admin.list_topics(timeout=30).topics
    assert "guarded" in topics


@pytest.mark.parametrize("version", [0, 1, 2])
def test_raw_alter_configs_of_every_version(conn, version: int) -> None:
    topic = f"raw-v{version}"
    assert create_topic(conn, topic, retention_ms="60000", segment_bytes="1048576") == 0
    # A null value deletes; unnamed segment.bytes is deleted too.
    (ok,) = _alter(
        conn, [(RESOURCE_TOPIC, topic, {"flush.ms": "5000", "retention.ms": None})], version=version
    )
    assert ok == {
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "resource_type": RESOURCE_TOPIC,
        "resource_name": topic,
    }
    assert _overrides(conn, topic) == {"flush.ms": "5000"}
    # An empty set of configs clears every override.
    (cleared,) = _alter(conn, [(RESOURCE_TOPIC, topic, {})], version=version)
    assert cleared["error_code"] == ErrorCode.NONE
    assert _overrides(conn, topic) == {}


def test_per_resource_errors_in_one_request(conn) -> None:
    assert create_topic(conn, "good") == 0
    assert create_topic(conn, "bad") == 0
    assert create_topic(conn, "twice") == 0
    responses = _alter(
        conn,
        [
            (RESOURCE_TOPIC, "good", {"retention.ms": "123"}),
            (RESOURCE_TOPIC, "bad", {"min.insync.replicas": "0"}),
            (RESOURCE_TOPIC, "missing", {"retention.ms": "1"}),
            (RESOURCE_BROKER_LOGGER, "1", {"kafka.server": "DEBUG"}),
            (RESOURCE_TOPIC, "twice", {"retention.ms": "1"}),
            (RESOURCE_TOPIC, "twice", {"retention.ms": "2"}),
        ],
    )
    codes = {(r["resource_name"], r["resource_type"]): r["error_code"] for r in responses}
    assert codes == {
        ("good", RESOURCE_TOPIC): ErrorCode.NONE,
        ("bad", RESOURCE_TOPIC): ErrorCode.INVALID_CONFIG,
        ("missing", RESOURCE_TOPIC): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("1", RESOURCE_BROKER_LOGGER): ErrorCode.INVALID_REQUEST,
        ("twice", RESOURCE_TOPIC): ErrorCode.INVALID_REQUEST,
    }
    messages = {r["resource_name"]: r["error_message"] for r in responses}
    assert "min.insync.replicas" in messages["bad"]
    assert "'missing' does not exist" in messages["missing"]
    assert "resource type 8 is not supported" in messages["1"]
    assert _overrides(conn, "good") == {"retention.ms": "123"}
    assert _overrides(conn, "twice") == {}


def _broker_configs(conn: KafkaConnection, name: str) -> dict[str, tuple[str, int, bool]]:
    """A broker resource's configs: name -> (value, config source, read-only)."""
    answer = conn.request(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {"resource_type": RESOURCE_BROKER, "resource_name": name,
                 "configuration_keys": None}
            ]
        },
    )  # fmt: skip
    (result,) = answer["results"]
    assert result["error_code"] == ErrorCode.NONE, result
    return {c["name"]: (c["value"], c["config_source"], c["read_only"]) for c in result["configs"]}


def test_broker_resources_go_to_the_controller(conn, broker) -> None:
    own = str(broker.node_id)
    (accepted,) = _alter(conn, [(RESOURCE_BROKER, own, {"log.cleaner.threads": "2"})])
    assert accepted["error_code"] == ErrorCode.NONE, accepted
    (default,) = _alter(
        conn,
        [(RESOURCE_BROKER, "", {"log.cleaner.threads": "1", "message.max.bytes": "2000000"})],
    )
    assert default["error_code"] == ErrorCode.NONE, default
    # Described as Kafka does: the cluster default shows its dynamic configs only (source 3);
    # a broker every setting in force, its own override (2) before the default's (3) before
    # the static setting (4, read-only).
    assert _broker_configs(conn, "") == {
        "log.cleaner.threads": ("1", 3, False),
        "message.max.bytes": ("2000000", 3, False),
    }
    described = _broker_configs(conn, own)
    assert described["log.cleaner.threads"] == ("2", 2, False)
    assert described["message.max.bytes"] == ("2000000", 3, False)
    assert described["broker.id"] == (own, 4, True)
    (bad_name,) = _alter(conn, [(RESOURCE_BROKER, "not-a-broker", {"x.y": "1"})])
    assert bad_name["error_code"] == ErrorCode.INVALID_REQUEST
    (bad_key,) = _alter(conn, [(RESOURCE_BROKER, "", {"Bad Key": "1"})])
    assert bad_key["error_code"] == ErrorCode.INVALID_CONFIG
    assert "Bad Key" in bad_key["error_message"]


def test_storage_is_fixed_when_the_topic_is_created(conn) -> None:
    assert create_topic(conn, "volatile", storage="memory") == 0
    (left_out,) = _alter(conn, [(RESOURCE_TOPIC, "volatile", {"retention.ms": "1000"})])
    assert left_out["error_code"] == ErrorCode.INVALID_CONFIG
    assert "storage=memory" in left_out["error_message"]
    (kept,) = _alter(
        conn, [(RESOURCE_TOPIC, "volatile", {"retention.ms": "1000", "storage": "memory"})]
    )
    assert kept["error_code"] == ErrorCode.NONE
    assert _overrides(conn, "volatile") == {"retention.ms": "1000", "storage": "memory"}


def test_kafka_python_alter_configs(broker, conn) -> None:
    kafka_admin = pytest.importorskip("kafka.admin")

    assert create_topic(conn, "kp", retention_ms="60000", segment_bytes="1048576") == 0
    admin = kafka_admin.KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    topic = kafka_admin.ConfigResourceType.TOPIC
    try:
        # AlterConfigs (33): kafka-python re-sends the overrides it does not change, so they stay.
        legacy = admin.alter_configs(
            [kafka_admin.ConfigResource(topic, "kp", {"retention.ms": "90000"})], incremental=False
        )
        assert legacy == {"topic": {"kp": "OK"}}
        assert _overrides(conn, "kp") == {"retention.ms": "90000", "segment.bytes": "1048576"}
        # IncrementalAlterConfigs (44): set, delete and append in one request.
        edits = {
            "retention.ms": "100000",
            "segment.bytes": ("DELETE", None),
            "cleanup.policy": ("APPEND", "compact"),
        }
        incremental = admin.alter_configs(
            [kafka_admin.ConfigResource(topic, "kp", edits)], incremental=True
        )
        assert incremental == {"topic": {"kp": "OK"}}
        assert _overrides(conn, "kp") == {
            "retention.ms": "100000",
            "cleanup.policy": "delete,compact",
        }
        refused = admin.alter_configs(
            [kafka_admin.ConfigResource(topic, "kp", {"retention.ms": "-5"})], incremental=False
        )
        assert "InvalidConfigurationError" in refused["topic"]["kp"]
        assert "retention.ms" in refused["topic"]["kp"]
    finally:
        admin.close()


def test_sdk_alter_topic_configs(broker) -> None:
    with Admin(broker.bootstrap_servers, timeout_s=15.0) as admin:
        admin.create_topic("sdk-cfg", configs={"retention.ms": "60000", "segment.bytes": "1048576"})
        admin.alter_topic_configs(
            "sdk-cfg",
            set={"retention.ms": "70000", "cleanup.policy": "compact"},
            delete=["segment.bytes"],
        )
        configs = admin.describe_configs("sdk-cfg")
        assert configs["retention.ms"].value == "70000"
        assert configs["cleanup.policy"].value == "compact"
        assert configs["segment.bytes"].is_default
        admin.alter_topic_configs("sdk-cfg", set={"retention.ms": "1"}, validate_only=True)
        assert admin.describe_configs("sdk-cfg")["retention.ms"].value == "70000"

        with pytest.raises(InvalidConfigError, match="min.compaction.lag.ms"):
            admin.alter_topic_configs(
                "sdk-cfg", set={"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}
            )
        with pytest.raises(InvalidConfigError, match="no.such.key"):
            admin.alter_topic_configs("sdk-cfg", delete=["no.such.key"])
        with pytest.raises(UnknownTopicError, match="'sdk-nope' does not exist"):
            admin.alter_topic_configs("sdk-nope", set={"retention.ms": "1"})
        with pytest.raises(ConfigurationError, match="both set and deleted"):
            admin.alter_topic_configs("sdk-cfg", set={"flush.ms": "1"}, delete=["flush.ms"])
        with pytest.raises(ConfigurationError, match="list of config names"):
            admin.alter_topic_configs("sdk-cfg", delete="flush.ms")
        assert admin.describe_configs("sdk-cfg")["retention.ms"].value == "70000"
