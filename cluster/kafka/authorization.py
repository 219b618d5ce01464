"""Authorization of Kafka requests by ACLs (``[security] authorizer_enable``), Kafka's rules.

Before a request reaches its handler, ``RequestAuthorizer.check`` decides, from the
connection's principal and address and the ACL bindings in this broker's metadata image
(``flux.auth.acl``), what of it may be served:

- **all of it**: the handler runs as usual;
- **none of it** (a group, cluster or single-resource API refused): the answer is the refusal,
  built here, and the handler never runs, so nothing changes;
- **part of it** (a multi-topic request): the handler runs on the allowed topics only, and the
  refused ones are added to its response with the authorization error, as Kafka answers them.

The operation each API needs is Kafka's (``KafkaApis.scala``):

| API | needs |
|---|---|
| Produce | WRITE on each topic |
| Fetch (consumer) | READ on each topic |
| ListOffsets, Metadata, OffsetFetch (topics) | DESCRIBE on each topic (Metadata for all topics lists only those; a named topic refused gets TOPIC_AUTHORIZATION_FAILED; auto-creation also needs CREATE on the cluster or the topic) |
| DeleteRecords, DeleteTopics | DELETE on the topic |
| CreateTopics | CREATE on the cluster or the topic |
| CreatePartitions | ALTER on the topic |
| DescribeConfigs / AlterConfigs, IncrementalAlterConfigs | DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, or on the cluster for broker resources |
| JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit | READ on the group (OffsetCommit also READ on each topic) |
| OffsetFetch, DescribeGroups, FindCoordinator (group) | DESCRIBE on the group |
| DeleteGroups, OffsetDelete | DELETE on the group (OffsetDelete also READ on each topic) |
| ListGroups | DESCRIBE on the cluster, else only the groups the principal may DESCRIBE |
| InitProducerId (idempotent) | IDEMPOTENT_WRITE on the cluster, or an ALLOW WRITE ACL on some topic |
| DescribeAcls, DescribeUserScramCredentials | DESCRIBE on the cluster |
| CreateAcls, DeleteAcls, AlterUserScramCredentials | ALTER on the cluster |
| ApiVersions, SaslHandshake, SaslAuthenticate, DescribeCluster | nothing |

Implications (WRITE implies DESCRIBE, ...), super users, DENY over ALLOW and
``allow_everyone_if_no_acl_found`` are ``flux.auth.acl.Authorizer``'s. With the authorizer off
every request is allowed, as before security existed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flux.auth.acl import (
    CLUSTER_RESOURCE_NAME,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclIndex,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
)
from flux.controller.image import MetadataImage
from flux.protocol.api import ApiKey, RequestHeader
from flux.protocol.errors import ErrorCode

__all__ = ["Decision", "RequestAuthorizer", "binding_of"]

TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
#: DescribeConfigs and the AlterConfigs resource types.
_RESOURCE_TOPIC = 2
_RESOURCE_BROKER = 4

Patch = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class Decision:
    """``refusal``: answer this instead of running the handler. Else run the handler on
    ``body`` and pass its response through ``patch`` (None: unchanged)."""

    body: dict[str, Any]
    refusal: dict[str, Any] | None = None
    patch: Patch | None = None


def binding_of(record: Any) -> AclBinding:
    """The ``AclBinding`` of a ``CreateAcl`` record (wire codes)."""
    return AclBinding(
        resource_type=ResourceType(record.resource_type),
        resource_name=record.resource_name,
        pattern_type=PatternType(record.pattern_type),
        principal=record.principal,
        host=record.host,
        operation=AclOperation(record.operation),
        permission=AclPermissionType(record.permission),
    )


class _Context:
    """One request's principal and host, and the decisions made for it (cached)."""

    def __init__(self, owner: RequestAuthorizer, principal: str, host: str) -> None:
        self._owner = owner
        self.principal = principal
        self.host = host
        self._index = owner.index()
        self._memo: dict[tuple[AclOperation, ResourceType, str], bool] = {}

    def allows(self, operation: AclOperation, kind: ResourceType, name: str) -> bool:
        key = (operation, kind, name)
        answer = self._memo.get(key)
        if answer is None:
            answer = self._owner.authorizer.authorize(
                self._index, self.principal, self.host, operation, kind, name
            )
            self._memo[key] = answer
        return answer

    def topic(self, operation: AclOperation, name: str) -> bool:
        return self.allows(operation, ResourceType.TOPIC, name)

    def group(self, operation: AclOperation, name: str) -> bool:
        return self.allows(operation, ResourceType.GROUP, name)

    def cluster(self, operation: AclOperation) -> bool:
        return self.allows(operation, ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME)

    def may_write_some_topic(self) -> bool:
        """An ALLOW WRITE (or ALL) ACL on some topic for this principal (Kafka 3.x lets an
        idempotent producer in on that alone)."""
        if self.principal in self._owner.authorizer.super_users:
            return True
        for binding in self._index:
            if (
                binding.resource_type == ResourceType.TOPIC
                and binding.permission == AclPermissionType.ALLOW
                and binding.operation in (AclOperation.WRITE, AclOperation.ALL)
                and binding.principal in (self.principal, WILDCARD_PRINCIPAL)
            ):
                return True
        return False


