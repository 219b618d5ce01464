"""V1 group membership on Flux's group coordinator (Kafka's classic protocol, served here).

A V1 consumer names itself (``consumer_id``); Flux makes it a *static member* of the group
(``group.instance.id = consumer_id``, KIP-345), with Kafka's consumer protocol, so V1 groups
are ordinary consumer groups: ``fluxctl group describe`` and Kafka tools show their members
and assignments, and Kafka consumers may share a group with V1 ones (with the same assignor).

- ``JOIN group topic consumer_id [assignor=range|round_robin]`` joins and waits for the
  rebalance to end (the other members learn of it from their next ``HEARTBEAT``, which answers
  ``GENERATION_MISMATCH``, and join again), then syncs: the member the coordinator picks as
  leader has the assignment computed here by the assignor; answer
  ``generation=<n> assigned=[p,p,...]`` (the member's partitions of the topic).
- ``SYNC group topic consumer_id generation``: the member's assignment in that generation.
- ``HEARTBEAT group topic consumer_id generation``: ``OK``, or ``GENERATION_MISMATCH`` when the
  group rebalances or the member is unknown: join again.
- ``LEAVE group topic consumer_id generation``: the member leaves now (a rebalance follows).
- ``COMMIT`` with generation >= 0 is checked against the member and generation.

Only the group's coordinator serves these (a broker that is not answers ``NOT_LEADER`` with the
coordinator's V1 address). A member that stops heartbeating is removed after
``SESSION_TIMEOUT_MS``.
"""

from __future__ import annotations

from typing import Any

from flux.protocol.consumer import (
    RANGE_ASSIGNOR,
    ROUND_ROBIN_ASSIGNOR,
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    range_assign,
    round_robin_assign,
)
from flux.protocol.errors import ErrorCode

from ..groups.coordinator import GroupCoordinator
from .protocol import V1Error

__all__ = ["ASSIGNORS", "V1Groups"]

SESSION_TIMEOUT_MS = 10_000
REBALANCE_TIMEOUT_MS = 30_000
#: V1 assignor names -> the Kafka consumer protocol's.
ASSIGNORS = {
    "range": RANGE_ASSIGNOR,
    "round_robin": ROUND_ROBIN_ASSIGNOR,
    "roundrobin": ROUND_ROBIN_ASSIGNOR,
}
_REJOIN = {
    ErrorCode.ILLEGAL_GENERATION,
    ErrorCode.UNKNOWN_MEMBER_ID,
    ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.FENCED_INSTANCE_ID,
}


