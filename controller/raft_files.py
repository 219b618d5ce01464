"""The controller's Raft files on disk: validating them at start, setting damaged ones aside,
and the recovery that follows (a controller that lost its log resyncs it from its peers).

Files (in the controller's data directory, written by pysyncobj 0.3.17)::

    raft.journal        the Raft log: a 40-byte header, then records
                        ``u32 size | u64 index | u64 term | command | u32 size`` (little endian)
                        up to the end offset stored in the header (later bytes are stale or
                        zero padding of the memory map)
    raft.journal.meta   pickled dict: ``currentTerm``, ``votedForNodeId`` (stored before any
                        vote is sent) and ``raftCommitIndex`` (stored about once a second)
    raft.dump           the snapshot ("full dump"): gzip of a pickled
                        ``(state, last entry, entry before it, members)``
    raft.recovery       Flux's own: present while this controller resyncs a log it lost (JSON)

What pysyncobj 0.3.17 does with damaged files (measured; ``docs/operations.md``, "Damaged
Raft files", has the table): nothing checks them. The journal has no checksum: one flipped bit
in a value loads silently as other metadata; a journal cut inside an entry either stops the
start (``struct.error``) or starts and kills the tick thread when it applies the cut entry
(``EOFError``); a zero-length one stops the start (``ValueError``: an empty file cannot be
memory-mapped); garbage loads as one entry with a random index and hangs the node. Opening a
journal *rewrites* it (pads it to 1 KiB). A snapshot that does not load is logged and
skipped, and the node keeps an empty state (the journal continues past the snapshot, so
nothing applies); one whose deflate stream still inflates is loaded without its CRC ever being
checked. A lost or garbled meta file is read as "term 0, voted for nobody".

What Flux checks before pysyncobj opens anything (read-only, on the bytes):

- journal: header (name, format), the end offset against the file size, every record's
  framing (the size before and after a record must agree and fit), indexes contiguous, terms
  never decreasing and never above the stored current term, each command's type and shape
  (decoded with an unpickler that builds no objects but pysyncobj's node address), and the
  **CRC-32 that Flux puts into every metadata command** (``command_checksum``: computed by the
  proposer over the request id and records, carried as the command's third argument). Every
  byte of a metadata command is therefore covered; commands written before checksums existed
  are accepted once as legacy ("unchecked"), but never after a checksummed one.
- dump: the whole gzip stream is read, so its CRC-32 and length are checked (pickle alone
  stops at its STOP opcode and would never reach them), then the tuple's shape and that the
  state holds a metadata image.
- meta: must unpickle to a dict with an integer ``currentTerm``.
- together: the log (journal, else dump) must reach the commit index stored in the meta file
  (else entries were lost), and a journal that extends past the dump must start with the
  dump's last two entries (else pysyncobj would throw the journal's newer entries away).

Limits of the detection: pysyncobj's framing is not covered by a checksum, so a damaged term
that stays within the bounds above, a damaged end offset that lands exactly on a record
boundary, or the bytes of pysyncobj's own entries (no-ops, membership changes) changed into
other valid values are not detected; the ``raftCommitIndex`` check catches a lost tail only up
to the last second's commit index. Records of the metadata itself (what the controller
replays) are covered.

Recovery, and why it is safe. A damaged journal is moved aside (``<name>.corrupt-<UTC time>``,
never deleted), a damaged dump too and the journal with it (the journal only makes sense on
top of its dump); the meta file is copied aside and rewritten with the term and vote only (the
commit index would point past the now empty log). ``raft.recovery`` is written first (and
fsynced), so a crash during recovery resumes it. The node then starts as an empty member and
the leader sends it the log or a snapshot. But a Raft voter that lost entries it acknowledged
can let a committed entry be lost: with A, B, C where an entry is stored on A and B only, B
loses its log and C (without the entry) campaigns while A is down: B's empty log is "at least
as up to date" as C's, so B votes for C, and C overwrites the entry. So while ``raft.recovery``
exists the controller **abstains**: it grants no vote, never campaigns, ignores leadership
transfer requests, but stores and acknowledges entries like any follower (those
acknowledgements are true). Counting votes, any majority that can elect a leader without it
still intersects every committing majority in a member that kept its log (a majority of n
minus one abstainer still has q members, and q + (q - 1) > n - 1), so elections stay safe;
with more abstainers than that no leader can be elected, which is unavailability, not loss.

It stops abstaining once it has applied a *recovery marker*: an empty metadata command it
proposes itself (forwarded to the leader) under a fresh request id after it restarted. The
marker's position in the log is after every entry any member had when the node lost its log:
if the leader that committed the marker has a higher term than the one this node kept, Leader
Completeness puts every entry committed in earlier terms before the marker; if it is the
leader of the same term, the node's lost entries came from that leader, whose log only grows
in its term. Either way the node's log then contains everything it ever acknowledged.

The term and vote must survive (else the node could vote twice in one term and two leaders
could be elected): a damaged or missing meta file of a controller that took part in the
quorum (a dump, or log entries of a term above 0) **refuses the start**, as does damage on a
controller with no peers to resync from (it would start with empty metadata). The operator
then decides (see ``docs/operations.md``): restore the files, or remove the voter, clear its
directory and add it back. A data directory deleted as a whole cannot be told from a new
controller; that, too, is an operator's step with the same procedure.

Thread-safety: the functions here are called once, at start, before pysyncobj's thread runs
(``inspect_raft_files``, ``set_aside``), and ``finish_recovery`` from that thread once; none
keeps state.
"""

