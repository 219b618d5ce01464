"""The replication throttle for reassignment traffic: bytes/s a leader sends to replicas that
are catching up because a reassignment added them.

Kafka's operators cap the bandwidth a reassignment takes from producers and consumers with
``kafka-reassign-partitions.sh --throttle``, which sets the dynamic broker configs
``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate`` and lists the
moving replicas in topic configs. Flux keeps the dynamic broker configs (set per broker, or
for every broker on the default resource ``""``, with IncrementalAlterConfigs or ``fluxctl
cluster rebalance --throttle``) and needs no replica list: the throttle applies exactly to
what a reassignment moves, the fetches of replicas in a partition's ``adding`` set. In-sync
followers are never throttled, so ``acks=all`` latency does not depend on it.

The bucket is enforced where the bytes leave, on the leader: one bucket per broker, shared by
its fetch sessions, holding at most one second of the rate. ``follower.replication.throttled
.rate`` caps the same traffic; the lower of the two applies (a follower takes its bytes from
several leaders, so on the leader the two are one limit). An answer that starts with a
partition always carries at least one whole batch, so a rate smaller than a batch is still
honoured on average (the bucket goes into debt and waits longer).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

__all__ = ["THROTTLE_KEYS", "ReplicationThrottle", "rate_from_configs"]

THROTTLE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


def rate_from_configs(
    broker_configs: Mapping[str, tuple[tuple[str, str], ...]], broker_id: int
) -> int | None:
    """The throttle of ``broker_id`` in bytes/s from the dynamic broker configs (its own
    resource first, then the cluster default ``""``); None: not throttled."""
    rates = []
    for key in THROTTLE_KEYS:
        for resource in (str(broker_id), ""):
            value = dict(broker_configs.get(resource, ())).get(key)
            if value is not None:
                try:
                    rates.append(int(value))
                except ValueError:
                    pass  # validated by the controller; an old value is ignored
                break
    rates = [rate for rate in rates if rate > 0]
    return min(rates) if rates else None


class ReplicationThrottle:
    """A token bucket of ``rate`` bytes/s (None: unlimited), one second deep."""

    def __init__(self, rate: int | None = None, *, clock=time.monotonic) -> None:
        self._clock = clock
        self.rate: int | None = None
        self._tokens = 0.0
        self._at = clock()
        self.throttled_bytes = 0
        self.set_rate(rate)

    def set_rate(self, rate: int | None) -> None:
        if rate == self.rate:
            return
        self._refill()
        self.rate = rate
        if rate is not None:
            self._tokens = min(self._tokens, float(rate))

    def _refill(self) -> None:
        now = self._clock()
        if self.rate is not None:
            self._tokens = min(self._tokens + (now - self._at) * self.rate, float(self.rate))
        self._at = now

    def available(self) -> int | None:
        """Bytes that may be sent now (None: unlimited; 0 or less: wait)."""
        if self.rate is None:
            return None
        self._refill()
        return int(self._tokens)

    def consume(self, sent: int) -> None:
        if self.rate is None:
            return
        self._refill()
        self._tokens -= sent
        self.throttled_bytes += sent

    def wait_s(self) -> float:
        """Seconds until at least one byte may be sent (at least 10 ms)."""
        if self.rate is None:
            return 0.0
        self._refill()
        return max((1 - self._tokens) / self.rate, 0.01)
