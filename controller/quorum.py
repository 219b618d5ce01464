"""The Raft metadata quorum: pysyncobj behind a small interface of our own.

``MetadataQuorum`` orders and persists batches of metadata records; the state machine it
replicates is ``_MetadataStateMachine`` (the ``MetadataImage``, the applied request ids and
the version). Nothing else in Flux touches pysyncobj, so it stays replaceable.

Thread model. pysyncobj runs its own tick thread: it applies committed commands, calls
``onStateChanged`` and the per-command callbacks there. Everything that crosses from that
thread into asyncio goes through ``MetadataQuorum._to_loop`` (``loop.call_soon_threadsafe``)
and nowhere else; the ``_on_*`` methods it schedules run on the event loop, own the loop-side
state (latest image, pending proposals, leadership flag) and invoke the user callbacks. The
public properties and ``propose`` are meant to be used from the loop.

Guarantees and how they are kept (see ``/work/shared/notes/pysyncobj.md`` for the gaps):

- A proposal is one Raft command carrying all its records, applied atomically (version + 1).
  It carries a request id; the state machine remembers the last ``MAX_REMEMBERED_REQUESTS``
  ids and skips a duplicate, so a retry after a timeout cannot apply twice. Completion is
  observed through the state machine's own apply notifications (by request id), not only
  through pysyncobj's callback, which is lost sometimes after log compaction.
- ``is_leader`` becomes true only after this node committed a barrier in its own term, so a
  new leader never computes records from an image that lags the log. The barrier carries the
  ``ControllerActivated`` record: from then on brokers count as alive only once this leader
  hears from them (see ``election.py``).
- The loop side keeps the records of the last ``MAX_DELTA_VERSIONS`` applied commands
  (``records_since``), so followers of the metadata get the records since the version they
  hold, not the whole image (Kafka's metadata log); after a snapshot load it starts over.
- Journal and snapshot live in ``data_dir``. Before pysyncobj opens them they are checked
  (``flux.controller.raft_files``: framing, indexes, terms, and a CRC-32 that every metadata
  command carries); damaged ones are moved aside (``<name>.corrupt-<UTC time>``, logged at
  ERROR) and the node starts as an empty member that resyncs from its peers, never with
  silently partial state. Until it has applied a recovery marker it proposed after the restart
  it *abstains* (``_FluxSyncObj``: grants no vote, never campaigns), because a voter that
  lost entries it acknowledged could otherwise elect a leader without them. It refuses to
  start when that cannot be made safe (lost term and vote, or no peers); the reasoning is in
  ``raft_files``.
- Membership is dynamic (pysyncobj's ``dynamicMembershipChange``): ``add_voter`` and
  ``remove_voter`` change it one voter at a time, and the membership lives in pysyncobj's log
  and snapshot, so a restarted controller replays it over the voters of its config file. What
  Flux decides about a change (validation, the ``QuorumVoters`` record, one change at a time)
  is in ``flux.controller.membership`` and ``ControllerService``.
- Calls that read or drive pysyncobj's internal state (the membership, match indexes, a
  leadership transfer) run on its tick thread: queued by ``_in_raft_thread`` and run by the
  tick callback, their results sent back through ``_to_loop``. The tick callback also keeps
  ``members`` (the Raft addresses of the current members) for the loop to read.
- A node campaigns only while it has held a connection to another member for
  ``CAMPAIGN_AFTER_CONNECTED_S`` (``_hold_elections_in_raft_thread``). A controller started to
  join the quorum is connected to a member only for the instant between the transport's key
  exchange and the member dropping its unknown address; pysyncobj may start an election in
  that instant (it campaigns whenever connected to anyone and without a leader), the joiner's
  term runs ahead, and once added it deposes the leader: an election for nothing, measured in
  ``tests/unit/test_quorum_membership.py``.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import itertools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from flux.controller import raft_files
from flux.controller.errors import (
    InvalidRecordError,
    NotControllerError,
    ProposalTimeoutError,
    QuorumClosedError,
    QuorumError,
    RaftRecoveryRefusedError,
)
from flux.controller.image import MetadataImage
from flux.controller.raft_files import DUMP_NAME, JOURNAL_NAME, command_checksum
from flux.controller.records import ControllerActivated, Record, record_from_dict, record_to_dict
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated
from pysyncobj.syncobj import _RAFT_STATE

__all__ = [
    "MAX_RECORDS_PER_PROPOSAL",
    "MAX_REMEMBERED_REQUESTS",
    "MetadataQuorum",
    "NotControllerError",
    "ProposalTimeoutError",
    "QuorumClosedError",
    "RaftRecoveryRefusedError",
    "raft_settings",
]

_log = logging.getLogger(__name__)

MAX_REMEMBERED_REQUESTS = 10_000
MAX_RECORDS_PER_PROPOSAL = 100_000
#: The largest Raft message pysyncobj may send in one piece (see ``raft_settings``): entries
#: are never split below it, and a follower far behind gets its entries in batches of this size.
RAFT_MESSAGE_BYTES_MAX = 64 * 1024 * 1024
MAX_REQUEST_ID_LENGTH = 200
MAX_PENDING_PROPOSALS = 10_000
#: Calls waiting to run on pysyncobj's tick thread (``_in_raft_thread``).
MAX_RAFT_THREAD_CALLS = 1000
RAFT_THREAD_CALL_TIMEOUT_S = 5.0
#: A member campaigns only once one of its connections to another member is this old.
CAMPAIGN_AFTER_CONNECTED_S = 0.3
#: Applied commands whose records are kept for metadata followers (``records_since``); one
#: further behind gets the whole image.
MAX_DELTA_VERSIONS = 10_000
#: ... and at most this many records in all (a topic of 10,000 partitions is one record).
MAX_DELTA_RECORDS = 200_000
#: A controller resyncing a log it lost proposes its recovery marker this often until it has
#: applied it (a proposal without a leader fails at once: ``commandsWaitLeader=False``).
RECOVERY_MARKER_RETRY_S = 1.0
_BARRIER_PREFIX = "leader-barrier:"
_RECOVERY_PREFIX = "raft-recovery:"
_RESERVED_PREFIXES = (_BARRIER_PREFIX, _RECOVERY_PREFIX)


def raft_settings(
    *,
    secret: str,
    journal_file: str,
    dump_file: str,
    on_state_changed: Callable[[int, int], None],
    log_compaction_min_entries: int,
    single_node: bool = False,
    election_timeout_s: tuple[float, float] = (0.4, 1.0),
    bind_address: str | None = None,
) -> SyncObjConf:
    """pysyncobj settings for the metadata quorum (see the notes on pysyncobj for why)."""
    return SyncObjConf(
        password=secret,
        # Where the Raft port binds when it differs from the address peers use (a container
        # binds 0.0.0.0 and is reached as flux1); None binds the self address.
        bindAddress=bind_address,
        journalFile=journal_file,
        fullDumpFile=dump_file,
        # ~1,000 synchronous commits/s instead of ~10/s with batching.
        appendEntriesUseBatch=False,
        # Never split one entry over several messages: pysyncobj 0.3.17 marks the last part
        # by the command's length instead of the pickled entry's (longer: protocol 2 pickles
        # bytes as UTF-8 text), so for about one large entry in six a follower unpickles an
        # incomplete entry and fails that tick (an error logged, the rest of the tick's work
        # dropped) until the next part completes it. Seen at 10,000 partitions, where one
        # broker's departure is a 3,334-record command. Entries larger than this would still
        # be split; proposals stay far below.
        appendEntriesBatchSizeBytes=RAFT_MESSAGE_BYTES_MAX,
        appendEntriesPeriod=0.1,
        # Voters are added and removed at run time (``MetadataQuorum.add_voter``); the
        # membership then lives in the log and the snapshot, not in the config file.
        dynamicMembershipChange=True,
        # Fail a proposal at once while there is no leader instead of queueing it.
        commandsWaitLeader=False,
        # Election timeouts: a dead leader is replaced in ~1 s (measured in test_quorum).
        raftMinTimeout=election_timeout_s[0],
        raftMaxTimeout=election_timeout_s[1],
        connectionTimeout=3.5,
        connectionRetryTime=1.0,
        # A leader cut off from the majority steps down after 2 s, not the default 30 s.
        leaderFallbackTimeout=2.0,
        logCompactionMinEntries=log_compaction_min_entries,
        logCompactionMinTime=300,
        # Snapshot in the tick thread rather than fork() a process that runs asyncio and other
        # threads; the metadata image is small.
        useFork=False,
        onStateChanged=on_state_changed,
        # Alone, a node commits an entry one tick after appending it (no follower reply wakes
        # the tick thread), so a short tick keeps a proposal at ~10 ms instead of ~50 ms.
        autoTickPeriod=0.01 if single_node else 0.05,
    )


class _MetadataStateMachine(SyncObjConsumer):
    """The replicated state: ``image``, ``applied`` (request id -> version, or -1 if the
    command was rejected) and, through ``image.version``, the number of applied commands.

    Runs on pysyncobj's tick thread only (``apply_records`` and ``_deserialize``); the loop
    may read ``image`` (one reference read) and test membership in ``applied``.
    Attributes set before ``SyncObjConsumer.__init__`` are not replicated (pysyncobj snapshots
    only the attributes added after it).
    """

    def __init__(
        self,
        notify: Callable[[MetadataImage, str | None, bool, list[dict[str, Any]]], None],
    ) -> None:
        self._notify = notify
        super().__init__()
        self.image: MetadataImage = MetadataImage.EMPTY
        self.applied: dict[str, int] = {}

    @replicated
    def apply_records(
        self, record_dicts: list[dict[str, Any]], request_id: str, checksum: int | None = None
    ) -> MetadataImage:
        """Apply one metadata command. ``checksum`` (``command_checksum`` of the records and
        request id) is not needed here: it protects the command in the journal, where
        ``raft_files`` checks it at every start (commands from peers arrive authenticated)."""
        if request_id in self.applied:
            _log.debug("request %s was already applied", request_id)
            return self.image
        try:
            records = [record_from_dict(d) for d in record_dicts]
            self.image = self.image.replay_all(records, self.image.version + 1)
            self.applied[request_id] = self.image.version
            accepted = True
        except Exception:
            # Deterministic on every replica: the same command fails the same way everywhere.
            _log.exception("rejected metadata command %s", request_id)
            self.applied[request_id] = -1
            accepted = False
        while len(self.applied) > MAX_REMEMBERED_REQUESTS:
            del self.applied[next(iter(self.applied))]
        self._notify(self.image, request_id, accepted, record_dicts if accepted else [])
        return self.image

    def _deserialize(self, data: Mapping[str, Any]) -> None:
        super()._deserialize(data)
        _log.info("metadata state restored from a snapshot at version %d", self.image.version)
        self._notify(self.image, None, True, [])


class _FluxSyncObj(SyncObj):
    """pysyncobj's ``SyncObj`` that can *abstain*: while ``abstaining`` it grants no vote,
    ignores a leader's request to take over (``timeout_now``) and never campaigns; it still
    stores and acknowledges the entries a leader sends, and forwards commands. A controller
    resyncing a log it lost abstains (``flux.controller.raft_files`` says why).

    The two overrides replace pysyncobj's private ``__onMessageReceived`` (the transport's
    callback, bound in ``SyncObj.__init__``) and ``__connectedToAnyone`` (the only test in
    front of an election) by their mangled names. ``abstaining`` is set before
    ``SyncObj.__init__`` starts the tick thread, so pysyncobj counts it among its own
    attributes and never puts it into a snapshot; after that only the tick thread writes it.
    """

    _ABSTAIN_FROM = frozenset({"request_vote", "timeout_now"})

    def __init__(
        self,
        self_address: str,
        peers: list[str],
        conf: SyncObjConf,
        consumers: list[SyncObjConsumer],
        *,
        abstaining: bool,
    ) -> None:
        self.abstaining = abstaining
        super().__init__(self_address, peers, conf, consumers)

    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:
        if (
            self.abstaining
            and isinstance(message, dict)
            and message.get("type") in self._ABSTAIN_FROM
        ):
            return
        SyncObj._SyncObj__onMessageReceived(self, node, message)

    def _SyncObj__connectedToAnyone(self) -> bool:
        if self.abstaining:
            return False
        connected: bool = SyncObj._SyncObj__connectedToAnyone(self)
        return connected


class _Recovery:
    """A controller resyncing a log it lost (tick thread only): the request id of its
    recovery marker and when to propose it next."""

    def __init__(self, marker_request_id: str) -> None:
        self.marker_request_id = marker_request_id
        self.next_proposal = 0.0
        self.started = time.monotonic()


class MetadataQuorum:
    """pysyncobj behind our own interface. Thread model: pysyncobj runs its own thread; results
    cross into asyncio ONLY through ``loop.call_soon_threadsafe`` in one named method
    (``_to_loop``). ``on_image`` and ``on_leadership`` are invoked on the loop."""

    def __init__(
        self,
        *,
        node_id: int,
        self_address: str,
        peer_addresses: Sequence[str],
        data_dir: Path,
        secret: str,
        loop: asyncio.AbstractEventLoop,
        on_image: Callable[[MetadataImage], None] | None = None,
        on_leadership: Callable[[bool], None] | None = None,
        log_compaction_min_entries: int = 1000,
        election_timeout_s: tuple[float, float] = (0.4, 1.0),
        bind_address: str | None = None,
        max_delta_versions: int = MAX_DELTA_VERSIONS,
    ) -> None:
        if not secret:
            raise ValueError("the Raft secret must not be empty: peers exchange pickled messages")
        self.node_id = node_id
        self.self_address = self_address
        self.peer_addresses = tuple(a for a in peer_addresses if a != self_address)
        self._loop = loop
        self._on_image_callback = on_image
        self._on_leadership_callback = on_leadership
        # Loop-side state, touched only on the loop.
        self._image = MetadataImage.EMPTY
        self._leader_ready = False
        self._pending: dict[str, asyncio.Future[MetadataImage]] = {}
        self._closed = False
        # (version, record dicts) of the last applied commands, oldest first, contiguous; the
        # image at ``_delta_base`` is where they start (loop side only).
        self._deltas: collections.deque[tuple[int, list[dict[str, Any]]]] = collections.deque()
        self._delta_base = 0
        self._delta_records = 0
        self._max_delta_versions = max_delta_versions
        # Written by the tick thread only (one reference assignment), read by the loop.
        self._members: frozenset[str] = frozenset({self_address, *self.peer_addresses})
        self._raft_calls: collections.deque[Callable[[], None]] = collections.deque()
        self._election_timeout_s = election_timeout_s
        #: Raft address -> time.monotonic() since when it is connected (tick thread only).
        self._connected_since: dict[str, float] = {}

        data_dir = Path(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        self._data_dir = data_dir
        self._journal_file = data_dir / JOURNAL_NAME
        self._dump_file = data_dir / DUMP_NAME
        #: Set while this node resyncs a log it lost (tick thread only after start).
        self._recovery: _Recovery | None = self._check_raft_files()
        #: What ``status`` reports about it (loop side).
        self._recovery_status: dict[str, Any] | None = (
            None if self._recovery is None else raft_files.read_recovery_state(data_dir)
        )

        self._machine = _MetadataStateMachine(self._on_applied_in_raft_thread)
        conf = raft_settings(
            secret=secret,
            journal_file=str(self._journal_file),
            dump_file=str(self._dump_file),
            on_state_changed=self._on_state_changed_in_raft_thread,
            log_compaction_min_entries=log_compaction_min_entries,
            single_node=not self.peer_addresses,
            election_timeout_s=election_timeout_s,
            bind_address=bind_address,
        )
        self._sync = _FluxSyncObj(
            self_address,
            list(self.peer_addresses),
            conf,
            [self._machine],
            abstaining=self._recovery is not None,
        )
        # The journal check expects every metadata command to call method 0 (raft_files).
        method_ids = [v for k, v in self._sync._methodToID.items() if k[0] == id(self._machine)]
        assert method_ids == [raft_files.APPLY_RECORDS_METHOD_ID], method_ids
        self._sync.addOnTickCallback(self._on_tick_in_raft_thread)

    def _check_raft_files(self) -> _Recovery | None:
        """Check the Raft files before pysyncobj opens them; set damaged ones aside. Returns
        the recovery to run, or None for a normal start; raises ``RaftRecoveryRefusedError``
        when starting would be unsafe (``raft_files``)."""
        plan = raft_files.inspect_raft_files(self._data_dir, has_peers=bool(self.peer_addresses))
        if plan.refusal is not None:
            _log.critical("controller %d refuses to start: %s", self.node_id, plan.refusal)
            raise RaftRecoveryRefusedError(plan.refusal)
        if not plan.resync:
            return None
        marker = f"{_RECOVERY_PREFIX}{self.node_id}:{time.time_ns()}"
        state = raft_files.set_aside(
            self._data_dir,
            plan,
            marker_request_id=marker,
            now=datetime.datetime.now(datetime.UTC),
        )
        if plan.damage:
            _log.error(
                "controller %d cannot load its Raft state in %s (%s); moved aside: %s. It "
                "starts as an empty member, resyncs the log from its peers and does not vote "
                "until it holds the log again.",
                self.node_id,
                self._data_dir,
                "; ".join(f"{d.name}: {d.problem}" for d in plan.damage),
                ", ".join(state.set_aside) or "nothing",
            )
        else:
            _log.warning(
                "controller %d resyncs its Raft log from its peers and does not vote until it "
                "holds it again: %s",
                self.node_id,
                "; ".join(state.reasons),
            )
        return _Recovery(marker)

    # -- the one boundary from pysyncobj's thread into asyncio ----------------------------

    def _to_loop(self, callback: Callable[..., None], *args: Any) -> None:
        """Schedule ``callback(*args)`` on the event loop (called from pysyncobj's thread)."""
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            # The loop is closed: nobody is left to tell.
            pass

    # -- pysyncobj thread side: only forward ------------------------------------------------

    def _on_applied_in_raft_thread(
        self,
        image: MetadataImage,
        request_id: str | None,
        accepted: bool,
        record_dicts: list[dict[str, Any]],
    ) -> None:
        sync = self._machine._syncObj
        snapshot_pending = getattr(sync, "_SyncObj__needLoadDumpFile", False)
        if request_id is not None and snapshot_pending and self._dump_file.exists():
            # pysyncobj applies journal entries before it loads the snapshot when its port is
            # not bound yet; loading the snapshot then replaces this state, so publishing these
            # intermediate images would only show brokers states that never existed.
            return
        self._to_loop(self._on_applied, image, request_id, accepted, record_dicts)

    def _on_tick_in_raft_thread(self) -> None:
        others = self._sync.otherNodes
        self._members = frozenset([self.self_address, *(node.address for node in others)])
        self._hold_elections_in_raft_thread(others)
        if self._recovery is not None:
            self._drive_recovery_in_raft_thread(self._recovery)
        while self._raft_calls:
            self._raft_calls.popleft()()

    def _drive_recovery_in_raft_thread(self, recovery: _Recovery) -> None:
        """Propose the recovery marker until it is applied here; then the log holds every
        entry this node had before it lost it, and it votes again (``raft_files``)."""
        marker = recovery.marker_request_id
        if marker in self._machine.applied:
            raft_files.finish_recovery(self._data_dir)
            self._recovery = None
            self._sync.abstaining = False
            elapsed_s = time.monotonic() - recovery.started
            _log.warning(
                "controller %d recovered its Raft log from its peers in %.1f s (up to index "
                "%d); it votes again",
                self.node_id,
                elapsed_s,
                self._sync.raftLastApplied,
            )
            self._to_loop(self._on_recovered)
            return
        now = time.monotonic()
        if now >= recovery.next_proposal:
            recovery.next_proposal = now + RECOVERY_MARKER_RETRY_S
            # An empty command: the state machine only remembers its request id. pysyncobj
            # forwards it to the leader; its outcome is read from ``applied``, not a callback.
            self._machine.apply_records([], marker, command_checksum([], marker))

    def _on_recovered(self) -> None:
        self._recovery_status = None

    def _hold_elections_in_raft_thread(self, others: set[Any]) -> None:
        """Push this node's election deadline past the next ticks while none of its
        connections to other members is ``CAMPAIGN_AFTER_CONNECTED_S`` old (module
        docstring). Runs every tick, after pysyncobj's election check, so a connection made
        during a tick cannot start an election on the next one. Members of a running quorum
        hold connections to each other for good, so a failover is not delayed; a cluster that
        starts elects its first leader that much later."""
        sync = self._sync
        now = time.monotonic()
        stable = False
        for node in others:
            if sync.isNodeConnected(node):
                since = self._connected_since.setdefault(node.address, now)
                stable = stable or now - since >= CAMPAIGN_AFTER_CONNECTED_S
            else:
                self._connected_since.pop(node.address, None)
        if stable or not others or sync._isLeader():
            return
        hold_until = now + self._election_timeout_s[0]
        if getattr(sync, "_SyncObj__raftElectionDeadline", hold_until) < hold_until:
            sync._SyncObj__raftElectionDeadline = hold_until

    def _on_state_changed_in_raft_thread(self, old_state: int, new_state: int) -> None:
        sync = self._machine._syncObj
        term = sync._getTerm() if sync is not None else -1
        if new_state == _RAFT_STATE.LEADER:
            # Leadership is announced once a no-op of this term has been applied: by then
            # the image holds every entry committed by earlier leaders.
            def on_barrier(result: Any, error: int) -> None:
                if error == FAIL_REASON.SUCCESS:
                    self._to_loop(self._on_leadership, True, term)

            barrier = [record_to_dict(ControllerActivated(node_id=self.node_id))]
            barrier_id = f"{_BARRIER_PREFIX}{self.node_id}:{term}"
            self._machine.apply_records(
                barrier, barrier_id, command_checksum(barrier, barrier_id), callback=on_barrier
            )
        elif old_state == _RAFT_STATE.LEADER:
            self._to_loop(self._on_leadership, False, term)

    # -- loop side ------------------------------------------------------------------------

    def _on_applied(
        self,
        image: MetadataImage,
        request_id: str | None,
        accepted: bool,
        record_dicts: list[dict[str, Any]],
    ) -> None:
        if image.version >= self._image.version or request_id is None:
            self._remember_delta(image, request_id, accepted, record_dicts)
            self._image = image
            if self._on_image_callback is not None:
                self._on_image_callback(image)
        future = self._pending.get(request_id) if request_id is not None else None
        if future is not None and not future.done():
            if accepted:
                future.set_result(image)
            else:
                future.set_exception(InvalidRecordError(f"request {request_id} was rejected"))

    def _remember_delta(
        self,
        image: MetadataImage,
        request_id: str | None,
        accepted: bool,
        record_dicts: list[dict[str, Any]],
    ) -> None:
        if not accepted or image.version == self._image.version:
            return
        if request_id is None or image.version != self._image.version + 1:
            # A snapshot was loaded (or versions jumped): deltas start over from here.
            self._deltas.clear()
            self._delta_base = image.version
            self._delta_records = 0
            return
        self._deltas.append((image.version, record_dicts))
        self._delta_records += len(record_dicts)
        while self._deltas and (
            len(self._deltas) > self._max_delta_versions or self._delta_records > MAX_DELTA_RECORDS
        ):
            version, dropped = self._deltas.popleft()
            self._delta_base = version
            self._delta_records -= len(dropped)

    def records_since(self, version: int) -> list[tuple[int, list[dict[str, Any]]]] | None:
        """The records of every command applied after ``version``, as ``(version, record
        dicts)`` in order; None when they are no longer kept (or ``version`` is not one this
        controller went through): the caller then needs the whole image."""
        if version < self._delta_base or version > self._image.version:
            return None
        if version == self._image.version:
            return []
        start = len(self._deltas) - (self._image.version - version)
        if start < 0:
            return None
        entries = list(itertools.islice(self._deltas, start, None))
        assert entries[0][0] == version + 1, "metadata deltas must be contiguous"
        return entries

    def _on_leadership(self, is_leader: bool, term: int) -> None:
        if is_leader and (not self._sync._isLeader() or self._sync._getTerm() != term):
            return
        if is_leader == self._leader_ready:
            return
        self._leader_ready = is_leader
        _log.info(
            "node %d %s the metadata leader (term %d)",
            self.node_id,
            "is" if is_leader else "is no longer",
            term,
        )
        if self._on_leadership_callback is not None:
            self._on_leadership_callback(is_leader)

    def _on_command_result(self, request_id: str, result: Any, error: int) -> None:
        future = self._pending.get(request_id)
        if future is None or future.done():
            return
        if error == FAIL_REASON.SUCCESS:
            if isinstance(result, MetadataImage):
                future.set_result(result)
            return
        if request_id in self._machine.applied:
            future.set_result(self._latest_image())
        elif error in (FAIL_REASON.QUEUE_FULL, FAIL_REASON.REQUEST_DENIED):
            future.set_exception(
                QuorumError(f"proposal refused by the Raft layer (reason {error})")
            )
        else:
            # MISSING_LEADER, NOT_LEADER, LEADER_CHANGED, DISCARDED, UNKNOWN_OUTCOME: the
            # caller retries with the same request id, which is safe.
            future.set_exception(NotControllerError(self.leader_address))

    def _latest_image(self) -> MetadataImage:
        machine_image = self._machine.image
        return machine_image if machine_image.version > self._image.version else self._image

    # -- public API -----------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        """The latest applied image (as delivered to the loop)."""
        return self._image

    @property
    def is_leader(self) -> bool:
        return self._leader_ready and not self._closed and self._sync._isLeader()

    @property
    def leader_address(self) -> str | None:
        """Raft address ``host:port`` of the current leader, if known."""
        if self._closed:
            return None
        leader = self._sync._getLeader()
        return None if leader is None else str(leader.address)

    async def wait_leader_known(self, timeout_s: float) -> str | None:
        """Wait until a leader is known (and, if it is this node, ready); its address."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            address = self.leader_address
            if address is not None and (address != self.self_address or self.is_leader):
                return address
            await asyncio.sleep(0.05)
        return None

    async def propose(
        self, records: Sequence[Record], *, request_id: str, timeout_s: float = 5.0
    ) -> MetadataImage:
        """Commit ``records`` as one Raft command and return the image right after it applied
        (for a duplicate request id: the current image, which includes its effect).

        Raises ``NotControllerError`` if this node is not the ready leader,
        ``ProposalTimeoutError`` if the commit was not seen within ``timeout_s`` (outcome
        unknown: retry with the same ``request_id``), ``QuorumClosedError`` after ``close``,
        ``InvalidRecordError`` for a record that the state machine would refuse to apply (a
        string over its length limit, ...): checked here, so it never takes a Raft round, or
        when the machine refused the command.
        """
        if self._closed:
            raise QuorumClosedError("the metadata quorum is closed")
        if not request_id or len(request_id) > MAX_REQUEST_ID_LENGTH:
            raise ValueError(f"request id must have 1 to {MAX_REQUEST_ID_LENGTH} characters")
        if request_id.startswith(_RESERVED_PREFIXES):
            raise ValueError(f"request ids starting with {_RESERVED_PREFIXES} are reserved")
        if len(records) > MAX_RECORDS_PER_PROPOSAL:
            raise ValueError(f"more than {MAX_RECORDS_PER_PROPOSAL} records in one proposal")
        if not self.is_leader:
            raise NotControllerError(self._other_leader())
        if request_id in self._machine.applied:
            return self._latest_image()
        future = self._pending.get(request_id)
        if future is None:
            if len(self._pending) >= MAX_PENDING_PROPOSALS:
                raise QuorumError(f"more than {MAX_PENDING_PROPOSALS} proposals in flight")
            dicts = [record_to_dict(record) for record in records]
            for data in dicts:
                record_from_dict(data)  # InvalidRecordError: what every node would refuse
            future = self._loop.create_future()
            self._pending[request_id] = future

            def on_result(result: Any, error: int) -> None:  # pysyncobj thread
                self._to_loop(self._on_command_result, request_id, result, error)

            checksum = command_checksum(dicts, request_id)
            self._machine.apply_records(dicts, request_id, checksum, callback=on_result)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout_s)
        except TimeoutError:
            if request_id in self._machine.applied:
                return self._latest_image()
            raise ProposalTimeoutError(
                f"request {request_id} was not committed within {timeout_s} s"
            ) from None
        finally:
            # Later retries find the outcome in the state machine's applied request ids.
            if self._pending.get(request_id) is future:
                del self._pending[request_id]

    # -- membership -------------------------------------------------------------------------

    @property
    def members(self) -> frozenset[str]:
        """Raft addresses of the current voters as this node's pysyncobj sees them (itself
        included); refreshed every tick."""
        return self._members

    async def _in_raft_thread(
        self, function: Callable[[], Any], timeout_s: float = RAFT_THREAD_CALL_TIMEOUT_S
    ) -> Any:
        """Run ``function`` on pysyncobj's tick thread (where its state may be touched) and
        return its result."""
        if self._closed:
            raise QuorumClosedError("the metadata quorum is closed")
        if len(self._raft_calls) >= MAX_RAFT_THREAD_CALLS:
            raise QuorumError(f"more than {MAX_RAFT_THREAD_CALLS} calls wait for the Raft thread")
        future: asyncio.Future[Any] = self._loop.create_future()

        def call() -> None:  # pysyncobj thread
            try:
                result = function()
            except Exception as error:  # handed to the caller on the loop
                self._to_loop(_settle, future, None, error)
            else:
                self._to_loop(_settle, future, result, None)

        self._raft_calls.append(call)
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            raise QuorumError(f"the Raft thread did not answer within {timeout_s} s") from None

    async def raft_view(self) -> dict[str, Any]:
        """This node's Raft view of the membership: ``members`` (Raft addresses, itself
        included), ``connected`` (members it has a connection to, itself included),
        ``match_index`` (per other member, meaningful on the leader) and ``commit_index``."""

        def read() -> dict[str, Any]:
            status = self._sync.getStatus()
            others = sorted(node.address for node in self._sync.otherNodes)
            return {
                "members": sorted([self.self_address, *others]),
                "connected": sorted(
                    [self.self_address]
                    + [a for a in others if status.get(f"partner_node_status_server_{a}") == 2]
                ),
                "match_index": {a: status.get(f"match_idx_server_{a}") for a in others},
                "commit_index": status["commit_idx"],
            }

        result: dict[str, Any] = await self._in_raft_thread(read)
        return result

    async def add_voter(self, raft_address: str, *, timeout_s: float) -> None:
        """Make ``raft_address`` a Raft voter: once the change is committed, wait until the new
        voter has caught up with the log as it was then, so it really counts towards the
        majority before anything else changes. The controller there must already run with
        the full member list (pysyncobj accepts any address; the caller checks)."""
        await self._change_membership(raft_address, adding=True, timeout_s=timeout_s)
        await self.wait_caught_up(raft_address, timeout_s=timeout_s)

    async def remove_voter(self, raft_address: str, *, timeout_s: float) -> None:
        """Remove the Raft voter ``raft_address`` (never this node: see
        ``transfer_leadership``) and wait until the change is committed."""
        if raft_address == self.self_address:
            raise ValueError("the leader cannot remove itself: transfer leadership first")
        await self._change_membership(raft_address, adding=False, timeout_s=timeout_s)

    async def _change_membership(
        self, raft_address: str, *, adding: bool, timeout_s: float
    ) -> None:
        if self._closed:
            raise QuorumClosedError("the metadata quorum is closed")
        if not self.is_leader:
            raise NotControllerError(self._other_leader())
        future: asyncio.Future[int] = self._loop.create_future()

        def on_result(result: Any, error: int) -> None:  # pysyncobj thread
            self._to_loop(_settle, future, error, None)

        change = self._sync.addNodeToCluster if adding else self._sync.removeNodeFromCluster
        change(raft_address, callback=on_result)
        try:
            error = await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            raise ProposalTimeoutError(
                f"{'adding' if adding else 'removing'} Raft voter {raft_address} was not "
                f"committed within {timeout_s} s"
            ) from None
        if error == FAIL_REASON.SUCCESS:
            _log.info("Raft voter %s %s", raft_address, "added" if adding else "removed")
            return
        # pysyncobj did not append it: the voter already is (is not) a member, or this
        # leader's first entry of its term is not applied yet.
        await self._in_raft_thread(lambda: None)  # ``members`` is fresh after a tick
        if (raft_address in self._members) == adding:
            return
        if error in (FAIL_REASON.QUEUE_FULL, FAIL_REASON.REQUEST_DENIED):
            raise QuorumError(f"the Raft layer refused the membership change (reason {error})")
        raise NotControllerError(self._other_leader())

    async def wait_caught_up(self, raft_address: str, *, timeout_s: float) -> None:
        """Wait until member ``raft_address`` holds the log up to the commit index of now."""
        deadline = time.monotonic() + timeout_s
        view = await self.raft_view()
        target = view["commit_index"]
        while True:
            match_index = view["match_index"].get(raft_address)
            if match_index is not None and match_index >= target:
                return
            if not self.is_leader:
                raise NotControllerError(self._other_leader())
            if time.monotonic() > deadline:
                raise ProposalTimeoutError(
                    f"Raft voter {raft_address} did not catch up within {timeout_s} s "
                    f"(it holds the log to {match_index}, the commit index is {target})"
                )
            await asyncio.sleep(0.05)
            view = await self.raft_view()

    async def transfer_leadership(self, *, timeout_s: float) -> str | None:
        """Hand Raft leadership to the most caught-up connected voter (Raft's TimeoutNow) and
        wait until another leader is known: its Raft address, or None if there was none in
        time. pysyncobj refuses while no follower is fully caught up; this retries."""
        deadline = time.monotonic() + timeout_s

        def request_transfer() -> int | None:  # pysyncobj thread
            outcome: list[int] = []
            self._sync.transferLeadership(None, lambda _result, error: outcome.append(error))
            return outcome[0] if outcome else None

        while time.monotonic() < deadline and not self._closed:
            address = self.leader_address
            if address is not None and address != self.self_address:
                _log.info("node %d handed Raft leadership to %s", self.node_id, address)
                return address
            if self._sync._isLeader():
                await self._in_raft_thread(request_transfer)
            await asyncio.sleep(0.1)
        return None

    def _other_leader(self) -> str | None:
        address = self.leader_address
        return None if address == self.self_address else address

    def status(self) -> dict[str, Any]:
        closed = self._closed
        return {
            "node_id": self.node_id,
            "self_address": self.self_address,
            "peers": list(self.peer_addresses),
            "members": sorted(self._members),
            "is_leader": self.is_leader,
            "leader_address": self.leader_address,
            "raft_term": None if closed else self._sync.raftCurrentTerm,
            "raft_commit_index": None if closed else self._sync.raftCommitIndex,
            "raft_last_applied": None if closed else self._sync.raftLastApplied,
            "version": self._image.version,
            "closed": closed,
            # Present while this controller resyncs a log it lost and abstains from votes.
            "journal_recovery": self._recovery_status,
        }

    async def close(self) -> None:
        """Stop pysyncobj's thread, release the Raft port and fail pending proposals."""
        if self._closed:
            return
        self._closed = True
        self._leader_ready = False
        await asyncio.to_thread(self._sync.destroy_synchronous)
        for future in self._pending.values():
            if not future.done():
                future.set_exception(QuorumClosedError("the metadata quorum was closed"))
                # Nobody may be awaiting it any more; do not warn about an unretrieved error.
                future.exception()
        self._pending.clear()


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """Complete ``future`` (on the loop) unless its waiter gave up already."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