from __future__ import annotations

import datetime
import gzip
import io
import json
import os
import pickle
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pysyncobj import pickle as raft_pickle

__all__ = [
    "DUMP_NAME",
    "JOURNAL_NAME",
    "META_NAME",
    "RECOVERY_NAME",
    "DumpSummary",
    "FileDamage",
    "JournalSummary",
    "RaftMeta",
    "RecoveryPlan",
    "RecoveryState",
    "check_dump",
    "check_journal",
    "command_checksum",
    "finish_recovery",
    "inspect_raft_files",
    "plan_recovery",
    "read_meta",
    "read_recovery_state",
    "set_aside",
]

JOURNAL_NAME = "raft.journal"
META_NAME = "raft.journal.meta"
DUMP_NAME = "raft.dump"
RECOVERY_NAME = "raft.recovery"
CORRUPT_SUFFIX = ".corrupt-"

# pysyncobj 0.3.17's journal format (pysyncobj/journal.py).
_APP_NAME = b"PYSYNCOBJ"
_NAME_SIZE = 24
_VERSION_SIZE = 8
_HEADER_SIZE = _NAME_SIZE + _VERSION_SIZE + 4 + 4
_FORMAT_VERSION = 1
_RECORD_HEADER_SIZE = 16  # u64 index, u64 term
# pysyncobj's command types (pysyncobj.syncobj._COMMAND_TYPE).
_REGULAR, _NO_OP, _MEMBERSHIP, _VERSION = 0, 1, 2, 3
#: pysyncobj numbers replicated methods in name order; the metadata state machine has one,
#: ``apply_records``, so every metadata command calls method 0 (asserted in ``quorum``).
APPLY_RECORDS_METHOD_ID = 0

#: Largest journal Flux reads to check it: pysyncobj's offsets are 32-bit (4 GiB).
MAX_JOURNAL_BYTES = 2**32
#: Largest snapshot Flux decompresses to check it (the metadata image; pysyncobj loads it
#: whole into memory anyway).
MAX_DUMP_BYTES = 2**31
#: Longest description of a problem kept in logs and in ``raft.recovery``.
MAX_PROBLEM_LENGTH = 300


# -- checksums of metadata commands -----------------------------------------------------------


