"""The classic group state machine: scenarios with a fake clock, plus a determinism property."""

from __future__ import annotations

import itertools
import json
from collections.abc import Hashable, Sequence
from typing import Any

import pytest
from flux.cluster.groups.state import (
    Effect,
    Group,
    GroupRecordError,
    GroupState,
    Persist,
    Respond,
    ScheduleTick,
)
from flux.protocol.errors import ErrorCode
from hypothesis import given, settings
from hypothesis import strategies as st

RANGE = [("range", b"meta-range")]
SESSION_MS = 10_000
REBALANCE_MS = 30_000


class Harness:
    """Drives one Group and records what its effects ask the caller to do."""

    def __init__(self, **options: Any) -> None:
        counter = itertools.count(1)
        options.setdefault("initial_rebalance_delay_ms", 0)
        self.group = Group(
            "g", member_id_factory=lambda prefix: f"{prefix}-{next(counter)}", **options
        )
        self.responses: dict[Hashable, dict[str, Any]] = {}
        self.persisted: list[dict[str, Any]] = []
        self.tick_at: int | None = None
        self.tokens = itertools.count(1)

    def run(self, effects: list[Effect]) -> list[Effect]:
        for effect in effects:
            if isinstance(effect, Respond):
                assert effect.token not in self.responses, f"{effect.token} answered twice"
                self.responses[effect.token] = effect.response
            elif isinstance(effect, Persist):
                json.dumps(effect.record)  # the record must be JSON-able
                self.persisted.append(effect.record)
            else:
                assert isinstance(effect, ScheduleTick)
                self.tick_at = effect.at_ms
        return effects

    def join(
        self,
        member_id: str = "",
        *,
        now: int,
        client_id: str = "c",
        instance: str | None = None,
        protocols: Sequence[tuple[str, bytes]] = RANGE,
        protocol_type: str = "consumer",
        require_known: bool = False,
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
    ) -> int:
        token = next(self.tokens)
        self.run(
            self.group.join(
                token=token,
                member_id=member_id,
                group_instance_id=instance,
                client_id=client_id,
                client_host="/127.0.0.1",
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=rebalance_ms,
                protocol_type=protocol_type,
                protocols=protocols,
                now_ms=now,
                require_known_member_id=require_known,
            )
        )
        return token

    def sync(
        self,
        member_id: str,
        *,
        now: int,
        generation: int | None = None,
        assignments: Sequence[tuple[str, bytes]] = (),
        instance: str | None = None,
        protocol_name: str | None = None,
    ) -> int:
        token = next(self.tokens)
        self.run(
            self.group.sync(
                token=token,
                member_id=member_id,
                generation_id=self.group.generation_id if generation is None else generation,
                group_instance_id=instance,
                protocol_type="consumer",
                protocol_name=protocol_name,
                assignments=assignments,
                now_ms=now,
            )
        )
        return token

    def heartbeat(
        self,
        member_id: str,
        *,
        now: int,
        generation: int | None = None,
        instance: str | None = None,
    ) -> ErrorCode:
        return self.group.heartbeat(
            member_id=member_id,
            generation_id=self.group.generation_id if generation is None else generation,
            group_instance_id=instance,
            now_ms=now,
        )

    def tick(self, now: int) -> list[Effect]:
        return self.run(self.group.tick(now))

    def leave(self, *members: tuple[str, str | None], now: int) -> list[tuple[str, Any, Any]]:
        error, results, effects = self.group.leave(members=list(members), now_ms=now)
        assert error is ErrorCode.NONE
        self.run(effects)
        return results

    def error(self, token: int) -> ErrorCode:
        return ErrorCode(self.responses[token]["error_code"])


def stable_group(count: int, **options: Any) -> tuple[Harness, list[str]]:
    """A STABLE generation-1 group of ``count`` dynamic members c-1 .. c-count, at time 0."""
    h = Harness(initial_rebalance_delay_ms=3000, **options)
    tokens = [h.join(now=0) for _ in range(count)]
    h.tick(3000)
    if h.group.state is GroupState.PREPARING_REBALANCE:
        h.tick(6000)  # members 2.. arrived during the first delay window
    ids = [h.responses[t]["member_id"] for t in tokens]
    leader = h.group.leader_id
    for member_id in ids:
        if member_id != leader:
            h.sync(member_id, now=6000)
    assert leader is not None
    h.sync(leader, now=6000, assignments=[(m, m.encode()) for m in ids])
    assert h.group.state is GroupState.STABLE
    return h, ids


