"""Descriptions of the Kafka API messages Flux speaks, one request and one response per API.

Written from Apache Kafka's message definitions
(``clients/src/main/resources/common/message/*.json``): the same field names, version ranges,
nullable versions, tags and defaults. Each description covers every version Kafka defines for
the message that Flux may want (including old versions Kafka 4 dropped, such as ListOffsets v0);
``flux.protocol.api.SUPPORTED_VERSIONS`` says which of them the broker actually serves.

Reading guide: ``field(name, type, versions, *members, nullable=..., default=..., tag=...,
tagged=...)``. A type starting with ``[]`` is an array; a capitalised type is a struct whose
members follow. To add an API, describe its two messages here and list them in ``REQUESTS`` and
``RESPONSES``; nothing else in the codec changes.
"""

from __future__ import annotations

from flux.protocol.schema import Field, Message
from flux.protocol.schema import field as f

__all__ = ["REQUESTS", "RESPONSES"]

# The descriptions mirror the nesting of Kafka's JSON; the formatter would put every argument on
# its own line and bury the structure.
# fmt: off

# ---------------------------------------------------------------------------- shared shapes


def _leader_id_and_epoch(name: str, versions: str, tag: int) -> Field:
    return f(
        name, "LeaderIdAndEpoch", versions,
        f("LeaderId", "int32", versions, default="-1"),
        f("LeaderEpoch", "int32", versions, default="-1"),
        tag=tag, tagged=versions,
    )


def _node_endpoints(versions: str, tag: int) -> Field:
    return f(
        "NodeEndpoints", "[]NodeEndpoint", versions,
        f("NodeId", "int32", versions),
        f("Host", "string", versions),
        f("Port", "int32", versions),
        f("Rack", "string", versions, nullable=versions, default="null"),
        tag=tag, tagged=versions,
    )


# ------------------------------------------------------------------------------ Produce (0)

PRODUCE_REQUEST = Message(
    "ProduceRequest", 0, "3-13", "9+",
    f("TransactionalId", "string", "3+", nullable="3+", default="null"),
    f("Acks", "int16", "0+"),
    f("TimeoutMs", "int32", "0+"),
    f("TopicData", "[]TopicProduceData", "0+",
        f("Name", "string", "0-12"),
        f("TopicId", "uuid", "13+"),
        f("PartitionData", "[]PartitionProduceData", "0+",
            f("Index", "int32", "0+"),
            f("Records", "records", "0+", nullable="0+"),
        ),
    ),
)

PRODUCE_RESPONSE = Message(
    "ProduceResponse", 0, "3-13", "9+",
    f("Responses", "[]TopicProduceResponse", "0+",
        f("Name", "string", "0-12"),
        f("TopicId", "uuid", "13+"),
        f("PartitionResponses", "[]PartitionProduceResponse", "0+",
            f("Index", "int32", "0+"),
            f("ErrorCode", "int16", "0+"),
            f("BaseOffset", "int64", "0+"),
            f("LogAppendTimeMs", "int64", "2+", default="-1"),
            f("LogStartOffset", "int64", "5+", default="-1"),
            f("RecordErrors", "[]BatchIndexAndErrorMessage", "8+",
                f("BatchIndex", "int32", "8+"),
                f("BatchIndexErrorMessage", "string", "8+", nullable="8+", default="null"),
            ),
            f("ErrorMessage", "string", "8+", nullable="8+", default="null"),
            _leader_id_and_epoch("CurrentLeader", "10+", tag=0),
        ),
    ),
    f("ThrottleTimeMs", "int32", "1+", default="0"),
    _node_endpoints("10+", tag=0),
)

# -------------------------------------------------------------------------------- Fetch (1)

FETCH_REQUEST = Message(
    "FetchRequest", 1, "4-18", "12+",
    f("ClusterId", "string", "12+", nullable="12+", default="null", tag=0, tagged="12+"),
    f("ReplicaId", "int32", "0-14", default="-1"),
    f("ReplicaState", "ReplicaState", "15+",
        f("ReplicaId", "int32", "15+", default="-1"),
        f("ReplicaEpoch", "int64", "15+", default="-1"),
        tag=1, tagged="15+",
    ),
    f("MaxWaitMs", "int32", "0+"),
    f("MinBytes", "int32", "0+"),
    f("MaxBytes", "int32", "3+", default="0x7fffffff"),
    f("IsolationLevel", "int8", "4+", default="0"),
    f("SessionId", "int32", "7+", default="0"),
    f("SessionEpoch", "int32", "7+", default="-1"),
    f("Topics", "[]FetchTopic", "0+",
        f("Topic", "string", "0-12"),
        f("TopicId", "uuid", "13+"),
        f("Partitions", "[]FetchPartition", "0+",
            f("Partition", "int32", "0+"),
            f("CurrentLeaderEpoch", "int32", "9+", default="-1"),
            f("FetchOffset", "int64", "0+"),
            f("LastFetchedEpoch", "int32", "12+", default="-1"),
            f("LogStartOffset", "int64", "5+", default="-1"),
            f("PartitionMaxBytes", "int32", "0+"),
            f("ReplicaDirectoryId", "uuid", "17+", tag=0, tagged="17+"),
            f("HighWatermark", "int64", "18+", default="9223372036854775807",
              tag=1, tagged="18+"),
        ),
    ),
    f("ForgottenTopicsData", "[]ForgottenTopic", "7+",
        f("Topic", "string", "7-12"),
        f("TopicId", "uuid", "13+"),
        f("Partitions", "[]int32", "7+"),
    ),
    f("RackId", "string", "11+", default=""),
)

FETCH_RESPONSE = Message(
    "FetchResponse", 1, "4-18", "12+",
    f("ThrottleTimeMs", "int32", "1+"),
    f("ErrorCode", "int16", "7+"),
    f("SessionId", "int32", "7+", default="0"),
    f("Responses", "[]FetchableTopicResponse", "0+",
        f("Topic", "string", "0-12"),
        f("TopicId", "uuid", "13+"),
        f("Partitions", "[]PartitionData", "0+",
            f("PartitionIndex", "int32", "0+"),
            f("ErrorCode", "int16", "0+"),
            f("HighWatermark", "int64", "0+"),
            f("LastStableOffset", "int64", "4+", default="-1"),
            f("LogStartOffset", "int64", "5+", default="-1"),
            f("DivergingEpoch", "EpochEndOffset", "12+",
                f("Epoch", "int32", "12+", default="-1"),
                f("EndOffset", "int64", "12+", default="-1"),
                tag=0, tagged="12+",
            ),
            _leader_id_and_epoch("CurrentLeader", "12+", tag=1),
            f("SnapshotId", "SnapshotId", "12+",
                f("EndOffset", "int64", "0+", default="-1"),
                f("Epoch", "int32", "0+", default="-1"),
                tag=2, tagged="12+",
            ),
            f("AbortedTransactions", "[]AbortedTransaction", "4+",
                f("ProducerId", "int64", "4+"),
                f("FirstOffset", "int64", "4+"),
                nullable="4+",
            ),
            f("PreferredReadReplica", "int32", "11+", default="-1"),
            f("Records", "records", "0+", nullable="0+"),
        ),
    ),
    _node_endpoints("16+", tag=0),
)

# -------------------------------------------------------------------------- ListOffsets (2)

LIST_OFFSETS_REQUEST = Message(
    "ListOffsetsRequest", 2, "0-11", "6+",
    f("ReplicaId", "int32", "0+"),
    f("IsolationLevel", "int8", "2+"),
    f("Topics", "[]ListOffsetsTopic", "0+",
        f("Name", "string", "0+"),
        f("Partitions", "[]ListOffsetsPartition", "0+",
            f("PartitionIndex", "int32", "0+"),
            f("CurrentLeaderEpoch", "int32", "4+", default="-1"),
            f("Timestamp", "int64", "0+"),
            f("MaxNumOffsets", "int32", "0", default="1"),
        ),
    ),
    f("TimeoutMs", "int32", "10+"),
)

