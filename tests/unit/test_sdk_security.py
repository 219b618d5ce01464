"""Client security settings without a broker: ``ClientSecurity`` checks and Kafka's dotted names,
client properties files, TLS contexts from generated certificates, fluxctl's security options,
the SCRAM upsertion the Admin sends, and that no password shows in a repr or an error.

Clients here bootstrap from a port nobody listens on: the errors asserted are raised before any
network call (one that needed the network would be a ``FluxConnectionError``).
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import ssl
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from flux.auth.certificates import CertificateAuthority
from flux.auth.scram import ScramCredential
from flux.cli._sdk import PASSWORD_ENV, client_options, read_password_file, resolve_security
from flux.sdk import (
    Admin,
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    ClientSecurity,
    ConfigurationError,
    FluxAuthenticationError,
    FluxError,
    Producer,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from flux.sdk.admin import _upsertion_body
from flux.sdk.security import load_client_properties, parse_client_properties

SECRET = "s3cret-Pa55word"


@pytest.fixture(scope="module")
def nobody() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("certificates")
    ca = CertificateAuthority.create("unit CA")
    client = ca.issue_client("client")
    (directory / "ca.pem").write_bytes(ca.certificate_pem)
    (directory / "client.pem").write_bytes(client.certificate_pem)
    (directory / "client.key").write_bytes(client.key_pem)
    (directory / "garbage.pem").write_text("not a certificate\n")
    return directory


def _sasl(**overrides: object) -> ClientSecurity:
    settings: dict[str, object] = {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "alice",
        "sasl_password": SECRET,
    }
    settings.update(overrides)
    return ClientSecurity(**settings)  # type: ignore[arg-type]


# -- ClientSecurity -------------------------------------------------------------------------------


def test_defaults_are_plaintext() -> None:
    security = ClientSecurity()
    assert security.security_protocol == "PLAINTEXT"
    assert not security.uses_tls and not security.uses_sasl
    assert security.ssl_context() is None
    assert repr(security) == "ClientSecurity()"


def test_names_are_case_insensitive() -> None:
    security = _sasl(security_protocol="sasl_plaintext", sasl_mechanism="scram_sha_256")
    assert security.security_protocol == "SASL_PLAINTEXT"
    assert security.sasl_mechanism == "SCRAM-SHA-256"
    assert security.uses_sasl and not security.uses_tls


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"security_protocol": "TLS"}, "security_protocol"),
        ({"security_protocol": 3}, "security_protocol"),
        (
            {"security_protocol": "SASL_SSL", "sasl_username": "a", "sasl_password": "p"},
            "sasl_mechanism",
        ),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_password": "p"},
            "sasl_username",
        ),
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_username": "a"},
            "sasl_password",
        ),
        (
            {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "GSSAPI",
                "sasl_username": "a",
                "sasl_password": "p",
            },
            "sasl_mechanism",
        ),
        ({"sasl_username": "alice"}, "does not use SASL"),
        ({"security_protocol": "SSL", "sasl_mechanism": "PLAIN"}, "does not use SASL"),
        ({"ssl_cafile": "ca.pem"}, "does not use TLS"),
        (
            {
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "PLAIN",
                "sasl_username": "a",
                "sasl_password": "p",
                "ssl_cafile": "ca.pem",
            },
            "does not use TLS",
        ),
        ({"security_protocol": "SSL", "ssl_keyfile": "client.key"}, "ssl_certfile"),
        ({"security_protocol": "SSL", "ssl_check_hostname": "yes"}, "ssl_check_hostname"),
    ],
)
def test_invalid_settings_name_the_setting(settings: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigurationError, match=named):
        ClientSecurity(**settings)  # type: ignore[arg-type]


def test_the_password_never_shows() -> None:
    security = _sasl(ssl_cafile="ca.pem")
    for text in (repr(security), str(security), f"{security}", repr([security])):
        assert SECRET not in text
        assert "sasl_password='***'" in text
    assert "sasl_username='alice'" in repr(security)
    # Errors about a password never quote it.
    with pytest.raises(ConfigurationError) as too_long:
        _sasl(sasl_password=SECRET * 200)
    assert SECRET not in str(too_long.value)
    with pytest.raises(ConfigurationError) as not_a_string:
        _sasl(sasl_password=SECRET.encode())
    assert SECRET not in str(not_a_string.value)
    upsertion = ScramCredentialUpsertion("alice", "SCRAM-SHA-256", SECRET)
    assert SECRET not in repr(upsertion)
    resolved = resolve_security(
        security_protocol="SASL_SSL",
        sasl_mechanism="PLAIN",
        sasl_username="a",
        environ={PASSWORD_ENV: SECRET},
    )
    assert resolved.sasl_password == SECRET
    assert SECRET not in repr(resolved)


def test_tls_files_may_be_paths(certificates: Path) -> None:
    security = ClientSecurity(security_protocol="SSL", ssl_cafile=certificates / "ca.pem")
    assert security.ssl_cafile == str(certificates / "ca.pem")
    assert security.ssl_context() is not None


def test_with_overrides_keeps_what_is_not_given() -> None:
    security = _sasl().with_overrides(sasl_username="bob", ssl_cafile=None)
    assert security.sasl_username == "bob"
    assert security.sasl_password == SECRET
    assert security.ssl_cafile is None


# -- Kafka's dotted names -------------------------------------------------------------------------


def test_from_config_reads_kafka_names_and_ignores_other_settings() -> None:
    security = ClientSecurity.from_config(
        {
            "bootstrap.servers": "b:9093",
            "acks": "all",
            "security.protocol": "sasl_ssl",
            "sasl.mechanisms": "SCRAM-SHA-256",
            "sasl.username": " alice ",
            "sasl.password": " with blanks ",
            "ssl.ca.location": "ca.pem",
            "ssl.certificate.location": "client.pem",
            "ssl.key.location": "client.key",
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert security == ClientSecurity(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="alice",
        sasl_password=" with blanks ",
        ssl_cafile="ca.pem",
        ssl_certfile="client.pem",
        ssl_keyfile="client.key",
        ssl_check_hostname=False,
    )
    assert ClientSecurity.from_config({}) == ClientSecurity()
    assert ClientSecurity.coerce(None) == ClientSecurity()
    assert ClientSecurity.coerce({"security.protocol": "SSL"}).uses_tls


def test_from_config_reads_a_jaas_line_and_explicit_names_win() -> None:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="alice" password="p\\"w";'
    )
    config = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": jaas,
    }
    security = ClientSecurity.from_config(config)
    assert (security.sasl_username, security.sasl_password) == ("alice", 'p"w')
    overridden = ClientSecurity.from_config({"sasl.username": "bob", **config})
    assert overridden.sasl_username == "bob"
    with pytest.raises(ConfigurationError, match="sasl.jaas.config"):
        ClientSecurity.from_config({**config, "sasl.jaas.config": "Module required;"})


@pytest.mark.parametrize(
    "config",
    [
        {"ssl.truststore.location": "trust.jks"},
        {"sasl.oauthbearer.method": "oidc"},
        {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "dns"},
    ],
)
def test_from_config_refuses_security_settings_it_does_not_implement(
    config: dict[str, str],
) -> None:
    with pytest.raises(ConfigurationError, match=r"ssl\.|sasl\."):
        ClientSecurity.from_config(config)


def test_coerce_refuses_other_types() -> None:
    with pytest.raises(ConfigurationError, match="security must be"):
        ClientSecurity.coerce("SASL_SSL")  # type: ignore[arg-type]


# -- properties files -----------------------------------------------------------------------------


def test_parse_client_properties() -> None:
    text = "\n".join(
        [
            "# a comment",
            "! another",
            "",
            "security.protocol=SASL_SSL",
            "  sasl.mechanism : SCRAM-SHA-512",
            "sasl.username alice",
            "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule \\",
            '    required username="alice" password="pw";',
            "ssl.ca.location=C\\:\\\\certs\\\\ca.pem",
            "tab=a\\tb",
            "unicode=\\u00e9",
            "security.protocol=SASL_PLAINTEXT",
            "empty=",
        ]
    )
    assert parse_client_properties(text) == {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
        'required username="alice" password="pw";',
        "ssl.ca.location": "C:\\certs\\ca.pem",
        "tab": "a\tb",
        "unicode": "é",
        "empty": "",
    }


def test_load_client_properties_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot be read"):
        load_client_properties(tmp_path / "missing.properties")
    binary = tmp_path / "binary.properties"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigurationError, match="not UTF-8"):
        load_client_properties(binary)


# -- TLS ------------------------------------------------------------------------------------------


def test_ssl_context_loads_the_files(certificates: Path) -> None:
    security = ClientSecurity(
        security_protocol="SSL",
        ssl_cafile=str(certificates / "ca.pem"),
        ssl_certfile=str(certificates / "client.pem"),
        ssl_keyfile=str(certificates / "client.key"),
    )
    context = security.ssl_context()
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    relaxed = security.with_overrides(ssl_check_hostname=False).ssl_context()
    assert relaxed is not None and not relaxed.check_hostname
    assert relaxed.verify_mode == ssl.CERT_REQUIRED  # the chain is still verified


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"ssl_cafile": "missing.pem"}, "ssl_cafile"),
        ({"ssl_cafile": "garbage.pem"}, "ssl_cafile"),
        ({"ssl_certfile": "missing.pem"}, "ssl_certfile"),
        ({"ssl_certfile": "client.pem", "ssl_keyfile": "ca.pem"}, "ssl_certfile"),
    ],
)
def test_unloadable_tls_files_fail_at_client_construction(
    nobody: str, certificates: Path, settings: dict[str, str], named: str
) -> None:
    security = ClientSecurity(
        security_protocol="SSL", **{k: str(certificates / v) for k, v in settings.items()}
    )
    with pytest.raises(ConfigurationError, match=named):
        security.ssl_context()
    with pytest.raises(ConfigurationError, match=named):
        AsyncProducer(nobody, security=security)
    with pytest.raises(ConfigurationError, match=named):
        Admin(nobody, security=security)


# -- clients --------------------------------------------------------------------------------------


def test_clients_take_security_objects_and_kafka_mappings(nobody: str, certificates: Path) -> None:
    security = _sasl(ssl_cafile=str(certificates / "ca.pem"))
    producer = AsyncProducer(nobody, security=security)
    assert producer.client.security is security
    consumer = AsyncConsumer(
        nobody,
        group_id="g",
        security={
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": SECRET,
        },
    )
    assert consumer.client.security.sasl_mechanism == "PLAIN"
    assert consumer._group_client.security is consumer.client.security
    with pytest.raises(ConfigurationError, match="security.protocol|security_protocol"):
        AsyncAdmin(nobody, security={"security.protocol": "KERBEROS"})
    with pytest.raises(ConfigurationError, match="sasl_password"):
        Producer(nobody, security={"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"})


def test_authentication_errors_are_flux_errors_with_a_code() -> None:
    from flux.protocol.errors import ErrorCode

    error = FluxAuthenticationError("refused", code=ErrorCode.SASL_AUTHENTICATION_FAILED)
    assert isinstance(error, FluxError)
    assert error.code is ErrorCode.SASL_AUTHENTICATION_FAILED


# -- SCRAM credentials the Admin sends ------------------------------------------------------------


@pytest.mark.parametrize(
    ("mechanism", "hash_name"), [("SCRAM-SHA-256", "sha256"), ("scram-sha-512", "sha512")]
)
def test_an_upsertion_carries_a_fresh_salt_and_the_salted_password(
    mechanism: str, hash_name: str
) -> None:
    first = _upsertion_body(ScramCredentialUpsertion("alice", mechanism, SECRET, iterations=8192))
    second = _upsertion_body(ScramCredentialUpsertion("alice", mechanism, SECRET, iterations=8192))
    assert first["name"] == "alice"
    assert first["mechanism"] == (1 if hash_name == "sha256" else 2)
    assert first["iterations"] == 8192
    assert len(first["salt"]) == 32 and first["salt"] != second["salt"]
    assert first["salted_password"] == hashlib.pbkdf2_hmac(
        hash_name, SECRET.encode(), first["salt"], 8192
    )
    assert SECRET.encode() not in repr(first).encode()
    # What the broker derives from it logs the password in, and only it.
    credential = ScramCredential.from_salted_password(
        mechanism.upper(), first["salt"], first["salted_password"], 8192
    )
    assert credential.verify_password(SECRET)
    assert not credential.verify_password(SECRET + "x")


@pytest.mark.parametrize(
    ("upsertions", "deletions", "named"),
    [
        ([], [], "nothing to alter"),
        ([ScramCredentialUpsertion("a", "SCRAM-SHA-256", "pw", iterations=1000)], [], "4096"),
        ([ScramCredentialUpsertion("a", "SCRAM-SHA-256", "pw", iterations=20000)], [], "16384"),
        ([ScramCredentialUpsertion("a", "SCRAM-SHA-1", "pw")], [], "mechanism"),
        ([ScramCredentialUpsertion("a", "SCRAM-SHA-256", "")], [], "password"),
        ([ScramCredentialUpsertion("", "SCRAM-SHA-256", "pw")], [], "user name"),
        ([], [ScramCredentialDeletion("a", "PLAIN")], "mechanism"),
    ],
)
def test_invalid_scram_alterations_fail_before_the_network(
    nobody: str,
    upsertions: list[ScramCredentialUpsertion],
    deletions: list[ScramCredentialDeletion],
    named: str,
) -> None:
    async def alter() -> None:
        async with AsyncAdmin(nobody) as admin:
            await admin.alter_user_scram_credentials(upsertions, deletions)

    with pytest.raises(ConfigurationError, match=named):
        asyncio.run(alter())


# -- fluxctl's security options -------------------------------------------------------------------


def test_resolve_security_layers_options_over_the_client_config(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text(
        "bootstrap.servers=ignored:9092\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.username=alice\n"
        "sasl.password=from-file\n"
        "ssl.ca.location=/etc/ca.pem\n"
    )
    from_file = resolve_security(client_config=str(config), environ={})
    assert from_file == ClientSecurity(
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="alice",
        sasl_password="from-file",
        ssl_cafile="/etc/ca.pem",
    )
    password_file = tmp_path / "password"
    password_file.write_text("from-password-file\nsecond line ignored\n")
    overridden = resolve_security(
        client_config=str(config),
        sasl_mechanism="PLAIN",
        sasl_username="bob",
        sasl_password_file=str(password_file),
        environ={PASSWORD_ENV: "from-env"},
    )
    assert overridden == from_file.with_overrides(
        sasl_mechanism="PLAIN", sasl_username="bob", sasl_password="from-password-file"
    )
    # The environment's password is below the file's, but above nothing.
    assert (
        resolve_security(
            security_protocol="SASL_SSL",
            sasl_mechanism="PLAIN",
            sasl_username="bob",
            environ={PASSWORD_ENV: "from-env"},
        ).sasl_password
        == "from-env"
    )
    # The file's ssl.ca.location under a protocol without TLS is refused, not ignored.
    with pytest.raises(ConfigurationError, match="does not use TLS"):
        resolve_security(client_config=str(config), security_protocol="SASL_PLAINTEXT", environ={})


def test_resolve_security_takes_the_environment_password_only_for_sasl() -> None:
    environ = {PASSWORD_ENV: SECRET}
    assert resolve_security(environ=environ) == ClientSecurity()
    assert resolve_security(security_protocol="SSL", environ=environ).sasl_password is None
    sasl = resolve_security(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_username="alice",
        environ=environ,
    )
    assert sasl.sasl_password == SECRET
    with pytest.raises(ConfigurationError, match="needs a password") as missing:
        resolve_security(
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_username="alice",
            environ={},
        )
    assert PASSWORD_ENV in str(missing.value)


def test_read_password_file(tmp_path: Path) -> None:
    path = tmp_path / "password"
    path.write_text(f"{SECRET}\r\n")
    assert read_password_file(str(path)) == SECRET
    path.write_text("\nsecond\n")
    with pytest.raises(ConfigurationError, match="no password") as empty:
        read_password_file(str(path))
    assert "second" not in str(empty.value)
    path.write_bytes(b"x" * 5000)
    with pytest.raises(ConfigurationError, match="larger"):
        read_password_file(str(path))


@click.command()
@client_options
def _show(bootstrap: str | None, timeout_s: float, security: ClientSecurity) -> None:
    click.echo(repr(security))


def test_client_options_build_one_security_argument(tmp_path: Path) -> None:
    password_file = tmp_path / "password"
    password_file.write_text(SECRET + "\n")
    runner = CliRunner()
    plain = runner.invoke(_show, [], env={PASSWORD_ENV: SECRET})
    assert plain.exit_code == 0, plain.output
    assert plain.output.strip() == "ClientSecurity()"
    sasl = runner.invoke(
        _show,
        [
            "--security-protocol",
            "sasl_plaintext",
            "--sasl-mechanism",
            "scram-sha-256",
            "--sasl-username",
            "alice",
            "--sasl-password-file",
            str(password_file),
        ],
    )
    assert sasl.exit_code == 0, sasl.output
    assert "security_protocol='SASL_PLAINTEXT'" in sasl.output
    assert "sasl_mechanism='SCRAM-SHA-256'" in sasl.output
    assert SECRET not in sasl.output
    from_env = runner.invoke(
        _show,
        [],
        env={
            "FLUX_SECURITY_PROTOCOL": "SASL_SSL",
            "FLUX_SASL_MECHANISM": "PLAIN",
            "FLUX_SASL_USERNAME": "alice",
            PASSWORD_ENV: SECRET,
        },
    )
    assert from_env.exit_code == 0, from_env.output
    assert "security_protocol='SASL_SSL'" in from_env.output


def test_client_options_refuse_a_password_on_the_command_line() -> None:
    result = CliRunner().invoke(_show, ["--sasl-password", SECRET])
    assert result.exit_code == 2
    assert "never given on the command line" in result.output
    assert "--sasl-password-file" in result.output


def test_client_options_report_bad_settings_as_errors(tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text("ssl.truststore.location=/etc/trust.jks\nacks=all\n")
    result = CliRunner().invoke(_show, ["--client-config", str(config)])
    assert result.exit_code == 1
    assert "Error: unsupported security settings: ssl.truststore.location" in result.output
    missing = CliRunner().invoke(
        _show,
        ["--security-protocol", "SASL_SSL", "--sasl-mechanism", "PLAIN", "--sasl-username", "a"],
        env={PASSWORD_ENV: ""},
    )
    assert missing.exit_code == 1
    assert "needs a password" in missing.output