# ------------------------------------------------------------------------------ scenarios


def test_three_members_one_rebalance_generation_one() -> None:
    h = Harness(initial_rebalance_delay_ms=3000)
    tokens = [h.join(now=t, client_id=f"c{t}") for t in (0, 100, 200)]
    assert h.group.state is GroupState.PREPARING_REBALANCE
    assert h.responses == {}  # parked behind the initial delay
    assert h.tick_at == 3000
    h.tick(3000)  # new members arrived during the delay: one more window
    assert h.responses == {} and h.tick_at == 6000
    h.tick(6000)
    assert h.group.state is GroupState.COMPLETING_REBALANCE
    assert h.group.generation_id == 1
    answers = [h.responses[t] for t in tokens]
    ids = [a["member_id"] for a in answers]
    assert ids == ["c0-1", "c100-2", "c200-3"]
    leader = answers[0]
    assert leader["leader"] == "c0-1" and leader["error_code"] == 0
    assert leader["protocol_name"] == "range" and leader["protocol_type"] == "consumer"
    assert leader["skip_assignment"] is False and leader["throttle_time_ms"] == 0
    assert leader["members"] == [
        {"member_id": m, "group_instance_id": None, "metadata": b"meta-range"} for m in ids
    ]
    for follower in answers[1:]:
        assert follower["members"] == [] and follower["leader"] == "c0-1"
        assert follower["generation_id"] == 1

    follower_syncs = [h.sync(m, now=6100) for m in ids[1:]]
    assert not any(t in h.responses for t in follower_syncs)  # parked until the leader's
    assert h.heartbeat(ids[1], now=6150) is ErrorCode.NONE  # allowed while completing
    leader_sync = h.sync(ids[0], now=6200, assignments=[(m, f"a-{m}".encode()) for m in ids])
    assert h.group.state is GroupState.STABLE
    for token, member_id in zip([leader_sync, *follower_syncs], ids, strict=True):
        assert h.responses[token] == {
            "throttle_time_ms": 0,
            "error_code": 0,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignment": f"a-{member_id}".encode(),
        }
    assert len(h.persisted) == 1
    record = h.persisted[0]
    assert record["generation"] == 1 and record["leader"] == "c0-1"
    assert [m["member_id"] for m in record["members"]] == ids


def test_fourth_member_triggers_generation_two() -> None:
    h, ids = stable_group(3)
    newcomer = h.join(now=7000, client_id="d")
    assert h.group.state is GroupState.PREPARING_REBALANCE
    for member_id in ids:
        assert h.heartbeat(member_id, now=7100) is ErrorCode.REBALANCE_IN_PROGRESS
    rejoins = [h.join(m, now=7200) for m in ids]
    assert h.group.state is GroupState.COMPLETING_REBALANCE  # everyone rejoined: no waiting
    assert h.group.generation_id == 2
    assert h.responses[newcomer]["member_id"] == "d-4"
    leader_answer = h.responses[rejoins[0]]
    assert leader_answer["leader"] == ids[0]  # the existing leader stays
    assert len(leader_answer["members"]) == 4
    assert all(h.responses[t]["generation_id"] == 2 for t in [newcomer, *rejoins])


def test_silent_member_expires_and_group_rebalances_without_it() -> None:
    h, ids = stable_group(3)
    alive, silent = ids[:2], ids[2]
    now = 6000
    while now < 6000 + SESSION_MS - 1000:
        now += 3000
        for member_id in alive:
            assert h.heartbeat(member_id, now=now) is ErrorCode.NONE
        h.tick(now)
    assert silent in h.group.members
    assert h.group.next_deadline_ms() == 6000 + SESSION_MS  # the silent member's session
    h.tick(6000 + SESSION_MS)
    assert silent not in h.group.members
    assert h.group.state is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(silent, now=16_100) is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat(alive[0], now=16_100) is ErrorCode.REBALANCE_IN_PROGRESS
    tokens = [h.join(m, now=16_200) for m in alive]
    assert h.group.generation_id == 2
    assert [m["member_id"] for m in h.responses[tokens[0]]["members"]] == alive


