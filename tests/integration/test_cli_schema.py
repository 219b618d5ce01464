"""``fluxctl schema`` against a real 3-node cluster's schema registry, through click's CliRunner
on the command group (so the tests do not depend on its registration in ``cli/main.py``)."""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from flux.cli import schema as schema_module
from flux.cli._bootstrap import LOCAL_CLUSTER_STATE
from flux.cli.schema import registry_urls, schema
from flux.cluster.launcher import NodeProcess

from tests.integration.http_helpers import running_cluster
from tests.integration.test_schema_registry import USER_BAD, USER_V1, USER_V2

pytestmark = pytest.mark.integration

#: The tests give the address themselves: none from the environment.
NO_ADDRESS_ENV: dict[str, str | None] = {"FLUX_HTTP": None, "FLUX_SCHEMA_REGISTRY_URL": None}


@click.group()
def fluxctl() -> None:
    """Stand-in for ``flux.cli.main.main``."""


fluxctl.add_command(schema)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[NodeProcess]]:
    with running_cluster(tmp_path_factory.mktemp("cli-schema")) as nodes:
        yield nodes


def http(node: NodeProcess) -> str:
    return str(node.ready["broker_http"])


def run(*args: str, node: NodeProcess | None = None, input: str | None = None) -> Result:
    argv = ["schema", *args]
    if node is not None:
        argv += ["--http", http(node)]
    return CliRunner().invoke(fluxctl, argv, input=input, env=NO_ADDRESS_ENV)


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.output, result.exception)
    return result


def ok_json(result: Result) -> Any:
    return json.loads(ok(result).stdout)


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def write_schema(directory: Path, name: str, document: Any) -> str:
    path = directory / name
    path.write_text(json.dumps(document))
    return str(path)


