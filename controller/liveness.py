"""Fast failure detection: fence a broker whose process is gone without waiting for its session
to time out.

The session timeout (``controller.session_timeout_ms``, Kafka's ``broker.session.timeout.ms``)
is the only safe detector of a broker that is slow, paused or cut off: nothing distinguishes
it from a dead one until it has been silent that long. A broker whose *process has died* is
different: its host's kernel answers a TCP connection to its port with a reset
(``ECONNREFUSED``) at once. So the active controller probes a broker, with one TCP connect to
its replication (HTTP) port, when

- its heartbeats are ``controller.liveness_probe_after_ms`` late (two heartbeat periods by
  default), or
- another broker reports that its replication connection to it broke
  (``POST /controller/brokers/unreachable``: a follower's session with a leader that died ends
  at the moment of the crash), or
- this controller has just become active (the previous one may have died with its node's
  broker, and sessions restart from zero in a new controller).

Only a *refused* connection fences, and only the incarnation that was probed. A connect that
succeeds or times out proves nothing (a busy or partitioned broker): the session timeout
still decides those, so a healthy but busy broker is never fenced by a probe. A firewall that
answers with resets for a live broker would also break replication; the setting
``controller.liveness_probe_after_ms = 0`` turns probing off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["LivenessProber", "ProbeTarget", "connect", "port_refuses"]

log = logging.getLogger("flux.controller.liveness")

#: One probe's connect timeout: longer means nothing, a refusal comes back in a round trip.
PROBE_TIMEOUT_S = 0.5
#: A broker is probed at most this often (a report storm from many followers is one probe).
MIN_PROBE_INTERVAL_S = 0.2
#: Pauses before a second and a third connect when one is accepted. A process being killed
#: closes its connections (its followers report at once) a moment before its listening
#: socket, so a probe sent on a report can still be accepted.
RETRY_PAUSES_S = (0.05, 0.2)


@dataclass(frozen=True)
class ProbeTarget:
    broker_id: int
    incarnation_id: str
    host: str
    port: int


async def connect(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """One TCP connect to ``host:port``, closed at once: ``"accepted"``, ``"refused"``
    (nothing listens there) or ``"silent"`` (timed out, unreachable: proves nothing)."""
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(host, port)
    except ConnectionRefusedError:
        return "refused"
    except (OSError, TimeoutError):
        return "silent"
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return "accepted"


async def port_refuses(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """True if a TCP connect to ``host:port`` is refused (nothing listens there); False if it
    is accepted, times out, or fails any other way (which proves nothing)."""
    return await connect(host, port, timeout_s) == "refused"


class LivenessProber:
    """Probes brokers on request, at most one probe per broker at a time and one per
    ``MIN_PROBE_INTERVAL_S``; calls ``on_dead(target, reason)`` for each refused probe."""

    def __init__(
        self,
        on_dead: Callable[[ProbeTarget, str], Awaitable[None]],
        *,
        probe: Callable[[str, int], Awaitable[bool]] = port_refuses,
    ) -> None:
        self._on_dead = on_dead
        self._probe = probe
        self._running: dict[int, asyncio.Task[None]] = {}
        self._last_probe: dict[int, float] = {}
        self.probes = 0
        self.refused = 0

    def request(self, target: ProbeTarget, reason: str) -> bool:
        """Probe ``target`` soon; False if a probe of it runs or ran too recently."""
        now = time.monotonic()
        running = self._running.get(target.broker_id)
        if running is not None and not running.done():
            return False
        if now - self._last_probe.get(target.broker_id, float("-inf")) < MIN_PROBE_INTERVAL_S:
            return False
        self._last_probe[target.broker_id] = now
        self._running[target.broker_id] = asyncio.create_task(self._run(target, reason))
        return True

    async def _run(self, target: ProbeTarget, reason: str) -> None:
        for pause_s in (0.0, *RETRY_PAUSES_S):
            await asyncio.sleep(pause_s)
            self.probes += 1
            try:
                refused = await self._probe(target.host, target.port)
            except Exception:
                log.exception("probing broker %d failed", target.broker_id)
                return
            if refused:
                break
        else:
            log.debug("broker %d answers on %s:%d", target.broker_id, target.host, target.port)
            return
        self.refused += 1
        try:
            await self._on_dead(
                target,
                f"{reason}, and its port {target.host}:{target.port} refuses connections",
            )
        except Exception as error:  # not active any more, a proposal timed out: retried later
            log.warning(
                "fencing broker %d after a refused probe failed: %r", target.broker_id, error
            )

    def forget(self) -> None:
        """Drop the probe history (this controller lost or gained leadership)."""
        self._last_probe.clear()

    async def stop(self) -> None:
        tasks = [task for task in self._running.values() if not task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._running.clear()