class V1Groups:
    """Group membership for V1 consumers, on this broker's coordinator."""

    def __init__(self, coordinator: GroupCoordinator, *, broker_id: int) -> None:
        self._coordinator = coordinator
        self._broker_id = broker_id
        # (group, consumer id) -> the member id the coordinator gave it.
        self._members: dict[tuple[str, str], str] = {}

    def member_id(self, group: str, consumer_id: str) -> str:
        return self._members.get((group, consumer_id), "")

    async def join(
        self, group: str, topic: str, consumer_id: str, assignor: str, client_host: str
    ) -> dict[str, Any]:
        protocol = ASSIGNORS[assignor]
        body = {
            "group_id": group,
            "session_timeout_ms": SESSION_TIMEOUT_MS,
            "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS,
            "member_id": self.member_id(group, consumer_id),
            "group_instance_id": consumer_id,
            "protocol_type": "consumer",
            "protocols": [
                {
                    "name": protocol,
                    "metadata": encode_subscription(Subscription(topics=[topic], version=0)),
                }
            ],
        }
        answer = await self._coordinator.join_group(
            body, version=5, client_id=f"v1-{consumer_id}", client_host=client_host
        )
        if answer["error_code"] == ErrorCode.MEMBER_ID_REQUIRED:
            body["member_id"] = answer["member_id"]
            answer = await self._coordinator.join_group(
                body, version=5, client_id=f"v1-{consumer_id}", client_host=client_host
            )
        _check(answer["error_code"], f"join {group}")
        member_id = answer["member_id"]
        generation = answer["generation_id"]
        self._members[(group, consumer_id)] = member_id
        assignments = []
        if answer["leader"] == member_id:
            counts = {
                name: len(t.partitions) for name, t in self._coordinator.image().topics.items()
            }
            try:
                subscriptions = {
                    m["member_id"]: decode_subscription(bytes(m["metadata"]))
                    for m in answer["members"]
                }
            except ConsumerProtocolError as error:  # a Kafka member's bytes
                raise V1Error("BAD_REQUEST", f"join {group}: {error}") from None
            assign = round_robin_assign if protocol == ROUND_ROBIN_ASSIGNOR else range_assign
            assignments = [
                {"member_id": member, "assignment": encode_assignment(Assignment(assigned))}
                for member, assigned in assign(subscriptions, counts).items()
            ]
        synced = await self._coordinator.sync_group(
            {
                "group_id": group,
                "member_id": member_id,
                "generation_id": generation,
                "group_instance_id": consumer_id,
                "protocol_type": "consumer",
                "protocol_name": answer.get("protocol_name") or protocol,
                "assignments": assignments,
            }
        )
        _check(synced["error_code"], f"sync {group}")
        return _assigned(generation, topic, bytes(synced["assignment"]))

    async def sync(
        self, group: str, topic: str, consumer_id: str, generation: int
    ) -> dict[str, Any]:
        synced = await self._coordinator.sync_group(
            {
                "group_id": group,
                "member_id": self._known(group, consumer_id),
                "generation_id": generation,
                "group_instance_id": consumer_id,
                "protocol_type": "consumer",
                "protocol_name": None,
                "assignments": [],
            }
        )
        _check(synced["error_code"], f"sync {group}")
        return _assigned(generation, topic, bytes(synced["assignment"]))

    def heartbeat(self, group: str, consumer_id: str, generation: int) -> dict[str, Any]:
        code = self._coordinator.heartbeat(
            {
                "group_id": group,
                "member_id": self._known(group, consumer_id),
                "generation_id": generation,
                "group_instance_id": consumer_id,
            }
        )
        _check(code, f"heartbeat {group}")
        return {}

    async def leave(self, group: str, consumer_id: str) -> dict[str, Any]:
        member_id = self._known(group, consumer_id)
        answer = await self._coordinator.leave_group(
            {
                "group_id": group,
                "members": [{"member_id": member_id, "group_instance_id": consumer_id}],
            },
            version=3,
        )
        self._members.pop((group, consumer_id), None)
        _check(answer["error_code"], f"leave {group}")
        for member in answer["members"]:
            _check(member["error_code"], f"leave {group}")
        return {}

    async def commit(
        self, group: str, consumer_id: str, generation: int, topic: str, index: int, offset: int
    ) -> dict[str, Any]:
        answer = await self._coordinator.commit_offsets(
            {
                "group_id": group,
                "generation_id_or_member_epoch": generation,
                "member_id": self._known(group, consumer_id),
                "group_instance_id": consumer_id,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": index,
                                "committed_offset": offset,
                                "committed_metadata": "",
                            }
                        ],
                    }
                ],
            }
        )
        for entry in answer["topics"]:
            for part in entry["partitions"]:
                _check(part["error_code"], f"commit {group}")
        return {"committed": "true"}

    def _known(self, group: str, consumer_id: str) -> str:
        member_id = self.member_id(group, consumer_id)
        if not member_id:
            raise V1Error(
                "GENERATION_MISMATCH", f"{consumer_id} is not a member of {group}: JOIN first"
            )
        return member_id


def _check(code: int, what: str) -> None:
    if code == ErrorCode.NONE:
        return
    error = ErrorCode(code)
    if error in _REJOIN:
        raise V1Error("GENERATION_MISMATCH", f"{what}: {error.name}, join again")
    if error in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                 ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):  # fmt: skip
        raise V1Error("UNAVAILABLE", f"{what}: {error.name}")
    raise V1Error("BAD_REQUEST", f"{what}: {error.name}")


def _assigned(generation: int, topic: str, assignment: bytes) -> dict[str, Any]:
    try:
        assigned = decode_assignment(assignment).assigned
    except ConsumerProtocolError as error:  # from a Kafka leader sharing the group
        raise V1Error("BAD_REQUEST", f"the group's assignment: {error}") from None
    partitions = sorted(assigned.get(topic, []))
    return {"generation": generation, "assigned": "[" + ",".join(map(str, partitions)) + "]"}
