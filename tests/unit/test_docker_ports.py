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


def test_a_compose_failure_names_its_cause() -> None:
    from flux.chaos.docker_cluster import _error_lines

    output = (
        "Creating fluxtest_flux1_1 ... done\n"
        "ERROR: for flux2  Cannot start service flux2: Bind for 0.0.0.0:32926 failed: "
        "port is already allocated\n"
        "Encountered errors while bringing up the project.\n"
    )
    message = _error_lines(output)
    assert "port is already allocated" in message
    assert message.endswith("Encountered errors while bringing up the project.")
    assert _error_lines("only line") == "only line"