class RequestAuthorizer:
    """See the module docstring."""

    def __init__(
        self,
        *,
        enabled: bool,
        super_users: frozenset[str],
        allow_everyone_if_no_acl_found: bool,
        image: Callable[[], MetadataImage],
    ) -> None:
        self.enabled = enabled
        self.authorizer = Authorizer(super_users, allow_everyone_if_no_acl_found)
        self.image = image
        self._index: tuple[Any, AclIndex] | None = None
        self._rules: dict[int, Callable[[_Context, RequestHeader, dict[str, Any]], Decision]] = {
            ApiKey.PRODUCE: _produce,
            ApiKey.FETCH: _fetch,
            ApiKey.LIST_OFFSETS: _topic_partitions(
                AclOperation.DESCRIBE,
                ("topics", "name", "partitions", "partition_index"),
                ("topics", "name", "partitions", "partition_index"),
                {"timestamp": -1, "offset": -1, "leader_epoch": -1, "old_style_offsets": []},
            ),
            # Kafka also lets CLUSTER_ACTION through (the API began as broker-to-broker);
            # Flux's followers do not use it, so only its consumer form is authorized.
            ApiKey.OFFSET_FOR_LEADER_EPOCH: _topic_partitions(
                AclOperation.DESCRIBE,
                ("topics", "topic", "partitions", "partition"),
                ("topics", "topic", "partitions", "partition"),
                {"leader_epoch": -1, "end_offset": -1},
            ),
            ApiKey.DELETE_RECORDS: _topic_partitions(
                AclOperation.DELETE,
                ("topics", "name", "partitions", "partition_index"),
                ("topics", "name", "partitions", "partition_index"),
                {"low_watermark": -1},
            ),
            ApiKey.METADATA: _metadata,
            ApiKey.CREATE_TOPICS: _create_topics,
            ApiKey.DELETE_TOPICS: _delete_topics,
            ApiKey.CREATE_PARTITIONS: _create_partitions,
            ApiKey.DESCRIBE_CONFIGS: _configs(AclOperation.DESCRIBE_CONFIGS, "results"),
            ApiKey.ALTER_CONFIGS: _configs(AclOperation.ALTER_CONFIGS, "responses"),
            ApiKey.INCREMENTAL_ALTER_CONFIGS: _configs(AclOperation.ALTER_CONFIGS, "responses"),
            ApiKey.JOIN_GROUP: _whole_group(AclOperation.READ),
            ApiKey.SYNC_GROUP: _whole_group(AclOperation.READ),
            ApiKey.HEARTBEAT: _whole_group(AclOperation.READ),
            ApiKey.LEAVE_GROUP: _whole_group(AclOperation.READ),
            ApiKey.OFFSET_COMMIT: _offset_commit,
            ApiKey.OFFSET_FETCH: _offset_fetch,
            ApiKey.OFFSET_DELETE: _offset_delete,
            ApiKey.FIND_COORDINATOR: _find_coordinator,
            ApiKey.DESCRIBE_GROUPS: _describe_groups,
            ApiKey.LIST_GROUPS: _list_groups,
            ApiKey.DELETE_GROUPS: _delete_groups,
            ApiKey.INIT_PRODUCER_ID: _init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: _add_offsets_to_txn,
            ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit,
            ApiKey.DESCRIBE_TRANSACTIONS: _describe_transactions,
            ApiKey.ELECT_LEADERS: _cluster_only(
                AclOperation.ALTER,
                lambda: {
                    "error_code": CLUSTER_DENIED,
                    "replica_election_results": [],
                },
            ),
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: _cluster_only(
                AclOperation.ALTER,
                lambda: {"error_code": CLUSTER_DENIED, "responses": []},
            ),
            ApiKey.LIST_PARTITION_REASSIGNMENTS: _cluster_only(
                AclOperation.DESCRIBE,
                lambda: {"error_code": CLUSTER_DENIED, "topics": []},
            ),
            ApiKey.UNREGISTER_BROKER: _cluster_only(
                AclOperation.ALTER,
                lambda: {"error_code": CLUSTER_DENIED, "error_message": None},
            ),
            ApiKey.DESCRIBE_LOG_DIRS: _cluster_only(
                AclOperation.DESCRIBE,
                lambda: {"error_code": CLUSTER_DENIED, "results": []},
            ),
            ApiKey.LIST_TRANSACTIONS: _list_transactions,
            ApiKey.DESCRIBE_PRODUCERS: _describe_producers,
            ApiKey.END_TXN: _transactional_write(
                "transactional_id",
                lambda: {"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED},
            ),
            ApiKey.DESCRIBE_ACLS: _cluster_only(
                AclOperation.DESCRIBE,
                lambda: {
                    "error_code": CLUSTER_DENIED,
                    "error_message": "not authorized to describe ACLs",
                    "resources": [],
                },
            ),
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _cluster_only(
                AclOperation.DESCRIBE,
                lambda: {
                    "error_code": CLUSTER_DENIED,
                    "error_message": "not authorized to describe credentials",
                    "results": [],
                },
            ),
            ApiKey.CREATE_ACLS: _create_acls,
            ApiKey.DELETE_ACLS: _delete_acls,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _alter_credentials,
        }

    def index(self) -> AclIndex:
        """The ``AclIndex`` of the current image's bindings, rebuilt only when they change."""
        acls = self.image().acls
        if self._index is None or self._index[0] is not acls:
            self._index = (acls, AclIndex(binding_of(record) for record in acls.values()))
        return self._index[1]

    def check(
        self, header: RequestHeader, body: dict[str, Any], principal: str, host: str
    ) -> Decision:
        if not self.enabled:
            return Decision(body)
        rule = self._rules.get(header.api_key)
        if rule is None:
            return Decision(body)
        return rule(_Context(self, principal, host), header, body)

    def allows(
        self, principal: str, host: str, operation: AclOperation, kind: ResourceType, name: str
    ) -> bool:
        """One decision (for other front doors: the HTTP API)."""
        if not self.enabled:
            return True
        return _Context(self, principal, host).allows(operation, kind, name)


# -- rules ------------------------------------------------------------------------------------


def _topic_partitions(
    operation: AclOperation,
    request: tuple[str, str, str, str],
    response: tuple[str, str, str, str],
    defaults: dict[str, Any],
    *,
    error: ErrorCode = TOPIC_DENIED,
) -> Callable[[_Context, RequestHeader, dict[str, Any]], Decision]:
    """A rule for requests of topics with partitions: refused topics leave the request and
    come back in the response, each partition with ``error``."""
    list_key, name_key, parts_key, index_key = request
    out_list, out_name, out_parts, out_index = response

    def rule(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
        topics = body.get(list_key) or []
        refused = [t for t in topics if not context.topic(operation, t[name_key])]
        if not refused:
            return Decision(body)
        kept = [t for t in topics if context.topic(operation, t[name_key])]

        def patch(answer: dict[str, Any]) -> dict[str, Any]:
            answer.setdefault(out_list, [])
            for topic in refused:
                answer[out_list].append(
                    {
                        out_name: topic[name_key],
                        out_parts: [
                            {out_index: _index(p, index_key), "error_code": error, **defaults}
                            for p in topic.get(parts_key) or []
                        ],
                    }
                )
            return answer

        return Decision({**body, list_key: kept}, patch=patch)

    return rule


def _index(partition: Any, key: str) -> Any:
    return partition[key] if isinstance(partition, dict) else partition


_produce_rule = _topic_partitions(
    AclOperation.WRITE,
    ("topic_data", "name", "partition_data", "index"),
    ("responses", "name", "partition_responses", "index"),
    {"base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1},
)


def _produce(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
    decision = _produce_rule(context, header, body)
    if decision.patch is not None and body.get("acks") == 0:
        # acks=0 gets no response: the refused batches are dropped, as Kafka drops them.
        decision.patch = None
    return decision


_fetch = _topic_partitions(
    AclOperation.READ,
    ("topics", "topic", "partitions", "partition"),
    ("responses", "topic", "partitions", "partition_index"),
    {
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": None,
    },
)


def _describable_topics(context: _Context) -> Patch:
    """A patch keeping only the answer's topics the principal may DESCRIBE."""

    def visible(answer: dict[str, Any]) -> dict[str, Any]:
        answer["topics"] = [
            t for t in answer.get("topics", []) if context.topic(AclOperation.DESCRIBE, t["name"])
        ]
        return answer

    return visible


def _metadata(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
    image = context._owner.image()
    topics = body.get("topics")
    if topics is None:
        # Every topic: the answer lists only those the principal may describe.
        return Decision(body, patch=_describable_topics(context))
    refused = []
    kept = []
    may_create = body.get("allow_auto_topic_creation", True)
    for topic in topics:
        name = topic.get("name")
        if name is None or context.topic(AclOperation.DESCRIBE, name):
            kept.append(topic)
            if (
                name is not None
                and name not in image.topics
                and not (
                    context.cluster(AclOperation.CREATE) or context.topic(AclOperation.CREATE, name)
                )
            ):
                may_create = False
        else:
            refused.append(name)
    if not refused and may_create == body.get("allow_auto_topic_creation", True):
        return Decision(body)

    def patch(answer: dict[str, Any]) -> dict[str, Any]:
        answer.setdefault("topics", [])
        for name in refused:
            answer["topics"].append(
                {"error_code": TOPIC_DENIED, "name": name, "is_internal": False, "partitions": []}
            )
        return answer

    return Decision({**body, "topics": kept, "allow_auto_topic_creation": may_create}, patch=patch)


def _create_topics(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
    if context.cluster(AclOperation.CREATE):
        return Decision(body)
    topics = body.get("topics") or []
    refused = [t["name"] for t in topics if not context.topic(AclOperation.CREATE, t["name"])]
    if not refused:
        return Decision(body)

    def patch(answer: dict[str, Any]) -> dict[str, Any]:
        answer.setdefault("topics", [])
        for name in refused:
            answer["topics"].append(
                {
                    "name": name,
                    "error_code": TOPIC_DENIED,
                    "error_message": "not authorized to create the topic",
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "configs": None,
                }
            )
        return answer

    kept = [t for t in topics if t["name"] not in refused]
    return Decision({**body, "topics": kept}, patch=patch)


def _delete_topics(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
    image = context._owner.image()
    names: list[str] = list(body.get("topic_names") or [])
    by_id = {}
    for topic in body.get("topics") or []:
        name = topic.get("name")
        if name is None:
            found = image.topic_by_id(str(topic.get("topic_id")))
            name = found.name if found is not None else None
        if name is not None:
            names.append(name)
            by_id[name] = topic
    refused = [n for n in names if not context.topic(AclOperation.DELETE, n)]
    if not refused:
        return Decision(body)
    refused_set = set(refused)

    def patch(answer: dict[str, Any]) -> dict[str, Any]:
        answer.setdefault("responses", [])
        for name in refused:
            answer["responses"].append(
                {
                    "name": name,
                    "error_code": TOPIC_DENIED,
                    "error_message": "not authorized to delete the topic",
                }
            )
        return answer

    filtered = {
        **body,
        "topic_names": [n for n in body.get("topic_names") or [] if n not in refused_set],
        "topics": [t for name, t in by_id.items() if name not in refused_set],
    }
    return Decision(filtered, patch=patch)


def _create_partitions(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
    topics = body.get("topics") or []
    refused = [t["name"] for t in topics if not context.topic(AclOperation.ALTER, t["name"])]
    if not refused:
        return Decision(body)

    def patch(answer: dict[str, Any]) -> dict[str, Any]:
        answer.setdefault("results", [])
        for name in refused:
            answer["results"].append(
                {"name": name, "error_code": TOPIC_DENIED, "error_message": "not authorized"}
            )
        return answer

    kept = [t for t in topics if t["name"] not in refused]
    return Decision({**body, "topics": kept}, patch=patch)


def _configs(
    operation: AclOperation, out_key: str
) -> Callable[[_Context, RequestHeader, dict[str, Any]], Decision]:
    def allowed(context: _Context, resource: dict[str, Any]) -> ErrorCode | None:
        kind = resource["resource_type"]
        if kind == _RESOURCE_TOPIC:
            name = resource["resource_name"]
            return None if context.topic(operation, name) else TOPIC_DENIED
        if kind == _RESOURCE_BROKER:
            return None if context.cluster(operation) else CLUSTER_DENIED
        return None  # the handler refuses other types itself

    def rule(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
        resources = body.get("resources") or []
        refused = [(r, code) for r in resources if (code := allowed(context, r)) is not None]
        if not refused:
            return Decision(body)
        refused_ids = {id(r) for r, _ in refused}

        def patch(answer: dict[str, Any]) -> dict[str, Any]:
            answer.setdefault(out_key, [])
            for resource, code in refused:
                answer[out_key].append(
                    {
                        "error_code": code,
                        "error_message": "not authorized",
                        "resource_type": resource["resource_type"],
                        "resource_name": resource["resource_name"],
                        "configs": [],
                    }
                )
            return answer

        kept = [r for r in resources if id(r) not in refused_ids]
        return Decision({**body, "resources": kept}, patch=patch)

    return rule


def _whole_group(
    operation: AclOperation,
) -> Callable[[_Context, RequestHeader, dict[str, Any]], Decision]:
    def rule(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
        if context.group(operation, body["group_id"]):
            return Decision(body)
        return Decision(body, refusal={"error_code": GROUP_DENIED, "members": []})

    return rule


_commit_topics = _topic_partitions(
    AclOperation.READ,
    ("topics", "name", "partitions", "partition_index"),
    ("topics", "name", "partitions", "partition_index"),
    {},
)


def _offset_commit(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
    if not context.group(AclOperation.READ, body["group_id"]):
        return Decision(
            body,
            refusal={
                "topics": [
                    {
                        "name": t["name"],
                        "partitions": [
                            {"partition_index": p["partition_index"], "error_code": GROUP_DENIED}
                            for p in t.get("partitions") or []
                        ],
                    }
                    for t in body.get("topics") or []
                ]
            },
        )
    return _commit_topics(context, header, body)


def _add_offsets_to_txn(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
    """WRITE on the transactional id and READ on the group (Kafka's rules)."""
    transactional_id = body.get("transactional_id") or ""
    if not context.allows(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return Decision(
            body, refusal={"error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
        )
    if not context.group(AclOperation.READ, body.get("group_id") or ""):
        return Decision(body, refusal={"error_code": GROUP_DENIED})
    return Decision(body)


def _txn_offset_commit(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
    """WRITE on the transactional id, then OffsetCommit's rules (READ on the group and on
    each topic)."""
    transactional_id = body.get("transactional_id") or ""
    if not context.allows(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return Decision(
            body,
            refusal={
                "topics": [
                    {
                        "name": t["name"],
                        "partitions": [
                            {
                                "partition_index": p["partition_index"],
                                "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                            }
                            for p in t.get("partitions") or []
                        ],
                    }
                    for t in body.get("topics") or []
                ]
            },
        )
    return _offset_commit(context, header, body)


def _describe_transactions(
    context: _Context, header: RequestHeader, body: dict[str, Any]
) -> Decision:
    """DESCRIBE on each transactional id; the others are answered as refused."""
    ids = body.get("transactional_ids") or []

    def allowed(transactional_id: str) -> bool:
        return context.allows(
            AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id
        )

    refused = [i for i in ids if not allowed(i)]
    if not refused:
        return Decision(body)

    def patch(answer: dict[str, Any]) -> dict[str, Any]:
        answer.setdefault("transaction_states", []).extend(
            {
                "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "transactional_id": transactional_id,
                "transaction_state": "",
                "transaction_timeout_ms": 0,
                "transaction_start_time_ms": -1,
                "producer_id": -1,
                "producer_epoch": -1,
                "topics": [],
            }  # fmt: skip
            for transactional_id in refused
        )
        return answer

    return Decision({**body, "transactional_ids": [i for i in ids if allowed(i)]}, patch=patch)


def _list_transactions(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
    """Only the transactional ids the principal may DESCRIBE are listed (Kafka's rule)."""

    def patch(answer: dict[str, Any]) -> dict[str, Any]:
        answer["transaction_states"] = [
            state
            for state in answer.get("transaction_states", [])
            if context.allows(
                AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, state["transactional_id"]
            )
        ]
        return answer

    return Decision(body, patch=patch)


def _describe_producers(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
    """READ on each topic; the partitions of the others are answered as refused."""
    topics = body.get("topics") or []
    refused = [t for t in topics if not context.topic(AclOperation.READ, t["name"])]
    if not refused:
        return Decision(body)

    def patch(answer: dict[str, Any]) -> dict[str, Any]:
        answer.setdefault("topics", []).extend(
            {
                "name": topic["name"],
                "partitions": [
                    {
                        "partition_index": index,
                        "error_code": TOPIC_DENIED,
                        "error_message": None,
                        "active_producers": [],
                    }  # fmt: skip
                    for index in topic["partition_indexes"]
                ],
            }
            for topic in refused
        )
        return answer

    kept = [t for t in topics if t not in refused]
    return Decision({**body, "topics": kept}, patch=patch)


def _offset_fetch(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
    group = body.get("group_id") or ""
    if not context.group(AclOperation.DESCRIBE, group):
        return Decision(body, refusal={"error_code": GROUP_DENIED, "topics": []})
    topics = body.get("topics")
    if topics is None:
        return Decision(body, patch=_describable_topics(context))
    refused = [t for t in topics if not context.topic(AclOperation.DESCRIBE, t["name"])]
    if not refused:
        return Decision(body)

    def patch(answer: dict[str, Any]) -> dict[str, Any]:
        answer.setdefault("topics", [])
        for topic in refused:
            answer["topics"].append(
                {
                    "name": topic["name"],
                    "partitions": [
                        {
                            "partition_index": index,
                            "committed_offset": -1,
                            "committed_leader_epoch": -1,
                            "metadata": None,
                            "error_code": TOPIC_DENIED,
                        }
                        for index in topic.get("partition_indexes") or []
                    ],
                }
            )
        return answer

    kept = [t for t in topics if t not in refused]
    return Decision({**body, "topics": kept}, patch=patch)


_offset_delete_topics = _topic_partitions(
    AclOperation.READ,
    ("topics", "name", "partitions", "partition_index"),
    ("topics", "name", "partitions", "partition_index"),
    {},
)


def _offset_delete(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
    if not context.group(AclOperation.DELETE, body["group_id"]):
        return Decision(body, refusal={"error_code": GROUP_DENIED, "topics": []})
    return _offset_delete_topics(context, header, body)


def _find_coordinator(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
    kind = ResourceType.TRANSACTIONAL_ID if body.get("key_type") == 1 else ResourceType.GROUP
    error = (
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        if kind == ResourceType.TRANSACTIONAL_ID
        else GROUP_DENIED
    )
    keys = body.get("coordinator_keys") or []
    if header.api_version < 4 or not keys:
        if context.allows(AclOperation.DESCRIBE, kind, body.get("key") or ""):
            return Decision(body)
        return Decision(
            body, refusal={"error_code": error, "error_message": "not authorized", "node_id": -1}
        )
    refused = [k for k in keys if not context.allows(AclOperation.DESCRIBE, kind, k)]
    if not refused:
        return Decision(body)

    def patch(answer: dict[str, Any]) -> dict[str, Any]:
        answer.setdefault("coordinators", [])
        for key in refused:
            answer["coordinators"].append(
                {
                    "key": key,
                    "node_id": -1,
                    "host": "",
                    "port": -1,
                    "error_code": error,
                    "error_message": "not authorized",
                }
            )
        return answer

    kept = [k for k in keys if k not in refused]
    if not kept:
        return Decision(body, refusal=patch({"coordinators": []}))
    return Decision({**body, "coordinator_keys": kept}, patch=patch)


def _describe_groups(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
    groups = body.get("groups") or []
    refused = [g for g in groups if not context.group(AclOperation.DESCRIBE, g)]
    if not refused:
        return Decision(body)

    def patch(answer: dict[str, Any]) -> dict[str, Any]:
        answer.setdefault("groups", [])
        for group in refused:
            answer["groups"].append({"error_code": GROUP_DENIED, "group_id": group, "members": []})
        return answer

    return Decision({**body, "groups": [g for g in groups if g not in refused]}, patch=patch)


def _list_groups(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
    if context.cluster(AclOperation.DESCRIBE):
        return Decision(body)

    def visible(answer: dict[str, Any]) -> dict[str, Any]:
        answer["groups"] = [
            g
            for g in answer.get("groups", [])
            if context.group(AclOperation.DESCRIBE, g["group_id"])
        ]
        return answer

    return Decision(body, patch=visible)


def _delete_groups(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
    groups = body.get("groups_names") or []
    refused = [g for g in groups if not context.group(AclOperation.DELETE, g)]
    if not refused:
        return Decision(body)

    def patch(answer: dict[str, Any]) -> dict[str, Any]:
        answer.setdefault("results", [])
        for group in refused:
            answer["results"].append({"group_id": group, "error_code": GROUP_DENIED})
        return answer

    kept = [g for g in groups if g not in refused]
    if not kept:
        return Decision(body, refusal=patch({"results": []}))
    return Decision({**body, "groups_names": kept}, patch=patch)


def _init_producer_id(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
    transactional_id = body.get("transactional_id")
    if transactional_id is not None:
        if context.allows(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return Decision(body)
        return Decision(
            body,
            refusal={
                "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
    if context.cluster(AclOperation.IDEMPOTENT_WRITE) or context.may_write_some_topic():
        return Decision(body)
    return Decision(
        body, refusal={"error_code": CLUSTER_DENIED, "producer_id": -1, "producer_epoch": -1}
    )


def _transactional_write(
    id_key: str, refusal: Callable[[], dict[str, Any]]
) -> Callable[[_Context, RequestHeader, dict[str, Any]], Decision]:
    """WRITE on the request's transactional id, or ``refusal``."""

    def rule(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
        transactional_id = body.get(id_key) or ""
        if context.allows(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return Decision(body)
        return Decision(body, refusal=refusal())

    return rule


def _add_partitions_to_txn(
    context: _Context, header: RequestHeader, body: dict[str, Any]
) -> Decision:
    """WRITE on the transactional id (every partition refused otherwise), then WRITE on each
    topic (Kafka's TOPIC_AUTHORIZATION_FAILED for those refused, OPERATION_NOT_ATTEMPTED for
    the rest: nothing is added)."""
    topics = body.get("v3_and_below_topics") or []

    def all_partitions(code_of: Callable[[str], ErrorCode]) -> dict[str, Any]:
        return {
            "results_by_topic_v3_and_below": [
                {
                    "name": topic["name"],
                    "results_by_partition": [
                        {"partition_index": index, "partition_error_code": code_of(topic["name"])}
                        for index in topic["partitions"]
                    ],
                }
                for topic in topics
            ]
        }

    transactional_id = body.get("v3_and_below_transactional_id") or ""
    if not context.allows(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return Decision(
            body,
            refusal=all_partitions(lambda _name: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
        )
    refused = {t["name"] for t in topics if not context.topic(AclOperation.WRITE, t["name"])}
    if refused:
        return Decision(
            body,
            refusal=all_partitions(
                lambda name: TOPIC_DENIED if name in refused else ErrorCode.OPERATION_NOT_ATTEMPTED
            ),
        )
    return Decision(body)


def _cluster_only(
    operation: AclOperation, refusal: Callable[[], dict[str, Any]]
) -> Callable[[_Context, RequestHeader, dict[str, Any]], Decision]:
    def rule(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
        if context.cluster(operation):
            return Decision(body)
        return Decision(body, refusal=refusal())

    return rule


def _create_acls(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
    if context.cluster(AclOperation.ALTER):
        return Decision(body)
    results = [
        {"error_code": CLUSTER_DENIED, "error_message": "not authorized to create ACLs"}
        for _ in body.get("creations") or []
    ]
    return Decision(body, refusal={"results": results})


def _delete_acls(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
    if context.cluster(AclOperation.ALTER):
        return Decision(body)
    results = [
        {
            "error_code": CLUSTER_DENIED,
            "error_message": "not authorized to delete ACLs",
            "matching_acls": [],
        }
        for _ in body.get("filters") or []
    ]
    return Decision(body, refusal={"filter_results": results})


def _alter_credentials(context: _Context, header: RequestHeader, body: dict[str, Any]) -> Decision:
    if context.cluster(AclOperation.ALTER):
        return Decision(body)
    users = dict.fromkeys(
        item["name"] for item in (body.get("deletions") or []) + (body.get("upsertions") or [])
    )
    results = [
        {"user": user, "error_code": CLUSTER_DENIED, "error_message": "not authorized"}
        for user in users
    ]
    return Decision(body, refusal={"results": results})