def command_checksum(record_dicts: Sequence[Mapping[str, Any]], request_id: str) -> int:
    """CRC-32 of a metadata command: over the request id and the records as compact JSON (in
    their own key order, which pickling keeps). The proposer computes it; it is checked each
    time the journal is read at start."""
    body = json.dumps([request_id, list(record_dicts)], separators=(",", ":"), ensure_ascii=True)
    return zlib.crc32(body.encode("ascii"))


# -- what was found ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FileDamage:
    """File ``name`` cannot be used: ``problem`` says why, in a sentence for the log."""

    name: str
    problem: str


@dataclass(frozen=True)
class JournalSummary:
    """A journal that passed every check. ``head``: its first two entries, as pysyncobj
    compares them with the dump's."""

    entries: int
    first_index: int | None
    last_index: int | None
    highest_term: int
    checksummed: int
    unchecked: int
    head: tuple[tuple[bytes, int, int], ...]


@dataclass(frozen=True)
class DumpSummary:
    """A snapshot that passed every check: its last entry and the entry before it."""

    last_entry: tuple[bytes, int, int]
    previous_entry: tuple[bytes, int, int]
    metadata_version: int

    @property
    def last_index(self) -> int:
        return self.last_entry[1]

    @property
    def last_term(self) -> int:
        return self.last_entry[2]


@dataclass(frozen=True)
class RaftMeta:
    """The meta file: the Raft term and vote that must survive restarts, and the commit
    index (stored lazily: a lower bound of what was committed)."""

    current_term: int
    voted_for: str | None
    commit_index: int | None


class _Damaged(Exception):
    """Internal: a check failed (turned into a ``FileDamage``)."""


# -- checks on bytes (pure) -------------------------------------------------------------------


class _CommandUnpickler(pickle._Unpickler):
    """Decodes journal commands, which hold only plain values and, in membership changes,
    pysyncobj's node address: nothing else may be built from bytes that may be damaged.

    The pure-Python unpickler on purpose: it reads a damaged length as a short read, where the
    C one allocates a buffer of that length first (up to 4 GiB for one flipped bit; measured:
    7 ms per damaged command)."""

    _ALLOWED = frozenset({("pysyncobj.node", "TCPNode")})

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise _Damaged(f"a command refers to {module}.{name}, which no command holds")


def _unpickle_command(data: bytes) -> Any:
    try:
        return _CommandUnpickler(io.BytesIO(data)).load()
    except _Damaged:
        raise
    except Exception as error:
        raise _Damaged(f"a command does not decode ({type(error).__name__}: {error})") from None


def _check_regular(command: Any, *, index: int) -> int | None:
    """Check a metadata command; its checksum, or None for a command written before them."""
    if not isinstance(command, tuple) or len(command) not in (2, 3):
        raise _Damaged(f"entry {index}: not a method call")
    method_id, args = command[0], command[1]
    if method_id != APPLY_RECORDS_METHOD_ID:
        raise _Damaged(f"entry {index}: calls method {method_id!r}, not apply_records")
    if len(command) == 3 and command[2] not in ({}, None):
        raise _Damaged(f"entry {index}: unexpected keyword arguments")
    if not isinstance(args, tuple) or len(args) not in (2, 3):
        raise _Damaged(f"entry {index}: apply_records has the wrong arguments")
    record_dicts, request_id = args[0], args[1]
    if not isinstance(record_dicts, list) or not all(isinstance(d, dict) for d in record_dicts):
        raise _Damaged(f"entry {index}: its records are not a list of objects")
    if not isinstance(request_id, str):
        raise _Damaged(f"entry {index}: its request id is not a string")
    if len(args) == 2 or args[2] is None:
        return None
    checksum = args[2]
    try:
        expected = command_checksum(record_dicts, request_id)
    except (TypeError, ValueError) as error:
        raise _Damaged(f"entry {index}: its records are not JSON values ({error})") from None
    if checksum != expected:
        raise _Damaged(
            f"entry {index} (request {request_id[:80]!r}): checksum {checksum!r} does not "
            f"match its content ({expected})"
        )
    return int(checksum)