LIST_OFFSETS_RESPONSE = Message(
    "ListOffsetsResponse", 2, "0-11", "6+",
    f("ThrottleTimeMs", "int32", "2+"),
    f("Topics", "[]ListOffsetsTopicResponse", "0+",
        f("Name", "string", "0+"),
        f("Partitions", "[]ListOffsetsPartitionResponse", "0+",
            f("PartitionIndex", "int32", "0+"),
            f("ErrorCode", "int16", "0+"),
            f("OldStyleOffsets", "[]int64", "0"),
            f("Timestamp", "int64", "1+", default="-1"),
            f("Offset", "int64", "1+", default="-1"),
            f("LeaderEpoch", "int32", "4+", default="-1"),
        ),
    ),
)

# ----------------------------------------------------------------------------- Metadata (3)

METADATA_REQUEST = Message(
    "MetadataRequest", 3, "0-13", "9+",
    # v0: an empty array means all topics. v1+: null means all topics, [] means none.
    f("Topics", "[]MetadataRequestTopic", "0+",
        f("TopicId", "uuid", "10+"),
        f("Name", "string", "0+", nullable="10+"),
        nullable="1+",
    ),
    f("AllowAutoTopicCreation", "bool", "4+", default="true"),
    f("IncludeClusterAuthorizedOperations", "bool", "8-10"),
    f("IncludeTopicAuthorizedOperations", "bool", "8+"),
)

METADATA_RESPONSE = Message(
    "MetadataResponse", 3, "0-13", "9+",
    f("ThrottleTimeMs", "int32", "3+"),
    f("Brokers", "[]MetadataResponseBroker", "0+",
        f("NodeId", "int32", "0+"),
        f("Host", "string", "0+"),
        f("Port", "int32", "0+"),
        f("Rack", "string", "1+", nullable="1+", default="null"),
    ),
    f("ClusterId", "string", "2+", nullable="2+", default="null"),
    f("ControllerId", "int32", "1+", default="-1"),
    f("Topics", "[]MetadataResponseTopic", "0+",
        f("ErrorCode", "int16", "0+"),
        f("Name", "string", "0+", nullable="12+"),
        f("TopicId", "uuid", "10+"),
        f("IsInternal", "bool", "1+", default="false"),
        f("Partitions", "[]MetadataResponsePartition", "0+",
            f("ErrorCode", "int16", "0+"),
            f("PartitionIndex", "int32", "0+"),
            f("LeaderId", "int32", "0+"),
            f("LeaderEpoch", "int32", "7+", default="-1"),
            f("ReplicaNodes", "[]int32", "0+"),
            f("IsrNodes", "[]int32", "0+"),
            f("OfflineReplicas", "[]int32", "5+"),
        ),
        f("TopicAuthorizedOperations", "int32", "8+", default="-2147483648"),
    ),
    f("ClusterAuthorizedOperations", "int32", "8-10", default="-2147483648"),
    f("ErrorCode", "int16", "13+"),
)

# -------------------------------------------------------------------------- ApiVersions (18)

API_VERSIONS_REQUEST = Message(
    "ApiVersionsRequest", 18, "0-4", "3+",
    f("ClientSoftwareName", "string", "3+"),
    f("ClientSoftwareVersion", "string", "3+"),
)

API_VERSIONS_RESPONSE = Message(
    "ApiVersionsResponse", 18, "0-4", "3+",
    f("ErrorCode", "int16", "0+"),
    f("ApiKeys", "[]ApiVersion", "0+",
        f("ApiKey", "int16", "0+"),
        f("MinVersion", "int16", "0+"),
        f("MaxVersion", "int16", "0+"),
    ),
    f("ThrottleTimeMs", "int32", "1+"),
    f("SupportedFeatures", "[]SupportedFeatureKey", "3+",
        f("Name", "string", "3+"),
        f("MinVersion", "int16", "3+"),
        f("MaxVersion", "int16", "3+"),
        tag=0, tagged="3+",
    ),
    f("FinalizedFeaturesEpoch", "int64", "3+", default="-1", tag=1, tagged="3+"),
    f("FinalizedFeatures", "[]FinalizedFeatureKey", "3+",
        f("Name", "string", "3+"),
        f("MaxVersionLevel", "int16", "3+"),
        f("MinVersionLevel", "int16", "3+"),
        tag=2, tagged="3+",
    ),
    f("ZkMigrationReady", "bool", "3+", default="false", tag=3, tagged="3+"),
)

# ------------------------------------------------------------------------- CreateTopics (19)

CREATE_TOPICS_REQUEST = Message(
    "CreateTopicsRequest", 19, "0-7", "5+",
    f("Topics", "[]CreatableTopic", "0+",
        f("Name", "string", "0+"),
        f("NumPartitions", "int32", "0+"),
        f("ReplicationFactor", "int16", "0+"),
        f("Assignments", "[]CreatableReplicaAssignment", "0+",
            f("PartitionIndex", "int32", "0+"),
            f("BrokerIds", "[]int32", "0+"),
        ),
        f("Configs", "[]CreatableTopicConfig", "0+",
            f("Name", "string", "0+"),
            f("Value", "string", "0+", nullable="0+"),
        ),
    ),
    f("timeoutMs", "int32", "0+", default="60000"),
    f("validateOnly", "bool", "1+", default="false"),
)

CREATE_TOPICS_RESPONSE = Message(
    "CreateTopicsResponse", 19, "0-7", "5+",
    f("ThrottleTimeMs", "int32", "2+"),
    f("Topics", "[]CreatableTopicResult", "0+",
        f("Name", "string", "0+"),
        f("TopicId", "uuid", "7+"),
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "1+", nullable="0+"),
        f("TopicConfigErrorCode", "int16", "5+", tag=0, tagged="5+"),
        f("NumPartitions", "int32", "5+", default="-1"),
        f("ReplicationFactor", "int16", "5+", default="-1"),
        f("Configs", "[]CreatableTopicConfigs", "5+",
            f("Name", "string", "5+"),
            f("Value", "string", "5+", nullable="5+"),
            f("ReadOnly", "bool", "5+"),
            f("ConfigSource", "int8", "5+", default="-1"),
            f("IsSensitive", "bool", "5+"),
            nullable="5+",
        ),
    ),
)

# ------------------------------------------------------------------------- DeleteTopics (20)

DELETE_TOPICS_REQUEST = Message(
    "DeleteTopicsRequest", 20, "0-6", "4+",
    f("Topics", "[]DeleteTopicState", "6+",
        f("Name", "string", "6+", nullable="6+", default="null"),
        f("TopicId", "uuid", "6+"),
    ),
    f("TopicNames", "[]string", "0-5"),
    f("TimeoutMs", "int32", "0+"),
)

DELETE_TOPICS_RESPONSE = Message(
    "DeleteTopicsResponse", 20, "0-6", "4+",
    f("ThrottleTimeMs", "int32", "1+"),
    f("Responses", "[]DeletableTopicResult", "0+",
        f("Name", "string", "0+", nullable="6+"),
        f("TopicId", "uuid", "6+"),
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "5+", nullable="5+", default="null"),
    ),
)

# ---------------------------------------------------------------------- DescribeConfigs (32)

DESCRIBE_CONFIGS_REQUEST = Message(
    "DescribeConfigsRequest", 32, "0-4", "4+",
    f("Resources", "[]DescribeConfigsResource", "0+",
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
        f("ConfigurationKeys", "[]string", "0+", nullable="0+"),
    ),
    f("IncludeSynonyms", "bool", "1+", default="false"),
    f("IncludeDocumentation", "bool", "3+", default="false"),
)

DESCRIBE_CONFIGS_RESPONSE = Message(
    "DescribeConfigsResponse", 32, "0-4", "4+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("Results", "[]DescribeConfigsResult", "0+",
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+"),
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
        f("Configs", "[]DescribeConfigsResourceResult", "0+",
            f("Name", "string", "0+"),
            f("Value", "string", "0+", nullable="0+"),
            f("ReadOnly", "bool", "0+"),
            f("ConfigSource", "int8", "1+", default="-1"),
            f("IsDefault", "bool", "0"),
            f("IsSensitive", "bool", "0+"),
            f("Synonyms", "[]DescribeConfigsSynonym", "1+",
                f("Name", "string", "1+"),
                f("Value", "string", "1+", nullable="0+"),
                f("Source", "int8", "1+"),
            ),
            f("ConfigType", "int8", "3+", default="0"),
            f("Documentation", "string", "3+", nullable="0+"),
        ),
    ),
)

