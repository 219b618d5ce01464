"""The host ports a Docker cluster publishes are picked below the kernel's ephemeral range: a
port in that range can be taken by any outgoing connection between the check and Docker's
bind (CI once drew base 32725, whose broker HTTP ports 32925+ were ephemeral, and
``docker-compose up`` failed)."""

from __future__ import annotations

from flux.chaos.docker_cluster import Ports, _ephemeral_start, free_base_port


def test_every_published_port_is_below_the_ephemeral_range() -> None:
    ephemeral = _ephemeral_start()
    for _ in range(300):
        base = free_base_port()
        assert base >= 20000
        assert max(port for port, _ in Ports(base).all()) < ephemeral