def test_lifecycle(cluster: list[NodeProcess], tmp_path: Path) -> None:
    first, second, third = cluster
    subject = unique("users") + "-value"
    v1 = write_schema(tmp_path, "user-v1.avsc", USER_V1)
    v2 = write_schema(tmp_path, "user-v2.avsc", USER_V2)
    bad = write_schema(tmp_path, "user-bad.avsc", USER_BAD)

    # register (JSON, then the same schema again through another broker: same id and version)
    registered = ok_json(run("register", subject, "--file", v1, "--json", node=first))
    assert set(registered) == {"subject", "id", "version", "schema_type"}
    assert registered["subject"] == subject and registered["version"] == 1
    assert registered["schema_type"] == "AVRO"
    again = ok(run("register", subject, "--file", v1, node=second)).stdout
    assert again.strip() == f"Registered {subject} version 1: schema id {registered['id']}"

    # list
    listed = ok_json(run("list", "--json", node=third))
    rows = {row["subject"]: row for row in listed["subjects"]}
    assert rows[subject] == {
        "subject": subject,
        "versions": [1],
        "latest_version": 1,
        "latest_id": registered["id"],
        "deleted": False,
    }
    table = ok(run("list", "--prefix", subject, node=first)).stdout
    assert subject in table and str(registered["id"]) in table

    # check: v2 may follow v1 (BACKWARD, the default)
    checked = ok_json(run("check", subject, "--file", v2, "--json", node=second))
    assert checked == {
        "subject": subject,
        "version": "latest",
        "compatible": True,
        "compatibility": "BACKWARD",
        "messages": [],
    }
    assert ok(run("check", subject, "--file", v2, node=first)).stdout.startswith(
        f"compatible with {subject} version latest (BACKWARD)"
    )
    second_version = ok_json(run("register", subject, "--file", v2, "--json", node=third))
    assert second_version["version"] == 2 and second_version["id"] != registered["id"]

    # get: the latest, a version, an id
    latest = ok_json(run("get", subject, "--json", node=first))
    assert set(latest) == {"subject", "version", "id", "schema_type", "schema", "references"}
    assert (latest["subject"], latest["version"], latest["id"]) == (
        subject,
        2,
        second_version["id"],
    )
    assert json.loads(latest["schema"])["fields"][2]["name"] == "email"
    shown = ok(run("get", subject, "--version", "1", node=second)).stdout
    header, _, body = shown.partition("\n")
    assert header == f"# {subject} version 1, schema id {registered['id']}, AVRO"
    assert json.loads(body) == USER_V1 and '\n  "type": "record"' in body  # pretty-printed
    by_id = ok_json(run("get", "--id", str(registered["id"]), "--json", node=third))
    assert by_id["subject"] is None and by_id["version"] is None
    assert json.loads(by_id["schema"]) == USER_V1

    # check: a new field without a default is not backward compatible: exit 1 with reasons
    refused = run("check", subject, "--file", bad, "--json", node=first)
    assert refused.exit_code == 1, refused.output
    verdict = json.loads(refused.stdout)
    assert verdict["compatible"] is False and verdict["messages"]
    assert any("country" in message for message in verdict["messages"]), verdict
    text = run("check", subject, "--schema", json.dumps(USER_BAD), node=second)
    assert text.exit_code == 1
    assert text.stdout.startswith(f"NOT compatible with {subject} version latest (BACKWARD)")
    assert "\n  - " in text.stdout
    register_bad = run("register", subject, "--file", bad, node=third)
    assert register_bad.exit_code == 1 and "HTTP 409" in register_bad.stderr

    # compatibility: NONE on the subject lets the schema through; the global level is unchanged
    assert ok_json(run("compatibility", subject, "--set", "none", "--json", node=first)) == {
        "subject": subject,
        "compatibility": "NONE",
    }
    assert ok(run("compatibility", subject, node=second)).stdout.strip() == f"{subject}: NONE"
    assert ok_json(run("compatibility", "--json", node=third)) == {
        "subject": None,
        "compatibility": "BACKWARD",
    }
    assert ok_json(run("check", subject, "--file", bad, "--json", node=first))["compatible"]

    # delete: one version soft, then the subject soft, then permanently
    assert ok_json(run("delete", subject, "--version", "1", "--json", node=second)) == {
        "subject": subject,
        "versions": [1],
        "permanent": False,
    }
    gone = run("get", subject, "--version", "1", node=third)
    assert gone.exit_code == 1 and "HTTP 404" in gone.stderr
    assert ok_json(run("list", "--prefix", subject, "--json", node=first))["subjects"][0][
        "versions"
    ] == [2]
    soft = ok(run("delete", subject, node=second)).stdout
    assert soft.strip() == f"Soft-deleted {subject} version 2"
    assert ok_json(run("list", "--prefix", subject, "--json", node=third)) == {"subjects": []}
    hidden = ok_json(run("list", "--deleted", "--prefix", subject, "--json", node=first))
    assert hidden == {
        "subjects": [
            {
                "subject": subject,
                "versions": [],
                "latest_version": None,
                "latest_id": None,
                "deleted": True,
            }
        ]
    }
    # a soft-deleted schema's id still resolves
    assert (
        ok_json(run("get", "--id", str(registered["id"]), "--json", node=second))["id"]
        == (registered["id"])
    )
    purged = ok_json(run("delete", subject, "--permanent", "--json", node=third))
    assert purged["permanent"] is True and sorted(purged["versions"]) == [1, 2]
    assert ok_json(run("list", "--deleted", "--prefix", subject, "--json", node=first)) == {
        "subjects": []
    }


def test_permanent_delete_needs_a_soft_delete_first(
    cluster: list[NodeProcess], tmp_path: Path
) -> None:
    subject = unique("orders")
    ok(run("register", subject, "--schema", json.dumps(USER_V1), node=cluster[0]))
    refused = run("delete", subject, "--permanent", node=cluster[1])
    assert refused.exit_code == 1
    assert "error code 40405" in refused.stderr, refused.stderr
    assert ok_json(run("list", "--prefix", subject, "--json", node=cluster[2]))["subjects"]


def test_json_schema_from_stdin_pretty_printed(cluster: list[NodeProcess]) -> None:
    subject = unique("events") + "-value"
    document = {"type": "object", "properties": {"id": {"type": "integer"}}}
    registered = ok_json(
        run(
            "register", subject, "--file", "-", "--type", "json", "--json",
            node=cluster[1], input=json.dumps(document),
        )
    )  # fmt: skip
    assert registered["schema_type"] == "JSON" and registered["version"] == 1
    shown = ok(run("get", subject, node=cluster[2])).stdout
    header, _, body = shown.partition("\n")
    assert header.endswith(", JSON") and json.loads(body) == document
    assert '\n  "type": "object"' in body