# ------------------------------------------------------------------------- AlterConfigs (33)

# The legacy API: each resource's configs replace all of its overrides (a null value deletes).
ALTER_CONFIGS_REQUEST = Message(
    "AlterConfigsRequest", 33, "0-2", "2+",
    f("Resources", "[]AlterConfigsResource", "0+",
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
        f("Configs", "[]AlterableConfig", "0+",
            f("Name", "string", "0+"),
            f("Value", "string", "0+", nullable="0+"),
        ),
    ),
    f("ValidateOnly", "bool", "0+"),
)

ALTER_CONFIGS_RESPONSE = Message(
    "AlterConfigsResponse", 33, "0-2", "2+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("Responses", "[]AlterConfigsResourceResponse", "0+",
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+"),
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
    ),
)

# --------------------------------------------------------------------- DescribeCluster (60)

DESCRIBE_CLUSTER_REQUEST = Message(
    "DescribeClusterRequest", 60, "0-2", "0+",
    f("IncludeClusterAuthorizedOperations", "bool", "0+"),
    f("EndpointType", "int8", "1+", default="1"),
    f("IncludeFencedBrokers", "bool", "2+"),
)

DESCRIBE_CLUSTER_RESPONSE = Message(
    "DescribeClusterResponse", 60, "0-2", "0+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
    f("ErrorMessage", "string", "0+", nullable="0+", default="null"),
    f("EndpointType", "int8", "1+", default="1"),
    f("ClusterId", "string", "0+"),
    f("ControllerId", "int32", "0+", default="-1"),
    f("Brokers", "[]DescribeClusterBroker", "0+",
        f("BrokerId", "int32", "0+"),
        f("Host", "string", "0+"),
        f("Port", "int32", "0+"),
        f("Rack", "string", "0+", nullable="0+", default="null"),
        f("IsFenced", "bool", "2+"),
    ),
    f("ClusterAuthorizedOperations", "int32", "0+", default="-2147483648"),
)

# --------------------------------------------------------------------- OffsetCommit (8)

OFFSET_COMMIT_REQUEST = Message(
    "OffsetCommitRequest", 8, "0-10", "8+",
    f("GroupId", "string", "0+"),
    f("GenerationIdOrMemberEpoch", "int32", "1+", default="-1"),
    f("MemberId", "string", "1+"),
    f("GroupInstanceId", "string", "7+", nullable="7+", default="null"),
    f("RetentionTimeMs", "int64", "2-4", default="-1"),
    f("Topics", "[]OffsetCommitRequestTopic", "0+",
        f("Name", "string", "0-9"),
        f("TopicId", "uuid", "10+"),
        f("Partitions", "[]OffsetCommitRequestPartition", "0+",
            f("PartitionIndex", "int32", "0+"),
            f("CommittedOffset", "int64", "0+"),
            f("CommittedLeaderEpoch", "int32", "6+", default="-1"),
            f("CommitTimestamp", "int64", "1", default="-1"),
            f("CommittedMetadata", "string", "0+", nullable="0+"),
        ),
    ),
)

OFFSET_COMMIT_RESPONSE = Message(
    "OffsetCommitResponse", 8, "0-10", "8+",
    f("ThrottleTimeMs", "int32", "3+"),
    f("Topics", "[]OffsetCommitResponseTopic", "0+",
        f("Name", "string", "0-9"),
        f("TopicId", "uuid", "10+"),
        f("Partitions", "[]OffsetCommitResponsePartition", "0+",
            f("PartitionIndex", "int32", "0+"),
            f("ErrorCode", "int16", "0+"),
        ),
    ),
)

# ---------------------------------------------------------------------- OffsetFetch (9)

OFFSET_FETCH_REQUEST = Message(
    "OffsetFetchRequest", 9, "0-10", "6+",
    f("GroupId", "string", "0-7"),
    # v0-1: topics must be listed; v2-7: null means all topics of the group.
    f("Topics", "[]OffsetFetchRequestTopic", "0-7",
        f("Name", "string", "0-7"),
        f("PartitionIndexes", "[]int32", "0-7"),
        nullable="2-7",
    ),
    f("Groups", "[]OffsetFetchRequestGroup", "8+",
        f("GroupId", "string", "8+"),
        f("MemberId", "string", "9+", nullable="9+", default="null"),
        f("MemberEpoch", "int32", "9+", default="-1"),
        f("Topics", "[]OffsetFetchRequestTopics", "8+",
            f("Name", "string", "8-9"),
            f("TopicId", "uuid", "10+"),
            f("PartitionIndexes", "[]int32", "8+"),
            nullable="8+",
        ),
    ),
    f("RequireStable", "bool", "7+", default="false"),
)

OFFSET_FETCH_RESPONSE = Message(
    "OffsetFetchResponse", 9, "0-10", "6+",
    f("ThrottleTimeMs", "int32", "3+"),
    f("Topics", "[]OffsetFetchResponseTopic", "0-7",
        f("Name", "string", "0-7"),
        f("Partitions", "[]OffsetFetchResponsePartition", "0-7",
            f("PartitionIndex", "int32", "0-7"),
            f("CommittedOffset", "int64", "0-7"),
            f("CommittedLeaderEpoch", "int32", "5-7", default="-1"),
            f("Metadata", "string", "0-7", nullable="0-7"),
            f("ErrorCode", "int16", "0-7"),
        ),
    ),
    f("ErrorCode", "int16", "2-7", default="0"),
    f("Groups", "[]OffsetFetchResponseGroup", "8+",
        f("GroupId", "string", "8+"),
        f("Topics", "[]OffsetFetchResponseTopics", "8+",
            f("Name", "string", "8-9"),
            f("TopicId", "uuid", "10+"),
            f("Partitions", "[]OffsetFetchResponsePartitions", "8+",
                f("PartitionIndex", "int32", "8+"),
                f("CommittedOffset", "int64", "8+"),
                f("CommittedLeaderEpoch", "int32", "8+", default="-1"),
                f("Metadata", "string", "8+", nullable="8+"),
                f("ErrorCode", "int16", "8+"),
            ),
        ),
        f("ErrorCode", "int16", "8+", default="0"),
    ),
)

# ----------------------------------------------------------------- FindCoordinator (10)

FIND_COORDINATOR_REQUEST = Message(
    "FindCoordinatorRequest", 10, "0-6", "3+",
    f("Key", "string", "0-3"),
    f("KeyType", "int8", "1+", default="0"),
    f("CoordinatorKeys", "[]string", "4+"),
)

FIND_COORDINATOR_RESPONSE = Message(
    "FindCoordinatorResponse", 10, "0-6", "3+",
    f("ThrottleTimeMs", "int32", "1+"),
    f("ErrorCode", "int16", "0-3"),
    f("ErrorMessage", "string", "1-3", nullable="1-3"),
    f("NodeId", "int32", "0-3"),
    f("Host", "string", "0-3"),
    f("Port", "int32", "0-3"),
    f("Coordinators", "[]Coordinator", "4+",
        f("Key", "string", "4+"),
        f("NodeId", "int32", "4+"),
        f("Host", "string", "4+"),
        f("Port", "int32", "4+"),
        f("ErrorCode", "int16", "4+"),
        f("ErrorMessage", "string", "4+", nullable="4+"),
    ),
)

# ----------------------------------------------------------------------- JoinGroup (11)