def _check_command(command: bytes, *, index: int) -> int | None:
    """Check one entry's command; its checksum if it is a checksummed metadata command."""
    if not command:
        raise _Damaged(f"entry {index}: empty command")
    kind, body = command[0], command[1:]
    if kind == _NO_OP:
        if body:
            raise _Damaged(f"entry {index}: a no-op with {len(body)} bytes of content")
        return None
    if kind == _VERSION:
        if type(_unpickle_command(body)) is not int:
            raise _Damaged(f"entry {index}: a code version that is not an integer")
        return None
    if kind == _MEMBERSHIP:
        change = _unpickle_command(body)
        if (
            not isinstance(change, list)
            or len(change) != 3
            or change[0] not in ("add", "rem")
            or not isinstance(change[1], str)
        ):
            raise _Damaged(f"entry {index}: a malformed membership change")
        return None
    if kind == _REGULAR:
        return _check_regular(_unpickle_command(body), index=index)
    raise _Damaged(f"entry {index}: unknown command type {kind}")


def _check_header(data: bytes) -> int:
    """The journal's end offset after checking its header against the file."""
    if not data:
        raise _Damaged("the file is empty (zero length)")
    if len(data) < _HEADER_SIZE:
        raise _Damaged(f"the header is cut short: {len(data)} of {_HEADER_SIZE} bytes")
    name = data[:_NAME_SIZE]
    if name != _APP_NAME + b"\0" * (_NAME_SIZE - len(_APP_NAME)):
        raise _Damaged(f"not a pysyncobj journal (header starts {name[:12]!r})")
    format_version, end = struct.unpack_from("<II", data, _NAME_SIZE + _VERSION_SIZE)
    if format_version != _FORMAT_VERSION:
        raise _Damaged(f"unknown journal format {format_version}")
    if end < _HEADER_SIZE or end > len(data):
        raise _Damaged(
            f"the header says the records end at byte {end} but the file has {len(data)} "
            "bytes (truncated)"
        )
    return int(end)


def check_journal(data: bytes, *, current_term: int | None) -> JournalSummary:
    """Check a journal's bytes (see the module docstring); raise ``ValueError`` naming the
    first problem. ``current_term``: the meta file's, which no entry's term may exceed."""
    try:
        return _check_journal(data, current_term=current_term)
    except _Damaged as damage:
        raise ValueError(str(damage)) from None


def _check_journal(data: bytes, *, current_term: int | None) -> JournalSummary:
    if len(data) > MAX_JOURNAL_BYTES:
        raise _Damaged(f"{len(data)} bytes: larger than a pysyncobj journal can be")
    end = _check_header(data)
    offset = _HEADER_SIZE
    entries = checksummed = unchecked = 0
    first_index = last_index = None
    highest_term = 0
    head: list[tuple[bytes, int, int]] = []
    while offset < end:
        if offset + 4 + _RECORD_HEADER_SIZE + 1 + 4 > end:
            raise _Damaged(f"a record at byte {offset} is cut short by the end at byte {end}")
        (size,) = struct.unpack_from("<I", data, offset)
        if size <= _RECORD_HEADER_SIZE or offset + 4 + size + 4 > end:
            raise _Damaged(
                f"the record at byte {offset} claims {size} bytes, past the end at byte {end} "
                "(truncated or overwritten)"
            )
        (trailing_size,) = struct.unpack_from("<I", data, offset + 4 + size)
        if trailing_size != size:
            raise _Damaged(
                f"the record at byte {offset} starts with size {size} and ends with size "
                f"{trailing_size}"
            )
        index, term = struct.unpack_from("<QQ", data, offset + 4)
        if last_index is not None and index != last_index + 1:
            raise _Damaged(f"entry {index} follows entry {last_index}")
        if index < 1:
            raise _Damaged(f"the record at byte {offset} has index {index}")
        if term < highest_term:
            raise _Damaged(
                f"entry {index} has term {term}, below the term {highest_term} before it"
            )
        if current_term is not None and term > current_term:
            raise _Damaged(f"entry {index} has term {term}, above the current term {current_term}")
        command = bytes(data[offset + 4 + _RECORD_HEADER_SIZE : offset + 4 + size])
        checksum = _check_command(command, index=index)
        if command[0] == _REGULAR:
            if checksum is not None:
                checksummed += 1
            elif checksummed:
                raise _Damaged(f"entry {index} has no checksum, though entries before it have")
            else:
                unchecked += 1
        if len(head) < 2:
            head.append((command, index, term))
        first_index = index if first_index is None else first_index
        last_index = index
        highest_term = term
        entries += 1
        offset += 4 + size + 4
    return JournalSummary(
        entries=entries,
        first_index=first_index,
        last_index=last_index,
        highest_term=highest_term,
        checksummed=checksummed,
        unchecked=unchecked,
        head=tuple(head),
    )


