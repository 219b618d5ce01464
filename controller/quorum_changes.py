"""The active controller's side of controller quorum changes (``fluxctl controller add|remove``).

``QuorumChanges`` belongs to one ``ControllerService``. It serves ``POST
/controller/quorum/voters`` (add ``{node_id, raft_address, http_address}``) and ``DELETE
/controller/quorum/voters/{id}`` on the active controller, one change at a time, and
reconciles the Raft membership with the recorded voters in the background. The decisions are
pure (``flux.controller.membership``, where the design is described); this module does the
I/O around them:

1. Read this leader's Raft view (members, connected members) and plan the change; refuse
   while another change is in progress (the lock is held, or the record and the Raft
   membership differ and the request neither retries nor cancels that change).
2. Adding: ask the new controller's ``GET /controller/status`` (it must run, with that id and
   Raft address, started with every current member in its voters) and connect to its Raft
   port. Nothing is changed for a controller that does not answer.
3. Commit the ``QuorumVoters`` record (the intent: every controller and broker learns the
   new voter set from the metadata log), then make the Raft change and, for an addition,
   wait until the new voter caught up.
4. Removing the active controller itself: hand Raft leadership to a caught-up voter and
   answer "not the controller" with the new leader as hint; the caller retries there.

Thread model: everything runs on the controller's event loop; one ``asyncio.Lock`` owns
membership changes (the reconciler takes it too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web
from flux.protocol.errors import ErrorCode

from . import membership
from .errors import NotControllerError, ProposalTimeoutError, QuorumError
from .handlers import ControllerResult
from .liveness import connect
from .membership import MembershipPlan, MembershipRefused, VoterAddress
from .records import QuorumVoters

if TYPE_CHECKING:
    from .service import ControllerService

__all__ = ["QuorumChanges"]

log = logging.getLogger("flux.controller.quorum_changes")

#: Committing a Raft membership change, and a new voter catching up with the log.
MEMBERSHIP_TIMEOUT_S = 30.0
#: Handing leadership over before the active controller is removed.
TRANSFER_TIMEOUT_S = 10.0
#: How often the active controller checks that the Raft membership matches the record.
RECONCILE_INTERVAL_S = 1.0
#: Asking a new controller for its status, and connecting to its Raft port.
PROBE_TIMEOUT_S = 2.0


class QuorumChanges:
    """Voter changes of one controller (see the module docstring)."""

    def __init__(self, service: ControllerService) -> None:
        self._service = service
        self._lock = asyncio.Lock()

    # -- the voter set ------------------------------------------------------------------------

    def voters(self) -> tuple[VoterAddress, ...]:
        """Flux's view of the voters: the last ``QuorumVoters`` record, or (before any change)
        the voters of this controller's config file."""
        recorded = self._service.image.quorum_voters
        if recorded:
            return membership.voters_from_record(recorded)
        return tuple(sorted(self._service.settings.voters))

    def known_voters(self) -> dict[str, VoterAddress]:
        """Every voter this controller knows of, by Raft address: its config's, overridden by
        the recorded ones (a leader may be a voter added after this config was written)."""
        known = {voter.raft_address: voter for voter in self._service.settings.voters}
        known.update((voter.raft_address, voter) for voter in self.voters())
        return known

    def describe(self) -> dict[str, Any]:
        """For ``GET /controller/status``: the voters and where this view comes from."""
        return {
            "voters": [voter.to_dict() for voter in self.voters()],
            "voters_source": "metadata" if self._service.image.quorum_voters else "config",
            "change_in_progress": self._lock.locked() or self._pending() != ((), ()),
        }

    def _pending(self) -> tuple[tuple[VoterAddress, ...], tuple[str, ...]]:
        if not self._service.image.quorum_voters:
            return (), ()
        return membership.pending_change(self.voters(), self._service.quorum.members)

    # -- HTTP handlers (wrapped by ControllerService._json) -----------------------------------

    async def add(self, request: web.Request, body: dict[str, Any]) -> dict[str, Any]:
        try:
            voter = VoterAddress(
                _field(body, "node_id", int),
                _field(body, "raft_address", str),
                _field(body, "http_address", str),
            )
        except MembershipRefused as error:
            return self._refused(error)
        return await self._change(
            lambda voters, members, reachable: membership.plan_add(
                voters, members, voter, reachable=reachable
            ),
            candidate=voter,
        )

    async def remove(self, request: web.Request, body: dict[str, Any]) -> dict[str, Any]:
        try:
            node_id = int(request.match_info["id"])
        except ValueError:
            return self._refused(
                MembershipRefused(
                    ErrorCode.INVALID_REQUEST,
                    f"a controller id is an integer, got {request.match_info['id']!r}",
                )
            )
        active_id = self._service.settings.node_id
        return await self._change(
            lambda voters, members, reachable: membership.plan_remove(
                voters, members, node_id, active_id=active_id, reachable=reachable
            ),
            candidate=None,
        )

    async def _change(
        self,
        plan_change: Callable[[tuple[VoterAddress, ...], frozenset[str], frozenset[str]], Any],
        *,
        candidate: VoterAddress | None,
    ) -> dict[str, Any]:
        service = self._service
        if not service.is_active:
            raise NotControllerError(None)
        if self._lock.locked():
            return self._refused(
                MembershipRefused(
                    ErrorCode.REQUEST_TIMED_OUT,
                    "another change of the controller quorum is in progress; retry once it "
                    "completes",
                )
            )
        async with self._lock:
            try:
                view = await service.quorum.raft_view()
                plan: MembershipPlan = plan_change(
                    self.voters(), frozenset(view["members"]), frozenset(view["connected"])
                )
                if plan.transfer_leadership:
                    await self._hand_over_leadership()
                if candidate is not None and candidate.raft_address not in view["members"]:
                    if candidate in plan.voters:
                        await self._check_candidate(candidate, frozenset(view["members"]))
                if plan.record_needed:
                    await self._record(plan.voters)
                await self._reconcile()
            except MembershipRefused as error:
                return self._refused(error)
            except (NotControllerError, ProposalTimeoutError):
                raise
            except QuorumError as error:
                return self._refused(MembershipRefused(ErrorCode.UNKNOWN_SERVER_ERROR, str(error)))
        return {"error_code": 0, "error_message": None, **self._answer()}

    def _answer(self) -> dict[str, Any]:
        return {
            "voters": [voter.to_dict() for voter in self.voters()],
            "members": sorted(self._service.quorum.members),
        }

    def _refused(self, error: MembershipRefused) -> dict[str, Any]:
        log.warning("controller quorum change refused: %s", error.message)
        answer: dict[str, Any] = {"error_code": int(error.code), "error_message": error.message}
        with contextlib.suppress(AssertionError):  # before start: no quorum to describe
            answer.update(self._answer())
        return answer

    # -- steps --------------------------------------------------------------------------------

    async def _record(self, voters: tuple[VoterAddress, ...]) -> None:
        record = QuorumVoters(voters=membership.voters_to_record(voters))
        await self._service._write(
            lambda image: ControllerResult(
                records=[record], response={"error_code": 0, "error_message": None}
            )
        )
        log.info("controller quorum voters recorded: %s", ", ".join(map(_describe, voters)))

    async def _reconcile(self) -> None:
        """Under the lock: make the Raft membership match the recorded voters, one voter at a
        time (there is at most one difference, unless the Raft layer failed midway)."""
        quorum = self._service.quorum
        if not self._service.image.quorum_voters:
            return
        to_add, to_remove = membership.pending_change(self.voters(), quorum.members)
        if to_add:
            voter = to_add[0]
            await self._check_candidate(voter, quorum.members)
            log.info("adding controller %s to the Raft quorum", _describe(voter))
            await quorum.add_voter(voter.raft_address, timeout_s=MEMBERSHIP_TIMEOUT_S)
        elif to_remove:
            address = to_remove[0]
            if address == quorum.self_address:
                await self._hand_over_leadership()
            log.info("removing Raft voter %s", address)
            await quorum.remove_voter(address, timeout_s=MEMBERSHIP_TIMEOUT_S)
        else:
            return
        if membership.pending_change(self.voters(), quorum.members) != ((), ()):
            await self._reconcile()

    async def _hand_over_leadership(self) -> None:
        """Hand Raft leadership to another voter and raise ``NotControllerError`` (the caller
        is answered with the new leader as hint)."""
        node_id = self._service.settings.node_id
        log.info("controller %d hands over leadership before it is removed", node_id)
        address = await self._service.quorum.transfer_leadership(timeout_s=TRANSFER_TIMEOUT_S)
        if address is None:
            raise MembershipRefused(
                ErrorCode.REQUEST_TIMED_OUT,
                f"controller {node_id} is the active controller and could not hand leadership "
                f"to another voter within {TRANSFER_TIMEOUT_S:.0f} s (none connected and caught "
                "up); retry",
            )
        raise NotControllerError(address)

    async def _check_candidate(self, voter: VoterAddress, members: frozenset[str]) -> None:
        status = await self._controller_status(voter.http_address)
        membership.check_candidate(voter, status, members)
        host, port = membership.parse_address(voter.raft_address, "the Raft address")
        if await connect(host, port, PROBE_TIMEOUT_S) != "accepted":
            raise MembershipRefused(
                ErrorCode.INVALID_REQUEST,
                f"controller {voter.node_id} answers over HTTP but its Raft port "
                f"{voter.raft_address} does not accept connections from controller "
                f"{self._service.settings.node_id}",
            )

    async def _controller_status(self, http_address: str) -> dict[str, Any] | None:
        internal = self._service.settings.internal
        path = "/controller/status"
        url = internal.url(http_address, path) if internal is not None else None
        try:
            async with (
                aiohttp.ClientSession() as session,
                session.get(
                    url or f"http://{http_address}{path}",
                    ssl=internal.ssl if internal is not None else True,
                    timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S),
                ) as response,
            ):
                if response.status != 200:
                    return None
                answer = await response.json(content_type=None)
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError):
            return None
        return answer if isinstance(answer, dict) else None

    # -- background ---------------------------------------------------------------------------

    async def reconcile_forever(self) -> None:
        """On the active controller: finish a change whose previous active controller failed
        between the record and the Raft change (or whose new voter was not up yet)."""
        while True:
            await asyncio.sleep(RECONCILE_INTERVAL_S)
            if not self._service.is_active or self._lock.locked():
                continue
            if self._pending() == ((), ()):
                continue
            try:
                async with self._lock:
                    await self._reconcile()
            except (MembershipRefused, QuorumError) as error:
                log.warning("controller quorum change not completed yet: %s", error)
            except Exception:
                log.exception("controller quorum reconciliation failed")


def _field(body: dict[str, Any], key: str, kind: type) -> Any:
    value = body.get(key)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise MembershipRefused(
            ErrorCode.INVALID_REQUEST,
            f"field {key!r} must be {'an integer' if kind is int else 'a string'}, got {value!r}",
        )
    return value


def _describe(voter: VoterAddress) -> str:
    return f"{voter.node_id}@{voter.raft_address} (HTTP {voter.http_address})"