JOIN_GROUP_REQUEST = Message(
    "JoinGroupRequest", 11, "0-9", "6+",
    f("GroupId", "string", "0+"),
    f("SessionTimeoutMs", "int32", "0+"),
    f("RebalanceTimeoutMs", "int32", "1+", default="-1"),
    f("MemberId", "string", "0+"),
    f("GroupInstanceId", "string", "5+", nullable="5+", default="null"),
    f("ProtocolType", "string", "0+"),
    f("Protocols", "[]JoinGroupRequestProtocol", "0+",
        f("Name", "string", "0+"),
        f("Metadata", "bytes", "0+"),
    ),
    f("Reason", "string", "8+", nullable="8+", default="null"),
)

JOIN_GROUP_RESPONSE = Message(
    "JoinGroupResponse", 11, "0-9", "6+",
    f("ThrottleTimeMs", "int32", "2+"),
    f("ErrorCode", "int16", "0+"),
    f("GenerationId", "int32", "0+", default="-1"),
    f("ProtocolType", "string", "7+", nullable="7+", default="null"),
    f("ProtocolName", "string", "0+", nullable="7+"),
    f("Leader", "string", "0+"),
    f("SkipAssignment", "bool", "9+", default="false"),
    f("MemberId", "string", "0+"),
    f("Members", "[]JoinGroupResponseMember", "0+",
        f("MemberId", "string", "0+"),
        f("GroupInstanceId", "string", "5+", nullable="5+", default="null"),
        f("Metadata", "bytes", "0+"),
    ),
)

# ----------------------------------------------------------------------- Heartbeat (12)

HEARTBEAT_REQUEST = Message(
    "HeartbeatRequest", 12, "0-4", "4+",
    f("GroupId", "string", "0+"),
    f("GenerationId", "int32", "0+"),
    f("MemberId", "string", "0+"),
    f("GroupInstanceId", "string", "3+", nullable="3+", default="null"),
)

HEARTBEAT_RESPONSE = Message(
    "HeartbeatResponse", 12, "0-4", "4+",
    f("ThrottleTimeMs", "int32", "1+"),
    f("ErrorCode", "int16", "0+"),
)

# ---------------------------------------------------------------------- LeaveGroup (13)

LEAVE_GROUP_REQUEST = Message(
    "LeaveGroupRequest", 13, "0-5", "4+",
    f("GroupId", "string", "0+"),
    f("MemberId", "string", "0-2"),
    f("Members", "[]MemberIdentity", "3+",
        f("MemberId", "string", "3+"),
        f("GroupInstanceId", "string", "3+", nullable="3+", default="null"),
        f("Reason", "string", "5+", nullable="5+", default="null"),
    ),
)

LEAVE_GROUP_RESPONSE = Message(
    "LeaveGroupResponse", 13, "0-5", "4+",
    f("ThrottleTimeMs", "int32", "1+"),
    f("ErrorCode", "int16", "0+"),
    f("Members", "[]MemberResponse", "3+",
        f("MemberId", "string", "3+"),
        f("GroupInstanceId", "string", "3+", nullable="3+"),
        f("ErrorCode", "int16", "3+"),
    ),
)

# ----------------------------------------------------------------------- SyncGroup (14)

SYNC_GROUP_REQUEST = Message(
    "SyncGroupRequest", 14, "0-5", "4+",
    f("GroupId", "string", "0+"),
    f("GenerationId", "int32", "0+"),
    f("MemberId", "string", "0+"),
    f("GroupInstanceId", "string", "3+", nullable="3+", default="null"),
    f("ProtocolType", "string", "5+", nullable="5+", default="null"),
    f("ProtocolName", "string", "5+", nullable="5+", default="null"),
    f("Assignments", "[]SyncGroupRequestAssignment", "0+",
        f("MemberId", "string", "0+"),
        f("Assignment", "bytes", "0+"),
    ),
)

SYNC_GROUP_RESPONSE = Message(
    "SyncGroupResponse", 14, "0-5", "4+",
    f("ThrottleTimeMs", "int32", "1+"),
    f("ErrorCode", "int16", "0+"),
    f("ProtocolType", "string", "5+", nullable="5+", default="null"),
    f("ProtocolName", "string", "5+", nullable="5+", default="null"),
    f("Assignment", "bytes", "0+"),
)

# ------------------------------------------------------------------ DescribeGroups (15)

DESCRIBE_GROUPS_REQUEST = Message(
    "DescribeGroupsRequest", 15, "0-6", "5+",
    f("Groups", "[]string", "0+"),
    f("IncludeAuthorizedOperations", "bool", "3+"),
)

DESCRIBE_GROUPS_RESPONSE = Message(
    "DescribeGroupsResponse", 15, "0-6", "5+",
    f("ThrottleTimeMs", "int32", "1+"),
    f("Groups", "[]DescribedGroup", "0+",
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "6+", nullable="6+", default="null"),
        f("GroupId", "string", "0+"),
        f("GroupState", "string", "0+"),
        f("ProtocolType", "string", "0+"),
        f("ProtocolData", "string", "0+"),
        f("Members", "[]DescribedGroupMember", "0+",
            f("MemberId", "string", "0+"),
            f("GroupInstanceId", "string", "4+", nullable="4+", default="null"),
            f("ClientId", "string", "0+"),
            f("ClientHost", "string", "0+"),
            f("MemberMetadata", "bytes", "0+"),
            f("MemberAssignment", "bytes", "0+"),
        ),
        f("AuthorizedOperations", "int32", "3+", default="-2147483648"),
    ),
)

# ---------------------------------------------------------------------- ListGroups (16)

LIST_GROUPS_REQUEST = Message(
    "ListGroupsRequest", 16, "0-5", "3+",
    f("StatesFilter", "[]string", "4+"),
    f("TypesFilter", "[]string", "5+"),
)

LIST_GROUPS_RESPONSE = Message(
    "ListGroupsResponse", 16, "0-5", "3+",
    f("ThrottleTimeMs", "int32", "1+"),
    f("ErrorCode", "int16", "0+"),
    f("Groups", "[]ListedGroup", "0+",
        f("GroupId", "string", "0+"),
        f("ProtocolType", "string", "0+"),
        f("GroupState", "string", "4+"),
        f("GroupType", "string", "5+"),
    ),
)

# ------------------------------------------------------------------- DeleteRecords (21)

DELETE_RECORDS_REQUEST = Message(
    "DeleteRecordsRequest", 21, "0-2", "2+",
    f("Topics", "[]DeleteRecordsTopic", "0+",
        f("Name", "string", "0+"),
        f("Partitions", "[]DeleteRecordsPartition", "0+",
            f("PartitionIndex", "int32", "0+"),
            f("Offset", "int64", "0+"),
        ),
    ),
    f("TimeoutMs", "int32", "0+"),
)

DELETE_RECORDS_RESPONSE = Message(
    "DeleteRecordsResponse", 21, "0-2", "2+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("Topics", "[]DeleteRecordsTopicResult", "0+",
        f("Name", "string", "0+"),
        f("Partitions", "[]DeleteRecordsPartitionResult", "0+",
            f("PartitionIndex", "int32", "0+"),
            f("LowWatermark", "int64", "0+"),
            f("ErrorCode", "int16", "0+"),
        ),
    ),
)

# ------------------------------------------------------------------ InitProducerId (22)

INIT_PRODUCER_ID_REQUEST = Message(
    "InitProducerIdRequest", 22, "0-6", "2+",
    f("TransactionalId", "string", "0+", nullable="0+"),
    f("TransactionTimeoutMs", "int32", "0+"),
    f("ProducerId", "int64", "3+", default="-1"),
    f("ProducerEpoch", "int16", "3+", default="-1"),
    f("Enable2Pc", "bool", "6+", default="false"),
    f("KeepPreparedTxn", "bool", "6+", default="false"),
)

INIT_PRODUCER_ID_RESPONSE = Message(
    "InitProducerIdResponse", 22, "0-6", "2+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
    f("ProducerId", "int64", "0+", default="-1"),
    f("ProducerEpoch", "int16", "0+"),
    f("OngoingTxnProducerId", "int64", "6+", default="-1"),
    f("OngoingTxnProducerEpoch", "int16", "6+", default="-1"),
)

# ------------------------------------------------------------ OffsetForLeaderEpoch (23)