def _entry(value: Any, what: str) -> tuple[bytes, int, int]:
    if (
        not isinstance(value, tuple)
        or len(value) != 3
        or not isinstance(value[0], bytes)
        or not value[0]
        or type(value[1]) is not int
        or type(value[2]) is not int
    ):
        raise _Damaged(f"its {what} is not a log entry")
    return (value[0], value[1], value[2])


def check_dump(data: bytes) -> DumpSummary:
    """Check a snapshot's bytes (see the module docstring); raise ``ValueError`` naming the
    problem. Unpickles the snapshot once its gzip checksum has passed."""
    try:
        return _check_dump(data)
    except _Damaged as damage:
        raise ValueError(str(damage)) from None


def _check_dump(data: bytes) -> DumpSummary:
    if not data:
        raise _Damaged("the file is empty (zero length)")
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as unzipped:
            content = unzipped.read(MAX_DUMP_BYTES + 1)
    except (OSError, EOFError, zlib.error) as error:
        # BadGzipFile (an OSError): not gzip or a failed CRC; EOFError: cut short.
        raise _Damaged(f"the gzip stream is damaged ({type(error).__name__}: {error})") from None
    if len(content) > MAX_DUMP_BYTES:
        raise _Damaged(f"it holds more than {MAX_DUMP_BYTES} bytes")
    try:
        dump = raft_pickle.loads(content)
    except Exception as error:
        raise _Damaged(f"the snapshot does not unpickle ({type(error).__name__})") from None
    if not isinstance(dump, tuple) or len(dump) != 4:
        raise _Damaged("not a pysyncobj snapshot (expected 4 parts)")
    state, last, previous, members = dump
    last_entry = _entry(last, "last entry")
    previous_entry = _entry(previous, "entry before the last")
    if previous_entry[1] + 1 != last_entry[1] or previous_entry[2] > last_entry[2]:
        raise _Damaged(f"its last entries {previous_entry[1:]} and {last_entry[1:]} do not follow")
    if not isinstance(members, (set, frozenset)) or not members:
        raise _Damaged("it holds no members")
    if (
        not isinstance(state, list)
        or len(state) != 2
        or not isinstance(state[0], dict)
        or not isinstance(state[1], dict)
    ):
        raise _Damaged("its state is not pysyncobj's and one state machine's")
    image = state[1].get("image")
    version = getattr(image, "version", None)
    if type(version) is not int or not isinstance(state[1].get("applied"), dict):
        raise _Damaged("its state machine holds no metadata image")
    return DumpSummary(
        last_entry=last_entry, previous_entry=previous_entry, metadata_version=version
    )