def test_rebalance_timeout_removes_members_that_did_not_rejoin() -> None:
    h, ids = stable_group(2)
    token = h.join(ids[0], now=7000)  # the leader's JoinGroup forces a rebalance
    assert h.group.state is GroupState.PREPARING_REBALANCE and token not in h.responses
    # The follower keeps heartbeating (so its session does not end) but never rejoins.
    for now in range(9000, 7000 + REBALANCE_MS, 2000):
        assert h.heartbeat(ids[1], now=now) is ErrorCode.REBALANCE_IN_PROGRESS
        h.tick(now)
    assert token not in h.responses
    h.tick(7000 + REBALANCE_MS)
    assert list(h.group.members) == [ids[0]]
    assert h.responses[token]["generation_id"] == 2
    assert h.heartbeat(ids[1], now=37_100) is ErrorCode.UNKNOWN_MEMBER_ID


def test_heartbeat_errors() -> None:
    h, ids = stable_group(2)
    assert h.heartbeat(ids[0], now=7000, generation=0) is ErrorCode.ILLEGAL_GENERATION
    assert h.heartbeat("nobody", now=7000) is ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat(ids[0], now=7000) is ErrorCode.NONE


def test_sync_errors() -> None:
    h, ids = stable_group(2)
    t = h.sync(ids[1], now=7000, generation=0)
    assert h.error(t) is ErrorCode.ILLEGAL_GENERATION
    t = h.sync("nobody", now=7000)
    assert h.error(t) is ErrorCode.UNKNOWN_MEMBER_ID
    t = h.sync(ids[1], now=7000, protocol_name="roundrobin")
    assert h.error(t) is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    t = h.sync(ids[1], now=7000)  # STABLE: the stored assignment again
    assert h.responses[t]["assignment"] == ids[1].encode()
    h.join(ids[0], now=7100)
    t = h.sync(ids[1], now=7200)
    assert h.error(t) is ErrorCode.REBALANCE_IN_PROGRESS


def test_commit_validation() -> None:
    h, ids = stable_group(2)
    g = h.group
    assert g.validate_commit(member_id=ids[0], generation_id=1, group_instance_id=None) is (
        ErrorCode.NONE
    )
    assert g.validate_commit(member_id=ids[0], generation_id=0, group_instance_id=None) is (
        ErrorCode.ILLEGAL_GENERATION
    )
    assert g.validate_commit(member_id="nobody", generation_id=1, group_instance_id=None) is (
        ErrorCode.UNKNOWN_MEMBER_ID
    )
    # A simple consumer cannot commit into a group that has members.
    assert g.validate_commit(member_id="", generation_id=-1, group_instance_id=None) is (
        ErrorCode.UNKNOWN_MEMBER_ID
    )
    h.join("", now=7000, client_id="d")  # PREPARING_REBALANCE: Kafka accepts current commits
    assert g.state is GroupState.PREPARING_REBALANCE
    assert g.validate_commit(member_id=ids[1], generation_id=1, group_instance_id=None) is (
        ErrorCode.NONE
    )
    h.join(ids[0], now=7100)
    h.join(ids[1], now=7100)
    assert g.state is GroupState.COMPLETING_REBALANCE
    assert g.validate_commit(member_id=ids[1], generation_id=2, group_instance_id=None) is (
        ErrorCode.REBALANCE_IN_PROGRESS
    )


def test_commit_refreshes_the_session() -> None:
    h, ids = stable_group(1)
    h.group.validate_commit(member_id=ids[0], generation_id=1, group_instance_id=None, now_ms=9000)
    h.tick(6000 + SESSION_MS)
    assert ids[0] in h.group.members


def test_simple_consumer_commit_on_empty_group() -> None:
    g = Group("g")
    assert g.validate_commit(member_id="", generation_id=-1, group_instance_id=None) is (
        ErrorCode.NONE
    )
    assert g.validate_commit(member_id="x", generation_id=3, group_instance_id=None) is (
        ErrorCode.UNKNOWN_MEMBER_ID
    )


