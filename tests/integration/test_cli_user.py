"""``fluxctl user`` and fluxctl's security options against a real node with secured listeners,
through click's CliRunner on the command objects (as ``test_fluxctl_topic.py`` does), plus one
run of the installed ``fluxctl`` entry point in a subprocess.

A user created with ``fluxctl user create`` (password from stdin or the hidden prompt) logs in
with the SDK and with fluxctl itself (``--client-config`` and the password options); after
``fluxctl user delete`` the same logins fail, with the broker's message and without the
password.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from flux.cli.topic import topic
from flux.cli.user import user
from flux.cluster.launcher import NodeProcess
from flux.sdk import Admin, ClientSecurity, FluxAuthenticationError

from tests.integration.test_sdk_security import Secured, start_secured

pytestmark = pytest.mark.integration

BOB_PASSWORD = "bob-Pa55word with blanks"


@click.group()
def fluxctl() -> None:
    """Stand-in for ``flux.cli.main.main``."""


fluxctl.add_command(user)
fluxctl.add_command(topic)


def run(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(fluxctl, list(args), input=input, env=env)


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return result


def failed(result: Result) -> Result:
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    assert result.output.startswith("Error: "), result.output
    assert "Traceback" not in result.output
    return result


@pytest.fixture
def secured(node_factory: Callable[..., NodeProcess], tmp_path: Path) -> Secured:
    return start_secured(node_factory, tmp_path)


def _users(bootstrap: str) -> dict[str, list[tuple[str, int]]]:
    listed = json.loads(ok(run("user", "list", "--json", "-b", bootstrap)).output)
    return {
        entry["name"]: [(c["mechanism"], c["iterations"]) for c in entry["credentials"]]
        for entry in listed["users"]
    }


def _bob(secured: Secured, mechanism: str = "SCRAM-SHA-512") -> ClientSecurity:
    return ClientSecurity(
        security_protocol="SASL_SSL",
        sasl_mechanism=mechanism,
        sasl_username="bob",
        sasl_password=BOB_PASSWORD,
        ssl_cafile=secured.ca,
    )


def test_user_create_list_delete_and_logging_in(secured: Secured, tmp_path: Path) -> None:
    plaintext = secured.listeners["PLAINTEXT"]
    sasl_ssl = secured.listeners["SASL_SSL"]
    created = ok(
        run("user", "create", "bob", "--password-stdin", "-b", plaintext, input=BOB_PASSWORD + "\n")
    )
    assert "SCRAM-SHA-256 and SCRAM-SHA-512" in created.output
    assert BOB_PASSWORD not in created.output
    assert _users(plaintext) == {
        "alice": [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 8192)],
        "bob": [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 4096)],
    }
    listed = ok(run("user", "list", "-b", plaintext)).output
    assert "bob: SCRAM-SHA-256 (4096 iterations), SCRAM-SHA-512 (4096 iterations)" in listed

    # bob logs in with the SDK (both SCRAM mechanisms, and PLAIN) ...
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"):
        with Admin(sasl_ssl, security=_bob(secured, mechanism)) as admin:
            assert admin.list_topics() == []
    # ... and with fluxctl: a Kafka client properties file, the password in it ...
    config = tmp_path / "bob.properties"
    config.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.username=bob\n"
        f"ssl.ca.location={secured.ca}\n"
    )
    with_password = tmp_path / "bob-with-password.properties"
    with_password.write_text(config.read_text() + f"sasl.password={BOB_PASSWORD}\n")
    ok(
        run(
            "topic",
            "create",
            "bob-topic",
            "-p",
            "1",
            "-b",
            sasl_ssl,
            "--client-config",
            str(with_password),
        )
    )
    # ... or the file without it and the password from the environment or a password file.
    env = {"FLUX_SASL_PASSWORD": BOB_PASSWORD}
    listed_topics = ok(
        run("topic", "list", "-b", sasl_ssl, "--client-config", str(config), env=env)
    )
    assert listed_topics.output.split() == ["bob-topic"]
    password_file = tmp_path / "bob.password"
    password_file.write_text(BOB_PASSWORD + "\n")
    options = [
        "--security-protocol",
        "SASL_PLAINTEXT",
        "--sasl-mechanism",
        "SCRAM-SHA-256",
        "--sasl-username",
        "bob",
        "--sasl-password-file",
        str(password_file),
    ]
    sasl_plaintext = secured.listeners["SASL_PLAINTEXT"]
    assert ok(run("topic", "list", "-b", sasl_plaintext, *options)).output.split() == ["bob-topic"]
    # Users can be managed over a secured listener too.
    assert "bob" in ok(run("user", "list", "-b", sasl_plaintext, *options)).output

    # A wrong password is refused with the broker's message, never echoing the password.
    wrong = run(
        "topic",
        "list",
        "-b",
        sasl_ssl,
        "--client-config",
        str(config),
        env={"FLUX_SASL_PASSWORD": "wrong-password"},
    )
    assert "invalid credentials" in failed(wrong).output
    assert "wrong-password" not in wrong.output

    deleted = ok(run("user", "delete", "bob", "-b", plaintext))
    assert "SCRAM-SHA-256 and SCRAM-SHA-512" in deleted.output
    assert list(_users(plaintext)) == ["alice"]
    with pytest.raises(FluxAuthenticationError, match="invalid credentials"):
        with Admin(sasl_ssl, security=_bob(secured)) as admin:
            admin.list_topics()
    refused = failed(run("topic", "list", "-b", sasl_ssl, "--client-config", str(config), env=env))
    assert "bob" in refused.output and "invalid credentials" in refused.output
    assert BOB_PASSWORD not in refused.output
    # PLAIN checks the same (deleted) credentials.
    plain = failed(run("topic", "list", "-b", sasl_plaintext, *options[:3], "PLAIN", *options[4:]))
    assert "Invalid username or password" in plain.output
    assert BOB_PASSWORD not in secured.node.log_path.read_text()


def test_user_create_prompts_and_picks_mechanisms(secured: Secured) -> None:
    plaintext = secured.listeners["PLAINTEXT"]
    # The hidden prompt asks twice; a mismatch asks again.
    prompted = ok(
        run(
            "user",
            "create",
            "carol",
            "-m",
            "SCRAM-SHA-512",
            "--iterations",
            "8192",
            "-b",
            plaintext,
            input="first\nsecond\ncarol-pw\ncarol-pw\n",
        )
    )
    assert "carol-pw" not in prompted.output
    assert _users(plaintext)["carol"] == [("SCRAM-SHA-512", 8192)]
    with Admin(
        secured.listeners["SASL_PLAINTEXT"],
        security=ClientSecurity(
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username="carol",
            sasl_password="carol-pw",
        ),
    ) as admin:
        admin.list_topics()
    # Adding SCRAM-SHA-256 keeps SCRAM-SHA-512; deleting one mechanism keeps the other.
    ok(
        run(
            "user",
            "create",
            "carol",
            "-m",
            "scram-sha-256",
            "--password-stdin",
            "-b",
            plaintext,
            input="carol-pw\n",
        )
    )
    assert _users(plaintext)["carol"] == [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 8192)]
    ok(run("user", "delete", "carol", "-m", "SCRAM-SHA-512", "-b", plaintext))
    assert _users(plaintext)["carol"] == [("SCRAM-SHA-256", 4096)]
    # Deleting what is not there, bad iterations and an empty password are errors.
    missing = failed(run("user", "delete", "carol", "-m", "SCRAM-SHA-512", "-b", plaintext))
    assert "carol" in missing.output
    assert "dave" in failed(run("user", "delete", "dave", "-b", plaintext)).output
    too_few = run(
        "user",
        "create",
        "dave",
        "--iterations",
        "1000",
        "--password-stdin",
        "-b",
        plaintext,
        input="pw\n",
    )
    assert too_few.exit_code == 2 and "1000" in too_few.output
    empty = run("user", "create", "dave", "--password-stdin", "-b", plaintext, input="\n")
    assert empty.exit_code == 2 and "must not be empty" in empty.output
    assert "dave" not in _users(plaintext)


def test_fluxctl_entry_point_manages_users(secured: Secured) -> None:
    executable = shutil.which("fluxctl", path=str(Path(sys.executable).parent))
    command = [executable] if executable else [sys.executable, "-m", "flux.cli.main"]
    plaintext = secured.listeners["PLAINTEXT"]
    created = subprocess.run(
        [*command, "user", "create", "erin", "--password-stdin", "-b", plaintext],
        input="erin-pw\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert created.returncode == 0, created.stderr
    listed = subprocess.run(
        [*command, "user", "list", "--json", "-b", plaintext],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    names = [entry["name"] for entry in json.loads(listed.stdout)["users"]]
    assert names == ["alice", "erin"]
