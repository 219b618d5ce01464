"""Which part of each Kafka request the ACLs let through (``cluster.kafka.authorization``),
against a metadata image holding ACL records; no processes."""

from __future__ import annotations

from typing import Any

from flux.auth.acl import AclOperation, PatternType, ResourceType
from flux.cluster.kafka.authorization import RequestAuthorizer
from flux.controller.image import MetadataImage
from flux.controller.records import CreateAcl
from flux.protocol.api import ApiKey, RequestHeader
from flux.protocol.errors import ErrorCode

ALLOW, DENY = 3, 2


def _acl(
    kind: ResourceType, name: str, principal: str, operation: AclOperation, **extra: Any
) -> CreateAcl:
    return CreateAcl(
        resource_type=int(kind),
        resource_name=name,
        pattern_type=int(extra.get("pattern", PatternType.LITERAL)),
        principal=principal,
        host=extra.get("host", "*"),
        operation=int(operation),
        permission=extra.get("permission", ALLOW),
    )


IMAGE = MetadataImage.EMPTY.replay_all(
    [
        _acl(
            ResourceType.TOPIC,
            "orders",
            "User:alice",
            AclOperation.WRITE,
            pattern=PatternType.PREFIXED,
        ),
        _acl(ResourceType.TOPIC, "payments", "User:alice", AclOperation.READ, host="10.0.0.1"),
        _acl(ResourceType.GROUP, "g", "User:alice", AclOperation.READ),
        _acl(ResourceType.TOPIC, "*", "User:bob", AclOperation.ALL),
        _acl(ResourceType.TOPIC, "payments", "User:bob", AclOperation.WRITE, permission=DENY),
    ],
    1,
)


def _authorizer(enabled: bool = True) -> RequestAuthorizer:
    return RequestAuthorizer(
        enabled=enabled,
        super_users=frozenset({"User:admin"}),
        allow_everyone_if_no_acl_found=False,
        image=lambda: IMAGE,
    )


def _header(api_key: int, version: int = 7) -> RequestHeader:
    return RequestHeader(api_key, version, 1, "test")


def _produce(acks: int = -1) -> dict[str, Any]:
    return {
        "acks": acks,
        "timeout_ms": 1000,
        "topic_data": [
            {"name": "orders-eu", "partition_data": [{"index": 0, "records": b""}]},
            {
                "name": "payments",
                "partition_data": [{"index": 0, "records": b""}, {"index": 1, "records": b""}],
            },
        ],
    }