def test_member_id_required_flow() -> None:
    h = Harness()
    first = h.join(now=0, require_known=True, client_id="app")
    answer = h.responses[first]
    assert ErrorCode(answer["error_code"]) is ErrorCode.MEMBER_ID_REQUIRED
    assert answer["member_id"] == "app-1" and answer["generation_id"] == -1
    assert h.group.state is GroupState.EMPTY and h.group.pending_member_ids == ["app-1"]
    unknown = h.join("app-999", now=10, require_known=True)
    assert h.error(unknown) is ErrorCode.UNKNOWN_MEMBER_ID
    second = h.join("app-1", now=20, require_known=True)
    assert h.error(second) is ErrorCode.NONE
    assert h.responses[second]["member_id"] == "app-1"
    assert h.responses[second]["leader"] == "app-1"
    assert h.group.pending_member_ids == []


def test_pending_member_holds_the_join_phase_until_it_expires() -> None:
    h, ids = stable_group(1)
    pending = h.join(now=7000, require_known=True)
    pending_id = h.responses[pending]["member_id"]
    assert h.group.state is GroupState.STABLE  # a pending member does not rebalance
    rejoin = h.join(ids[0], now=7100)  # the leader's join starts a rebalance
    assert rejoin not in h.responses  # waits for the pending member
    h.tick(7000 + SESSION_MS)  # the pending member never came back
    assert pending_id not in h.group.pending_member_ids
    assert h.responses[rejoin]["generation_id"] == 2


def test_inconsistent_protocols() -> None:
    h, ids = stable_group(2)
    t = h.join(now=7000, protocol_type="connect")
    assert h.error(t) is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    t = h.join(now=7000, protocols=[("roundrobin", b"")])
    assert h.error(t) is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    t = h.join(ids[0], now=7000, protocols=[("roundrobin", b"")])  # the other lacks it
    assert h.error(t) is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    fresh = Harness()
    token = fresh.join(now=0, protocols=[])
    assert fresh.error(token) is ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.group.state is GroupState.STABLE


def test_protocol_is_the_most_voted_common_one() -> None:
    h = Harness(initial_rebalance_delay_ms=1000)
    both = [("roundrobin", b"r"), ("range", b"g")]
    tokens = [
        h.join(now=0, protocols=[("range", b"g"), ("roundrobin", b"r")]),
        h.join(now=0, protocols=both),
        h.join(now=0, protocols=[("roundrobin", b"r"), ("sticky", b"s"), ("range", b"g")]),
    ]
    h.tick(1000)
    h.tick(2000)
    assert h.group.protocol_name == "roundrobin"
    leader = h.responses[tokens[0]]
    assert leader["protocol_name"] == "roundrobin"
    assert [m["metadata"] for m in leader["members"]] == [b"r", b"r", b"r"]


def test_invalid_session_timeout() -> None:
    h = Harness()
    t = h.join(now=0, session_ms=10)
    assert h.error(t) is ErrorCode.INVALID_SESSION_TIMEOUT


def test_leave_empties_the_group_and_persists() -> None:
    h, ids = stable_group(1)
    results = h.leave((ids[0], None), ("ghost", None), now=7000)
    assert results == [(ids[0], None, ErrorCode.NONE), ("ghost", None, ErrorCode.UNKNOWN_MEMBER_ID)]
    g = h.group
    assert g.state is GroupState.EMPTY and g.members == {} and g.leader_id is None
    assert g.generation_id == 2 and g.protocol_name is None
    assert h.persisted[-1]["members"] == [] and h.persisted[-1]["generation"] == 2
    assert g.validate_commit(member_id="", generation_id=-1, group_instance_id=None) is (
        ErrorCode.NONE
    )


def test_leave_of_one_member_rebalances_the_rest() -> None:
    h, ids = stable_group(2)
    h.leave((ids[0], None), now=7000)
    assert h.group.state is GroupState.PREPARING_REBALANCE
    assert h.group.leader_id == ids[1]
    t = h.join(ids[1], now=7100)
    assert h.responses[t]["leader"] == ids[1] and h.responses[t]["generation_id"] == 2


def test_leaving_member_with_parked_join_is_answered() -> None:
    h, ids = stable_group(2)
    t = h.join(ids[0], now=7000)  # the leader's join parks (a follower's would be answered)
    h.leave((ids[0], None), now=7100)
    assert h.error(t) is ErrorCode.UNKNOWN_MEMBER_ID