def read_meta(data: bytes) -> RaftMeta:
    """Read the meta file's bytes; raise ``ValueError`` if they do not hold a term."""
    if not data:
        raise ValueError("the file is empty (zero length)")
    try:
        meta = _unpickle_command(data)
    except _Damaged as damage:
        raise ValueError(str(damage)) from None
    if not isinstance(meta, dict):
        raise ValueError("it does not hold a dict")
    term = meta.get("currentTerm")
    if type(term) is not int or term < 0:
        raise ValueError(f"it holds no current term (currentTerm={term!r})")
    voted_for = meta.get("votedForNodeId")
    if voted_for is not None and not isinstance(voted_for, str):
        raise ValueError(f"its vote {voted_for!r} is not a node address")
    commit_index = meta.get("raftCommitIndex")
    if commit_index is not None and type(commit_index) is not int:
        raise ValueError(f"its commit index {commit_index!r} is not an integer")
    return RaftMeta(current_term=term, voted_for=voted_for, commit_index=commit_index)


# -- the decision (pure) ----------------------------------------------------------------------


@dataclass(frozen=True)
class RecoveryPlan:
    """What to do at start.

    ``refusal``: do not start; the sentence says why and what to do. Else ``set_aside``: the
    files to move aside (names), ``damage``: what is wrong with them, ``resync``: start
    abstaining until the log is recovered from the peers (``raft.recovery``), ``notes``: why
    the node resyncs although nothing is set aside."""

    refusal: str | None = None
    set_aside: tuple[str, ...] = ()
    damage: tuple[FileDamage, ...] = ()
    resync: bool = False
    notes: tuple[str, ...] = ()
    meta: RaftMeta | None = None


def _took_part(journal: JournalSummary | FileDamage | None, dump: object) -> bool:
    """Whether the files show this controller ever held Raft state worth keeping (a new one
    has a journal with pysyncobj's first no-op of term 0 at most)."""
    if dump is not None or isinstance(journal, FileDamage):
        return True
    return journal is not None and journal.highest_term > 0


def plan_recovery(
    *,
    journal: JournalSummary | FileDamage | None,
    dump: DumpSummary | FileDamage | None,
    meta: RaftMeta | FileDamage | None,
    resync_pending: bool,
    has_peers: bool,
) -> RecoveryPlan:
    """Decide from what the checks found (None: the file does not exist); see the module
    docstring for the rules and why."""
    if not isinstance(meta, RaftMeta) and _took_part(journal, dump):
        problem = "it is missing" if meta is None else meta.problem
        return RecoveryPlan(
            refusal=(
                f"{META_NAME} cannot be used ({problem}), so this controller does not know the "
                "Raft term and the vote it gave: started anyway it could vote twice in one term "
                "and let two leaders overwrite committed metadata. Nothing was changed. Restore "
                "the file, or remove this voter from the quorum, clear its controller directory "
                "and add it back (docs/operations.md, 'Damaged Raft files')"
            )
        )
    current_meta = meta if isinstance(meta, RaftMeta) else None
    damage: list[FileDamage] = [f for f in (journal, dump) if isinstance(f, FileDamage)]
    if (
        isinstance(dump, DumpSummary)
        and current_meta is not None
        and dump.last_term > current_meta.current_term
    ):
        damage.append(
            FileDamage(
                DUMP_NAME,
                f"its last entry has term {dump.last_term}, above the current term "
                f"{current_meta.current_term}",
            )
        )
    notes: list[str] = []
    if not damage:
        log_end = _log_end(journal, dump)
        commit_index = current_meta.commit_index if current_meta is not None else None
        if commit_index is not None and commit_index > max(log_end, 1):
            damage.append(
                FileDamage(
                    JOURNAL_NAME,
                    f"the log ends at entry {log_end}, before the commit index {commit_index} "
                    f"stored in {META_NAME}: committed entries are missing",
                )
            )
        elif _journal_dropped_by_dump(journal, dump):
            assert isinstance(journal, JournalSummary) and isinstance(dump, DumpSummary)
            notes.append(
                f"{JOURNAL_NAME} (entries {journal.first_index} to {journal.last_index}) does "
                f"not start at the snapshot's entries {dump.previous_entry[1]} and "
                f"{dump.last_index}: pysyncobj will replace it by the snapshot and drop "
                f"entries {dump.last_index + 1} to {journal.last_index}"
            )
    if (damage or notes or resync_pending) and not has_peers:
        reasons = [f"{d.name}: {d.problem}" for d in damage] + notes
        if resync_pending:
            reasons.append(f"{RECOVERY_NAME}: an earlier recovery did not finish")
        return RecoveryPlan(
            refusal=(
                "cannot load the whole Raft state ("
                + "; ".join(reasons)
                + ") and this controller has no peers to recover the metadata from: started "
                "with what is left it would lose metadata. Nothing was changed. Restore the "
                "files from a backup, or move them aside to start with empty metadata "
                "(docs/operations.md, 'Damaged Raft files')"
            ),
            damage=tuple(damage),
        )
    set_aside: list[str] = []
    damaged_names = {d.name for d in damage}
    if DUMP_NAME in damaged_names:
        # The journal continues the dump: without it the journal replays onto an empty state.
        set_aside += [JOURNAL_NAME, DUMP_NAME]
    elif JOURNAL_NAME in damaged_names:
        set_aside.append(JOURNAL_NAME)
    if set_aside:
        set_aside.append(META_NAME)  # copied aside, rewritten with the term and vote only
    return RecoveryPlan(
        set_aside=tuple(name for name in set_aside if _exists_in(name, journal, dump, meta)),
        damage=tuple(damage),
        resync=bool(damage) or bool(notes) or resync_pending,
        notes=tuple(notes),
        meta=current_meta,
    )


