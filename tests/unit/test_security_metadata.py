"""Security in the node configuration and the metadata log: listener security protocols,
SCRAM credentials and ACL bindings as records (pure, no processes)."""

from __future__ import annotations

import base64
import pickle
from pathlib import Path

import pytest
from flux.auth.scram import ScramCredential
from flux.cluster.config import ConfigError, parse_config
from flux.controller import security
from flux.controller.image import MetadataDelta, MetadataImage
from flux.controller.records import (
    CreateAcl,
    DeleteAcl,
    RemoveUserScramCredential,
    UserScramCredential,
    record_from_dict,
    record_to_dict,
)
from flux.protocol.errors import ErrorCode

NODE = {"node": {"roles": ["broker", "controller"]}, "controller": {"secret": "s"}}


def _config(broker: dict, security_section: dict | None = None):
    return parse_config({**NODE, "broker": broker, "security": security_section or {}})


def test_listener_protocols_come_from_the_map_or_the_name(tmp_path: Path) -> None:
    for name in ("cert.pem", "key.pem"):
        (tmp_path / name).write_text("x")
    config = _config(
        {
            "listeners": [
                "CLIENT://127.0.0.1:0",
                "SASL_SSL://127.0.0.1:0",
                "INTERNAL://127.0.0.1:0",
            ],
            "listener_security_protocol_map": ["CLIENT:SASL_PLAINTEXT"],
        },
        {"ssl_certfile": str(tmp_path / "cert.pem"), "ssl_keyfile": str(tmp_path / "key.pem")},
    )
    protocols = [(listener.name, listener.security_protocol) for listener in config.listeners]
    # A name that is neither mapped nor a protocol stays PLAINTEXT, as before protocols existed.
    assert protocols == [
        ("CLIENT", "SASL_PLAINTEXT"),
        ("SASL_SSL", "SASL_SSL"),
        ("INTERNAL", "PLAINTEXT"),
    ]
    assert [listener.uses_tls for listener in config.listeners] == [False, True, False]
    assert [listener.uses_sasl for listener in config.listeners] == [True, True, False]
    assert _config({}).listeners[0].security_protocol == "PLAINTEXT"


