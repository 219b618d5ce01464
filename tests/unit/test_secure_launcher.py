"""The pieces of ``fluxctl cluster up --secure`` that need no running node: certificates and
their file modes, the secured node configs, the client properties file, the admin's SCRAM
credentials sent to the active controller (against stand-in controllers), the compose
variables of ``--docker --secure`` read back as node configs, and the CLI's refusals."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import stat
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from cryptography import x509
from flux.auth.internal import authorization_value
from flux.auth.scram import ScramCredential
from flux.chaos.docker_cluster import SECURE_COMPOSE_FILE, TLS_MOUNT, secure_compose_env
from flux.cli.chaos import chaos
from flux.cli.main import main
from flux.cluster.config import load_config, parse_config
from flux.cluster.launcher import (
    ClusterSecurityError,
    ClusterTls,
    client_properties,
    create_scram_user,
    local_cluster_configs,
    secure_settings,
    write_client_properties,
    write_cluster_tls,
)
from flux.sdk.security import ClientSecurity, load_client_properties

ROOT = Path(__file__).resolve().parents[2]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- certificates and configs ---------------------------------------------------------------------


def test_cluster_tls_names_the_local_hosts_and_keeps_keys_private(tmp_path: Path) -> None:
    tls = write_cluster_tls(tmp_path / "tls", ["127.0.0.1", "localhost", "127.0.0.1"])
    assert tls == ClusterTls.in_directory(tmp_path / "tls")
    assert _mode(tmp_path / "tls") == 0o700
    assert _mode(tls.key_file) == 0o600 and _mode(tmp_path / "tls" / "ca.key") == 0o600
    assert _mode(tls.cert_file) == 0o644 and _mode(tls.ca_file) == 0o644
    node = x509.load_pem_x509_certificate(tls.cert_file.read_bytes())
    authority = x509.load_pem_x509_certificate(tls.ca_file.read_bytes())
    names = node.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    node.verify_directly_issued_by(authority)


def test_shared_cluster_tls_is_readable_by_a_container_user(tmp_path: Path) -> None:
    tls = write_cluster_tls(tmp_path / "tls", ["flux1", "127.0.0.1"], shared=True)
    assert _mode(tmp_path / "tls") == 0o755 and _mode(tls.key_file) == 0o644
    assert _mode(tmp_path / "tls" / "ca.key") == 0o600, "only the operator needs the CA key"


def test_secured_configs_have_one_sasl_ssl_listener_and_the_security_settings(
    tmp_path: Path,
) -> None:
    tls = write_cluster_tls(tmp_path / "tls", ["127.0.0.1", "localhost"])
    processes = local_cluster_configs(
        tmp_path, 3, tls=tls, extra={"security": {"connections_max_reauth_ms": 60000}}
    )
    for process in processes:
        assert _mode(process.config_path) == 0o600, "it holds the cluster secret"
        config = load_config(process.config_path, environ={})
        (listener,) = config.listeners
        assert listener.security_protocol == "SASL_SSL"
        assert (listener.host, listener.port) == ("127.0.0.1", config.broker.kafka_port)
        security = config["security"]
        assert security["ssl_client_auth"] == "none"
        assert set(security["sasl_enabled_mechanisms"]) == {
            "PLAIN",
            "SCRAM-SHA-256",
            "SCRAM-SHA-512",
        }
        assert security["authorizer_enable"] is True
        assert security["super_users"] == ("User:admin",)
        assert security["allow_everyone_if_no_acl_found"] is False
        assert security["http_auth"] == "required"
        assert security["internal_tls"] is True and security["internal_auth"] is True
        assert security["ssl_cafile"] == str(tls.ca_file)
        assert security["connections_max_reauth_ms"] == 60000, "extra still wins"
        assert config.controller.secret


def test_plain_configs_stay_plain(tmp_path: Path) -> None:
    (process,) = local_cluster_configs(tmp_path, 1)
    config = load_config(process.config_path, environ={})
    assert [listener.security_protocol for listener in config.listeners] == ["PLAINTEXT"]
    assert config.security.authorizer_enable is False


# -- client settings --------------------------------------------------------------------------------


def test_client_properties_round_trip_with_a_private_file(tmp_path: Path) -> None:
    ca_file = tmp_path / "ca.pem"
    ca_file.write_text("not read here")
    settings = client_properties("127.0.0.1:1,127.0.0.1:2", password=" p\\=ss:", ca_file=ca_file)
    path = tmp_path / "client.properties"
    write_client_properties(path, settings)
    assert _mode(path) == 0o600
    assert load_client_properties(path) == settings
    security = ClientSecurity.from_config(settings)
    assert security.security_protocol == "SASL_SSL"
    assert security.sasl_mechanism == "SCRAM-SHA-512" and security.sasl_username == "admin"
    assert security.sasl_password == " p\\=ss:" and security.ssl_cafile == str(ca_file)


# -- the admin's credentials through the active controller ------------------------------------------


class _Controller:
    """A stand-in controller HTTP server answering ``POST /controller/scram-credentials``
    with a fixed status and body, recording what it received."""

    def __init__(self, status: int, answer: dict[str, Any]) -> None:
        self.received: list[tuple[dict[str, str], dict[str, Any]]] = []
        controller = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                body = json.loads(self.rfile.read(length))
                controller.received.append((dict(self.headers), body))
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def controllers() -> Iterator[list[_Controller]]:
    started: list[_Controller] = []
    yield started
    for controller in started:
        controller.close()


def test_credentials_go_to_the_active_controller(controllers: list[_Controller]) -> None:
    standby = _Controller(421, {"error_code": 41, "leader_id": 2, "leader_http": "x:1"})
    active = _Controller(200, {"results": [{"user": "admin", "error_code": 0}], "version": 7})
    controllers.extend([standby, active])
    version = create_scram_user(
        [standby.address, active.address],
        user="admin",
        password="s3cret",
        secret="cluster-secret",
        ca_file=None,
        timeout_s=5,
    )
    assert version == 7 and len(standby.received) == 1 and len(active.received) == 1
    headers, body = active.received[0]
    assert headers["Authorization"] == authorization_value("cluster-secret")
    assert body["deletions"] == []
    assert sorted(u["mechanism"] for u in body["upsertions"]) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    for upsertion in body["upsertions"]:
        assert upsertion["name"] == "admin"
        stored = ScramCredential.from_dict(upsertion)
        again = ScramCredential.from_password(
            stored.mechanism, "s3cret", salt=stored.salt, iterations=stored.iterations
        )
        assert again == stored, "the credential is the password's"
        assert "s3cret" not in json.dumps(upsertion)


def test_a_refused_credential_is_an_error(controllers: list[_Controller]) -> None:
    refusing = _Controller(
        200,
        {"results": [{"user": "admin", "error_code": 67, "error_message": "too few iterations"}]},
    )
    controllers.append(refusing)
    with pytest.raises(ClusterSecurityError, match="too few iterations"):
        create_scram_user(
            [refusing.address], user="admin", password="p", secret="s", ca_file=None, timeout_s=5
        )


def test_no_controller_answering_gives_up_in_time() -> None:
    with pytest.raises(ClusterSecurityError, match="could not create"):
        create_scram_user(
            ["127.0.0.1:1"], user="admin", password="p", secret="s", ca_file=None, timeout_s=0.3
        )


# -- --docker --secure: the compose variables as the nodes read them ---------------------------------


_ENTRY = re.compile(r"^\s+(FLUX_[A-Z0-9_]+):\s*(.*?)\s*$")
_VARIABLE = re.compile(r"\$\{([A-Z0-9_]+)(?::-([^}]*))?\}")


def _compose_node_environments(variables: dict[str, str]) -> dict[str, dict[str, str]]:
    """Each service's ``FLUX_`` environment in docker-compose.cluster.yml (the shared
    ``x-flux-env`` block plus its own entries), with the compose variables substituted as
    compose does, plus the Dockerfile's ``ENV`` defaults underneath."""
    image_env = dict(
        re.findall(r"(FLUX_[A-Z0-9_]+)=(\S+)", (ROOT / "docker/Dockerfile").read_text())
    )
    shared: dict[str, str] = {}
    services: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in (ROOT / "docker-compose.cluster.yml").read_text().splitlines():
        if line.startswith("x-flux-env:"):
            current = shared
        elif re.match(r"^  flux\d+:$", line):
            current = services.setdefault(line.strip().rstrip(":"), {})
        elif line and not line.startswith(" "):
            current = None
        match = _ENTRY.match(line)
        if current is not None and match:
            current[match.group(1)] = match.group(2).strip('"')

    def substitute(value: str) -> str:
        return _VARIABLE.sub(lambda m: variables.get(m.group(1)) or (m.group(2) or ""), value)

    return {
        name: {k: substitute(v) for k, v in {**image_env, **shared, **own}.items()}
        for name, own in services.items()
    }