OFFSET_FOR_LEADER_EPOCH_REQUEST = Message(
    "OffsetForLeaderEpochRequest", 23, "0-4", "4+",
    f("ReplicaId", "int32", "3+", default="-2"),
    f("Topics", "[]OffsetForLeaderTopic", "0+",
        f("Topic", "string", "0+"),
        f("Partitions", "[]OffsetForLeaderPartition", "0+",
            f("Partition", "int32", "0+"),
            f("CurrentLeaderEpoch", "int32", "2+", default="-1"),
            f("LeaderEpoch", "int32", "0+"),
        ),
    ),
)

OFFSET_FOR_LEADER_EPOCH_RESPONSE = Message(
    "OffsetForLeaderEpochResponse", 23, "0-4", "4+",
    f("ThrottleTimeMs", "int32", "2+"),
    f("Topics", "[]OffsetForLeaderTopicResult", "0+",
        f("Topic", "string", "0+"),
        f("Partitions", "[]EpochEndOffset", "0+",
            f("ErrorCode", "int16", "0+"),
            f("Partition", "int32", "0+"),
            f("LeaderEpoch", "int32", "1+", default="-1"),
            f("EndOffset", "int64", "0+", default="-1"),
        ),
    ),
)

# -------------------------------------------------------------- AddPartitionsToTxn (24)

# v0-3 are the client's form: one transaction, its fields prefixed "V3AndBelow" (body keys
# ``v3_and_below_transactional_id``, ..., ``v3_and_below_topics``). v4+ is the brokers' batched
# form (KIP-890): a ``transactions`` array, with ``verify_only`` per transaction.


def _add_partitions_to_txn_topics(name: str, versions: str) -> Field:
    # Kafka's common struct AddPartitionsToTxnTopic.
    return f(
        name, "[]AddPartitionsToTxnTopic", versions,
        f("Name", "string", "0+"),
        f("Partitions", "[]int32", "0+"),
    )


def _add_partitions_to_txn_topic_results(name: str, versions: str) -> Field:
    # Kafka's common structs AddPartitionsToTxnTopicResult and AddPartitionsToTxnPartitionResult.
    return f(
        name, "[]AddPartitionsToTxnTopicResult", versions,
        f("Name", "string", "0+"),
        f("ResultsByPartition", "[]AddPartitionsToTxnPartitionResult", "0+",
            f("PartitionIndex", "int32", "0+"),
            f("PartitionErrorCode", "int16", "0+"),
        ),
    )


ADD_PARTITIONS_TO_TXN_REQUEST = Message(
    "AddPartitionsToTxnRequest", 24, "0-5", "3+",
    f("Transactions", "[]AddPartitionsToTxnTransaction", "4+",
        f("TransactionalId", "string", "4+"),
        f("ProducerId", "int64", "4+"),
        f("ProducerEpoch", "int16", "4+"),
        f("VerifyOnly", "bool", "4+", default="false"),
        _add_partitions_to_txn_topics("Topics", "4+"),
    ),
    f("V3AndBelowTransactionalId", "string", "0-3"),
    f("V3AndBelowProducerId", "int64", "0-3"),
    f("V3AndBelowProducerEpoch", "int16", "0-3"),
    _add_partitions_to_txn_topics("V3AndBelowTopics", "0-3"),
)

ADD_PARTITIONS_TO_TXN_RESPONSE = Message(
    "AddPartitionsToTxnResponse", 24, "0-5", "3+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "4+"),
    f("ResultsByTransaction", "[]AddPartitionsToTxnResult", "4+",
        f("TransactionalId", "string", "4+"),
        _add_partitions_to_txn_topic_results("TopicResults", "4+"),
    ),
    # Body key ``results_by_topic_v3_and_below``.
    _add_partitions_to_txn_topic_results("ResultsByTopicV3AndBelow", "0-3"),
)

# ----------------------------------------------------------------- AddOffsetsToTxn (25)

ADD_OFFSETS_TO_TXN_REQUEST = Message(
    "AddOffsetsToTxnRequest", 25, "0-4", "3+",
    f("TransactionalId", "string", "0+"),
    f("ProducerId", "int64", "0+"),
    f("ProducerEpoch", "int16", "0+"),
    f("GroupId", "string", "0+"),
)

ADD_OFFSETS_TO_TXN_RESPONSE = Message(
    "AddOffsetsToTxnResponse", 25, "0-4", "3+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
)

# -------------------------------------------------------------------------- EndTxn (26)

END_TXN_REQUEST = Message(
    "EndTxnRequest", 26, "0-5", "3+",
    f("TransactionalId", "string", "0+"),
    f("ProducerId", "int64", "0+"),
    f("ProducerEpoch", "int16", "0+"),
    f("Committed", "bool", "0+"),
)

# v5 (KIP-890 part 2): the epoch is bumped at the end of every transaction; the response
# carries the producer id and epoch to use next.
END_TXN_RESPONSE = Message(
    "EndTxnResponse", 26, "0-5", "3+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
    f("ProducerId", "int64", "5+", default="-1"),
    f("ProducerEpoch", "int16", "5+", default="-1"),
)

# ----------------------------------------------------------------- WriteTxnMarkers (27)

# Coordinator to partition leaders. Kafka 4 dropped v0 (its JSON now says "1-2") without
# changing a field; v0 is described here as older brokers speak it.
WRITE_TXN_MARKERS_REQUEST = Message(
    "WriteTxnMarkersRequest", 27, "0-2", "1+",
    f("Markers", "[]WritableTxnMarker", "0+",
        f("ProducerId", "int64", "0+"),
        f("ProducerEpoch", "int16", "0+"),
        f("TransactionResult", "bool", "0+"),
        f("Topics", "[]WritableTxnMarkerTopic", "0+",
            f("Name", "string", "0+"),
            f("PartitionIndexes", "[]int32", "0+"),
        ),
        f("CoordinatorEpoch", "int32", "0+"),
        f("TransactionVersion", "int8", "2+", default="0"),
    ),
)

WRITE_TXN_MARKERS_RESPONSE = Message(
    "WriteTxnMarkersResponse", 27, "0-2", "1+",
    f("Markers", "[]WritableTxnMarkerResult", "0+",
        f("ProducerId", "int64", "0+"),
        f("Topics", "[]WritableTxnMarkerTopicResult", "0+",
            f("Name", "string", "0+"),
            f("Partitions", "[]WritableTxnMarkerPartitionResult", "0+",
                f("PartitionIndex", "int32", "0+"),
                f("ErrorCode", "int16", "0+"),
            ),
        ),
    ),
)

# ----------------------------------------------------------------- TxnOffsetCommit (28)

TXN_OFFSET_COMMIT_REQUEST = Message(
    "TxnOffsetCommitRequest", 28, "0-5", "3+",
    f("TransactionalId", "string", "0+"),
    f("GroupId", "string", "0+"),
    f("ProducerId", "int64", "0+"),
    f("ProducerEpoch", "int16", "0+"),
    f("GenerationId", "int32", "3+", default="-1"),
    f("MemberId", "string", "3+", default=""),
    f("GroupInstanceId", "string", "3+", nullable="3+", default="null"),
    f("Topics", "[]TxnOffsetCommitRequestTopic", "0+",
        f("Name", "string", "0+"),
        f("Partitions", "[]TxnOffsetCommitRequestPartition", "0+",
            f("PartitionIndex", "int32", "0+"),
            f("CommittedOffset", "int64", "0+"),
            f("CommittedLeaderEpoch", "int32", "2+", default="-1"),
            f("CommittedMetadata", "string", "0+", nullable="0+"),
        ),
    ),
)

TXN_OFFSET_COMMIT_RESPONSE = Message(
    "TxnOffsetCommitResponse", 28, "0-5", "3+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("Topics", "[]TxnOffsetCommitResponseTopic", "0+",
        f("Name", "string", "0+"),
        f("Partitions", "[]TxnOffsetCommitResponsePartition", "0+",
            f("PartitionIndex", "int32", "0+"),
            f("ErrorCode", "int16", "0+"),
        ),
    ),
)

