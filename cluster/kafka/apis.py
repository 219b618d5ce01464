"""Kafka request dispatch of a broker.

``KafkaApis.handle`` receives the decoded header and body from the listener, answers each API
in the version ranges of ``ADVERTISED_VERSIONS`` (a subset of what the codec implements), and
returns the encoded response frame.

Reads of cluster state (Metadata, DescribeCluster, DescribeConfigs) answer from this broker's
metadata image. Admin writes (CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs,
IncrementalAlterConfigs, auto-creation) are forwarded to the active controller, and answered
once this broker's image shows their effect.
Produce, Fetch and ListOffsets are served only by a partition's leader in a compatible leader
epoch; other brokers answer ``NOT_LEADER_OR_FOLLOWER``, a stale client epoch gets
``FENCED_LEADER_EPOCH``. Per-partition problems become per-partition error codes; nothing a
client sends can make the broker drop data it already acknowledged.

The handlers are mixins, one module per API family: ``metadata`` (Metadata, DescribeCluster),
``produce``, ``fetch`` (Fetch, ListOffsets), ``admin`` (CreateTopics, DeleteTopics,
CreatePartitions, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs), ``groups`` (the
group coordinator's APIs), ``replica_admin`` (ElectLeaders,
AlterPartitionReassignments, ListPartitionReassignments, DescribeLogDirs), ``producer_ids``
(InitProducerId), ``transactions``
(InitProducerId with a transactional id, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
TxnOffsetCommit, DescribeTransactions, ListTransactions, DescribeProducers) and ``security`` (the SCRAM
credential APIs); ``common`` holds the state they share. ApiVersions is answered here, from ``ADVERTISED_VERSIONS``.
"""

from __future__ import annotations

from typing import Any

from flux.protocol.api import (
    SUPPORTED_VERSIONS,
    ApiKey,
    EncodeError,
    RequestHeader,
    encode_response,
)
from flux.protocol.errors import ErrorCode, UnsupportedVersionError

from ..config import NodeConfig
from ..groups.coordinator import GroupCoordinator
from ..metadata.controller_client import ControllerClient
from ..metadata.lifecycle import BrokerLifecycle
from ..replication.replica_manager import ReplicaManager
from ..transactions.coordinator import TransactionCoordinator
from .admin import AdminApis
from .authorization import RequestAuthorizer
from .fetch import FetchApis
from .groups import GroupApis
from .metadata import MetadataApis
from .produce import ProduceApis
from .producer_ids import ProducerIdApis, ProducerIdManager
from .replica_admin import ReplicaAdminApis
from .security import SecurityApis
from .server import ConnectionInfo, Deferred
from .transactions import TransactionApis

__all__ = ["ADVERTISED_VERSIONS", "KafkaApis"]

# The APIs this broker answers, each in the codec's full range except where capped below.
_IMPLEMENTED_APIS = (
    ApiKey.PRODUCE,
    ApiKey.FETCH,
    ApiKey.LIST_OFFSETS,
    ApiKey.OFFSET_FOR_LEADER_EPOCH,
    ApiKey.DELETE_RECORDS,
    ApiKey.METADATA,
    ApiKey.API_VERSIONS,
    ApiKey.CREATE_TOPICS,
    ApiKey.DELETE_TOPICS,
    ApiKey.CREATE_PARTITIONS,
    ApiKey.DESCRIBE_CONFIGS,
    ApiKey.ALTER_CONFIGS,
    ApiKey.INCREMENTAL_ALTER_CONFIGS,
    ApiKey.DESCRIBE_CLUSTER,
    ApiKey.INIT_PRODUCER_ID,
    ApiKey.ADD_PARTITIONS_TO_TXN,
    ApiKey.ADD_OFFSETS_TO_TXN,
    ApiKey.END_TXN,
    ApiKey.TXN_OFFSET_COMMIT,
    ApiKey.DESCRIBE_PRODUCERS,
    ApiKey.DESCRIBE_TRANSACTIONS,
    ApiKey.LIST_TRANSACTIONS,
    ApiKey.ELECT_LEADERS,
    ApiKey.DESCRIBE_LOG_DIRS,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS,
    ApiKey.LIST_PARTITION_REASSIGNMENTS,
    ApiKey.UNREGISTER_BROKER,
    ApiKey.FIND_COORDINATOR,
    ApiKey.JOIN_GROUP,
    ApiKey.SYNC_GROUP,
    ApiKey.HEARTBEAT,
    ApiKey.LEAVE_GROUP,
    ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH,
    ApiKey.LIST_GROUPS,
    ApiKey.DESCRIBE_GROUPS,
    ApiKey.DELETE_GROUPS,
    ApiKey.OFFSET_DELETE,
    # Answered by the listener (``server.py``), which owns the connection's SASL state.
    ApiKey.SASL_HANDSHAKE,
    ApiKey.SASL_AUTHENTICATE,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    ApiKey.DESCRIBE_ACLS,
    ApiKey.CREATE_ACLS,
    ApiKey.DELETE_ACLS,
)
# InitProducerId v5+ is for transactions 2.0. OffsetFetch v8 batches groups; v7 serves every
# client we test.
_VERSION_CAPS = {ApiKey.INIT_PRODUCER_ID: 4, ApiKey.OFFSET_FETCH: 7}
ADVERTISED_VERSIONS: dict[int, tuple[int, int]] = {
    key: (SUPPORTED_VERSIONS[key][0], min(SUPPORTED_VERSIONS[key][1], _VERSION_CAPS.get(key, 99)))
    for key in _IMPLEMENTED_APIS
}