def _mounted(environment: dict[str, str], tls_dir: Path) -> dict[str, str]:
    """Paths under the container's TLS mount as the host sees them (what the mount does)."""
    return {k: v.replace(str(TLS_MOUNT), str(tls_dir)) for k, v in environment.items()}


def test_compose_defaults_stay_plain() -> None:
    environments = _compose_node_environments({})
    assert sorted(environments) == ["flux1", "flux2", "flux3"]
    for environment in environments.values():
        config = parse_config({}, environ=environment)
        assert [listener.security_protocol for listener in config.listeners] == [
            "PLAINTEXT",
            "PLAINTEXT",
        ]
        assert config.security.authorizer_enable is False
        assert config.security.internal_tls is False and config.security.http_auth == "none"


def test_compose_variables_of_secure_give_the_local_secure_settings(tmp_path: Path) -> None:
    tls_dir = tmp_path / "tls"
    write_cluster_tls(tls_dir, ["flux1", "flux2", "flux3", "127.0.0.1", "localhost"], shared=True)
    settings = secure_settings(ClusterTls.in_directory(TLS_MOUNT))
    variables = secure_compose_env(tls_dir, settings)
    assert variables["FLUX_TLS_DIR"] == str(tls_dir.resolve())
    expected = secure_settings(ClusterTls.in_directory(tls_dir))
    for name, environment in _compose_node_environments(variables).items():
        config = parse_config({}, environ=_mounted(environment, tls_dir))
        assert [listener.security_protocol for listener in config.listeners] == [
            "SASL_SSL",
            "SASL_SSL",
        ], name
        security = config["security"]
        for key, value in expected.items():
            wanted = tuple(value) if isinstance(value, list) else value
            assert security[key] == wanted, (name, key)
    override = (ROOT / SECURE_COMPOSE_FILE).read_text()
    assert override.count("${FLUX_TLS_DIR:?") == 3 and override.count(f":{TLS_MOUNT}:ro") == 3
    assert (
        "FLUX_TLS_DIR"
        not in (ROOT / "docker-compose.cluster.yml").read_text().split("services:")[1]
    ), "a cluster without security mounts nothing"


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="no docker-compose here")
def test_compose_file_with_secure_variables_is_valid(tmp_path: Path) -> None:
    """``docker-compose config`` (no engine needed) accepts the file, with the secure
    override, and the variables."""
    variables = secure_compose_env(tmp_path, secure_settings(ClusterTls.in_directory(TLS_MOUNT)))
    compose = shutil.which("docker-compose")
    assert compose is not None
    done = subprocess.run(
        [
            compose,
            *("-f", str(ROOT / "docker-compose.cluster.yml")),
            *("-f", str(ROOT / SECURE_COMPOSE_FILE)),
            "config",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **variables},
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # v1 prints short volume syntax, v2 long syntax: both name the folder and the mount.
    assert str(tmp_path.resolve()) in done.stdout and "/etc/flux/tls" in done.stdout
    assert "INTERNAL:SASL_SSL,EXTERNAL:SASL_SSL" in done.stdout


# -- the CLI ----------------------------------------------------------------------------------------


def _secure_state(root: Path) -> None:
    """A stopped secure cluster's state file (no node runs, so nothing is contacted)."""
    root.mkdir(parents=True)
    state = {
        "dir": str(root),
        "secure": True,
        "security": {
            "protocol": "SASL_SSL",
            "user": "admin",
            "mechanism": "SCRAM-SHA-512",
            "ca_file": str(root / "tls" / "ca.pem"),
            "client_properties": str(root / "client.properties"),
        },
        "nodes": [
            {
                "id": 1,
                "pid": None,
                "kafka": "127.0.0.1:19092",
                "http": "127.0.0.1:19193",
                "broker_http": "127.0.0.1:19292",
                "roles": ["broker", "controller"],
                "config": str(root / "node-1" / "node.toml"),
                "data_dir": str(root / "node-1" / "data"),
                "log": str(root / "node-1" / "node.log"),
            }
        ],
    }
    (root / "cluster.json").write_text(json.dumps(state))


def test_status_of_a_secure_cluster_gives_client_settings_without_the_password(
    tmp_path: Path,
) -> None:
    root = tmp_path / "cluster"
    _secure_state(root)
    result = CliRunner().invoke(main, ["cluster", "status", "--data-dir", str(root), "--json"])
    assert result.exit_code == 0, result.output
    status = json.loads(result.output)
    security = status["security"]
    assert status["secure"] is True
    assert security["client_properties"] == str(root / "client.properties")
    assert security["confluent_kafka"]["settings"]["security.protocol"] == "SASL_SSL"
    assert "sasl.password" not in security["confluent_kafka"]["settings"]
    assert security["kafka_python"]["settings"]["bootstrap_servers"] == ["127.0.0.1:19092"]
    assert security["aiokafka"]["password_setting"] == "sasl_plain_password"
    assert "--client-config" in security["fluxctl"]
    text = CliRunner().invoke(main, ["cluster", "status", "--data-dir", str(root)])
    assert text.exit_code == 0 and "kafka-python:" in text.output and "aiokafka:" in text.output


def test_up_refuses_to_change_a_clusters_security(tmp_path: Path) -> None:
    root = tmp_path / "cluster"
    _secure_state(root)
    result = CliRunner().invoke(main, ["cluster", "up", "--data-dir", str(root)])
    assert result.exit_code != 0 and "created with --secure" in result.output


def test_chaos_run_secure_is_for_the_process_backend(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        chaos, ["run", "kill-leader", "--docker", "--secure", "--out", str(tmp_path / "run")]
    )
    assert result.exit_code != 0 and "process backend" in result.output


def test_client_settings_files_are_named_in_the_help() -> None:
    result = CliRunner().invoke(main, ["cluster", "up", "--help"])
    assert "--secure" in result.output and "client.properties" in result.output
