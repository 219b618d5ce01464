"""Controller quorum changes: the pure decisions of ``flux.controller.membership`` and the
``QuorumVoters`` record."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from flux.controller.errors import InvalidRecordError
from flux.controller.image import MetadataImage
from flux.controller.membership import (
    MAX_VOTERS,
    MembershipPlan,
    MembershipRefused,
    VoterAddress,
    check_candidate,
    majority,
    parse_address,
    pending_change,
    plan_add,
    plan_remove,
    voters_from_record,
    voters_to_record,
)
from flux.controller.records import QuorumVoters, record_from_dict, record_to_dict
from flux.protocol.errors import ErrorCode


def voter(node_id: int) -> VoterAddress:
    return VoterAddress(node_id, f"10.0.0.{node_id}:9093", f"10.0.0.{node_id}:9094")


THREE = (voter(1), voter(2), voter(3))
MEMBERS = frozenset(v.raft_address for v in THREE)


def refused(call: object, code: ErrorCode, words: str) -> None:
    assert callable(call)
    with pytest.raises(MembershipRefused) as caught:
        call()
    assert caught.value.code == code, caught.value.message
    assert words in caught.value.message


# -- adding ------------------------------------------------------------------------------------


def test_add_records_the_larger_set() -> None:
    plan = plan_add(THREE, MEMBERS, voter(4), reachable=MEMBERS)
    assert plan == MembershipPlan((*THREE, voter(4)), record_needed=True)


def test_adding_an_existing_voter_again_changes_nothing() -> None:
    plan = plan_add(THREE, MEMBERS, voter(3), reachable=MEMBERS)
    assert plan == MembershipPlan(THREE, record_needed=False)


@pytest.mark.parametrize(
    ("new", "words"),
    [
        (VoterAddress(3, "10.0.0.9:9093", "10.0.0.3:9094"), "already a voter"),
        (VoterAddress(4, "10.0.0.2:9093", "10.0.0.4:9094"), "belongs to voter 2"),
        (VoterAddress(4, "10.0.0.4:9093", "10.0.0.1:9094"), "belongs to voter 1"),
    ],
)
def test_add_refuses_a_clash_with_a_voter(new: VoterAddress, words: str) -> None:
    refused(
        lambda: plan_add(THREE, MEMBERS, new, reachable=MEMBERS), ErrorCode.DUPLICATE_VOTER, words
    )


@pytest.mark.parametrize(
    ("new", "words"),
    [
        (VoterAddress(-1, "h:1", "h:2"), "controller id"),
        (VoterAddress(True, "h:1", "h:2"), "controller id"),  # type: ignore[arg-type]
        (VoterAddress(4, "h", "h:2"), "Raft address"),
        (VoterAddress(4, "h:0", "h:2"), "Raft address"),
        (VoterAddress(4, "h:70000", "h:2"), "Raft address"),
        (VoterAddress(4, ":1", "h:2"), "Raft address"),
        (VoterAddress(4, "h:1", "h:x"), "HTTP address"),
        (VoterAddress(4, "h:1", "http://h:2"), "HTTP address"),
    ],
)
def test_add_refuses_bad_input(new: VoterAddress, words: str) -> None:
    refused(
        lambda: plan_add(THREE, MEMBERS, new, reachable=MEMBERS), ErrorCode.INVALID_REQUEST, words
    )


def test_add_refuses_more_than_the_voter_limit() -> None:
    voters = tuple(voter(i) for i in range(1, MAX_VOTERS + 1))
    members = frozenset(v.raft_address for v in voters)
    refused(
        lambda: plan_add(voters, members, voter(MAX_VOTERS + 1), reachable=members),
        ErrorCode.INVALID_REQUEST,
        f"at most {MAX_VOTERS}",
    )


def test_add_refuses_when_the_larger_quorum_would_lack_a_majority() -> None:
    # 4 voters need 3; with 2 of 3 down only the leader and the new voter remain.
    only_me = frozenset({THREE[0].raft_address})
    refused(
        lambda: plan_add(THREE, MEMBERS, voter(4), reachable=only_me),
        ErrorCode.INVALID_REQUEST,
        "only 2 are reachable",
    )
    # One of 3 down: 2 + the new one make 3 of 4.
    assert plan_add(THREE, MEMBERS, voter(4), reachable=MEMBERS - {THREE[2].raft_address})


def test_ipv6_addresses_in_brackets() -> None:
    assert parse_address("[::1]:9093", "x") == ("::1", 9093)


# -- removing ----------------------------------------------------------------------------------


def test_remove_records_the_smaller_set() -> None:
    plan = plan_remove(THREE, MEMBERS, 2, active_id=1, reachable=MEMBERS)
    assert plan == MembershipPlan((voter(1), voter(3)), record_needed=True)


def test_removing_the_active_controller_hands_leadership_over_first() -> None:
    plan = plan_remove(THREE, MEMBERS, 1, active_id=1, reachable=MEMBERS)
    assert plan == MembershipPlan(THREE, record_needed=False, transfer_leadership=True)


def test_remove_refuses_an_unknown_voter() -> None:
    refused(
        lambda: plan_remove(THREE, MEMBERS, 7, active_id=1, reachable=MEMBERS),
        ErrorCode.VOTER_NOT_FOUND,
        "not a voter (voters: 1, 2, 3)",
    )


def test_remove_refuses_the_last_voter() -> None:
    one = (voter(1),)
    members = frozenset({voter(1).raft_address})
    refused(
        lambda: plan_remove(one, members, 1, active_id=1, reachable=members),
        ErrorCode.INVALID_REQUEST,
        "last voter",
    )


def test_remove_refuses_when_the_rest_would_lack_a_majority() -> None:
    # Voter 3 is down: removing 2 leaves {1, 3} which needs both.
    reachable = MEMBERS - {voter(3).raft_address}
    refused(
        lambda: plan_remove(THREE, MEMBERS, 2, active_id=1, reachable=reachable),
        ErrorCode.INVALID_REQUEST,
        "only 1 are reachable",
    )
    # Removing the dead one is what an operator wants, and it is allowed.
    assert plan_remove(THREE, MEMBERS, 3, active_id=1, reachable=reachable).record_needed


# -- one change at a time ----------------------------------------------------------------------


def test_pending_change_is_the_difference_between_record_and_raft() -> None:
    four = (*THREE, voter(4))
    assert pending_change(four, MEMBERS) == ((voter(4),), ())
    assert pending_change(THREE[:2], MEMBERS) == ((), (voter(3).raft_address,))
    assert pending_change(THREE, MEMBERS) == ((), ())


def test_while_a_change_is_pending_only_its_retry_or_cancellation_is_accepted() -> None:
    four = (*THREE, voter(4))  # recorded, not yet in Raft
    assert plan_add(four, MEMBERS, voter(4), reachable=MEMBERS) == MembershipPlan(
        four, record_needed=False
    )
    assert plan_remove(four, MEMBERS, 4, active_id=1, reachable=MEMBERS) == MembershipPlan(
        THREE, record_needed=True
    )
    refused(
        lambda: plan_add(four, MEMBERS, voter(5), reachable=MEMBERS),
        ErrorCode.REQUEST_TIMED_OUT,
        "adding controller 4",
    )
    refused(
        lambda: plan_remove(four, MEMBERS, 2, active_id=1, reachable=MEMBERS),
        ErrorCode.REQUEST_TIMED_OUT,
        "in progress",
    )


def test_majority() -> None:
    assert [majority(n) for n in range(1, 6)] == [1, 2, 2, 3, 3]


# -- checking the controller to add ------------------------------------------------------------


def candidate_status(**changes: object) -> dict[str, object]:
    status: dict[str, object] = {
        "node_id": 4,
        "raft": {
            "self_address": voter(4).raft_address,
            "members": sorted([*MEMBERS, voter(4).raft_address]),
        },
    }
    status.update(changes)
    return status


def test_a_candidate_started_with_the_full_list_passes() -> None:
    check_candidate(voter(4), candidate_status(), MEMBERS)


@pytest.mark.parametrize(
    ("status", "code", "words"),
    [
        (None, ErrorCode.INVALID_REQUEST, "does not answer"),
        (candidate_status(node_id=5), ErrorCode.INVALID_VOTER_KEY, "is node 5, not 4"),
        (
            candidate_status(raft={"self_address": "10.0.0.4:1", "members": []}),
            ErrorCode.INVALID_VOTER_KEY,
            "runs Raft on",
        ),
        (
            candidate_status(
                raft={"self_address": voter(4).raft_address, "members": [voter(1).raft_address]}
            ),
            ErrorCode.INCONSISTENT_VOTER_SET,
            "not started with the full voter list",
        ),
    ],
)
def test_a_candidate_that_cannot_join_is_refused(
    status: dict[str, object] | None, code: ErrorCode, words: str
) -> None:
    refused(lambda: check_candidate(voter(4), status, MEMBERS), code, words)


# -- the record --------------------------------------------------------------------------------


def test_quorum_voters_record_round_trip_and_replay() -> None:
    record = QuorumVoters(voters_to_record((voter(2), voter(1))))
    data = json.loads(json.dumps(record_to_dict(record)))
    assert record_from_dict(data) == record
    image = MetadataImage.EMPTY.replay_all([record], 1)
    assert voters_from_record(image.quorum_voters) == (voter(1), voter(2))
    assert MetadataImage.from_dict(json.loads(json.dumps(image.to_dict()))) == image
    # An empty voter set is never applied: a quorum keeps at least one voter.
    assert image.replay(QuorumVoters(())).quorum_voters == image.quorum_voters


@pytest.mark.parametrize(
    "voters",
    [[[1, "h:1"]], [["1", "h:1", "h:2"]], [[1, 2, "h:2"]], "1@h:1:2"],
)
def test_malformed_quorum_voters_records_are_rejected(voters: object) -> None:
    with pytest.raises(InvalidRecordError):
        record_from_dict({"type": "QuorumVoters", "v": 1, "voters": voters})


# -- the active controller's side: one change at a time ----------------------------------------


class _FakeQuorum:
    self_address = voter(1).raft_address
    members = MEMBERS

    async def raft_view(self) -> dict[str, object]:
        return {"members": sorted(MEMBERS), "connected": sorted(MEMBERS), "commit_index": 1}


class _FakeService:
    def __init__(self) -> None:
        from flux.controller.service import ControllerSettings

        self.settings = ControllerSettings(
            node_id=1, host="h", http_port=1, voters=THREE, data_dir=Path("."), secret="s"
        )
        self.image = MetadataImage.EMPTY
        self.quorum = _FakeQuorum()
        self.is_active = True
        self.written: list[object] = []


def test_a_second_change_is_refused_while_one_runs() -> None:
    from flux.controller.quorum_changes import QuorumChanges

    async def test() -> None:
        changes = QuorumChanges(_FakeService())  # type: ignore[arg-type]
        body = {"node_id": 2, "raft_address": "x:1", "http_address": "x:2"}
        async with changes._lock:  # a change in progress
            answer = await changes.add(None, body)  # type: ignore[arg-type]
        assert answer["error_code"] == ErrorCode.REQUEST_TIMED_OUT
        assert "in progress" in answer["error_message"]
        # Without one, the same request is judged on its merits (id 2 has other addresses).
        answer = await changes.add(None, body)  # type: ignore[arg-type]
        assert answer["error_code"] == ErrorCode.DUPLICATE_VOTER
        assert [v["node_id"] for v in answer["voters"]] == [1, 2, 3]
        assert changes.describe()["voters_source"] == "config"

    asyncio.run(test())


def test_bad_fields_are_refused_before_anything_runs() -> None:
    from flux.controller.quorum_changes import QuorumChanges

    async def test() -> None:
        changes = QuorumChanges(_FakeService())  # type: ignore[arg-type]
        answer = await changes.add(None, {"node_id": "4", "raft_address": "x:1"})  # type: ignore[arg-type]
        assert answer["error_code"] == ErrorCode.INVALID_REQUEST
        assert "'node_id' must be an integer" in answer["error_message"]

    asyncio.run(test())
