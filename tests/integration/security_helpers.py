"""Certificates and secured nodes for the security tests: a throwaway CA (``ca.pem``), a node
certificate for 127.0.0.1 and localhost (``node.pem``/``node.key``), client certificates
(``<name>.pem``/``<name>.key``), and a node with every Kafka listener."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flux.auth.certificates import CertificateAuthority
from flux.cluster.launcher import NodeProcess

LISTENERS = ["PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL"]


@dataclass
class Secured:
    """A node with secured listeners and the files of its certificates."""

    node: NodeProcess
    directory: Path
    listeners: dict[str, str]

    @property
    def ca(self) -> str:
        return str(self.directory / "ca.pem")

    def file(self, name: str) -> str:
        return str(self.directory / name)

    def address(self, listener: str) -> tuple[str, int]:
        host, _, port = self.listeners[listener].rpartition(":")
        return host, int(port)


def write_certificates(
    directory: Path, clients: dict[str, str | None] | None = None
) -> CertificateAuthority:
    """Write the CA, the node certificate and one certificate per client (name ->
    organization: the principal is ``User:CN=<name>[,O=<organization>]``); the CA."""
    ca = CertificateAuthority.create("test CA")
    files = {"ca.pem": ca.certificate_pem}
    node = ca.issue_server("node", ["127.0.0.1", "localhost"])
    files.update({"node.pem": node.certificate_pem, "node.key": node.key_pem})
    for name, organization in (clients or {}).items():
        client = ca.issue_client(name, organization=organization)
        files.update({f"{name}.pem": client.certificate_pem, f"{name}.key": client.key_pem})
    for name, data in files.items():
        (directory / name).write_bytes(data)
    return ca


def node_security(directory: Path, **overrides: Any) -> dict[str, Any]:
    """The ``[security]`` section naming the files of ``write_certificates``."""
    return {
        "ssl_certfile": str(directory / "node.pem"),
        "ssl_keyfile": str(directory / "node.key"),
        "ssl_cafile": str(directory / "ca.pem"),
        **overrides,
    }


def start_secured_node(
    node_factory: Callable[..., NodeProcess], directory: Path, **security: Any
) -> Secured:
    """One node with all four listeners, client certificates requested (unless ``security``
    says otherwise), and a client certificate ``client`` (O=Example) written beside its
    own."""
    write_certificates(directory, {"client": "Example"})
    node = node_factory(
        broker={"listeners": [f"{name}://127.0.0.1:0" for name in LISTENERS]},
        security=node_security(directory, **{"ssl_client_auth": "requested", **security}),
        topic={"partitions": 1, "replication_factor": 1},
    )
    return Secured(node, directory, node.ready["listeners"])