def _exists_in(name: str, journal: object, dump: object, meta: object) -> bool:
    return {JOURNAL_NAME: journal, DUMP_NAME: dump, META_NAME: meta}[name] is not None


def _log_end(journal: JournalSummary | FileDamage | None, dump: object) -> int:
    ends = [0]
    if isinstance(journal, JournalSummary) and journal.last_index is not None:
        ends.append(journal.last_index)
    if isinstance(dump, DumpSummary):
        ends.append(dump.last_index)
    return max(ends)


def _journal_dropped_by_dump(
    journal: JournalSummary | FileDamage | None, dump: DumpSummary | FileDamage | None
) -> bool:
    """pysyncobj clears the journal when its first two entries are not the dump's last two
    (``SyncObj.__loadDumpFile``): entries after the dump are lost if the journal has any (a
    crash between writing the dump and trimming the journal leaves such a pair)."""
    if not isinstance(journal, JournalSummary) or not isinstance(dump, DumpSummary):
        return False
    if journal.last_index is None or journal.last_index <= dump.last_index:
        return False
    return journal.head != (dump.previous_entry, dump.last_entry)


# -- the files (I/O) --------------------------------------------------------------------------


@dataclass(frozen=True)
class RecoveryState:
    """The content of ``raft.recovery``: since when and why this controller resyncs, the
    files it set aside, and the request id of its recovery marker."""

    since: str
    reasons: tuple[str, ...]
    set_aside: tuple[str, ...]
    marker_request_id: str
    term: int | None = None
    previous: tuple[dict[str, Any], ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "reasons": list(self.reasons),
            "set_aside": list(self.set_aside),
            "marker_request_id": self.marker_request_id,
            "term": self.term,
            "previous": list(self.previous),
        }


def _read(path: Path, limit: int) -> bytes | None:
    try:
        with open(path, "rb") as file:
            return file.read(limit + 1)
    except FileNotFoundError:
        return None


def _short(problem: str) -> str:
    return problem if len(problem) <= MAX_PROBLEM_LENGTH else problem[:MAX_PROBLEM_LENGTH] + "..."