@pytest.mark.parametrize(
    ("broker", "section", "message"),
    [
        ({"listeners": ["SSL://127.0.0.1:0"]}, {}, "security.ssl_certfile: required"),
        (
            {"listener_security_protocol_map": ["OTHER:SSL"]},
            {},
            "'OTHER' is not in broker.listeners",
        ),
        (
            {"listener_security_protocol_map": ["PLAINTEXT:TLS"]},
            {},
            "broker.listener_security_protocol_map",
        ),
        ({}, {"ssl_certfile": "/no/such/file.pem"}, "no such file"),
        ({}, {"sasl_enabled_mechanisms": ["GSSAPI"]}, "unknown SASL mechanism 'GSSAPI'"),
        ({}, {"ssl_client_auth": "sometimes"}, "security.ssl_client_auth"),
        (
            {"listeners": ["SASL_PLAINTEXT://127.0.0.1:0"]},
            {"sasl_enabled_mechanisms": []},
            "needs at least one",
        ),
    ],
)
def test_bad_security_settings_name_the_key(broker: dict, section: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _config(broker, section)


def _upsertion(name: str, mechanism: str = "SCRAM-SHA-256", **overrides: object) -> dict:
    credential = ScramCredential.from_password(mechanism, "pw", iterations=4096)
    values = {"name": name, "mechanism": mechanism, **credential.to_dict()}
    values.update(overrides)
    return values


def test_credentials_apply_per_user_all_or_nothing() -> None:
    image = MetadataImage.EMPTY
    result = security.alter_scram_credentials(
        image,
        deletions=[],
        upsertions=[
            _upsertion("alice"),
            _upsertion("alice", "SCRAM-SHA-512"),
            _upsertion("bob"),
            _upsertion("bob", "SCRAM-SHA-512", iterations=100),
        ],
    )
    results = {item["user"]: item for item in result.response["results"]}
    assert results["alice"]["error_code"] == ErrorCode.NONE
    assert results["bob"]["error_code"] == ErrorCode.UNACCEPTABLE_CREDENTIAL
    assert "Too few iterations" in results["bob"]["error_message"]
    # bob's valid SHA-256 alteration went down with his invalid SHA-512 one.
    assert {(r.name, r.mechanism) for r in result.records} == {
        ("alice", "SCRAM-SHA-256"),
        ("alice", "SCRAM-SHA-512"),
    }
    image = image.replay_all(result.records, 5)
    assert set(image.scram_credentials) == {("alice", "SCRAM-SHA-256"), ("alice", "SCRAM-SHA-512")}
    stored = image.scram_credentials[("alice", "SCRAM-SHA-256")]
    assert ScramCredential.from_dict(record_to_dict(stored)).verify_password("pw")

    duplicate = security.alter_scram_credentials(
        image,
        deletions=[{"name": "carol", "mechanism": "SCRAM-SHA-256"}],
        upsertions=[_upsertion("carol")],
    )
    assert duplicate.response["results"][0]["error_code"] == ErrorCode.DUPLICATE_RESOURCE
    missing = security.alter_scram_credentials(
        image,
        deletions=[
            {"name": "alice", "mechanism": "SCRAM-SHA-512"},
            {"name": "dave", "mechanism": "SCRAM-SHA-256"},
        ],
        upsertions=[],
    )
    codes = {item["user"]: item["error_code"] for item in missing.response["results"]}
    assert codes == {"alice": ErrorCode.NONE, "dave": ErrorCode.RESOURCE_NOT_FOUND}
    image = image.replay_all(missing.records, 6)
    assert set(image.scram_credentials) == {("alice", "SCRAM-SHA-256")}
    bad_key = security.alter_scram_credentials(
        image, deletions=[], upsertions=[_upsertion("erin", stored_key="c2hvcnQ=")]
    )
    assert bad_key.records == []
    assert bad_key.response["results"][0]["error_code"] == ErrorCode.UNACCEPTABLE_CREDENTIAL


def test_acl_records_replay_snapshot_and_delta() -> None:
    binding = {
        "resource_type": 2,
        "resource_name": "orders",
        "pattern_type": 3,
        "principal": "User:alice",
        "host": "*",
        "operation": 4,
        "permission": 3,
    }
    created = security.change_acls(MetadataImage.EMPTY, create=[binding, binding])
    assert created.response["created"] == 1
    image = MetadataImage.EMPTY.replay_all(created.records, 3)
    assert list(image.acls.values()) == [CreateAcl(**binding)]
    # Creating it again makes no record; deleting it makes one.
    assert security.change_acls(image, create=[binding]).records == []
    deleted = security.change_acls(image, delete=[binding])
    assert deleted.records == [DeleteAcl(**binding)]
    assert deleted.response["deleted"] == 1
    assert (
        security.change_acls(image, create=[{**binding, "host": 7}]).response["error_code"]
        == ErrorCode.INVALID_REQUEST
    )

    credential = _upsertion("alice")
    with_user = image.replay(
        UserScramCredential(
            name="alice",
            mechanism="SCRAM-SHA-256",
            salt=credential["salt"],
            stored_key=credential["stored_key"],
            server_key=credential["server_key"],
            iterations=4096,
        )
    )
    # Snapshots (JSON for brokers far behind, pickle for Raft) carry both.
    assert MetadataImage.from_dict(with_user.to_dict()) == with_user
    assert pickle.loads(pickle.dumps(with_user)) == with_user
    delta = MetadataDelta.between(image, with_user)
    assert delta.credentials_changed and not delta.acls_changed
    removed = with_user.replay(RemoveUserScramCredential(name="alice", mechanism="SCRAM-SHA-256"))
    assert removed.scram_credentials == {}
    for record in (CreateAcl(**binding), DeleteAcl(**binding)):
        assert record_from_dict(record_to_dict(record)) == record
    # A snapshot holds the salted keys only.
    (stored,) = with_user.to_dict()["scram_credentials"]
    assert set(stored) == {
        "type",
        "v",
        "name",
        "mechanism",
        "salt",
        "stored_key",
        "server_key",
        "iterations",
    }
    assert len(base64.b64decode(stored["stored_key"])) == 32
