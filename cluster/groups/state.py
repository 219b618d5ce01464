"""Kafka's classic consumer-group protocol as a pure state machine: one ``Group`` per group id.

The group coordinator (the broker leading the group's ``__consumer_offsets`` partition) feeds
JoinGroup, SyncGroup, Heartbeat, LeaveGroup and OffsetCommit requests into a ``Group`` and
executes the *effects* it returns. Nothing here does I/O, reads a clock or draws randomness:
every method takes ``now_ms`` and member ids come from an injected ``member_id_factory``, so a
scenario replayed with the same inputs produces the same effects.

Effects (executed in list order by the caller)::

    Respond(token, response)  answer the parked JoinGroup/SyncGroup request ``token`` with this
                              response body (snake_case fields of JoinGroupResponse or
                              SyncGroupResponse, ``throttle_time_ms`` included)
    Persist(record)           write ``record`` (``Group.to_record()``) as the group's metadata
                              record; Respond effects that follow it in the same list should be
                              sent once the write succeeded (Kafka's order); if it fails, call
                              ``persist_failed()``
    ScheduleTick(at_ms)       call ``tick()`` at or after ``at_ms``: the group's earliest
                              deadline. Each ScheduleTick supersedes the previous one, so one
                              timer per group suffices; an early or extra ``tick()`` is harmless

JoinGroup and SyncGroup answers are delayed until a rebalance phase completes, so ``join`` and
``sync`` never return a response directly: every answer, immediate or delayed, is a
``Respond`` for the request's ``token`` (any hashable the caller chooses). Every token gets
exactly one Respond eventually -- a superseded or cancelled request is answered with an error
-- unless the group is discarded without ``mark_dead()``.

States and transitions (Kafka's ``ClassicGroupState``)::

    EMPTY --join--> PREPARING_REBALANCE --all joined / timeout--> COMPLETING_REBALANCE
    COMPLETING_REBALANCE --leader's SyncGroup--> STABLE
    STABLE / COMPLETING_REBALANCE --join with new metadata, leader join, member removed-->
        PREPARING_REBALANCE
    PREPARING_REBALANCE --join phase completes with no member--> EMPTY
    any --mark_dead()--> DEAD

Rules, as in Kafka's ``GroupMetadataManager``/``ClassicGroup`` (differences are marked):

* JoinGroup. An empty member id gets a generated id; with ``require_known_member_id`` (v4+)
  a dynamic member is answered MEMBER_ID_REQUIRED with that id and becomes *pending* until it
  rejoins with it or its session timeout passes. A join starts a rebalance from EMPTY, STABLE
  or COMPLETING_REBALANCE (there, the leader's join or changed metadata force one; a follower
  rejoining unchanged gets the current generation back). The join phase completes when every member is awaiting a
  join answer and no member id is pending, or when the rebalance timeout (the largest of the
  members') passes, which drops the dynamic members that did not rejoin. A rebalance started
  from EMPTY waits ``initial_rebalance_delay_ms`` and, while new members keep arriving, another
  delay each time, up to the rebalance timeout in total (``group.initial.rebalance.delay.ms``).
  At completion the generation goes up by one, the protocol most members vote for among those
  all support is chosen (ties: the order of the oldest member's preferences -- Kafka breaks
  ties by hash order), the leader stays if it rejoined, else the first rejoined member leads.
  The leader's answer lists every member with its metadata; the others get an empty list.
* SyncGroup. The leader's request carries the assignment (members it leaves out get empty
  bytes); the group becomes STABLE, the record is persisted and every parked SyncGroup is
  answered. Followers' requests park until then. In STABLE a SyncGroup gets the stored
  assignment.
* Heartbeat. REBALANCE_IN_PROGRESS during PREPARING_REBALANCE (the client rejoins); NONE in
  COMPLETING_REBALANCE and STABLE. Each accepted heartbeat refreshes the session.
* Sessions. A member whose session passes without a heartbeat is removed and the group
  rebalances. Members parked in a JoinGroup are exempt (the rebalance timeout bounds them),
  except new members, bounded by ``new_member_join_timeout_ms`` (Kafka's 5 minutes); members
  parked in a SyncGroup are exempt until the leader's assignment arrives.
* Static membership (``group_instance_id``). A JoinGroup with an empty member id and a known
  instance id replaces the old member id by a new one, keeping the member's assignment; the
  old id's parked requests and later requests get FENCED_INSTANCE_ID. In STABLE the
  replacement persists the group and answers at once with the current generation when the
  chosen protocol would not change (the answer names the previous leader id, so the new id
  never runs a trivial assignment, as Kafka's pre-KIP-814 coordinator did); otherwise it
  rebalances. Static members that miss a rebalance stay members (until their session or the
  pending-sync timeout below ends), so a restarting static member does not move partitions.
* Offset commits (``validate_commit``). Generation < 0 on an EMPTY group: allowed (simple
  consumers, admin tools). Otherwise member, instance id and generation must match; commits
  are *accepted during PREPARING_REBALANCE* (Kafka relies on the heartbeat to tell the member
  about the rebalance) and refused with REBALANCE_IN_PROGRESS during COMPLETING_REBALANCE.

* Pending sync (Kafka's KAFKA-13052). Members that got a JoinGroup answer (or missed the join
  phase, being static) and send no SyncGroup within the rebalance timeout are removed, which
  starts a new rebalance -- so a leader that heartbeats but never assigns cannot wedge the
  group in COMPLETING_REBALANCE.
* OffsetDelete (``validate_offset_delete``, ``is_subscribed_to_topic``), Kafka's KIP-496: a
  DEAD group is GROUP_ID_NOT_FOUND; an EMPTY group may lose any offset; a consumer group with
  members may lose the offsets of topics none of its members subscribes to
  (GROUP_SUBSCRIBED_TO_TOPIC for the others; when a subscription does not decode, every
  topic counts as subscribed); any other group with members is NON_EMPTY_GROUP.
* A group rebuilt EMPTY by ``from_record`` keeps the time it became empty
  (``current_state_timestamp_ms``), so offset expiration (``expiration``) counts from the same
  moment on every coordinator.

Not implemented: KIP-814's ``skip_assignment`` (always False).

Thread-safety: none; a ``Group`` belongs to the one task that owns the coordinator's state.
Invariants (asserted): member ids are unique across members and pending members; the static
member map is the inverse of the members' instance ids; the leader is a member, or None only
when there are no members; a parked SyncGroup exists only in COMPLETING_REBALANCE and a parked
JoinGroup only in PREPARING_REBALANCE.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeAlias

from flux.protocol.errors import ErrorCode

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "DEFAULT_MAX_MEMBERS",
    "DEFAULT_MAX_SESSION_TIMEOUT_MS",
    "DEFAULT_MIN_SESSION_TIMEOUT_MS",
    "GROUP_RECORD_VERSION",
    "NEW_MEMBER_JOIN_TIMEOUT_MS",
    "Effect",
    "Group",
    "GroupRecordError",
    "GroupState",
    "Member",
    "Persist",
    "Respond",
    "ScheduleTick",
    "join_error_response",
    "subscription_topics",
    "sync_error_response",
    "validate_group_record",
]

# Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: how long a brand-new member may stay parked in
# a JoinGroup (it has no member id to heartbeat with, and a defunct one must not pin the group).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
# Kafka's group.min.session.timeout.ms / group.max.session.timeout.ms defaults.
DEFAULT_MIN_SESSION_TIMEOUT_MS = 6_000
DEFAULT_MAX_SESSION_TIMEOUT_MS = 30 * 60 * 1000
# Bound on members plus pending members (Kafka's group.max.size is unbounded by default; a
# client that loops on JoinGroup with empty member ids must not grow the group without limit).
DEFAULT_MAX_MEMBERS = 10_000
GROUP_RECORD_VERSION = 1
#: The protocol type of Kafka consumer groups, whose member metadata is a subscription.
CONSUMER_PROTOCOL_TYPE = "consumer"

_NO_GENERATION = -1


class GroupRecordError(ValueError):
    """A group metadata record (``Group.to_record()`` shape) that is malformed."""


class GroupState(Enum):
    """Kafka's classic group states; the values are the names DescribeGroups reports."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# ------------------------------------------------------------------------------- effects