# ---------------------------------------------------------------- DescribeLogDirs (35)

# Kafka 4 dropped v0 (its JSON now says "1-5"); v1 is the same as v0 on the wire (only the
# broker's throttling changed), so v0 is described here as older brokers speak it. A null
# ``topics`` asks for every topic.
DESCRIBE_LOG_DIRS_REQUEST = Message(
    "DescribeLogDirsRequest", 35, "0-5", "2+",
    f("Topics", "[]DescribableLogDirTopic", "0+",
        f("Topic", "string", "0+"),
        f("Partitions", "[]int32", "0+"),
        nullable="0+",
    ),
)

# v3 adds the top-level error code, v4 the volume sizes, v5 the cordoned flag.
DESCRIBE_LOG_DIRS_RESPONSE = Message(
    "DescribeLogDirsResponse", 35, "0-5", "2+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "3+"),
    f("Results", "[]DescribeLogDirsResult", "0+",
        f("ErrorCode", "int16", "0+"),
        f("LogDir", "string", "0+"),
        f("Topics", "[]DescribeLogDirsTopic", "0+",
            f("Name", "string", "0+"),
            f("Partitions", "[]DescribeLogDirsPartition", "0+",
                f("PartitionIndex", "int32", "0+"),
                f("PartitionSize", "int64", "0+"),
                f("OffsetLag", "int64", "0+"),
                f("IsFutureKey", "bool", "0+"),
            ),
        ),
        f("TotalBytes", "int64", "4+", default="-1"),
        f("UsableBytes", "int64", "4+", default="-1"),
        f("IsCordoned", "bool", "5+", default="false"),
    ),
)

# ---------------------------------------------------------------- CreatePartitions (37)

CREATE_PARTITIONS_REQUEST = Message(
    "CreatePartitionsRequest", 37, "0-3", "2+",
    f("Topics", "[]CreatePartitionsTopic", "0+",
        f("Name", "string", "0+"),
        f("Count", "int32", "0+"),
        f("Assignments", "[]CreatePartitionsAssignment", "0+",
            f("BrokerIds", "[]int32", "0+"),
            nullable="0+",
        ),
    ),
    f("TimeoutMs", "int32", "0+"),
    f("ValidateOnly", "bool", "0+"),
)

CREATE_PARTITIONS_RESPONSE = Message(
    "CreatePartitionsResponse", 37, "0-3", "2+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("Results", "[]CreatePartitionsTopicResult", "0+",
        f("Name", "string", "0+"),
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+", default="null"),
    ),
)

# -------------------------------------------------------------------- DeleteGroups (42)

DELETE_GROUPS_REQUEST = Message(
    "DeleteGroupsRequest", 42, "0-2", "2+",
    f("GroupsNames", "[]string", "0+"),
)

DELETE_GROUPS_RESPONSE = Message(
    "DeleteGroupsResponse", 42, "0-2", "2+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("Results", "[]DeletableGroupResult", "0+",
        f("GroupId", "string", "0+"),
        f("ErrorCode", "int16", "0+"),
    ),
)

# -------------------------------------------------------------------- ElectLeaders (43)

# v1 adds the election type (KIP-460: 0 preferred, 1 unclean) and the top-level error code.
# A null ``topic_partitions`` asks for every partition.
ELECT_LEADERS_REQUEST = Message(
    "ElectLeadersRequest", 43, "0-2", "2+",
    f("ElectionType", "int8", "1+"),
    f("TopicPartitions", "[]TopicPartitions", "0+",
        f("Topic", "string", "0+"),
        f("Partitions", "[]int32", "0+"),
        nullable="0+",
    ),
    f("TimeoutMs", "int32", "0+", default="60000"),
)

ELECT_LEADERS_RESPONSE = Message(
    "ElectLeadersResponse", 43, "0-2", "2+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "1+"),
    f("ReplicaElectionResults", "[]ReplicaElectionResult", "0+",
        f("Topic", "string", "0+"),
        f("PartitionResult", "[]PartitionResult", "0+",
            f("PartitionId", "int32", "0+"),
            f("ErrorCode", "int16", "0+"),
            f("ErrorMessage", "string", "0+", nullable="0+"),
        ),
    ),
)

# --------------------------------------------------------- IncrementalAlterConfigs (44)

INCREMENTAL_ALTER_CONFIGS_REQUEST = Message(
    "IncrementalAlterConfigsRequest", 44, "0-1", "1+",
    f("Resources", "[]AlterConfigsResource", "0+",
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
        f("Configs", "[]AlterableConfig", "0+",
            f("Name", "string", "0+"),
            f("ConfigOperation", "int8", "0+"),
            f("Value", "string", "0+", nullable="0+"),
        ),
    ),
    f("ValidateOnly", "bool", "0+"),
)

INCREMENTAL_ALTER_CONFIGS_RESPONSE = Message(
    "IncrementalAlterConfigsResponse", 44, "0-1", "1+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("Responses", "[]AlterConfigsResourceResponse", "0+",
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+"),
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
    ),
)

# ----------------------------------------------------- AlterPartitionReassignments (45)

# Null ``replicas`` cancels the partition's pending reassignment. v1 (KIP-860) adds
# ``allow_replication_factor_change`` to both messages.
ALTER_PARTITION_REASSIGNMENTS_REQUEST = Message(
    "AlterPartitionReassignmentsRequest", 45, "0-1", "0+",
    f("TimeoutMs", "int32", "0+", default="60000"),
    f("AllowReplicationFactorChange", "bool", "1+", default="true"),
    f("Topics", "[]ReassignableTopic", "0+",
        f("Name", "string", "0+"),
        f("Partitions", "[]ReassignablePartition", "0+",
            f("PartitionIndex", "int32", "0+"),
            f("Replicas", "[]int32", "0+", nullable="0+", default="null"),
        ),
    ),
)

ALTER_PARTITION_REASSIGNMENTS_RESPONSE = Message(
    "AlterPartitionReassignmentsResponse", 45, "0-1", "0+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("AllowReplicationFactorChange", "bool", "1+", default="true"),
    f("ErrorCode", "int16", "0+"),
    f("ErrorMessage", "string", "0+", nullable="0+"),
    f("Responses", "[]ReassignableTopicResponse", "0+",
        f("Name", "string", "0+"),
        f("Partitions", "[]ReassignablePartitionResponse", "0+",
            f("PartitionIndex", "int32", "0+"),
            f("ErrorCode", "int16", "0+"),
            f("ErrorMessage", "string", "0+", nullable="0+"),
        ),
    ),
)

# ------------------------------------------------------ ListPartitionReassignments (46)

# Null ``topics`` (the default) lists every ongoing reassignment.
LIST_PARTITION_REASSIGNMENTS_REQUEST = Message(
    "ListPartitionReassignmentsRequest", 46, "0", "0+",
    f("TimeoutMs", "int32", "0+", default="60000"),
    f("Topics", "[]ListPartitionReassignmentsTopics", "0+",
        f("Name", "string", "0+"),
        f("PartitionIndexes", "[]int32", "0+"),
        nullable="0+", default="null",
    ),
)

LIST_PARTITION_REASSIGNMENTS_RESPONSE = Message(
    "ListPartitionReassignmentsResponse", 46, "0", "0+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
    f("ErrorMessage", "string", "0+", nullable="0+"),
    f("Topics", "[]OngoingTopicReassignment", "0+",
        f("Name", "string", "0+"),
        f("Partitions", "[]OngoingPartitionReassignment", "0+",
            f("PartitionIndex", "int32", "0+"),
            f("Replicas", "[]int32", "0+"),
            f("AddingReplicas", "[]int32", "0+"),
            f("RemovingReplicas", "[]int32", "0+"),
        ),
    ),
)

# ------------------------------------------------------------------- OffsetDelete (47)

OFFSET_DELETE_REQUEST = Message(
    "OffsetDeleteRequest", 47, "0", "none",
    f("GroupId", "string", "0+"),
    f("Topics", "[]OffsetDeleteRequestTopic", "0+",
        f("Name", "string", "0+"),
        f("Partitions", "[]OffsetDeleteRequestPartition", "0+",
            f("PartitionIndex", "int32", "0+"),
        ),
    ),
)

