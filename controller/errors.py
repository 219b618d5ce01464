"""Errors raised by ``flux.controller``.

Request handlers never raise for a bad request: they answer with a Kafka error code in the
response (``ControllerResult.response["error_code"]``). Exceptions are for programming errors,
malformed stored data and the Raft layer::

    ControllerError
    ├── InvalidRecordError             a record dict that does not describe a valid record
    ├── InvalidReplicationFactorError  placement asked for more replicas than brokers
    └── QuorumError                    the Raft layer could not complete a proposal
        ├── NotControllerError         this node is not the Raft leader (``leader_address`` hints)
        ├── ProposalTimeoutError       no commit within the timeout: outcome unknown
        ├── QuorumClosedError          the quorum was closed
        └── RaftRecoveryRefusedError   damaged Raft files that cannot be recovered safely: the
                                       controller does not start (``raft_files``)

Kafka error codes map onto this tree in one place, ``ERROR_CODES``.
"""

from __future__ import annotations

from flux.protocol.errors import ErrorCode

__all__ = [
    "ERROR_CODES",
    "ControllerError",
    "InvalidRecordError",
    "InvalidReplicationFactorError",
    "NotControllerError",
    "ProposalTimeoutError",
    "QuorumClosedError",
    "QuorumError",
    "RaftRecoveryRefusedError",
]


class ControllerError(Exception):
    """Base of every exception raised by ``flux.controller``."""


class InvalidRecordError(ControllerError):
    """A serialized record that is malformed: unknown type, missing field or wrong type."""


class InvalidReplicationFactorError(ControllerError):
    """``place_replicas`` was asked for more replicas per partition than there are brokers."""


class QuorumError(ControllerError):
    """The metadata quorum could not complete an operation."""


class NotControllerError(QuorumError):
    """This node is not the active controller; ``leader_address`` is the Raft leader if known."""

    def __init__(self, leader_address: str | None) -> None:
        hint = f"; the leader is {leader_address}" if leader_address else "; no leader is known"
        super().__init__(f"this node is not the active controller{hint}")
        self.leader_address = leader_address


class ProposalTimeoutError(QuorumError):
    """A proposal was not seen committed in time. Its outcome is unknown (it may still apply)."""


class QuorumClosedError(QuorumError):
    """The quorum was closed before or while the operation ran."""


class RaftRecoveryRefusedError(QuorumError):
    """The Raft files are damaged (or the term and vote are lost) and starting would be
    unsafe; the message says why and what an operator can do. Nothing was changed on disk."""


# One table from exception class to the Kafka error code an HTTP/Kafka layer should answer with.
ERROR_CODES: dict[type[ControllerError], ErrorCode] = {
    InvalidRecordError: ErrorCode.INVALID_REQUEST,
    InvalidReplicationFactorError: ErrorCode.INVALID_REPLICATION_FACTOR,
    NotControllerError: ErrorCode.NOT_CONTROLLER,
    ProposalTimeoutError: ErrorCode.REQUEST_TIMED_OUT,
    QuorumClosedError: ErrorCode.NOT_CONTROLLER,
    QuorumError: ErrorCode.UNKNOWN_SERVER_ERROR,
    ControllerError: ErrorCode.UNKNOWN_SERVER_ERROR,
}
