"""Changes of the controller quorum's voters, one voter at a time: the pure decisions.

Where the voter set lives (the decision, also in ``docs/operations.md``):

- **Raft membership** -- which Raft addresses vote and count for a majority -- is pysyncobj's:
  membership entries in its log (journal) and the member list in its snapshot. A restarted
  controller starts from the voters of its config file and replays its log, so it ends up
  with the membership as changed, whatever its config file still says.
- **Flux's view** -- which node id and controller HTTP address go with each Raft address, used
  for leader hints, ``leader_id()`` and by brokers to find the controllers -- is the
  ``QuorumVoters`` record in the metadata log (``MetadataImage.quorum_voters``). Every
  controller and every broker follows the metadata log, so all of them learn a change, and it
  survives restarts like any other metadata. Until the first change the image holds no voters
  and the voters of the config files apply.

A change commits the ``QuorumVoters`` record first (the intent), then the Raft membership
change (``MetadataQuorum.add_voter`` / ``remove_voter``). If the active controller fails in
between, the next one sees the intent differ from the Raft membership and finishes the change
(``ControllerService`` reconciles), adding a voter only once it answers. While the two differ a
change is in progress, and no other change is accepted: only a retry of the pending change, or
the one that cancels it (its target equals the Raft membership).

The active controller cannot remove itself from pysyncobj's membership; removing it first
hands Raft leadership to a caught-up voter, and the request is then retried on the new active
controller (``MembershipPlan.transfer_leadership``).

Pure functions of literal inputs; thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass

from flux.protocol.errors import ErrorCode

__all__ = [
    "MAX_NODE_ID",
    "MAX_VOTERS",
    "MembershipPlan",
    "MembershipRefused",
    "VoterAddress",
    "check_candidate",
    "majority",
    "parse_address",
    "pending_change",
    "plan_add",
    "plan_remove",
    "voters_from_record",
    "voters_to_record",
]

#: A quorum larger than this buys nothing but slower commits (Kafka and etcd advise 3 or 5).
MAX_VOTERS = 9
MAX_NODE_ID = 2**31 - 1
MAX_HOST_LENGTH = 253


@dataclass(frozen=True, order=True)
class VoterAddress:
    """One controller quorum voter: its node id, Raft address and controller HTTP address
    (both ``host:port``)."""

    node_id: int
    raft_address: str
    http_address: str

    def to_dict(self) -> dict[str, object]:
        return {
            "node_id": self.node_id,
            "raft_address": self.raft_address,
            "http_address": self.http_address,
        }


class MembershipRefused(Exception):
    """A membership change that is not made: the Kafka error code and why (for the caller)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class MembershipPlan:
    """What to do for a requested change.

    ``voters`` is the voter set once it is done. ``record_needed``: commit ``voters`` as a
    ``QuorumVoters`` record first (False when the record already says so: a retry, or nothing
    to do). ``transfer_leadership``: the active controller itself is to be removed, so it hands
    leadership over and the request is retried on the next active controller; nothing else
    changes here."""

    voters: tuple[VoterAddress, ...]
    record_needed: bool
    transfer_leadership: bool = False


def majority(voter_count: int) -> int:
    """Votes needed to elect or commit among ``voter_count`` voters."""
    return voter_count // 2 + 1


def parse_address(text: object, what: str) -> tuple[str, int]:
    """``host:port`` (an IPv6 host in brackets); raise ``MembershipRefused`` naming ``what``."""
    if not isinstance(text, str):
        raise MembershipRefused(
            ErrorCode.INVALID_REQUEST, f"{what} must be host:port, got {text!r}"
        )
    host, sep, port_text = text.rpartition(":")
    host_name = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    valid_port = port_text.isdigit() and 0 < int(port_text) < 65536
    if (
        not sep
        or not host_name
        or len(host_name) > MAX_HOST_LENGTH
        or not valid_port
        or any(c.isspace() or c in "/@" for c in host)
    ):
        raise MembershipRefused(
            ErrorCode.INVALID_REQUEST,
            f"{what} must be host:port with a port from 1 to 65535, got {text!r}",
        )
    return host_name, int(port_text)


