"""Which committed offsets have expired: Kafka's ``offsets.retention.minutes`` rules (KIP-211,
with KIP-496's rule for topics a live consumer group no longer subscribes to).

``plan_expiration`` looks at one group -- its committed offsets and, when the coordinator has
one, its ``Group`` -- and says which offsets expire now and whether the group itself goes:

* **No ``Group``** (a standalone consumer or an admin tool: commits without group membership,
  Kafka's "simple" consumer, protocol type None): an offset expires ``retention_ms`` after it
  was committed (its ``commit_ms``).
* **EMPTY group** (no members): an offset expires ``retention_ms`` after the group became
  empty (``Group.state_since_ms``, kept in the group record so a new coordinator counts from
  the same moment), or after its commit if that is later. Kafka counts from the moment the
  group became empty alone; Flux also waits a full retention after the last commit, so
  offsets an admin tool resets on a long-empty group are not gone at the next check (never
  shorter than Kafka, only longer).
* **STABLE consumer group whose subscriptions are known**: offsets of topics no member
  subscribes to expire ``retention_ms`` after their commit (KIP-496); the subscribed topics'
  offsets never expire while the group has members.
* **Any other group with members** (rebalancing, another protocol type, subscriptions that
  do not decode): nothing expires.

A group that is EMPTY and has no offsets left after the expiration is deleted (Kafka moves it
to Dead and writes its group tombstone), so an idle group leaves no trace once its offsets
have gone -- unless a member id it handed out (MEMBER_ID_REQUIRED) is about to join.

Pure: no clock (``now_ms`` is a parameter), no I/O; the coordinator turns the plan into
tombstones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .offsets_records import CommittedOffset
from .state import CONSUMER_PROTOCOL_TYPE, Group, GroupState

__all__ = ["ExpirationPlan", "plan_expiration"]


@dataclass(frozen=True)
class ExpirationPlan:
    """The offsets of one group that expire now, sorted, and whether the group goes too."""

    offsets: tuple[tuple[str, int], ...]
    delete_group: bool


def plan_expiration(
    *,
    offsets: Mapping[tuple[str, int], CommittedOffset],
    group: Group | None,
    now_ms: int,
    retention_ms: int,
) -> ExpirationPlan:
    """The expiration of one group's ``offsets`` (by (topic, partition)) at ``now_ms``."""
    assert retention_ms > 0, "a retention of 0 would expire every commit at once"
    expired = []
    for key, committed in offsets.items():
        since_ms = _expires_since(key[0], committed, group)
        if since_ms is not None and now_ms - since_ms >= retention_ms:
            expired.append(key)
    expired.sort()
    delete_group = (
        group is not None
        and group.state is GroupState.EMPTY
        # A member id handed out with MEMBER_ID_REQUIRED is about to rejoin: keep the group.
        and not group.pending_member_ids
        and len(expired) == len(offsets)
    )
    return ExpirationPlan(offsets=tuple(expired), delete_group=delete_group)


def _expires_since(topic: str, committed: CommittedOffset, group: Group | None) -> int | None:
    """From when ``committed`` counts towards its expiration, or None if it cannot expire."""
    if group is None or (group.state is GroupState.EMPTY and group.protocol_type is None):
        return committed.commit_ms
    if group.state is GroupState.EMPTY:
        return max(group.state_since_ms, committed.commit_ms)
    if group.state is GroupState.STABLE and group.protocol_type == CONSUMER_PROTOCOL_TYPE:
        subscribed = group.subscribed_topics()
        if subscribed is not None and topic not in subscribed:
            return committed.commit_ms
    return None