def test_new_member_during_completing_rebalance_cancels_parked_syncs() -> None:
    h = Harness(initial_rebalance_delay_ms=1000)
    a, b = h.join(now=0), h.join(now=0)
    h.tick(1000)
    h.tick(2000)
    follower_sync = h.sync(h.responses[b]["member_id"], now=2100)
    h.join(now=2200, client_id="late")
    assert h.error(follower_sync) is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.group.state is GroupState.PREPARING_REBALANCE
    assert a in h.responses


def test_static_member_rejoin_fences_the_old_member_id() -> None:
    h = Harness(initial_rebalance_delay_ms=1000)
    first = h.join(now=0, instance="i1", client_id="app")
    other = h.join(now=0, client_id="other")
    h.tick(1000)
    h.tick(2000)
    old_id = h.responses[first]["member_id"]
    other_id = h.responses[other]["member_id"]
    assert old_id == "i1-1"
    h.sync(other_id, now=2100)
    h.sync(old_id, now=2100, instance="i1", assignments=[(old_id, b"A"), (other_id, b"B")])
    assert h.group.state is GroupState.STABLE
    persisted = len(h.persisted)

    # The same instance restarts and joins without a member id.
    again = h.join(now=3000, instance="i1", client_id="app")
    answer = h.responses[again]
    new_id = answer["member_id"]
    assert new_id != old_id and answer["error_code"] == 0
    assert answer["generation_id"] == 1  # no rebalance: same protocols, STABLE group
    assert answer["leader"] == old_id  # the previous leader id: the new id does not assign
    assert len(h.persisted) == persisted + 1
    assert h.group.state is GroupState.STABLE and h.group.leader_id == new_id
    t = h.sync(new_id, now=3100, instance="i1")
    assert h.responses[t]["assignment"] == b"A"  # the assignment moved to the new id
    assert h.heartbeat(old_id, now=3200, instance="i1") is ErrorCode.FENCED_INSTANCE_ID
    t = h.sync(old_id, now=3200, instance="i1")
    assert h.error(t) is ErrorCode.FENCED_INSTANCE_ID
    t = h.join(old_id, now=3200, instance="i1")
    assert h.error(t) is ErrorCode.FENCED_INSTANCE_ID
    assert h.group.validate_commit(member_id=old_id, generation_id=1, group_instance_id="i1") is (
        ErrorCode.FENCED_INSTANCE_ID
    )
    assert h.heartbeat(new_id, now=3200, instance="i1") is ErrorCode.NONE


def test_static_member_replaced_while_parked_fences_the_parked_join() -> None:
    h, ids = stable_group(1)
    static = h.join(now=7000, instance="s")
    assert h.group.state is GroupState.PREPARING_REBALANCE  # ids[0] has not rejoined
    replacement = h.join(now=7100, instance="s")
    assert h.error(static) is ErrorCode.FENCED_INSTANCE_ID
    h.join(ids[0], now=7200)
    assert h.responses[replacement]["member_id"] == "s-3"
    assert h.responses[replacement]["generation_id"] == 2


def test_static_member_survives_a_missed_rebalance() -> None:
    h = Harness(initial_rebalance_delay_ms=1000)
    a = h.join(now=0, client_id="a")
    s = h.join(now=0, instance="s")
    h.tick(1000)
    h.tick(2000)
    a_id, s_id = h.responses[a]["member_id"], h.responses[s]["member_id"]
    h.sync(s_id, now=2100, instance="s")
    h.sync(a_id, now=2100, assignments=[(a_id, b"a"), (s_id, b"s")])
    h.join(a_id, now=3000)  # leader rejoin; the static member does not rejoin
    h.heartbeat(s_id, now=3000 + REBALANCE_MS - 5000, instance="s")
    h.tick(3000 + REBALANCE_MS)
    assert s_id in h.group.members  # kept; only its session can remove it
    assert h.group.generation_id == 2