def voters_from_record(voters: Iterable[tuple[int, str, str]]) -> tuple[VoterAddress, ...]:
    return tuple(sorted(VoterAddress(*voter) for voter in voters))


def voters_to_record(voters: Iterable[VoterAddress]) -> tuple[tuple[int, str, str], ...]:
    return tuple((v.node_id, v.raft_address, v.http_address) for v in sorted(voters))


def pending_change(
    voters: Iterable[VoterAddress], members: Set[str]
) -> tuple[tuple[VoterAddress, ...], tuple[str, ...]]:
    """What the Raft membership (``members``, Raft addresses) lacks to match the recorded
    ``voters``: ``(voters to add, Raft addresses to remove)``; both empty when they match."""
    voters = tuple(voters)
    wanted = {voter.raft_address for voter in voters}
    to_add = tuple(sorted(v for v in voters if v.raft_address not in members))
    to_remove = tuple(sorted(address for address in members if address not in wanted))
    return to_add, to_remove


def plan_add(
    voters: tuple[VoterAddress, ...],
    members: Set[str],
    new: VoterAddress,
    *,
    reachable: Set[str],
) -> MembershipPlan:
    """Plan adding ``new`` to ``voters`` (the recorded set; ``members`` is the Raft membership,
    ``reachable`` the members the active controller is connected to, itself included). The new
    controller's own answer is checked by the caller (``check_candidate``)."""
    _check_node_id(new.node_id)
    parse_address(new.raft_address, "the Raft address")
    parse_address(new.http_address, "the HTTP address")
    existing = next((v for v in voters if v.node_id == new.node_id), None)
    if existing is not None and existing != new:
        raise MembershipRefused(
            ErrorCode.DUPLICATE_VOTER,
            f"controller {new.node_id} is already a voter, at Raft {existing.raft_address} and "
            f"HTTP {existing.http_address}",
        )
    for voter in voters:
        if voter.node_id != new.node_id and new.raft_address == voter.raft_address:
            raise MembershipRefused(
                ErrorCode.DUPLICATE_VOTER,
                f"Raft address {new.raft_address} belongs to voter {voter.node_id}",
            )
        if voter.node_id != new.node_id and new.http_address == voter.http_address:
            raise MembershipRefused(
                ErrorCode.DUPLICATE_VOTER,
                f"HTTP address {new.http_address} belongs to voter {voter.node_id}",
            )
    target = tuple(sorted({*voters, new}))
    if len(target) > MAX_VOTERS:
        raise MembershipRefused(
            ErrorCode.INVALID_REQUEST, f"a quorum has at most {MAX_VOTERS} voters"
        )
    plan = _in_progress_plan(voters, members, target)
    if plan is not None:
        return plan
    if target == voters:
        return MembershipPlan(voters, record_needed=False)
    # The new voter counts once it has caught up; until then the others must make a majority
    # of the larger quorum with it (it was probed by the caller).
    reachable_after = len(reachable & members) + 1
    if reachable_after < majority(len(target)):
        raise MembershipRefused(
            ErrorCode.INVALID_REQUEST,
            f"adding controller {new.node_id} would leave {len(target)} voters of which only "
            f"{reachable_after} are reachable: a majority needs {majority(len(target))}",
        )
    return MembershipPlan(target, record_needed=True)


