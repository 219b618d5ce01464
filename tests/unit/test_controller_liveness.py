"""The liveness prober: a refused TCP connect (nothing listens) means the broker process is
gone; an accepted connect or a timeout proves nothing; probes of one broker are coalesced."""

from __future__ import annotations

import asyncio
import socket

from flux.controller.liveness import (
    MIN_PROBE_INTERVAL_S,
    RETRY_PAUSES_S,
    LivenessProber,
    ProbeTarget,
    port_refuses,
)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_port_nothing_listens_on_refuses() -> None:
    assert asyncio.run(port_refuses("127.0.0.1", _closed_port())) is True


def test_a_listening_port_does_not_refuse_even_if_nobody_accepts() -> None:
    # A paused process still has its listening socket: the kernel completes the handshake.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        assert asyncio.run(port_refuses("127.0.0.1", sock.getsockname()[1])) is False


def test_an_unanswered_connect_is_not_a_refusal(monkeypatch) -> None:
    async def hangs(host: str, port: int):  # a partitioned or overloaded host: no answer
        await asyncio.sleep(10)

    monkeypatch.setattr(asyncio, "open_connection", hangs)
    assert asyncio.run(port_refuses("127.0.0.1", 1, timeout_s=0.05)) is False


def _target(broker_id: int = 2) -> ProbeTarget:
    return ProbeTarget(broker_id, "inc-a", "127.0.0.1", 1)


def test_a_refused_probe_reports_the_probed_incarnation_with_the_reason() -> None:
    dead: list[tuple[ProbeTarget, str]] = []

    async def on_dead(target: ProbeTarget, reason: str) -> None:
        dead.append((target, reason))

    async def refused(host: str, port: int) -> bool:
        return True

    async def scenario() -> None:
        prober = LivenessProber(on_dead, probe=refused)
        assert prober.request(_target(), "broker 1 lost its connection to it")
        await asyncio.sleep(0.01)
        await prober.stop()
        assert prober.probes == 1 and prober.refused == 1

    asyncio.run(scenario())
    assert len(dead) == 1
    target, reason = dead[0]
    assert target == _target()
    assert "broker 1 lost its connection to it" in reason and "refuses connections" in reason


def test_an_answering_broker_is_not_reported() -> None:
    dead: list[ProbeTarget] = []

    async def on_dead(target: ProbeTarget, reason: str) -> None:
        dead.append(target)

    async def answers(host: str, port: int) -> bool:
        return False

    async def scenario() -> int:
        prober = LivenessProber(on_dead, probe=answers)
        prober.request(_target(), "late heartbeats")
        await asyncio.sleep(sum(RETRY_PAUSES_S) + 0.1)
        return prober.probes

    assert asyncio.run(scenario()) == 1 + len(RETRY_PAUSES_S)  # accepted each time
    assert dead == []


def test_a_probe_accepted_while_the_process_dies_is_tried_again() -> None:
    """The listening socket closes a moment after the connections a follower saw break."""
    answers = iter([False, True])
    dead: list[ProbeTarget] = []

    async def on_dead(target: ProbeTarget, reason: str) -> None:
        dead.append(target)

    async def dying(host: str, port: int) -> bool:
        return next(answers)

    async def scenario() -> int:
        prober = LivenessProber(on_dead, probe=dying)
        prober.request(_target(), "broker 1 lost its connection to it")
        await asyncio.sleep(RETRY_PAUSES_S[0] + 0.05)
        return prober.probes

    assert asyncio.run(scenario()) == 2
    assert dead == [_target()]


def test_probes_of_one_broker_are_coalesced_and_rate_limited() -> None:
    async def scenario() -> tuple[list[bool], int]:
        gate = asyncio.Event()

        async def slow(host: str, port: int) -> bool:
            await gate.wait()
            return True

        async def on_dead(target: ProbeTarget, reason: str) -> None:
            pass

        prober = LivenessProber(on_dead, probe=slow)
        answers = [prober.request(_target(2), "a")]
        answers.append(prober.request(_target(2), "b"))  # one is running
        answers.append(prober.request(_target(3), "c"))  # another broker: its own probe
        gate.set()
        await asyncio.sleep(0.01)
        answers.append(prober.request(_target(2), "d"))  # too soon after the last
        await asyncio.sleep(MIN_PROBE_INTERVAL_S)
        answers.append(prober.request(_target(2), "e"))
        await asyncio.sleep(0.01)
        await prober.stop()
        return answers, prober.probes

    answers, probes = asyncio.run(scenario())
    assert answers == [True, False, True, False, True]
    assert probes == 3


def test_a_failed_fence_does_not_break_the_prober() -> None:
    async def on_dead(target: ProbeTarget, reason: str) -> None:
        raise RuntimeError("not the active controller any more")

    async def refused(host: str, port: int) -> bool:
        return True

    async def scenario() -> int:
        prober = LivenessProber(on_dead, probe=refused)
        prober.request(_target(), "x")
        await asyncio.sleep(0.01)
        prober.forget()
        assert prober.request(_target(), "y")  # forget() drops the rate limit
        await asyncio.sleep(0.01)
        return prober.refused

    assert asyncio.run(scenario()) == 2