class KafkaApis(
    MetadataApis,
    ProduceApis,
    FetchApis,
    AdminApis,
    ReplicaAdminApis,
    TransactionApis,
    GroupApis,
    ProducerIdApis,
    SecurityApis,
):
    """Answers Kafka requests against this broker's ``ReplicaManager`` and metadata image."""

    def __init__(
        self,
        config: NodeConfig,
        replicas: ReplicaManager,
        controller: ControllerClient,
        lifecycle: BrokerLifecycle,
        producer_ids: ProducerIdManager,
        groups: GroupCoordinator,
        transactions: TransactionCoordinator,
    ) -> None:
        self._config = config
        self._replicas = replicas
        self._controller = controller
        self._lifecycle = lifecycle
        self._producer_ids = producer_ids
        self._groups = groups
        self._transactions = transactions
        self._node_id = config.node.id
        security = config.security
        self.authorization = RequestAuthorizer(
            enabled=security.authorizer_enable,
            super_users=frozenset(security.super_users),
            allow_everyone_if_no_acl_found=security.allow_everyone_if_no_acl_found,
            image=lambda: replicas.image,
        )
        # Metadata, DescribeCluster, FindCoordinator and JoinGroup also need the connection
        # and are dispatched in ``handle``.
        self._handlers = {
            ApiKey.API_VERSIONS: self._api_versions,
            ApiKey.PRODUCE: self._produce,
            ApiKey.FETCH: self._fetch,
            ApiKey.LIST_OFFSETS: self._list_offsets,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self._offset_for_leader_epoch,
            ApiKey.DELETE_RECORDS: self._delete_records,
            ApiKey.CREATE_TOPICS: self._create_topics,
            ApiKey.DELETE_TOPICS: self._delete_topics,
            ApiKey.CREATE_PARTITIONS: self._create_partitions,
            ApiKey.DESCRIBE_CONFIGS: self._describe_configs,
            ApiKey.ALTER_CONFIGS: self._alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self._incremental_alter_configs,
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: self._add_partitions_to_txn,
            ApiKey.END_TXN: self._end_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self._add_offsets_to_txn,
            ApiKey.TXN_OFFSET_COMMIT: self._txn_offset_commit,
            ApiKey.DESCRIBE_PRODUCERS: self._describe_producers,
            ApiKey.DESCRIBE_TRANSACTIONS: self._describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self._list_transactions,
            ApiKey.ELECT_LEADERS: self._elect_leaders,
            ApiKey.DESCRIBE_LOG_DIRS: self._describe_log_dirs,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: self._alter_partition_reassignments,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: self._list_partition_reassignments,
            ApiKey.UNREGISTER_BROKER: self._unregister_broker,
            ApiKey.SYNC_GROUP: self._sync_group,
            ApiKey.HEARTBEAT: self._heartbeat,
            ApiKey.LEAVE_GROUP: self._leave_group,
            ApiKey.OFFSET_COMMIT: self._offset_commit,
            ApiKey.OFFSET_FETCH: self._offset_fetch,
            ApiKey.LIST_GROUPS: self._list_groups,
            ApiKey.DESCRIBE_GROUPS: self._describe_groups,
            ApiKey.DELETE_GROUPS: self._delete_groups,
            ApiKey.OFFSET_DELETE: self._offset_delete,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self._describe_user_scram_credentials,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self._alter_user_scram_credentials,
            ApiKey.DESCRIBE_ACLS: self._describe_acls,
            ApiKey.CREATE_ACLS: self._create_acls,
            ApiKey.DELETE_ACLS: self._delete_acls,
        }

    async def handle(
        self, header: RequestHeader, body: dict[str, Any], connection: ConnectionInfo
    ) -> bytes | Deferred | None:
        low, high = ADVERTISED_VERSIONS.get(header.api_key, (1, 0))
        if not low <= header.api_version <= high:
            raise UnsupportedVersionError(header.api_key, header.api_version, header.correlation_id)
        patch = None
        if self.authorization.enabled:
            decision = self.authorization.check(
                header, body, connection.principal, connection.peer.rpartition(":")[0]
            )
            if decision.refusal is not None:
                return encode_response(header, decision.refusal)
            body, patch = decision.body, decision.patch
        response = await self._dispatch(header, body, connection)
        if patch is not None and response is not None:
            if isinstance(response, Deferred):
                response = response.then(lambda done: None if done is None else patch(done))
            else:
                response = patch(response)
        if response is None:
            return None
        if isinstance(response, Deferred):
            return response.then(
                lambda done: None if done is None else _encode_response(header, done)
            )
        return _encode_response(header, response)

    async def _dispatch(
        self, header: RequestHeader, body: dict[str, Any], connection: ConnectionInfo
    ) -> dict[str, Any] | Deferred | None:
        if header.api_key == ApiKey.JOIN_GROUP:
            response = await self._join_group(header, body, connection.peer)
        elif header.api_key == ApiKey.METADATA:
            # Broker addresses are answered on the listener the client came in on.
            response = await self._metadata(header, body, connection.listener)
        elif header.api_key == ApiKey.DESCRIBE_CLUSTER:
            response = await self._describe_cluster(header, body, connection.listener)
        elif header.api_key == ApiKey.FIND_COORDINATOR:
            response = await self._find_coordinator(header, body, connection.listener)
        elif header.api_key == ApiKey.PRODUCE:
            # v10+ names the new leader of a moved partition on this listener (KIP-951).
            response = await self._produce(header, body, connection.listener)
        else:
            response = await self._handlers[header.api_key](header, body)
        return response

    # -- ApiVersions --------------------------------------------------------------------------

    async def _api_versions(self, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "error_code": ErrorCode.NONE,
            "api_keys": [
                {"api_key": int(key), "min_version": low, "max_version": high}
                for key, (low, high) in sorted(ADVERTISED_VERSIONS.items())
            ],
            "throttle_time_ms": 0,
        }


#: Longest error message an answer carries (Kafka strings hold at most 32767 bytes).
ERROR_MESSAGE_MAX_CHARS = 1000


def _encode_response(header: RequestHeader, response: dict[str, Any]) -> bytes:
    """``encode_response``, and if that fails, once more with every error message cut to
    ``ERROR_MESSAGE_MAX_CHARS``: messages quote what the client sent, and the fuzzer's
    CreateTopics with a 32767-byte topic name got an error message too long to encode (the
    connection closed with an internal error). Only the failure path pays for the walk."""
    try:
        return encode_response(header, response)
    except EncodeError:
        return encode_response(header, _shorten_messages(response))


def _shorten_messages(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: (
                item[:ERROR_MESSAGE_MAX_CHARS] + "..."
                if key.endswith("message")
                and isinstance(item, str)
                and len(item) > ERROR_MESSAGE_MAX_CHARS
                else _shorten_messages(item)
            )
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_shorten_messages(item) for item in value]
    return value