def plan_remove(
    voters: tuple[VoterAddress, ...],
    members: Set[str],
    node_id: int,
    *,
    active_id: int | None,
    reachable: Set[str],
) -> MembershipPlan:
    """Plan removing voter ``node_id`` (arguments as for ``plan_add``; ``active_id`` is the
    controller deciding, the Raft leader)."""
    _check_node_id(node_id)
    target = tuple(v for v in voters if v.node_id != node_id)
    plan = _in_progress_plan(voters, members, target)
    if plan is not None:
        return plan
    if target == voters:
        raise MembershipRefused(
            ErrorCode.VOTER_NOT_FOUND,
            f"controller {node_id} is not a voter (voters: {_ids(voters)})",
        )
    if not target:
        raise MembershipRefused(
            ErrorCode.INVALID_REQUEST,
            f"controller {node_id} is the last voter: a quorum needs at least one",
        )
    if node_id == active_id:
        return MembershipPlan(voters, record_needed=False, transfer_leadership=True)
    removed = next(v for v in voters if v.node_id == node_id)
    reachable_after = len((reachable & members) - {removed.raft_address})
    if reachable_after < majority(len(target)):
        raise MembershipRefused(
            ErrorCode.INVALID_REQUEST,
            f"removing controller {node_id} would leave {len(target)} voters of which only "
            f"{reachable_after} are reachable: a majority needs {majority(len(target))}",
        )
    return MembershipPlan(target, record_needed=True)


def check_candidate(
    new: VoterAddress, status: Mapping[str, object] | None, members: Set[str]
) -> None:
    """Refuse to add ``new`` unless its ``GET /controller/status`` answer (``status``; None if
    it did not answer) shows the controller runs with that id and Raft address and was started
    with every current member (``members``) among its voters: pysyncobj would accept any
    address, and a voter that never answers raises the majority while adding nothing."""
    where = f"http://{new.http_address}/controller/status"
    if status is None:
        raise MembershipRefused(
            ErrorCode.INVALID_REQUEST,
            f"controller {new.node_id} does not answer at {where}: start it first, with every "
            "current voter and itself in controller.voters",
        )
    if status.get("node_id") != new.node_id:
        raise MembershipRefused(
            ErrorCode.INVALID_VOTER_KEY,
            f"the controller at {new.http_address} is node {status.get('node_id')!r}, "
            f"not {new.node_id}",
        )
    raft = status.get("raft")
    raft = raft if isinstance(raft, Mapping) else {}
    if raft.get("self_address") != new.raft_address:
        raise MembershipRefused(
            ErrorCode.INVALID_VOTER_KEY,
            f"controller {new.node_id} runs Raft on {raft.get('self_address')!r}, "
            f"not {new.raft_address}",
        )
    its_members = raft.get("members")
    known = set(its_members) if isinstance(its_members, list) else set()
    missing = sorted(set(members) - known)
    if missing:
        raise MembershipRefused(
            ErrorCode.INCONSISTENT_VOTER_SET,
            f"controller {new.node_id} was not started with the full voter list (it lacks "
            f"{', '.join(missing)}): restart it with every current voter and itself in "
            "controller.voters",
        )


def _in_progress_plan(
    voters: tuple[VoterAddress, ...], members: Set[str], target: tuple[VoterAddress, ...]
) -> MembershipPlan | None:
    """While the record and the Raft membership differ, only the pending change (a retry) or
    its cancellation is accepted; None when they agree (plan normally)."""
    to_add, to_remove = pending_change(voters, members)
    if not to_add and not to_remove:
        return None
    if target == voters:
        return MembershipPlan(voters, record_needed=False)
    if {voter.raft_address for voter in target} == set(members):
        return MembershipPlan(target, record_needed=True)
    pending = ", ".join(
        [f"adding controller {v.node_id}" for v in to_add]
        + [f"removing Raft member {address}" for address in to_remove]
    )
    raise MembershipRefused(
        ErrorCode.REQUEST_TIMED_OUT,
        f"another change of the controller quorum is in progress ({pending}); retry once it "
        "completes, or cancel it",
    )


def _check_node_id(node_id: object) -> None:
    if isinstance(node_id, bool) or not isinstance(node_id, int) or not 0 <= node_id <= MAX_NODE_ID:
        raise MembershipRefused(
            ErrorCode.INVALID_REQUEST,
            f"a controller id is an integer from 0 to {MAX_NODE_ID}, got {node_id!r}",
        )


def _ids(voters: Iterable[VoterAddress]) -> str:
    return ", ".join(str(v.node_id) for v in voters) or "none"