def test_produce_keeps_allowed_topics_and_answers_the_refused_ones() -> None:
    decision = _authorizer().check(_header(ApiKey.PRODUCE), _produce(), "User:alice", "10.0.0.9")
    assert decision.refusal is None
    assert [t["name"] for t in decision.body["topic_data"]] == ["orders-eu"]
    assert decision.patch is not None
    answer = decision.patch({"responses": [{"name": "orders-eu", "partition_responses": []}]})
    refused = answer["responses"][1]
    assert refused["name"] == "payments"
    assert [(p["index"], p["error_code"]) for p in refused["partition_responses"]] == [
        (0, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
        (1, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    ]
    # acks=0: refused batches are dropped, there is no response to patch.
    quiet = _authorizer().check(_header(ApiKey.PRODUCE), _produce(acks=0), "User:alice", "h")
    assert quiet.patch is None and len(quiet.body["topic_data"]) == 1
    # DENY wins over bob's wildcard ALLOW ALL; super users and a disabled authorizer pass all.
    bob = _authorizer().check(_header(ApiKey.PRODUCE), _produce(), "User:bob", "h")
    assert [t["name"] for t in bob.body["topic_data"]] == ["orders-eu"]
    for authorizer, principal in ((_authorizer(), "User:admin"), (_authorizer(False), "User:eve")):
        everything = authorizer.check(_header(ApiKey.PRODUCE), _produce(), principal, "h")
        assert everything.patch is None and len(everything.body["topic_data"]) == 2


def test_hosts_groups_and_metadata_listing() -> None:
    fetch = {"topics": [{"topic": "payments", "partitions": [{"partition": 0, "fetch_offset": 0}]}]}
    allowed = _authorizer().check(_header(ApiKey.FETCH, 12), fetch, "User:alice", "10.0.0.1")
    assert allowed.patch is None
    elsewhere = _authorizer().check(_header(ApiKey.FETCH, 12), fetch, "User:alice", "10.0.0.2")
    assert elsewhere.body["topics"] == []
    (entry,) = elsewhere.patch({"responses": []})["responses"]
    assert entry["partitions"][0]["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED

    join = {"group_id": "other", "member_id": "", "protocols": []}
    refused = _authorizer().check(_header(ApiKey.JOIN_GROUP), join, "User:alice", "h")
    assert refused.refusal == {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "members": []}
    assert (
        _authorizer()
        .check(_header(ApiKey.JOIN_GROUP), {**join, "group_id": "g"}, "User:alice", "h")
        .refusal
        is None
    )

    commit = {
        "group_id": "other",
        "topics": [{"name": "payments", "partitions": [{"partition_index": 3}]}],
    }
    refused_commit = _authorizer().check(_header(ApiKey.OFFSET_COMMIT), commit, "User:alice", "h")
    assert refused_commit.refusal["topics"][0]["partitions"] == [
        {"partition_index": 3, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    ]

    listing = _authorizer().check(
        _header(ApiKey.METADATA, 12), {"topics": None}, "User:alice", "10.0.0.9"
    )
    answer = listing.patch(
        {"topics": [{"name": name} for name in ("orders", "payments", "secret", "orders-x")]}
    )
    # Describe comes with WRITE (orders*), READ needs the host (payments from 10.0.0.1 only).
    assert [t["name"] for t in answer["topics"]] == ["orders", "orders-x"]
    named = _authorizer().check(
        _header(ApiKey.METADATA, 12),
        {"topics": [{"name": "secret"}, {"name": "orders-new"}], "allow_auto_topic_creation": True},
        "User:alice",
        "h",
    )
    # A topic that does not exist is only auto-created with CREATE permission.
    assert named.body["allow_auto_topic_creation"] is False
    assert [t["name"] for t in named.body["topics"]] == ["orders-new"]
    assert (
        named.patch({"topics": []})["topics"][0]["error_code"]
        == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    )


def test_cluster_operations_and_idempotent_producers() -> None:
    create = {"creations": [{"resource_type": 2}, {"resource_type": 3}]}
    refused = _authorizer().check(_header(ApiKey.CREATE_ACLS, 3), create, "User:alice", "h")
    assert [r["error_code"] for r in refused.refusal["results"]] == [
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    ] * 2
    # An ALLOW WRITE on some topic lets an idempotent producer get its id; none refuses it.
    init = {"transactional_id": None, "transaction_timeout_ms": 1000}
    assert (
        _authorizer().check(_header(ApiKey.INIT_PRODUCER_ID, 4), init, "User:alice", "h").refusal
        is None
    )
    carol = _authorizer().check(_header(ApiKey.INIT_PRODUCER_ID, 4), init, "User:carol", "h")
    assert carol.refusal["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    delete = {"topics": [{"name": "orders", "topic_id": None}], "topic_names": []}
    deleting = _authorizer().check(_header(ApiKey.DELETE_TOPICS, 6), delete, "User:alice", "h")
    assert deleting.body["topics"] == []
    assert (
        deleting.patch({"responses": []})["responses"][0]["error_code"]
        == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    )


def test_transactional_requests_need_write_on_the_transactional_id() -> None:
    image = IMAGE.replay_all(
        [
            _acl(
                ResourceType.TRANSACTIONAL_ID,
                "app-",
                "User:alice",
                AclOperation.WRITE,
                pattern=PatternType.PREFIXED,
            )
        ],  # fmt: skip
        2,
    )
    authorizer = RequestAuthorizer(
        enabled=True,
        super_users=frozenset(),
        allow_everyone_if_no_acl_found=False,
        image=lambda: image,
    )
    end = {"transactional_id": "app-1", "producer_id": 1, "producer_epoch": 0, "committed": True}
    assert authorizer.check(_header(ApiKey.END_TXN, 3), end, "User:alice", "h").refusal is None
    other = authorizer.check(
        _header(ApiKey.END_TXN, 3), {**end, "transactional_id": "x"}, "User:alice", "h"
    )
    assert other.refusal == {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}

    def add(transactional_id: str, topics: list[str]) -> dict[str, Any]:
        return {
            "v3_and_below_transactional_id": transactional_id,
            "v3_and_below_producer_id": 1,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": name, "partitions": [0, 1]} for name in topics],
        }

    def codes(decision: Any) -> dict[str, set[int]]:
        return {
            topic["name"]: {p["partition_error_code"] for p in topic["results_by_partition"]}
            for topic in decision.refusal["results_by_topic_v3_and_below"]
        }

    header = _header(ApiKey.ADD_PARTITIONS_TO_TXN, 3)
    assert authorizer.check(header, add("app-1", ["orders-eu"]), "User:alice", "h").refusal is None
    # A topic alice may not write: it is refused, the others are not attempted.
    mixed = authorizer.check(header, add("app-1", ["orders-eu", "payments"]), "User:alice", "h")
    assert codes(mixed) == {
        "orders-eu": {ErrorCode.OPERATION_NOT_ATTEMPTED},
        "payments": {ErrorCode.TOPIC_AUTHORIZATION_FAILED},
    }
    foreign = authorizer.check(header, add("x", ["orders-eu"]), "User:alice", "h")
    assert codes(foreign) == {"orders-eu": {ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}}


def test_transaction_admin_reads_and_offsets_in_transactions() -> None:
    image = IMAGE.replay_all(
        [
            _acl(
                ResourceType.TRANSACTIONAL_ID,
                "app-",
                "User:alice",
                AclOperation.WRITE,
                pattern=PatternType.PREFIXED,
            )
        ],  # fmt: skip
        2,
    )
    authorizer = RequestAuthorizer(
        enabled=True, super_users=frozenset(), allow_everyone_if_no_acl_found=False,
        image=lambda: image,
    )  # fmt: skip
    # WRITE implies DESCRIBE (Kafka): alice sees her ids, not others'.
    describe = authorizer.check(
        _header(ApiKey.DESCRIBE_TRANSACTIONS, 0),
        {"transactional_ids": ["app-1", "other"]},
        "User:alice",
        "h",
    )
    assert describe.body["transactional_ids"] == ["app-1"]
    patched = describe.patch({"transaction_states": []})["transaction_states"]
    assert [(s["transactional_id"], s["error_code"]) for s in patched] == [
        ("other", ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    ]
    listing = authorizer.check(_header(ApiKey.LIST_TRANSACTIONS, 1), {}, "User:alice", "h")
    answer = {"transaction_states": [{"transactional_id": i} for i in ("app-2", "other")]}
    assert listing.patch(answer)["transaction_states"] == [{"transactional_id": "app-2"}]
    producers = authorizer.check(
        _header(ApiKey.DESCRIBE_PRODUCERS, 0),
        {
            "topics": [
                {"name": "payments", "partition_indexes": [0]},
                {"name": "secret", "partition_indexes": [1]},
            ]
        },  # fmt: skip
        "User:alice",
        "10.0.0.1",  # alice may READ payments from there
    )
    assert [t["name"] for t in producers.body["topics"]] == ["payments"]
    refused = producers.patch({"topics": []})["topics"]
    assert refused[0]["partitions"][0]["error_code"] == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    # Offsets in a transaction: WRITE on the id, READ on the group (alice may read group g).
    add = {"transactional_id": "app-1", "producer_id": 1, "producer_epoch": 0, "group_id": "g"}
    header = _header(ApiKey.ADD_OFFSETS_TO_TXN, 3)
    assert authorizer.check(header, add, "User:alice", "h").refusal is None
    assert authorizer.check(header, {**add, "group_id": "h"}, "User:alice", "h").refusal == {
        "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED
    }
    commit = {**add, "topics": [{"name": "payments", "partitions": [{"partition_index": 0}]}]}
    txn_commit = _header(ApiKey.TXN_OFFSET_COMMIT, 3)
    foreign = authorizer.check(txn_commit, {**commit, "transactional_id": "x"}, "User:alice", "h")
    assert foreign.refusal["topics"][0]["partitions"][0]["error_code"] == (
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    )


def test_offset_for_leader_epoch_needs_describe_on_the_topic() -> None:
    """A consumer checking its position after a leader change (KIP-320): DESCRIBE on the
    topic (READ implies it); refused topics come back with TOPIC_AUTHORIZATION_FAILED."""
    body = {
        "replica_id": -1,
        "topics": [
            {"topic": name, "partitions": [{"partition": 0, "leader_epoch": 3}]}
            for name in ("payments", "secret")
        ],
    }
    header = _header(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4)
    decision = _authorizer().check(header, body, "User:alice", "10.0.0.1")
    assert [t["topic"] for t in decision.body["topics"]] == ["payments"]
    assert decision.patch is not None
    answer = decision.patch({"topics": []})
    assert answer["topics"] == [
        {
            "topic": "secret",
            "partitions": [
                {
                    "partition": 0,
                    "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    "leader_epoch": -1,
                    "end_offset": -1,
                }
            ],
        }
    ]