OFFSET_DELETE_RESPONSE = Message(
    "OffsetDeleteResponse", 47, "0", "none",
    f("ErrorCode", "int16", "0+"),
    f("ThrottleTimeMs", "int32", "0+"),
    f("Topics", "[]OffsetDeleteResponseTopic", "0+",
        f("Name", "string", "0+"),
        f("Partitions", "[]OffsetDeleteResponsePartition", "0+",
            f("PartitionIndex", "int32", "0+"),
            f("ErrorCode", "int16", "0+"),
        ),
    ),
)

# --------------------------------------------------------------- DescribeProducers (61)

DESCRIBE_PRODUCERS_REQUEST = Message(
    "DescribeProducersRequest", 61, "0", "0+",
    f("Topics", "[]TopicRequest", "0+",
        f("Name", "string", "0+"),
        f("PartitionIndexes", "[]int32", "0+"),
    ),
)

DESCRIBE_PRODUCERS_RESPONSE = Message(
    "DescribeProducersResponse", 61, "0", "0+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("Topics", "[]TopicResponse", "0+",
        f("Name", "string", "0+"),
        f("Partitions", "[]PartitionResponse", "0+",
            f("PartitionIndex", "int32", "0+"),
            f("ErrorCode", "int16", "0+"),
            f("ErrorMessage", "string", "0+", nullable="0+", default="null"),
            f("ActiveProducers", "[]ProducerState", "0+",
                f("ProducerId", "int64", "0+"),
                f("ProducerEpoch", "int32", "0+"),  # int32 here, as in Kafka
                f("LastSequence", "int32", "0+", default="-1"),
                f("LastTimestamp", "int64", "0+", default="-1"),
                f("CoordinatorEpoch", "int32", "0+"),
                f("CurrentTxnStartOffset", "int64", "0+", default="-1"),
            ),
        ),
    ),
)

# ------------------------------------------------------------ DescribeTransactions (65)

DESCRIBE_TRANSACTIONS_REQUEST = Message(
    "DescribeTransactionsRequest", 65, "0", "0+",
    f("TransactionalIds", "[]string", "0+"),
)

DESCRIBE_TRANSACTIONS_RESPONSE = Message(
    "DescribeTransactionsResponse", 65, "0", "0+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("TransactionStates", "[]TransactionState", "0+",
        f("ErrorCode", "int16", "0+"),
        f("TransactionalId", "string", "0+"),
        f("TransactionState", "string", "0+"),
        f("TransactionTimeoutMs", "int32", "0+"),
        f("TransactionStartTimeMs", "int64", "0+"),
        f("ProducerId", "int64", "0+"),
        f("ProducerEpoch", "int16", "0+"),
        f("Topics", "[]TopicData", "0+",
            f("Topic", "string", "0+"),
            f("Partitions", "[]int32", "0+"),
        ),
    ),
)

# ---------------------------------------------------------------- ListTransactions (66)

LIST_TRANSACTIONS_REQUEST = Message(
    "ListTransactionsRequest", 66, "0-2", "0+",
    f("StateFilters", "[]string", "0+"),
    f("ProducerIdFilters", "[]int64", "0+"),
    f("DurationFilter", "int64", "1+", default="-1"),
    f("TransactionalIdPattern", "string", "2+", nullable="2+", default="null"),
)

LIST_TRANSACTIONS_RESPONSE = Message(
    "ListTransactionsResponse", 66, "0-2", "0+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
    f("UnknownStateFilters", "[]string", "0+"),
    f("TransactionStates", "[]TransactionState", "0+",
        f("TransactionalId", "string", "0+"),
        f("ProducerId", "int64", "0+"),
        f("TransactionState", "string", "0+"),
    ),
)

# ------------------------------------------------------------------- SaslHandshake (17)

# v0: the SASL tokens that follow are raw frames (no Kafka header); v1: they travel in
# SaslAuthenticate requests. The response is the same in both versions.
SASL_HANDSHAKE_REQUEST = Message(
    "SaslHandshakeRequest", 17, "0-1", "none",
    f("Mechanism", "string", "0+"),
)

SASL_HANDSHAKE_RESPONSE = Message(
    "SaslHandshakeResponse", 17, "0-1", "none",
    f("ErrorCode", "int16", "0+"),
    f("Mechanisms", "[]string", "0+"),
)

# ---------------------------------------------------------------- SaslAuthenticate (36)

SASL_AUTHENTICATE_REQUEST = Message(
    "SaslAuthenticateRequest", 36, "0-2", "2+",
    f("AuthBytes", "bytes", "0+"),
)

SASL_AUTHENTICATE_RESPONSE = Message(
    "SaslAuthenticateResponse", 36, "0-2", "2+",
    f("ErrorCode", "int16", "0+"),
    f("ErrorMessage", "string", "0+", nullable="0+"),
    f("AuthBytes", "bytes", "0+"),
    f("SessionLifetimeMs", "int64", "1+", default="0"),
)

# -------------------------------------------------------------------- DescribeAcls (29)

DESCRIBE_ACLS_REQUEST = Message(
    "DescribeAclsRequest", 29, "0-3", "2+",
    f("ResourceTypeFilter", "int8", "0+"),
    f("ResourceNameFilter", "string", "0+", nullable="0+"),
    f("PatternTypeFilter", "int8", "1+", default="3"),
    f("PrincipalFilter", "string", "0+", nullable="0+"),
    f("HostFilter", "string", "0+", nullable="0+"),
    f("Operation", "int8", "0+"),
    f("PermissionType", "int8", "0+"),
)

DESCRIBE_ACLS_RESPONSE = Message(
    "DescribeAclsResponse", 29, "0-3", "2+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
    f("ErrorMessage", "string", "0+", nullable="0+"),
    f("Resources", "[]DescribeAclsResource", "0+",
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
        f("PatternType", "int8", "1+", default="3"),
        f("Acls", "[]AclDescription", "0+",
            f("Principal", "string", "0+"),
            f("Host", "string", "0+"),
            f("Operation", "int8", "0+"),
            f("PermissionType", "int8", "0+"),
        ),
    ),
)

# ---------------------------------------------------------------------- CreateAcls (30)

CREATE_ACLS_REQUEST = Message(
    "CreateAclsRequest", 30, "0-3", "2+",
    f("Creations", "[]AclCreation", "0+",
        f("ResourceType", "int8", "0+"),
        f("ResourceName", "string", "0+"),
        f("ResourcePatternType", "int8", "1+", default="3"),
        f("Principal", "string", "0+"),
        f("Host", "string", "0+"),
        f("Operation", "int8", "0+"),
        f("PermissionType", "int8", "0+"),
    ),
)

CREATE_ACLS_RESPONSE = Message(
    "CreateAclsResponse", 30, "0-3", "2+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("Results", "[]AclCreationResult", "0+",
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+"),
    ),
)

# ---------------------------------------------------------------------- DeleteAcls (31)

DELETE_ACLS_REQUEST = Message(
    "DeleteAclsRequest", 31, "0-3", "2+",
    f("Filters", "[]DeleteAclsFilter", "0+",
        f("ResourceTypeFilter", "int8", "0+"),
        f("ResourceNameFilter", "string", "0+", nullable="0+"),
        f("PatternTypeFilter", "int8", "1+", default="3"),
        f("PrincipalFilter", "string", "0+", nullable="0+"),
        f("HostFilter", "string", "0+", nullable="0+"),
        f("Operation", "int8", "0+"),
        f("PermissionType", "int8", "0+"),
    ),
)

DELETE_ACLS_RESPONSE = Message(
    "DeleteAclsResponse", 31, "0-3", "2+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("FilterResults", "[]DeleteAclsFilterResult", "0+",
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+"),
        f("MatchingAcls", "[]DeleteAclsMatchingAcl", "0+",
            f("ErrorCode", "int16", "0+"),
            f("ErrorMessage", "string", "0+", nullable="0+"),
            f("ResourceType", "int8", "0+"),
            f("ResourceName", "string", "0+"),
            f("PatternType", "int8", "1+", default="3"),
            f("Principal", "string", "0+"),
            f("Host", "string", "0+"),
            f("Operation", "int8", "0+"),
            f("PermissionType", "int8", "0+"),
        ),
    ),
)

