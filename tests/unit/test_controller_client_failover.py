"""A broker's controller client moves on from a controller that does not answer.

Found by the netns partition scenarios (``pytest chaos/ -k network_namespaces``): with the
first configured controller partitioned away (its packets dropped, so a request waits out its
whole deadline), every heartbeat asked that controller first again, spent its one-second
deadline on it, and never reached the new active controller, which then fenced every live
broker of the majority."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from flux.cluster.metadata.controller_client import ControllerClient, ControllerUnavailableError

CONTROLLERS = ["10.0.0.1:9193", "10.0.0.2:9195", "10.0.0.3:9197"]


class _Network:
    """Answers as the controllers would: ``dead`` ones time out, ``active`` answers 200, the
    others 421 with a hint to ``active``."""

    def __init__(self, *, dead: set[str], active: str) -> None:
        self.dead = dead
        self.active = active
        self.asked: list[str] = []

    async def request(
        self, method: str, address: str, path: str, body: Any, timeout_s: float
    ) -> tuple[int, dict[str, Any]]:
        self.asked.append(address)
        if address in self.dead:
            await asyncio.sleep(timeout_s)  # a dropped packet: nothing comes back
            raise TimeoutError
        if address == self.active:
            return 200, {"ok": True}
        return 421, {"error_message": "not the controller", "leader_http": self.active}


def _client(network: _Network) -> ControllerClient:
    client = ControllerClient(CONTROLLERS)
    client._request = network.request  # type: ignore[method-assign]
    return client


def test_the_next_call_skips_a_controller_that_did_not_answer() -> None:
    network = _Network(dead={CONTROLLERS[0]}, active=CONTROLLERS[1])
    client = _client(network)

    async def heartbeats() -> list[bool]:
        delivered = []
        for _ in range(3):
            try:
                await client.write("POST", "/controller/brokers/heartbeat", {}, timeout_s=0.2)
                delivered.append(True)
            except ControllerUnavailableError:
                delivered.append(False)
        return delivered

    # The first heartbeat spends its deadline on the dead controller; the next ones get through.
    assert asyncio.run(heartbeats()) == [False, True, True]
    assert network.asked == [CONTROLLERS[0], CONTROLLERS[1], CONTROLLERS[1]]


def test_an_active_controller_that_stops_answering_is_not_asked_first_again() -> None:
    """The active controller's answers are lost (a one-way partition): the next heartbeat
    goes to another controller, whose hint leads to the new active one."""
    network = _Network(dead=set(), active=CONTROLLERS[1])
    client = _client(network)
    asyncio.run(client.write("POST", "/x", {}, timeout_s=0.2))  # learns the active one
    network.dead, network.active = {CONTROLLERS[1]}, CONTROLLERS[0]
    network.asked.clear()

    async def two_heartbeats() -> None:
        with pytest.raises(ControllerUnavailableError):
            await client.write("POST", "/x", {}, timeout_s=0.2)
        assert await client.write("POST", "/x", {}, timeout_s=0.2) == {"ok": True}

    asyncio.run(two_heartbeats())
    assert network.asked == [CONTROLLERS[1], CONTROLLERS[2], CONTROLLERS[0]]


@pytest.mark.parametrize("dead", [set(), {CONTROLLERS[2]}])
def test_a_standby_hint_leads_to_the_active_controller(dead: set[str]) -> None:
    network = _Network(dead=dead, active=CONTROLLERS[2] if not dead else CONTROLLERS[1])
    client = _client(network)
    answer = asyncio.run(client.write("POST", "/x", {}, timeout_s=1.0))
    assert answer == {"ok": True} and network.asked[-1] == network.active
