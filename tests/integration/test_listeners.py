"""Named listeners (Kafka's listeners / advertised.listeners): each client is told the brokers'
addresses on the listener it connected to."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from flux.cluster.launcher import NodeProcess, free_port
from flux.protocol.api import ApiKey
from flux.sdk.wire import KafkaConnection

from tests.integration.helpers import wait_until

pytestmark = pytest.mark.integration


def test_each_listener_advertises_its_own_address(node_factory: Callable[..., NodeProcess]) -> None:
    internal, external = free_port(), free_port()
    node = node_factory(
        broker={
            "listeners": [f"INTERNAL://127.0.0.1:{internal}", f"EXTERNAL://127.0.0.1:{external}"],
            # "localhost" on the second one stands for a host name only outside clients use.
            "advertised_listeners": [
                f"INTERNAL://127.0.0.1:{internal}",
                f"EXTERNAL://localhost:{external + 0}",
            ],
        }
    )
    assert node.ready["listeners"] == {
        "INTERNAL": f"127.0.0.1:{internal}",
        "EXTERNAL": f"localhost:{external}",
    }
    for port, expected in (
        (internal, ("127.0.0.1", internal)),
        (external, ("localhost", external)),
    ):
        with KafkaConnection("127.0.0.1", port) as conn:
            metadata = conn.request(ApiKey.METADATA, 12, {"topics": None})
            (broker,) = metadata["brokers"]
            assert (broker["host"], broker["port"]) == expected
            cluster = conn.request(ApiKey.DESCRIBE_CLUSTER, 0, {})
            assert [(b["host"], b["port"]) for b in cluster["brokers"]] == [expected]
            # The first lookup creates __consumer_offsets: wait for its leader.
            coordinator = wait_until(
                lambda: _found(
                    conn.request(ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})
                )
            )
            assert (coordinator["host"], coordinator["port"]) == expected


def _found(answer: dict) -> dict | None:
    return answer if answer["error_code"] == 0 else None