@dataclass(frozen=True)
class Respond:
    """Send ``response`` (a JoinGroup or SyncGroup response body) for request ``token``."""

    token: Hashable
    response: dict[str, Any]


@dataclass(frozen=True)
class Persist:
    """Write ``record`` as the group's metadata record (see ``offsets_records``)."""

    record: dict[str, Any]


@dataclass(frozen=True)
class ScheduleTick:
    """Call ``Group.tick()`` at or after ``at_ms``; supersedes earlier ScheduleTicks."""

    at_ms: int


Effect: TypeAlias = Respond | Persist | ScheduleTick


def join_error_response(member_id: str, error: ErrorCode) -> dict[str, Any]:
    """A JoinGroup response body carrying only ``error`` (Kafka's ``joinError``)."""
    return {
        "throttle_time_ms": 0,
        "error_code": int(error),
        "generation_id": _NO_GENERATION,
        "protocol_type": None,
        "protocol_name": "",
        "leader": "",
        "skip_assignment": False,
        "member_id": member_id,
        "members": [],
    }


def sync_error_response(error: ErrorCode) -> dict[str, Any]:
    """A SyncGroup response body carrying only ``error``."""
    return {
        "throttle_time_ms": 0,
        "error_code": int(error),
        "protocol_type": None,
        "protocol_name": None,
        "assignment": b"",
    }


#: Characters of the client id (or group instance id) a new member id starts with. Kafka
#: uses the whole client id, which may be 32767 bytes long: the id with its UUID then no
#: longer fits the Kafka string that carries it back (found by the fuzzer: a JoinGroup with
#: the longest client id could not be answered).
MEMBER_ID_PREFIX_MAX = 255


def _default_member_id_factory(prefix: str) -> str:
    return f"{prefix[:MEMBER_ID_PREFIX_MAX]}-{uuid.uuid4()}"


# ------------------------------------------------------------------------------- members


@dataclass(frozen=True)
class _Waiter:
    """A parked request; wrapping the token lets any hashable (even None) be a token."""

    token: Hashable


@dataclass
class Member:
    """One member of a group. Mutated only by its ``Group``.

    ``protocols`` lists ``(name, metadata)`` in the member's order of preference.
    ``awaiting_join``/``awaiting_sync`` say whether a JoinGroup/SyncGroup of the member is parked.
    ``is_new``: joined during the current join phase and never got a JoinGroup answer.
    """

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_heartbeat_ms: int = 0
    is_new: bool = False
    join_waiter: _Waiter | None = field(default=None, repr=False)
    sync_waiter: _Waiter | None = field(default=None, repr=False)

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol_name: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        return b""

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == self.protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise AssertionError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def session_deadline_ms(self, new_member_join_timeout_ms: int) -> int | None:
        """When the member expires without a heartbeat, or None while it cannot expire."""
        if self.awaiting_join:
            if self.is_new:
                return self.last_heartbeat_ms + new_member_join_timeout_ms
            return None
        if self.awaiting_sync:
            return None
        return self.last_heartbeat_ms + self.session_timeout_ms


@dataclass
class _InitialDelay:
    """The initial-rebalance delay in progress (Kafka's ``InitialDelayedJoin``)."""

    remaining_ms: int
    new_member_added: bool = False


# --------------------------------------------------------------------------------- group