def test_bad_input_is_a_clear_error(cluster: list[NodeProcess], tmp_path: Path) -> None:
    subject = unique("bad")
    node = cluster[0]

    not_json = tmp_path / "user.avsc"
    not_json.write_text("record User { string name; }")
    result = run("register", subject, "--file", str(not_json), node=node)
    assert result.exit_code == 1, result.output
    assert f"Error: schema file '{not_json}' is not valid JSON" in result.stderr
    assert result.stdout == ""

    # JSON, but not Avro: the registry's verdict, with its status and error code
    not_avro = tmp_path / "not-avro.avsc"
    not_avro.write_text(json.dumps({"type": "record", "name": "X", "fields": [{"name": "a"}]}))
    result = run("register", subject, "--file", str(not_avro), node=node)
    assert result.exit_code == 1, result.output
    assert "HTTP 422, error code 42201" in result.stderr, result.stderr
    assert "Traceback" not in result.output

    result = run("check", subject, "--file", str(tmp_path / "missing.avsc"), node=node)
    assert result.exit_code == 1 and "cannot be read" in result.stderr

    empty = tmp_path / "empty.avsc"
    empty.write_text("  \n")
    assert "is empty" in run("register", subject, "--file", str(empty), node=node).stderr

    both = run("register", subject, "--file", str(empty), "--schema", "{}", node=node)
    assert both.exit_code == 2 and "exactly one of --file PATH and --schema TEXT" in both.stderr
    assert run("get", subject, "--version", "0", node=node).exit_code == 2
    assert run("get", subject, "--id", "1", node=node).exit_code == 2
    assert run("compatibility", "--set", "SIDEWAYS", node=node).exit_code == 2

    missing = run("get", subject, node=node)
    assert missing.exit_code == 1 and "error code 40401" in missing.stderr


def test_registry_address(
    cluster: list[NodeProcess], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = cluster[0]
    # --registry-url: several URLs, the first one not answering
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/schemas"
    url = f"{dead},http://{http(node)}/schemas"
    listed = run("list", "--json", "--registry-url", url)
    assert "subjects" in ok_json(listed)
    only_dead = run("list", "--registry-url", dead, "--timeout", "2")
    assert only_dead.exit_code == 1 and "no schema registry reachable" in only_dead.stderr

    # the local cluster of `fluxctl cluster up` (its state file, relative to the working
    # directory), then none at all
    monkeypatch.chdir(tmp_path)
    state = {"nodes": [{"id": 1, "pid": os.getpid(), "broker_http": http(node)}]}
    LOCAL_CLUSTER_STATE.parent.mkdir(parents=True)
    LOCAL_CLUSTER_STATE.write_text(json.dumps(state))
    assert ok(run("compatibility")).stdout.strip() == "global: BACKWARD"
    LOCAL_CLUSTER_STATE.unlink()
    result = run("list")
    assert result.exit_code == 2 and "no schema registry known" in result.stderr


def test_registry_urls() -> None:
    assert registry_urls("http://a:1/schemas/, https://b:2/schemas", "x:3", "y:4") == [
        "http://a:1/schemas",
        "https://b:2/schemas",
    ]
    assert registry_urls(None, "a:1,b:2", "y:4") == ["http://a:1/schemas", "http://b:2/schemas"]
    assert registry_urls(None, "https://a:1/", None) == ["https://a:1/schemas"]
    assert registry_urls(None, None, "y:4") == ["http://y:4/schemas"]
    with pytest.raises(click.BadParameter):
        registry_urls("a:1/schemas", None, None)
    with pytest.raises(click.UsageError):
        registry_urls(None, None, None)


def test_copied_constants_match_the_registry() -> None:
    from flux.registry import PREFIX
    from flux.registry.schemas import MAX_SCHEMA_BYTES, SCHEMA_TYPES
    from flux.registry.state import COMPATIBILITY_LEVELS

    assert schema_module.SCHEMA_TYPES == SCHEMA_TYPES
    assert schema_module.COMPATIBILITY_LEVELS == COMPATIBILITY_LEVELS
    assert schema_module.SCHEMA_BYTES_MAX == MAX_SCHEMA_BYTES
    assert schema_module.REGISTRY_PATH == PREFIX


def test_registered_in_fluxctl() -> None:
    from flux.cli.main import main

    result = CliRunner().invoke(main, ["schema", "--help"])
    assert result.exit_code == 0
    for command in ("register", "list", "get", "check", "delete", "compatibility"):
        assert command in result.stdout