def inspect_raft_files(data_dir: Path, *, has_peers: bool) -> RecoveryPlan:
    """Read (never write) the Raft files in ``data_dir`` and decide what to do at start."""
    meta: RaftMeta | FileDamage | None = None
    meta_bytes = _read(data_dir / META_NAME, 1 << 20)
    if meta_bytes is not None:
        try:
            meta = read_meta(meta_bytes)
        except ValueError as error:
            meta = FileDamage(META_NAME, _short(str(error)))
    current_term = meta.current_term if isinstance(meta, RaftMeta) else None

    journal: JournalSummary | FileDamage | None = None
    journal_bytes = _read(data_dir / JOURNAL_NAME, MAX_JOURNAL_BYTES)
    if journal_bytes is not None:
        try:
            journal = check_journal(journal_bytes, current_term=current_term)
        except ValueError as error:
            journal = FileDamage(JOURNAL_NAME, _short(str(error)))
    del journal_bytes

    dump: DumpSummary | FileDamage | None = None
    dump_bytes = _read(data_dir / DUMP_NAME, MAX_DUMP_BYTES)
    if dump_bytes is not None:
        try:
            dump = check_dump(dump_bytes)
        except ValueError as error:
            dump = FileDamage(DUMP_NAME, _short(str(error)))
    del dump_bytes

    return plan_recovery(
        journal=journal,
        dump=dump,
        meta=meta,
        resync_pending=(data_dir / RECOVERY_NAME).exists(),
        has_peers=has_peers,
    )


def read_recovery_state(data_dir: Path) -> dict[str, Any] | None:
    """``raft.recovery`` as written (None if there is none or it does not read)."""
    try:
        state = json.loads((data_dir / RECOVERY_NAME).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def _write_durably(path: Path, content: bytes) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "wb") as file:
        file.write(content)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def set_aside(
    data_dir: Path, plan: RecoveryPlan, *, marker_request_id: str, now: datetime.datetime
) -> RecoveryState:
    """Carry out ``plan`` (which must not be a refusal): record the recovery in
    ``raft.recovery`` first, then move the files aside (the meta file is copied and rewritten
    with the term and vote only). Returns what was recorded."""
    assert plan.refusal is None and plan.resync, plan
    stamp = now.astimezone(datetime.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    moved = [
        f"{name} -> {name}{CORRUPT_SUFFIX}{stamp}"
        + (" (a copy; the file keeps the term and vote)" if name == META_NAME else "")
        for name in plan.set_aside
    ]
    reasons = [f"{d.name}: {d.problem}" for d in plan.damage] + list(plan.notes)
    previous = read_recovery_state(data_dir)
    state = RecoveryState(
        since=now.astimezone(datetime.UTC).isoformat(),
        reasons=tuple(reasons) or ("an earlier recovery did not finish",),
        set_aside=tuple(moved),
        marker_request_id=marker_request_id,
        term=plan.meta.current_term if plan.meta is not None else None,
        # The one before, without its own history: repeated restarts must not grow the file.
        previous=({k: v for k, v in previous.items() if k != "previous"},) if previous else (),
    )
    _write_durably(data_dir / RECOVERY_NAME, json.dumps(state.to_dict(), indent=1).encode())
    for name in plan.set_aside:
        source = data_dir / name
        target = data_dir / f"{name}{CORRUPT_SUFFIX}{stamp}"
        if name == META_NAME:
            target.write_bytes(source.read_bytes())
        else:
            os.replace(source, target)
    if META_NAME in plan.set_aside and plan.meta is not None:
        # Term and vote must survive (Raft, §5.2); the commit index would point past the log.
        meta = {"currentTerm": plan.meta.current_term, "votedForNodeId": plan.meta.voted_for}
        _write_durably(data_dir / META_NAME, raft_pickle.dumps(meta))
    _fsync_directory(data_dir)
    return state


def finish_recovery(data_dir: Path) -> None:
    """The log is recovered: remove ``raft.recovery`` (the node votes again)."""
    (data_dir / RECOVERY_NAME).unlink(missing_ok=True)
    _fsync_directory(data_dir)