def test_leader_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    h = Harness(initial_rebalance_delay_ms=1000)
    a, b = h.join(now=0), h.join(now=0)
    h.tick(1000)
    h.tick(2000)
    a_id, b_id = h.responses[a]["member_id"], h.responses[b]["member_id"]
    assert h.group.leader_id == a_id
    parked = h.sync(b_id, now=2100)
    for now in range(8000, 2000 + REBALANCE_MS, 6000):  # alive, but never assigns
        assert h.heartbeat(a_id, now=now) is ErrorCode.NONE
        h.tick(now)
    assert h.group.state is GroupState.COMPLETING_REBALANCE and parked not in h.responses
    h.tick(2000 + REBALANCE_MS)
    assert a_id not in h.group.members
    assert h.error(parked) is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.group.state is GroupState.PREPARING_REBALANCE and h.group.leader_id == b_id


def test_admin_removes_a_static_member_by_instance_id() -> None:
    h = Harness()
    t = h.join(now=0, instance="s")
    member_id = h.responses[t]["member_id"]
    results = h.leave(("", "s"), now=100)
    assert results == [("", "s", ErrorCode.NONE)]
    assert member_id not in h.group.members and h.group.state is GroupState.EMPTY


def test_initial_rebalance_delay_is_honoured_and_bounded() -> None:
    h = Harness(initial_rebalance_delay_ms=3000)
    a = h.join(now=0, rebalance_ms=7000)
    h.tick(2999)
    assert a not in h.responses
    h.join(now=1000, rebalance_ms=7000)
    h.tick(3000)  # a new member arrived: wait another 3000 (4000 of 7000 left)
    assert a not in h.responses and h.tick_at == 6000
    h.join(now=5000, rebalance_ms=7000)
    h.tick(6000)  # again: only 1000 left of the rebalance timeout
    assert a not in h.responses and h.tick_at == 7000
    h.join(now=6500, rebalance_ms=7000)
    h.tick(7000)  # nothing left: complete with whoever joined
    assert h.responses[a]["generation_id"] == 1
    assert len(h.responses[a]["members"]) == 4


def test_initial_delay_without_newcomers_ends_after_one_window() -> None:
    h = Harness(initial_rebalance_delay_ms=3000)
    a = h.join(now=0)
    h.tick(3000)
    assert h.responses[a]["generation_id"] == 1


def test_new_member_parked_too_long_is_dropped() -> None:
    h, ids = stable_group(2)
    newcomer = h.join(now=7000, client_id="n", rebalance_ms=10 * 60 * 1000)
    h.join(ids[0], now=7000)
    # ids[1] keeps heartbeating but never rejoins; the newcomer's join times out first.
    for now in range(9000, 7000 + 5 * 60 * 1000, 5000):
        h.heartbeat(ids[1], now=now)
        h.tick(now)
    h.tick(7000 + 5 * 60 * 1000)
    assert h.error(newcomer) is ErrorCode.UNKNOWN_MEMBER_ID


def test_persist_failure_starts_a_new_rebalance() -> None:
    h, ids = stable_group(2)
    h.run(h.group.persist_failed(generation_id=1, now_ms=7000))
    assert h.group.state is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(ids[0], now=7100) is ErrorCode.REBALANCE_IN_PROGRESS
    assert h.group.persist_failed(generation_id=0, now_ms=7200) == []


def test_mark_dead_answers_parked_requests() -> None:
    h, ids = stable_group(2)
    t = h.join(ids[0], now=7000)
    h.run(h.group.mark_dead(now_ms=7100))
    assert h.error(t) is ErrorCode.NOT_COORDINATOR
    assert h.group.state is GroupState.DEAD
    assert h.heartbeat(ids[1], now=7200) is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.group.validate_delete() is ErrorCode.GROUP_ID_NOT_FOUND


def test_describe_and_overview() -> None:
    h, ids = stable_group(2)
    described = h.group.describe()
    assert described["group_state"] == "Stable"
    assert described["protocol_type"] == "consumer" and described["protocol_data"] == "range"
    assert [m["member_id"] for m in described["members"]] == ids
    assert described["members"][0]["client_host"] == "/127.0.0.1"
    assert described["members"][0]["member_metadata"] == b"meta-range"
    assert described["members"][1]["member_assignment"] == ids[1].encode()
    assert h.group.overview()["group_state"] == "Stable"
    assert h.group.validate_delete() is ErrorCode.NON_EMPTY_GROUP
    h.join(ids[0], now=7000)
    assert h.group.describe()["members"][0]["member_assignment"] == b""  # only when Stable