# ---------------------------------------------------- DescribeUserScramCredentials (50)

DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST = Message(
    "DescribeUserScramCredentialsRequest", 50, "0", "0+",
    # null or empty: describe every user.
    f("Users", "[]UserName", "0+",
        f("Name", "string", "0+"),
        nullable="0+",
    ),
)

DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE = Message(
    "DescribeUserScramCredentialsResponse", 50, "0", "0+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
    f("ErrorMessage", "string", "0+", nullable="0+"),
    f("Results", "[]DescribeUserScramCredentialsResult", "0+",
        f("User", "string", "0+"),
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+"),
        f("CredentialInfos", "[]CredentialInfo", "0+",
            f("Mechanism", "int8", "0+"),
            f("Iterations", "int32", "0+"),
        ),
    ),
)

# ------------------------------------------------------- AlterUserScramCredentials (51)

ALTER_USER_SCRAM_CREDENTIALS_REQUEST = Message(
    "AlterUserScramCredentialsRequest", 51, "0", "0+",
    f("Deletions", "[]ScramCredentialDeletion", "0+",
        f("Name", "string", "0+"),
        f("Mechanism", "int8", "0+"),
    ),
    f("Upsertions", "[]ScramCredentialUpsertion", "0+",
        f("Name", "string", "0+"),
        f("Mechanism", "int8", "0+"),
        f("Iterations", "int32", "0+"),
        f("Salt", "bytes", "0+"),
        f("SaltedPassword", "bytes", "0+"),
    ),
)

ALTER_USER_SCRAM_CREDENTIALS_RESPONSE = Message(
    "AlterUserScramCredentialsResponse", 51, "0", "0+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("Results", "[]AlterUserScramCredentialsResult", "0+",
        f("User", "string", "0+"),
        f("ErrorCode", "int16", "0+"),
        f("ErrorMessage", "string", "0+", nullable="0+"),
    ),
)

# ---------------------------------------------------------------- UnregisterBroker (64)

# An admin client asks any broker, which forwards to the active controller (KIP-500's
# UnregisterBroker: remove a drained, stopped broker's registration).
UNREGISTER_BROKER_REQUEST = Message(
    "UnregisterBrokerRequest", 64, "0", "0+",
    f("BrokerId", "int32", "0+"),
)

UNREGISTER_BROKER_RESPONSE = Message(
    "UnregisterBrokerResponse", 64, "0", "0+",
    f("ThrottleTimeMs", "int32", "0+"),
    f("ErrorCode", "int16", "0+"),
    f("ErrorMessage", "string", "0+", nullable="0+"),
)

# fmt: on

# ---------------------------------------------------------------------------------- registry

REQUESTS: dict[int, Message] = {
    message.api_key: message
    for message in (
        PRODUCE_REQUEST,
        FETCH_REQUEST,
        LIST_OFFSETS_REQUEST,
        METADATA_REQUEST,
        API_VERSIONS_REQUEST,
        CREATE_TOPICS_REQUEST,
        DELETE_TOPICS_REQUEST,
        DESCRIBE_CONFIGS_REQUEST,
        ALTER_CONFIGS_REQUEST,
        DESCRIBE_CLUSTER_REQUEST,
        OFFSET_COMMIT_REQUEST,
        OFFSET_FETCH_REQUEST,
        FIND_COORDINATOR_REQUEST,
        JOIN_GROUP_REQUEST,
        HEARTBEAT_REQUEST,
        LEAVE_GROUP_REQUEST,
        SYNC_GROUP_REQUEST,
        DESCRIBE_GROUPS_REQUEST,
        LIST_GROUPS_REQUEST,
        DELETE_RECORDS_REQUEST,
        INIT_PRODUCER_ID_REQUEST,
        OFFSET_FOR_LEADER_EPOCH_REQUEST,
        ADD_PARTITIONS_TO_TXN_REQUEST,
        ADD_OFFSETS_TO_TXN_REQUEST,
        END_TXN_REQUEST,
        WRITE_TXN_MARKERS_REQUEST,
        TXN_OFFSET_COMMIT_REQUEST,
        DESCRIBE_LOG_DIRS_REQUEST,
        CREATE_PARTITIONS_REQUEST,
        DELETE_GROUPS_REQUEST,
        ELECT_LEADERS_REQUEST,
        INCREMENTAL_ALTER_CONFIGS_REQUEST,
        ALTER_PARTITION_REASSIGNMENTS_REQUEST,
        LIST_PARTITION_REASSIGNMENTS_REQUEST,
        OFFSET_DELETE_REQUEST,
        DESCRIBE_PRODUCERS_REQUEST,
        DESCRIBE_TRANSACTIONS_REQUEST,
        LIST_TRANSACTIONS_REQUEST,
        SASL_HANDSHAKE_REQUEST,
        SASL_AUTHENTICATE_REQUEST,
        DESCRIBE_ACLS_REQUEST,
        CREATE_ACLS_REQUEST,
        DELETE_ACLS_REQUEST,
        DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST,
        ALTER_USER_SCRAM_CREDENTIALS_REQUEST,
        UNREGISTER_BROKER_REQUEST,
    )
}

RESPONSES: dict[int, Message] = {
    message.api_key: message
    for message in (
        PRODUCE_RESPONSE,
        FETCH_RESPONSE,
        LIST_OFFSETS_RESPONSE,
        METADATA_RESPONSE,
        API_VERSIONS_RESPONSE,
        CREATE_TOPICS_RESPONSE,
        DELETE_TOPICS_RESPONSE,
        DESCRIBE_CONFIGS_RESPONSE,
        ALTER_CONFIGS_RESPONSE,
        DESCRIBE_CLUSTER_RESPONSE,
        OFFSET_COMMIT_RESPONSE,
        OFFSET_FETCH_RESPONSE,
        FIND_COORDINATOR_RESPONSE,
        JOIN_GROUP_RESPONSE,
        HEARTBEAT_RESPONSE,
        LEAVE_GROUP_RESPONSE,
        SYNC_GROUP_RESPONSE,
        DESCRIBE_GROUPS_RESPONSE,
        LIST_GROUPS_RESPONSE,
        DELETE_RECORDS_RESPONSE,
        INIT_PRODUCER_ID_RESPONSE,
        OFFSET_FOR_LEADER_EPOCH_RESPONSE,
        ADD_PARTITIONS_TO_TXN_RESPONSE,
        ADD_OFFSETS_TO_TXN_RESPONSE,
        END_TXN_RESPONSE,
        WRITE_TXN_MARKERS_RESPONSE,
        TXN_OFFSET_COMMIT_RESPONSE,
        DESCRIBE_LOG_DIRS_RESPONSE,
        CREATE_PARTITIONS_RESPONSE,
        DELETE_GROUPS_RESPONSE,
        ELECT_LEADERS_RESPONSE,
        INCREMENTAL_ALTER_CONFIGS_RESPONSE,
        ALTER_PARTITION_REASSIGNMENTS_RESPONSE,
        LIST_PARTITION_REASSIGNMENTS_RESPONSE,
        OFFSET_DELETE_RESPONSE,
        DESCRIBE_PRODUCERS_RESPONSE,
        DESCRIBE_TRANSACTIONS_RESPONSE,
        LIST_TRANSACTIONS_RESPONSE,
        SASL_HANDSHAKE_RESPONSE,
        SASL_AUTHENTICATE_RESPONSE,
        DESCRIBE_ACLS_RESPONSE,
        CREATE_ACLS_RESPONSE,
        DELETE_ACLS_RESPONSE,
        DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE,
        ALTER_USER_SCRAM_CREDENTIALS_RESPONSE,
        UNREGISTER_BROKER_RESPONSE,
    )
}