class Group:
    """The classic group protocol for one group id. See the module docstring for the rules.

    Thread-safety: none; owned by one task. Every public method leaves the invariants listed
    in the module docstring true (``check_invariants``).
    """

    def __init__(
        self,
        group_id: str,
        *,
        initial_rebalance_delay_ms: int = 3000,
        member_id_factory: Callable[[str], str] = _default_member_id_factory,
        min_session_timeout_ms: int = DEFAULT_MIN_SESSION_TIMEOUT_MS,
        max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS,
        max_members: int = DEFAULT_MAX_MEMBERS,
        new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS,
        now_ms: int = 0,
    ) -> None:
        assert initial_rebalance_delay_ms >= 0
        assert 0 < min_session_timeout_ms <= max_session_timeout_ms
        assert max_members > 0
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        # Insertion order is join order: it picks the next leader and orders the leader's list.
        self.members: dict[str, Member] = {}
        self.state_since_ms = now_ms
        self._initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self._member_id_factory = member_id_factory
        self._min_session_timeout_ms = min_session_timeout_ms
        self._max_session_timeout_ms = max_session_timeout_ms
        self._max_members = max_members
        self._new_member_join_timeout_ms = new_member_join_timeout_ms
        self._static_members: dict[str, str] = {}  # group_instance_id -> member_id
        self._pending_members: dict[str, int] = {}  # member_id -> expiry deadline (ms)
        self._join_deadline_ms: int | None = None  # end of the join phase (or delay window)
        self._initial_delay: _InitialDelay | None = None
        # Members that got a JoinGroup answer but have not sent SyncGroup yet, and when they
        # are removed for it (Kafka's pending-sync timeout, KAFKA-13052).
        self._pending_sync: set[str] = set()
        self._sync_deadline_ms: int | None = None
        self._scheduled_tick_ms: int | None = None

    # ------------------------------------------------------------------------- queries

    @property
    def pending_member_ids(self) -> list[str]:
        """Member ids handed out with MEMBER_ID_REQUIRED that have not joined yet."""
        return list(self._pending_members)

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self._static_members.get(group_instance_id)

    def rebalance_timeout_ms(self) -> int:
        """The largest rebalance timeout among the members (0 without members)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def next_deadline_ms(self) -> int | None:
        """The earliest time at which ``tick()`` has something to do, or None."""
        deadlines = list(self._pending_members.values())
        if self.state is GroupState.PREPARING_REBALANCE and self._join_deadline_ms is not None:
            deadlines.append(self._join_deadline_ms)
        if self._pending_sync and self._sync_deadline_ms is not None:
            deadlines.append(self._sync_deadline_ms)
        for member in self.members.values():
            deadline = member.session_deadline_ms(self._new_member_join_timeout_ms)
            if deadline is not None:
                deadlines.append(deadline)
        return min(deadlines, default=None)

    def describe(self) -> dict[str, Any]:
        """The group as a DescribeGroups ``DescribedGroup`` entry (snake_case fields).

        As in Kafka, member metadata and assignments are shown only while STABLE.
        """
        stable = self.state is GroupState.STABLE
        return {
            "error_code": int(ErrorCode.NONE),
            "group_id": self.group_id,
            "group_state": self.state.value,
            "protocol_type": self.protocol_type or "",
            "protocol_data": (self.protocol_name or "") if stable else "",
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata(self.protocol_name) if stable else b"",
                    "member_assignment": m.assignment if stable else b"",
                }
                for m in self.members.values()
            ],
            "authorized_operations": -(2**31),
        }

    def overview(self) -> dict[str, Any]:
        """The group as a ListGroups ``ListedGroup`` entry."""
        return {
            "group_id": self.group_id,
            "protocol_type": self.protocol_type or "",
            "group_state": self.state.value,
            "group_type": "classic",
        }

    # ------------------------------------------------------------------------ JoinGroup

    def join(
        self,
        *,
        token: Hashable,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        now_ms: int,
        require_known_member_id: bool,
    ) -> list[Effect]:
        """Handle a JoinGroup request. ``rebalance_timeout_ms`` < 0 (v0) means the session's."""
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        request = _JoinRequest(
            token=token,
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=protocol_type,
            protocols=[(name, bytes(metadata)) for name, metadata in protocols],
        )
        effects: list[Effect] = []
        error = self._join_precheck(request)
        if error is not ErrorCode.NONE:
            effects.append(Respond(token, join_error_response(member_id, error)))
        elif member_id == "":
            effects += self._join_unknown_member(request, now_ms, require_known_member_id)
        else:
            effects += self._join_known_member(request, now_ms)
        return self._finish(effects, now_ms)

    def _join_precheck(self, request: _JoinRequest) -> ErrorCode:
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if not (
            self._min_session_timeout_ms
            <= request.session_timeout_ms
            <= self._max_session_timeout_ms
        ):
            return ErrorCode.INVALID_SESSION_TIMEOUT
        if not self._supports_protocols(request):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return ErrorCode.NONE

    def _supports_protocols(self, request: _JoinRequest) -> bool:
        """Whether the joiner's protocol type matches and one protocol is supported by all.

        Unlike Kafka, a rejoining member's own current protocols are not counted, so the only
        member of a group may switch protocols.
        """
        names = {name for name, _ in request.protocols}
        if not request.protocol_type or not names:
            return False
        others = [m for m in self.members.values() if m.member_id != request.member_id]
        if not others:
            return True
        if request.protocol_type != self.protocol_type:
            return False
        return any(all(name in m.protocol_names() for m in others) for name in names)

    def _join_unknown_member(
        self, request: _JoinRequest, now_ms: int, require_known_member_id: bool
    ) -> list[Effect]:
        instance_id = request.group_instance_id
        if instance_id is not None and instance_id in self._static_members:
            return self._replace_static_member(request, now_ms)
        if len(self.members) + len(self._pending_members) >= self._max_members:
            return [
                Respond(request.token, join_error_response("", ErrorCode.GROUP_MAX_SIZE_REACHED))
            ]
        new_member_id = self._member_id_factory(instance_id or request.client_id)
        assert new_member_id not in self.members and new_member_id not in self._pending_members
        if instance_id is None and require_known_member_id:
            self._pending_members[new_member_id] = now_ms + request.session_timeout_ms
            error = join_error_response(new_member_id, ErrorCode.MEMBER_ID_REQUIRED)
            return [Respond(request.token, error)]
        return self._add_member_and_rebalance(request, new_member_id, now_ms)

    def _join_known_member(self, request: _JoinRequest, now_ms: int) -> list[Effect]:
        member_id = request.member_id
        if member_id in self._pending_members:
            if request.group_instance_id is not None:
                # Kafka never hands a pending id to a static member; treat the mix as unknown.
                del self._pending_members[member_id]
                error = join_error_response(member_id, ErrorCode.UNKNOWN_MEMBER_ID)
                return [Respond(request.token, error)]
            del self._pending_members[member_id]
            return self._add_member_and_rebalance(request, member_id, now_ms)
        error = self._validate_member(member_id, request.group_instance_id)
        if error is not ErrorCode.NONE:
            return [Respond(request.token, join_error_response(member_id, error))]
        member = self.members[member_id]
        if self.state is GroupState.PREPARING_REBALANCE:
            return self._update_member_and_rebalance(member, request, now_ms)
        if self.state is GroupState.COMPLETING_REBALANCE:
            if member.matches(request.protocols):
                # It missed the JoinGroup answer: send the current generation again.
                return [Respond(request.token, self._join_result(member))]
            return self._update_member_and_rebalance(member, request, now_ms)
        if self.state is GroupState.STABLE:
            if member_id == self.leader_id or not member.matches(request.protocols):
                # The leader's JoinGroup forces a rebalance: it is how a consumer asks for
                # one after a change its metadata does not show (new partitions, say).
                return self._update_member_and_rebalance(member, request, now_ms)
            return [Respond(request.token, self._join_result(member, with_members=False))]
        # EMPTY with a member id the group does not know.
        return [Respond(request.token, join_error_response(member_id, ErrorCode.UNKNOWN_MEMBER_ID))]

    def _add_member_and_rebalance(
        self, request: _JoinRequest, member_id: str, now_ms: int
    ) -> list[Effect]:
        member = Member(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=list(request.protocols),
            last_heartbeat_ms=now_ms,
            is_new=True,
            join_waiter=_Waiter(request.token),
        )
        if self.state is GroupState.PREPARING_REBALANCE and self._initial_delay is not None:
            self._initial_delay.new_member_added = True
        self._add(member)
        return self._maybe_prepare_rebalance(now_ms)

    def _update_member_and_rebalance(
        self, member: Member, request: _JoinRequest, now_ms: int
    ) -> list[Effect]:
        effects = self._park_join(member, request.token)
        member.protocols = list(request.protocols)
        member.protocol_type = request.protocol_type
        if len(self.members) == 1:
            self.protocol_type = request.protocol_type  # the only member may switch types
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.client_id = request.client_id
        member.client_host = request.client_host
        return effects + self._maybe_prepare_rebalance(now_ms)

    def _park_join(self, member: Member, token: Hashable) -> list[Effect]:
        """Park a JoinGroup; a JoinGroup of the member already parked is answered with an error."""
        effects: list[Effect] = []
        if member.join_waiter is not None:
            superseded = join_error_response(member.member_id, ErrorCode.REBALANCE_IN_PROGRESS)
            effects.append(Respond(member.join_waiter.token, superseded))
        member.join_waiter = _Waiter(token)
        return effects

    def _replace_static_member(self, request: _JoinRequest, now_ms: int) -> list[Effect]:
        assert request.group_instance_id is not None
        old_member_id = self._static_members[request.group_instance_id]
        old = self.members[old_member_id]
        new_member_id = self._member_id_factory(request.group_instance_id)
        assert new_member_id not in self.members and new_member_id not in self._pending_members
        previous_leader = self.leader_id
        effects = self._fence(old)
        member = Member(
            member_id=new_member_id,
            group_instance_id=old.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=list(request.protocols),
            assignment=old.assignment,
            last_heartbeat_ms=now_ms,
            join_waiter=_Waiter(request.token),
        )
        # Keep the member's place in join order.
        self.members = {
            (new_member_id if mid == old_member_id else mid): (
                member if mid == old_member_id else m
            )
            for mid, m in self.members.items()
        }
        self._static_members[request.group_instance_id] = new_member_id
        if old_member_id in self._pending_sync:
            self._pending_sync.discard(old_member_id)
            self._pending_sync.add(new_member_id)
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if self.state is GroupState.STABLE and self._select_protocol() == self.protocol_name:
            member.join_waiter = None
            response = self._join_result(member, with_members=False)
            # The previous leader id, so that a replaced leader does not compute a trivial
            # assignment the stable group would not propagate anyway.
            response["leader"] = previous_leader or ""
            effects.append(Persist(self.to_record()))
            effects.append(Respond(request.token, response))
            return effects
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            # In COMPLETING_REBALANCE the leader may be assigning to the old member id.
            effects += self._prepare_rebalance(now_ms)
        return effects

    def _fence(self, member: Member) -> list[Effect]:
        """Answer the parked requests of a static member replaced by a new member id."""
        effects: list[Effect] = []
        if member.join_waiter is not None:
            fenced = join_error_response(member.member_id, ErrorCode.FENCED_INSTANCE_ID)
            effects.append(Respond(member.join_waiter.token, fenced))
            member.join_waiter = None
        if member.sync_waiter is not None:
            effects.append(
                Respond(member.sync_waiter.token, sync_error_response(ErrorCode.FENCED_INSTANCE_ID))
            )
            member.sync_waiter = None
        return effects

    def _join_result(self, member: Member, *, with_members: bool = True) -> dict[str, Any]:
        """The JoinGroup answer for the current generation; only the leader sees the members."""
        is_leader = member.member_id == self.leader_id
        return {
            "throttle_time_ms": 0,
            "error_code": int(ErrorCode.NONE),
            "generation_id": self.generation_id,
            "protocol_type": self.protocol_type,
            "protocol_name": self.protocol_name,
            "leader": self.leader_id or "",
            "skip_assignment": False,
            "member_id": member.member_id,
            "members": (
                [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "metadata": m.metadata(self.protocol_name),
                    }
                    for m in self.members.values()
                ]
                if is_leader and with_members
                else []
            ),
        }

    # ------------------------------------------------------------------------ SyncGroup

    def sync(
        self,
        *,
        token: Hashable,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Sequence[tuple[str, bytes]],
        now_ms: int,
    ) -> list[Effect]:
        """Handle a SyncGroup request; ``assignments`` is non-empty only from the leader."""
        error = self._sync_precheck(
            member_id, generation_id, group_instance_id, protocol_type, protocol_name
        )
        if error is not ErrorCode.NONE:
            return self._finish([Respond(token, sync_error_response(error))], now_ms)
        member = self.members[member_id]
        self._pending_sync.discard(member_id)
        if self.state is GroupState.STABLE:
            member.last_heartbeat_ms = now_ms
            return self._finish([Respond(token, self._sync_result(member))], now_ms)
        assert self.state is GroupState.COMPLETING_REBALANCE
        effects: list[Effect] = []
        if member.sync_waiter is not None:
            superseded = sync_error_response(ErrorCode.REBALANCE_IN_PROGRESS)
            effects.append(Respond(member.sync_waiter.token, superseded))
        member.sync_waiter = _Waiter(token)
        if member_id == self.leader_id:
            effects += self._complete_sync(dict(assignments), now_ms)
        return self._finish(effects, now_ms)

    def _sync_precheck(
        self,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> ErrorCode:
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_member(member_id, group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if generation_id != self.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if _inconsistent(protocol_type, self.protocol_type) or _inconsistent(
            protocol_name, self.protocol_name
        ):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if self.state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if self.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def _complete_sync(self, assignment: dict[str, bytes], now_ms: int) -> list[Effect]:
        """Store the leader's assignment, persist, and answer every parked SyncGroup."""
        for member in self.members.values():
            # Members the leader left out get an empty assignment; unknown ids are ignored.
            member.assignment = bytes(assignment.get(member.member_id, b""))
        self._transition(GroupState.STABLE, now_ms)
        effects: list[Effect] = [Persist(self.to_record())]
        for member in self.members.values():
            if member.sync_waiter is not None:
                effects.append(Respond(member.sync_waiter.token, self._sync_result(member)))
                member.sync_waiter = None
                # Its session was paused while parked; restart it from the answer.
                member.last_heartbeat_ms = now_ms
        return effects

    def _sync_result(self, member: Member) -> dict[str, Any]:
        return {
            "throttle_time_ms": 0,
            "error_code": int(ErrorCode.NONE),
            "protocol_type": self.protocol_type,
            "protocol_name": self.protocol_name,
            "assignment": member.assignment,
        }

    def persist_failed(self, *, generation_id: int, now_ms: int) -> list[Effect]:
        """The Persist of ``generation_id``'s assignment failed: start a new rebalance.

        Answers the caller held back behind the failed Persist should be replaced by error
        answers (``sync_error_response``) -- Kafka answers with the write's error.
        """
        effects: list[Effect] = []
        if generation_id == self.generation_id and self.state in (
            GroupState.STABLE,
            GroupState.COMPLETING_REBALANCE,
        ):
            for member in self.members.values():
                member.assignment = b""
            effects += self._prepare_rebalance(now_ms)
        return self._finish(effects, now_ms)

    # ------------------------------------------------------------------------ Heartbeat

    def heartbeat(
        self, *, member_id: str, generation_id: int, group_instance_id: str | None, now_ms: int
    ) -> ErrorCode:
        """Handle a Heartbeat request and return its error code."""
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_member(member_id, group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if generation_id != self.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if self.state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        self.members[member_id].last_heartbeat_ms = now_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        # COMPLETING_REBALANCE too: clients heartbeat between the JoinGroup answer and SyncGroup.
        return ErrorCode.NONE

    # ----------------------------------------------------------------------- LeaveGroup

    def leave(
        self, *, members: Sequence[tuple[str, str | None]], now_ms: int
    ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]], list[Effect]]:
        """Handle a LeaveGroup request: ``members`` lists ``(member_id, group_instance_id)``.

        Returns the top-level error, one ``(member_id, group_instance_id, error)`` per leaving
        member, and the effects. For LeaveGroup v0-2 (one member, no per-member list) the
        caller reports that member's error as the top-level error, as Kafka does.
        """
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, [], []
        results: list[tuple[str, str | None, ErrorCode]] = []
        effects: list[Effect] = []
        for member_id, instance_id in members:
            error, member_effects = self._leave_one(member_id, instance_id, now_ms)
            results.append((member_id, instance_id, error))
            effects += member_effects
        return ErrorCode.NONE, results, self._finish(effects, now_ms)

    def _leave_one(
        self, member_id: str, instance_id: str | None, now_ms: int
    ) -> tuple[ErrorCode, list[Effect]]:
        static_member_id = None if instance_id is None else self._static_members.get(instance_id)
        if member_id != "" and static_member_id is not None and static_member_id != member_id:
            return ErrorCode.FENCED_INSTANCE_ID, []
        if member_id in self._pending_members:
            del self._pending_members[member_id]
            return ErrorCode.NONE, []
        if static_member_id is not None:
            # An admin client removes static members by instance id with an empty member id.
            member = self.members[static_member_id]
        elif member_id in self.members:
            member = self.members[member_id]
        else:
            return ErrorCode.UNKNOWN_MEMBER_ID, []
        return ErrorCode.NONE, self._remove_member_and_update_group(member, now_ms)

    # --------------------------------------------------------------------- OffsetCommit

    def validate_commit(
        self,
        *,
        member_id: str,
        generation_id: int,
        group_instance_id: str | None,
        now_ms: int | None = None,
    ) -> ErrorCode:
        """Whether an OffsetCommit may be stored (Kafka's ``ClassicGroup.validateOffsetCommit``).

        With ``now_ms``, an accepted commit from a member also refreshes its session, as a
        heartbeat would (Kafka does the same).
        """
        if self.state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and self.state is GroupState.EMPTY:
            return ErrorCode.NONE  # a simple consumer or an admin tool: no group management
        if generation_id >= 0 or member_id != "" or group_instance_id is not None:
            error = self._validate_member(member_id, group_instance_id)
            if error is not ErrorCode.NONE:
                return error
            if generation_id != self.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif self.state is not GroupState.EMPTY:
            # No member id and no generation (OffsetCommit v0): only for groups without members.
            return ErrorCode.UNKNOWN_MEMBER_ID
        if self.state is GroupState.COMPLETING_REBALANCE:
            # The member has the new generation from its JoinGroup answer but no assignment yet.
            return ErrorCode.REBALANCE_IN_PROGRESS
        # STABLE, and PREPARING_REBALANCE: Kafka accepts commits of the current generation
        # while members rejoin, so a consumer can commit what it processed before revoking.
        if now_ms is not None and member_id in self.members:
            self.members[member_id].last_heartbeat_ms = now_ms
        return ErrorCode.NONE

    def validate_delete(self) -> ErrorCode:
        """Whether DeleteGroups may delete the group: only an EMPTY group can go."""
        if self.state is GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if self.state is not GroupState.EMPTY:
            return ErrorCode.NON_EMPTY_GROUP
        return ErrorCode.NONE

    # --------------------------------------------------------------------- OffsetDelete

    def validate_offset_delete(self) -> ErrorCode:
        """Whether OffsetDelete may look at the group's partitions at all (Kafka's
        ``ClassicGroup.validateDeleteOffsets``): a DEAD group is GROUP_ID_NOT_FOUND; a group
        with members that does not use the consumer protocol is NON_EMPTY_GROUP (what its
        members consume is unknown); an EMPTY group or a consumer group may go on, partition
        by partition (``is_subscribed_to_topic``)."""
        if self.state is GroupState.DEAD:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if self.state is not GroupState.EMPTY and self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return ErrorCode.NON_EMPTY_GROUP
        return ErrorCode.NONE

    def subscribed_topics(self) -> frozenset[str] | None:
        """The topics the members of a consumer group subscribe to (the union of their
        subscriptions in the chosen protocol), or None when that is unknown: no protocol
        chosen yet, not the consumer protocol, or a subscription that does not decode. An
        EMPTY group subscribes to nothing."""
        if not self.members:
            return frozenset()
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            subscribed = subscription_topics(member.metadata(self.protocol_name))
            if subscribed is None:
                return None
            topics |= subscribed
        return frozenset(topics)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """Kafka's ``isSubscribedToTopic``: True when a member subscribes to ``topic``, and
        True as well when the subscriptions are unknown (the safe answer: OffsetDelete refuses
        and offset expiration keeps)."""
        topics = self.subscribed_topics()
        return topics is None or topic in topics

    # ------------------------------------------------------------------------- timers

    def tick(self, now_ms: int) -> list[Effect]:
        """Expire sessions and pending members, and end the join phase or delay window."""
        self._scheduled_tick_ms = None
        effects: list[Effect] = []
        for member_id, deadline in list(self._pending_members.items()):
            if now_ms >= deadline:
                del self._pending_members[member_id]
        for member in list(self.members.values()):
            if member.member_id not in self.members:
                continue
            session_deadline = member.session_deadline_ms(self._new_member_join_timeout_ms)
            if session_deadline is not None and now_ms >= session_deadline:
                effects += self._remove_member_and_update_group(member, now_ms)
        if (
            self.state is GroupState.PREPARING_REBALANCE
            and self._join_deadline_ms is not None
            and now_ms >= self._join_deadline_ms
        ):
            effects += self._on_join_deadline(now_ms)
        if (
            self.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE)
            and self._pending_sync
            and self._sync_deadline_ms is not None
            and now_ms >= self._sync_deadline_ms
        ):
            # Members that never sent SyncGroup within the rebalance timeout: remove them
            # (the first removal starts the rebalance).
            for member_id in sorted(self._pending_sync):
                if member_id in self.members:
                    effects += self._remove_member_and_update_group(self.members[member_id], now_ms)
        return self._finish(effects, now_ms)

    def _on_join_deadline(self, now_ms: int) -> list[Effect]:
        delay = self._initial_delay
        if delay is not None and delay.new_member_added and delay.remaining_ms > 0:
            # Members are still arriving at a fresh group: wait another delay window.
            window_ms = min(self._initial_rebalance_delay_ms, delay.remaining_ms)
            delay.remaining_ms -= window_ms
            delay.new_member_added = False
            self._join_deadline_ms = now_ms + window_ms
            return []
        return self._complete_join(now_ms)

    # ------------------------------------------------------------------- DEAD / records

    def mark_dead(
        self, *, now_ms: int, error: ErrorCode = ErrorCode.NOT_COORDINATOR
    ) -> list[Effect]:
        """The group is deleted or this broker no longer coordinates it: answer every parked
        request with ``error`` and refuse everything from now on."""
        effects: list[Effect] = []
        for member in self.members.values():
            if member.join_waiter is not None:
                response = join_error_response(member.member_id, error)
                effects.append(Respond(member.join_waiter.token, response))
                member.join_waiter = None
            if member.sync_waiter is not None:
                effects.append(Respond(member.sync_waiter.token, sync_error_response(error)))
                member.sync_waiter = None
        self._pending_members.clear()
        self._pending_sync.clear()
        self._join_deadline_ms = None
        self._initial_delay = None
        self._transition(GroupState.DEAD, now_ms)
        self.check_invariants()
        return effects

    def to_record(self) -> dict[str, Any]:
        """The group metadata record: JSON-able, rebuilt by ``from_record``.

        Like Kafka's ``GroupMetadataValue``, a member keeps only the metadata of the chosen
        protocol (``subscription``); bytes are base64 text.
        """
        return {
            "version": GROUP_RECORD_VERSION,
            "protocol_type": self.protocol_type,
            "generation": self.generation_id,
            "protocol": self.protocol_name,
            "leader": self.leader_id,
            "current_state_timestamp_ms": self.state_since_ms,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "rebalance_timeout_ms": m.rebalance_timeout_ms,
                    "session_timeout_ms": m.session_timeout_ms,
                    "subscription": _b64(m.metadata(self.protocol_name)),
                    "assignment": _b64(m.assignment),
                }
                for m in self.members.values()
            ],
        }

    @classmethod
    def from_record(
        cls, group_id: str, record: dict[str, Any], *, now_ms: int, **options: Any
    ) -> Group:
        """Rebuild a group from ``to_record()`` output (a coordinator taking over the group).

        The group is STABLE with its members, or EMPTY without; every member's session starts
        at ``now_ms``. ``options`` are the constructor's keyword arguments. Raises
        ``GroupRecordError`` on a malformed record.
        """
        validate_group_record(record)
        group = cls(group_id, now_ms=now_ms, **options)
        group.generation_id = record["generation"]
        group.protocol_type = record["protocol_type"]
        group.protocol_name = record["protocol"]
        for item in record["members"]:
            protocols = (
                []
                if group.protocol_name is None
                else [(group.protocol_name, base64.b64decode(item["subscription"]))]
            )
            group._add(
                Member(
                    member_id=item["member_id"],
                    group_instance_id=item["group_instance_id"],
                    client_id=item["client_id"],
                    client_host=item["client_host"],
                    session_timeout_ms=item["session_timeout_ms"],
                    rebalance_timeout_ms=item["rebalance_timeout_ms"],
                    protocol_type=record["protocol_type"] or "",
                    protocols=protocols,
                    assignment=base64.b64decode(item["assignment"]),
                    last_heartbeat_ms=now_ms,
                )
            )
        if group.members:
            group.leader_id = record["leader"] if record["leader"] in group.members else None
            if group.leader_id is None:
                group.leader_id = next(iter(group.members))
            group.state = GroupState.STABLE
        else:
            # An empty group has been empty since its record says (never later than now):
            # offsets expire a retention after that, wherever the group is coordinated.
            group.state_since_ms = min(record["current_state_timestamp_ms"], now_ms)
        group.check_invariants()
        return group

    # ------------------------------------------------------------------------ internals

    def _validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """Kafka's ``validateMember``: the instance id maps to this member id, which exists."""
        if group_instance_id is not None:
            existing = self._static_members.get(group_instance_id)
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def _add(self, member: Member) -> None:
        assert member.member_id not in self.members
        if member.group_instance_id is not None:
            assert member.group_instance_id not in self._static_members
            self._static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._pending_members.pop(member.member_id, None)

    def _remove_member_and_update_group(self, member: Member, now_ms: int) -> list[Effect]:
        """Remove a member (left or expired) and rebalance the rest."""
        effects: list[Effect] = []
        # A removed member still parked gets UNKNOWN_MEMBER_ID, so a live client rejoins.
        if member.join_waiter is not None:
            response = join_error_response("", ErrorCode.UNKNOWN_MEMBER_ID)
            effects.append(Respond(member.join_waiter.token, response))
            member.join_waiter = None
        if member.sync_waiter is not None:
            effects.append(
                Respond(member.sync_waiter.token, sync_error_response(ErrorCode.UNKNOWN_MEMBER_ID))
            )
            member.sync_waiter = None
        self._remove(member.member_id)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            effects += self._prepare_rebalance(now_ms)
        return effects

    def _remove(self, member_id: str) -> None:
        member = self.members.pop(member_id)
        assert member.join_waiter is None and member.sync_waiter is None
        if member.group_instance_id is not None:
            del self._static_members[member.group_instance_id]
        self._pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)

    def _maybe_prepare_rebalance(self, now_ms: int) -> list[Effect]:
        if self.state in (GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            return self._prepare_rebalance(now_ms)
        return []

    def _prepare_rebalance(self, now_ms: int) -> list[Effect]:
        effects: list[Effect] = []
        if self.state is GroupState.COMPLETING_REBALANCE:
            # The assignment being computed is void: parked SyncGroups rejoin.
            for member in self.members.values():
                member.assignment = b""
                if member.sync_waiter is not None:
                    response = sync_error_response(ErrorCode.REBALANCE_IN_PROGRESS)
                    effects.append(Respond(member.sync_waiter.token, response))
                    member.sync_waiter = None
                    member.last_heartbeat_ms = now_ms
        self._pending_sync.clear()
        self._sync_deadline_ms = None
        delay_ms = self._initial_rebalance_delay_ms
        if self.state is GroupState.EMPTY and delay_ms > 0:
            remaining_ms = max(self.rebalance_timeout_ms() - delay_ms, 0)
            self._initial_delay = _InitialDelay(remaining_ms=remaining_ms)
            self._join_deadline_ms = now_ms + delay_ms
        else:
            self._initial_delay = None
            self._join_deadline_ms = now_ms + self.rebalance_timeout_ms()
        self._transition(GroupState.PREPARING_REBALANCE, now_ms)
        return effects

    def _all_members_joined(self) -> bool:
        return not self._pending_members and all(m.awaiting_join for m in self.members.values())

    def _maybe_complete_join(self, now_ms: int) -> list[Effect]:
        # During the initial delay only the delay's deadline ends the join phase.
        if (
            self.state is GroupState.PREPARING_REBALANCE
            and self._initial_delay is None
            and self._all_members_joined()
        ):
            return self._complete_join(now_ms)
        return []

    def _complete_join(self, now_ms: int) -> list[Effect]:
        """End the join phase: drop dynamic laggards, start the next generation, answer."""
        assert self.state is GroupState.PREPARING_REBALANCE
        self._initial_delay = None
        self._join_deadline_ms = None
        for member in list(self.members.values()):
            # Static members that missed the join stay until their session expires.
            if not member.awaiting_join and member.group_instance_id is None:
                self._remove(member.member_id)
        if self.members and not self._elect_joined_leader():
            # Only static members are left and none rejoined: wait another rebalance timeout.
            self._join_deadline_ms = now_ms + self.rebalance_timeout_ms()
            return []
        self.generation_id += 1
        if not self.members:
            self.protocol_name = None
            self._transition(GroupState.EMPTY, now_ms)
            return [Persist(self.to_record())]
        self.protocol_name = self._select_protocol()
        self._transition(GroupState.COMPLETING_REBALANCE, now_ms)
        self._pending_sync = set(self.members)
        self._sync_deadline_ms = now_ms + self.rebalance_timeout_ms()
        effects: list[Effect] = []
        for member in self.members.values():
            if member.join_waiter is not None:
                effects.append(Respond(member.join_waiter.token, self._join_result(member)))
                member.join_waiter = None
            member.is_new = False
            member.last_heartbeat_ms = now_ms
        return effects

    def _elect_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else the first member that did; False if none did."""
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is not None and leader.awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def _select_protocol(self) -> str | None:
        """The protocol most members vote for among those all members support."""
        if not self.members:
            return None
        ordered = list(self.members.values())
        candidates = set(ordered[0].protocol_names())
        for member in ordered[1:]:
            candidates &= set(member.protocol_names())
        assert candidates, "members without a common protocol were admitted"
        votes: dict[str, int] = {}
        for member in ordered:
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        preference = {name: index for index, name in enumerate(ordered[0].protocol_names())}
        return max(votes, key=lambda name: (votes[name], -preference[name]))

    def _transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.state_since_ms = now_ms

    def _finish(self, effects: list[Effect], now_ms: int) -> list[Effect]:
        """Common tail of every request: complete a finished join phase, schedule the timer."""
        effects += self._maybe_complete_join(now_ms)
        deadline = self.next_deadline_ms()
        if deadline is not None and deadline != self._scheduled_tick_ms:
            self._scheduled_tick_ms = deadline
            effects.append(ScheduleTick(deadline))
        self.check_invariants()
        return effects

    def check_invariants(self) -> None:
        """Assert the invariants of the module docstring (cheap: one pass over the members)."""
        assert not (set(self._pending_members) & set(self.members))
        assert self._static_members == {
            m.group_instance_id: m.member_id
            for m in self.members.values()
            if m.group_instance_id is not None
        }
        assert self._pending_sync <= set(self.members)
        assert (self.leader_id is None) == (not self.members)
        assert self.leader_id is None or self.leader_id in self.members
        for member_id, member in self.members.items():
            assert member.member_id == member_id
            if member.awaiting_join:
                assert self.state is GroupState.PREPARING_REBALANCE
            if member.awaiting_sync:
                assert self.state is GroupState.COMPLETING_REBALANCE


@dataclass(frozen=True)
class _JoinRequest:
    token: Hashable
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]


def _inconsistent(requested: str | None, current: str | None) -> bool:
    """SyncGroup v5+: a protocol type or name that contradicts the group's."""
    return requested is not None and current is not None and requested != current


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def subscription_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics of a consumer-protocol subscription (Kafka's ``ConsumerProtocolSubscription``:
    int16 version >= 0, then an int32 count of int16-length UTF-8 topic names; the fields
    after them do not matter here), or None when the bytes do not decode that far.

    The broker otherwise never looks inside member metadata; OffsetDelete and offset
    expiration need the topics (``flux.sdk.consumer_protocol`` writes the same layout, but
    ``cluster`` does not import the SDK)."""
    data = bytes(metadata)
    if len(data) < 6:
        return None
    version = int.from_bytes(data[0:2], "big", signed=True)
    count = int.from_bytes(data[2:6], "big", signed=True)
    # Every name takes at least its 2-byte length, which bounds a lying count.
    if version < 0 or count < 0 or count > (len(data) - 6) // 2:
        return None
    topics: set[str] = set()
    position = 6
    for _ in range(count):
        if position + 2 > len(data):
            return None
        length = int.from_bytes(data[position : position + 2], "big", signed=True)
        position += 2
        if length < 0 or position + length > len(data):
            return None
        try:
            topics.add(data[position : position + length].decode("utf-8"))
        except UnicodeDecodeError:
            return None
        position += length
    return frozenset(topics)


# ------------------------------------------------------------------- record validation

_MEMBER_FIELDS: dict[str, tuple[type, ...]] = {
    "member_id": (str,),
    "group_instance_id": (str, type(None)),
    "client_id": (str,),
    "client_host": (str,),
    "rebalance_timeout_ms": (int,),
    "session_timeout_ms": (int,),
    "subscription": (str,),
    "assignment": (str,),
}
_RECORD_FIELDS: dict[str, tuple[type, ...]] = {
    "version": (int,),
    "protocol_type": (str, type(None)),
    "generation": (int,),
    "protocol": (str, type(None)),
    "leader": (str, type(None)),
    "current_state_timestamp_ms": (int,),
    "members": (list,),
}


def _check_fields(obj: Any, fields: dict[str, tuple[type, ...]], what: str) -> None:
    if not isinstance(obj, dict):
        raise GroupRecordError(f"{what} is not an object")
    if set(obj) != set(fields):
        raise GroupRecordError(f"{what} has fields {sorted(obj)}, expected {sorted(fields)}")
    for name, types in fields.items():
        value = obj[name]
        # bool is an int subclass; a JSON true is never a valid number here.
        if isinstance(value, bool) or not isinstance(value, types):
            raise GroupRecordError(f"{what} field {name!r} has the wrong type")


def validate_group_record(record: Any) -> None:
    """Raise ``GroupRecordError`` unless ``record`` has the shape ``Group.to_record()`` makes."""
    _check_fields(record, _RECORD_FIELDS, "group record")
    if record["version"] != GROUP_RECORD_VERSION:
        raise GroupRecordError(f"unknown group record version {record['version']}")
    if not 0 <= record["generation"] < 2**31:
        raise GroupRecordError("generation out of range")
    seen_ids: set[str] = set()
    seen_instances: set[str] = set()
    for item in record["members"]:
        _check_fields(item, _MEMBER_FIELDS, "group record member")
        if item["member_id"] in seen_ids or not item["member_id"]:
            raise GroupRecordError("empty or duplicate member id")
        seen_ids.add(item["member_id"])
        instance_id = item["group_instance_id"]
        if instance_id is not None:
            if instance_id in seen_instances:
                raise GroupRecordError("duplicate group instance id")
            seen_instances.add(instance_id)
        for name in ("rebalance_timeout_ms", "session_timeout_ms"):
            if not 0 <= item[name] < 2**31:
                raise GroupRecordError(f"{name} out of range")
        for name in ("subscription", "assignment"):
            try:
                base64.b64decode(item[name], validate=True)
            except (binascii.Error, ValueError) as exc:
                raise GroupRecordError(f"member {name} is not base64") from exc
    if seen_ids and (record["protocol"] is None or record["protocol_type"] is None):
        raise GroupRecordError("a group with members needs a protocol type and protocol")