def test_record_round_trip() -> None:
    h, ids = stable_group(3)
    record = json.loads(json.dumps(h.group.to_record()))
    loaded = Group.from_record("g", record, now_ms=50_000)
    assert loaded.state is GroupState.STABLE
    assert loaded.generation_id == 1 and loaded.leader_id == ids[0]
    assert loaded.protocol_type == "consumer" and loaded.protocol_name == "range"
    assert list(loaded.members) == ids
    assert [m.assignment for m in loaded.members.values()] == [m.encode() for m in ids]
    assert loaded.to_record()["members"] == record["members"]
    # Sessions restart at load time; members carry on with their generation.
    assert loaded.heartbeat(
        member_id=ids[1], generation_id=1, group_instance_id=None, now_ms=50_001
    ) is (ErrorCode.NONE)
    assert loaded.next_deadline_ms() == 50_000 + SESSION_MS

    empty = Group.from_record("e", Group("e").to_record(), now_ms=0)
    assert empty.state is GroupState.EMPTY and empty.members == {}


@pytest.mark.parametrize(
    "damage",
    [
        lambda r: r.pop("generation"),
        lambda r: r.update(generation="1"),
        lambda r: r.update(generation=True),
        lambda r: r.update(version=99),
        lambda r: r["members"][0].update(assignment="not base64!"),
        lambda r: r["members"].append(dict(r["members"][0])),
        lambda r: r.update(protocol=None),
        lambda r: r.update(members={}),
    ],
)
def test_malformed_record_is_refused(damage: Any) -> None:
    h, _ = stable_group(1)
    record = json.loads(json.dumps(h.group.to_record()))
    damage(record)
    with pytest.raises(GroupRecordError):
        Group.from_record("g", record, now_ms=0)


# ------------------------------------------------------------------------------ property

_OPS = st.lists(
    st.tuples(
        st.sampled_from(["join", "join_new", "sync", "heartbeat", "leave", "tick", "commit"]),
        st.integers(0, 3),  # which known member id
        st.integers(0, 12_000),  # time advance
        st.booleans(),  # static / require known / leader assignment
    ),
    max_size=40,
)


def _play(ops: list[tuple[str, int, int, bool]]) -> list[Any]:
    """Run a random request sequence; return everything observable."""
    h = Harness(initial_rebalance_delay_ms=500)
    issued: list[int] = []
    seen_ids: list[str] = []
    observed: list[Any] = []
    now = 0
    for op, index, advance, flag in ops:
        now += advance
        member_id = seen_ids[index % len(seen_ids)] if seen_ids else "x"
        before = len(h.responses)
        if op == "join_new":
            issued.append(h.join(now=now, require_known=flag, instance="s" if flag else None))
        elif op == "join":
            issued.append(h.join(member_id, now=now))
        elif op == "sync":
            assignments = [(m, m.encode()) for m in h.group.members] if flag else []
            issued.append(h.sync(member_id, now=now, assignments=assignments))
        elif op == "heartbeat":
            observed.append(h.heartbeat(member_id, now=now))
        elif op == "leave":
            observed.append(h.leave((member_id, None), now=now))
        elif op == "commit":
            observed.append(
                h.group.validate_commit(
                    member_id=member_id, generation_id=h.group.generation_id, group_instance_id=None
                )
            )
        else:
            h.tick(now)
        for token in list(h.responses)[before:]:
            new_id = h.responses[token]["member_id"] if "member_id" in h.responses[token] else ""
            if new_id and new_id not in seen_ids:
                seen_ids.append(new_id)
        observed.append((h.group.state, h.group.generation_id, h.group.leader_id))
        deadline = h.group.next_deadline_ms()
        # The last ScheduleTick never lies after the group's earliest deadline.
        assert deadline is None or (h.tick_at is not None and h.tick_at <= deadline)
    h.run(h.group.mark_dead(now_ms=now))
    # Every request got exactly one answer (Harness.run rejects a second one).
    assert set(h.responses) == set(issued)
    observed.append(sorted(h.responses.items(), key=lambda item: str(item[0])))
    observed.append(h.persisted)
    return observed


@settings(max_examples=150, deadline=None)
@given(_OPS)
def test_random_requests_keep_invariants_and_replay_deterministically(
    ops: list[tuple[str, int, int, bool]],
) -> None:
    assert _play(ops) == _play(ops)
