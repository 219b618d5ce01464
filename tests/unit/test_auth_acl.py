"""ACLs (flux.auth.acl): Kafka's StandardAuthorizer rules, binding validation, describe/delete
filters, the index; and principals (flux.auth.principal), including TLS subjects."""

from __future__ import annotations

import datetime
import ssl
from collections.abc import Callable, Iterable

import pytest
from flux.auth.acl import (
    AclBinding,
    AclBindingFilter,
    AclIndex,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
    validate_binding,
    validate_filter,
)
from flux.auth.errors import InvalidAclError, InvalidPrincipalError
from flux.auth.principal import (
    ANONYMOUS,
    KafkaPrincipal,
    distinguished_name,
    principal_from_certificate_subject,
)
from hypothesis import given, settings
from hypothesis import strategies as st

Op, Perm, Pattern, Res = AclOperation, AclPermissionType, PatternType, ResourceType
ALLOW, DENY = Perm.ALLOW, Perm.DENY
LITERAL, PREFIXED = Pattern.LITERAL, Pattern.PREFIXED

DENY_BY_DEFAULT = Authorizer(frozenset({"User:admin"}), allow_everyone_if_no_acl_found=False)
ALLOW_BY_DEFAULT = Authorizer(frozenset(), allow_everyone_if_no_acl_found=True)


def acl(
    operation: AclOperation = Op.READ,
    permission: AclPermissionType = ALLOW,
    name: str = "orders",
    *,
    pattern: PatternType = LITERAL,
    principal: str = "User:alice",
    host: str = "*",
    resource_type: ResourceType = Res.TOPIC,
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


Store = Callable[[Iterable[AclBinding]], "list[AclBinding] | AclIndex"]


@pytest.fixture(params=["list", "index"])
def store(request: pytest.FixtureRequest) -> Store:
    """Every decision is checked over a plain list and over an AclIndex."""
    return list if request.param == "list" else AclIndex


def allowed(
    acls: list[AclBinding] | AclIndex,
    operation: AclOperation,
    name: str = "orders",
    *,
    principal: str = "User:alice",
    host: str = "10.0.0.1",
    resource_type: ResourceType = Res.TOPIC,
    authorizer: Authorizer = DENY_BY_DEFAULT,
) -> bool:
    return authorizer.authorize(acls, principal, host, operation, resource_type, name)


def test_wire_codes() -> None:
    assert [(member.name, member.value) for member in Res] == [
        ("UNKNOWN", 0),
        ("ANY", 1),
        ("TOPIC", 2),
        ("GROUP", 3),
        ("CLUSTER", 4),
        ("TRANSACTIONAL_ID", 5),
        ("DELEGATION_TOKEN", 6),
        ("USER", 7),
    ]
    assert [member.value for member in Pattern] == [0, 1, 2, 3, 4]
    assert (Pattern.MATCH, Pattern.LITERAL, Pattern.PREFIXED) == (2, 3, 4)
    assert (Perm.ANY, Perm.DENY, Perm.ALLOW) == (1, 2, 3)
    assert (Op.ALL, Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE) == (
        2,
        3,
        8,
        11,
        12,
    )
    assert (Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS) == (13, 14)
    assert Op(99) is Op.UNKNOWN and Res(42) is Res.UNKNOWN
    assert Res.parse("topic") is Res.TOPIC and Op.parse("Describe_Configs") is Op.DESCRIBE_CONFIGS
    assert Perm.parse("maybe") is Perm.UNKNOWN


@pytest.mark.parametrize(
    "granted, requested, expected",
    [
        (Op.READ, Op.READ, True),
        (Op.READ, Op.DESCRIBE, True),
        (Op.READ, Op.WRITE, False),
        (Op.WRITE, Op.DESCRIBE, True),
        (Op.DELETE, Op.DESCRIBE, True),
        (Op.ALTER, Op.DESCRIBE, True),
        (Op.ALTER, Op.ALTER_CONFIGS, False),
        (Op.CREATE, Op.DESCRIBE, False),
        (Op.DESCRIBE, Op.READ, False),
        (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, True),
        (Op.ALTER_CONFIGS, Op.DESCRIBE, False),
        (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, False),
        (Op.ALL, Op.READ, True),
        (Op.ALL, Op.IDEMPOTENT_WRITE, True),
        (Op.ALL, Op.DESCRIBE_CONFIGS, True),
    ],
)
def test_allow_implications(
    store: Store, granted: AclOperation, requested: AclOperation, expected: bool
) -> None:
    assert allowed(store([acl(granted)]), requested) is expected


def test_deny_does_not_imply() -> None:
    # Kafka: DENY READ does not deny DESCRIBE; only DENY ALL denies every operation.
    acls = [acl(Op.ALL, ALLOW), acl(Op.READ, DENY)]
    assert not allowed(acls, Op.READ)
    assert allowed(acls, Op.DESCRIBE)
    assert allowed(acls, Op.WRITE)
    acls = [acl(Op.READ, ALLOW), acl(Op.ALL, DENY)]
    assert not allowed(acls, Op.READ) and not allowed(acls, Op.DESCRIBE)


def test_deny_wins(store: Store) -> None:
    acls = store(
        [
            acl(Op.READ, ALLOW, principal="User:*"),
            acl(Op.READ, DENY, "ord", pattern=PREFIXED, principal="User:alice"),
        ]
    )
    assert not allowed(acls, Op.READ)
    assert allowed(acls, Op.READ, principal="User:bob")
    assert not allowed(acls, Op.READ, "order-history")


def test_literal_prefixed_and_wildcard_patterns(store: Store) -> None:
    literal = store([acl(name="orders")])
    assert allowed(literal, Op.READ, "orders")
    assert not allowed(literal, Op.READ, "orders-eu")
    assert not allowed(literal, Op.READ, "order")
    prefixed = store([acl(name="orders", pattern=PREFIXED)])
    assert allowed(prefixed, Op.READ, "orders")
    assert allowed(prefixed, Op.READ, "orders-eu")
    assert not allowed(prefixed, Op.READ, "order")
    assert not allowed(prefixed, Op.READ, "eu-orders")
    wildcard = store([acl(name="*")])
    assert allowed(wildcard, Op.READ, "orders") and allowed(wildcard, Op.READ, "anything")
    # A literal name that merely starts like the resource never applies.
    assert not allowed(store([acl(name="ord")]), Op.READ, "orders")


def test_resource_types_are_separate(store: Store) -> None:
    acls = store([acl(name="orders", resource_type=Res.GROUP)])
    assert allowed(acls, Op.READ, resource_type=Res.GROUP)
    assert not allowed(acls, Op.READ, resource_type=Res.TOPIC)
    assert allowed(acls, Op.READ, resource_type=Res.TOPIC, authorizer=ALLOW_BY_DEFAULT)


def test_super_users_may_do_anything(store: Store) -> None:
    acls = store([acl(Op.ALL, DENY, principal="User:*")])
    assert allowed(acls, Op.ALTER, principal="User:admin")
    assert allowed(store([]), Op.CLUSTER_ACTION, "kafka-cluster", principal="User:admin")
    assert not allowed(acls, Op.READ, principal="User:bob")


def test_no_acl_found(store: Store) -> None:
    nothing = store([])
    assert allowed(nothing, Op.WRITE, authorizer=ALLOW_BY_DEFAULT)
    assert not allowed(nothing, Op.WRITE, authorizer=DENY_BY_DEFAULT)
    # Any ACL on the resource, for anyone, means the default no longer applies.
    for_alice = store([acl(Op.READ, name="ord", pattern=PREFIXED)])
    assert not allowed(for_alice, Op.READ, principal="User:bob", authorizer=ALLOW_BY_DEFAULT)
    assert not allowed(for_alice, Op.WRITE, authorizer=ALLOW_BY_DEFAULT)
    # An ACL on another resource does not count.
    elsewhere = store([acl(Op.READ, name="payments")])
    assert allowed(elsewhere, Op.READ, principal="User:bob", authorizer=ALLOW_BY_DEFAULT)


def test_hosts(store: Store) -> None:
    acls = store(
        [
            acl(host="10.0.0.1"),
            acl(Op.WRITE, host="::1"),
            acl(Op.DELETE, host="192.168.1.5"),
        ]
    )
    assert allowed(acls, Op.READ, host="10.0.0.1")
    assert not allowed(acls, Op.READ, host="10.0.0.2")
    assert allowed(acls, Op.WRITE, host="0:0:0:0:0:0:0:1")
    assert not allowed(acls, Op.WRITE, host="::2")
    assert allowed(acls, Op.DELETE, host="::ffff:192.168.1.5")
    assert allowed(store([acl(host="*")]), Op.READ, host="fe80::1")


def test_wildcard_principal(store: Store) -> None:
    acls = store([acl(principal="User:*")])
    assert allowed(acls, Op.READ, principal="User:anyone")
    assert not allowed(store([acl(principal="User:bob")]), Op.READ)


def test_authorize_needs_a_concrete_request() -> None:
    for operation in (Op.ANY, Op.ALL, Op.UNKNOWN):
        with pytest.raises(ValueError):
            allowed([], operation)
    with pytest.raises(ValueError):
        allowed([], Op.READ, resource_type=Res.ANY)


@pytest.mark.parametrize(
    "binding",
    [
        acl(),
        acl(Op.ALL, DENY, "*", principal="User:*", host="::1"),
        acl(Op.CLUSTER_ACTION, name="kafka-cluster", resource_type=Res.CLUSTER),
        acl(Op.WRITE, name="tx-", pattern=PREFIXED, resource_type=Res.TRANSACTIONAL_ID),
        acl(principal="User:CN=client,O=Example", host="10.1.2.3"),
    ],
)
def test_valid_bindings(binding: AclBinding) -> None:
    validate_binding(binding)


@pytest.mark.parametrize(
    "binding, message",
    [
        (acl(resource_type=Res.ANY), "Invalid resourceType ANY"),
        (acl(resource_type=Res.UNKNOWN), "Invalid resourceType UNKNOWN"),
        (acl(pattern=Pattern.MATCH), "Invalid patternType MATCH"),
        (acl(pattern=Pattern.ANY), "Invalid patternType ANY"),
        (acl(Op.ANY), "Invalid operation ANY"),
        (acl(Op.UNKNOWN), "Invalid operation UNKNOWN"),
        (acl(permission=Perm.ANY), "Invalid permissionType ANY"),
        (acl(name=""), "Resource name should not be empty"),
        (acl(name="cluster", resource_type=Res.CLUSTER), "only valid name for the CLUSTER"),
        (acl(name="*", pattern=PREFIXED), "wildcard"),
        (acl(principal="alice"), "Invalid principal"),
        (acl(principal="User:"), "Invalid principal"),
        (acl(host="broker.example.com"), "Invalid host"),
        (acl(host=""), "Invalid host"),
    ],
)
def test_invalid_bindings(binding: AclBinding, message: str) -> None:
    with pytest.raises(InvalidAclError, match=message):
        validate_binding(binding)


def test_binding_dict_round_trip() -> None:
    binding = acl(Op.DESCRIBE_CONFIGS, DENY, "ord", pattern=PREFIXED, host="10.0.0.1")
    data = binding.to_dict()
    assert data["operation"] == "DESCRIBE_CONFIGS" and data["pattern_type"] == "PREFIXED"
    assert AclBinding.from_dict(data) == binding
    with pytest.raises(InvalidAclError, match="malformed"):
        AclBinding.from_dict({**data, "operation": "FLY"})
    with pytest.raises(InvalidAclError, match="malformed"):
        AclBinding.from_dict({key: value for key, value in data.items() if key != "host"})


ORDERS = acl(name="orders")
ORD_PREFIXED = acl(name="ord", pattern=PREFIXED)
STAR = acl(name="*")
ORDERS_PREFIXED = acl(name="orders", pattern=PREFIXED)
ORDERS_GROUP = acl(name="orders", resource_type=Res.GROUP)
BOB_WRITES = acl(Op.WRITE, DENY, "orders", principal="User:bob", host="10.0.0.9")
PAYMENTS = acl(name="payments")
ALL_BINDINGS = [ORDERS, ORD_PREFIXED, STAR, ORDERS_PREFIXED, ORDERS_GROUP, BOB_WRITES, PAYMENTS]


@pytest.mark.parametrize(
    "acl_filter, expected",
    [
        (AclBindingFilter(), ALL_BINDINGS),
        (
            AclBindingFilter(Res.TOPIC, "orders", Pattern.MATCH),
            [ORDERS, ORD_PREFIXED, STAR, ORDERS_PREFIXED, BOB_WRITES],
        ),
        (
            AclBindingFilter(Res.ANY, "orders", Pattern.MATCH),
            [ORDERS, ORD_PREFIXED, STAR, ORDERS_PREFIXED, ORDERS_GROUP, BOB_WRITES],
        ),
        (
            AclBindingFilter(Res.ANY, "orders", Pattern.ANY),
            [ORDERS, ORDERS_PREFIXED, ORDERS_GROUP, BOB_WRITES],
        ),
        (AclBindingFilter(Res.TOPIC, "orders", LITERAL), [ORDERS, BOB_WRITES]),
        (AclBindingFilter(Res.TOPIC, "orders", PREFIXED), [ORDERS_PREFIXED]),
        (AclBindingFilter(Res.TOPIC, "*", LITERAL), [STAR]),
        (AclBindingFilter(pattern_type=PREFIXED), [ORD_PREFIXED, ORDERS_PREFIXED]),
        (
            AclBindingFilter(Res.TOPIC, None, Pattern.MATCH),
            [ORDERS, ORD_PREFIXED, STAR, ORDERS_PREFIXED, BOB_WRITES, PAYMENTS],
        ),
        (AclBindingFilter(principal="User:bob"), [BOB_WRITES]),
        (AclBindingFilter(host="10.0.0.9"), [BOB_WRITES]),
        (AclBindingFilter(operation=Op.WRITE), [BOB_WRITES]),
        (AclBindingFilter(permission=DENY), [BOB_WRITES]),
        (AclBindingFilter(None, "payments", None, None, None, None, None), [PAYMENTS]),
        (AclBindingFilter(resource_type=Res.UNKNOWN), []),
        (AclBindingFilter(pattern_type=Pattern.UNKNOWN), []),
        (AclBindingFilter(operation=Op.UNKNOWN), []),
    ],
)
def test_filters(acl_filter: AclBindingFilter, expected: list[AclBinding]) -> None:
    assert [binding for binding in ALL_BINDINGS if acl_filter.matches(binding)] == expected
    assert AclIndex(ALL_BINDINGS).find(acl_filter) == expected


def test_validate_filter() -> None:
    validate_filter(AclBindingFilter())
    validate_filter(AclBindingFilter(Res.TOPIC, "orders", Pattern.MATCH, "User:a", "*"))
    with pytest.raises(InvalidAclError, match="Unknown patternFilter"):
        validate_filter(AclBindingFilter(pattern_type=Pattern.UNKNOWN))
    with pytest.raises(InvalidAclError, match="Unknown patternFilter"):
        validate_filter(AclBindingFilter(resource_type=Res.UNKNOWN))
    with pytest.raises(InvalidAclError, match="Unknown entryFilter"):
        validate_filter(AclBindingFilter(permission=Perm.UNKNOWN))


def test_index_add_remove_and_lookup() -> None:
    index = AclIndex()
    assert index.add(ORDERS) and not index.add(ORDERS)
    assert index.add(ORD_PREFIXED) and index.add(STAR) and index.add(ORDERS_GROUP)
    assert len(index) == 4 and ORDERS in index and PAYMENTS not in index
    assert set(index.matching(Res.TOPIC, "orders")) == {ORDERS, ORD_PREFIXED, STAR}
    assert set(index.matching(Res.TOPIC, "or")) == {STAR}
    assert set(index.matching(Res.GROUP, "orders")) == {ORDERS_GROUP}
    assert index.remove(ORD_PREFIXED) and not index.remove(ORD_PREFIXED)
    assert set(index.matching(Res.TOPIC, "orders-eu")) == {STAR}
    assert list(index) == [ORDERS, STAR, ORDERS_GROUP]
    with pytest.raises(InvalidAclError):
        index.add(acl(pattern=Pattern.MATCH))


names = st.sampled_from(["", "a", "b", "ab", "aa", "abc", "ba", "*"])
bindings = st.builds(
    AclBinding,
    resource_type=st.sampled_from([Res.TOPIC, Res.GROUP]),
    resource_name=names.filter(bool),
    pattern_type=st.sampled_from([LITERAL, PREFIXED]),
    principal=st.sampled_from(["User:alice", "User:bob", "User:*"]),
    host=st.sampled_from(["*", "10.0.0.1", "::1"]),
    operation=st.sampled_from([Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALL, Op.ALTER_CONFIGS]),
    permission=st.sampled_from([ALLOW, DENY]),
)


@settings(max_examples=300)
@given(
    acls=st.lists(bindings, max_size=12),
    removed=st.sets(st.integers(0, 11)),
    resource_type=st.sampled_from([Res.TOPIC, Res.GROUP]),
    name=names,
    principal=st.sampled_from(["User:alice", "User:bob", "User:carol"]),
    host=st.sampled_from(["10.0.0.1", "10.0.0.2", "0:0:0:0:0:0:0:1"]),
    operation=st.sampled_from([Op.READ, Op.WRITE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS]),
    allow_everyone=st.booleans(),
)
def test_index_agrees_with_a_scan(
    acls: list[AclBinding],
    removed: set[int],
    resource_type: ResourceType,
    name: str,
    principal: str,
    host: str,
    operation: AclOperation,
    allow_everyone: bool,
) -> None:
    index = AclIndex(acls)
    for position in removed:
        if position < len(acls):
            index.remove(acls[position])
    kept = [binding for binding in dict.fromkeys(acls) if binding in index]
    assert list(index) == kept
    by_scan = {b for b in kept if AclBindingFilter(resource_type, name, Pattern.MATCH).matches(b)}
    assert set(index.matching(resource_type, name)) == by_scan
    authorizer = Authorizer(frozenset(), allow_everyone_if_no_acl_found=allow_everyone)
    request = (principal, host, operation, resource_type, name)
    assert authorizer.authorize(index, *request) == authorizer.authorize(kept, *request)


def test_principals() -> None:
    assert str(KafkaPrincipal("User", "alice")) == "User:alice"
    assert KafkaPrincipal(name="bob") == KafkaPrincipal("User", "bob")
    assert KafkaPrincipal.parse("User:CN=a,O=b:c") == KafkaPrincipal("User", "CN=a,O=b:c")
    assert KafkaPrincipal.parse("Group:ops").principal_type == "Group"
    assert str(ANONYMOUS) == "User:ANONYMOUS"
    for text in ("alice", "User:", ":alice", ""):
        with pytest.raises(InvalidPrincipalError):
            KafkaPrincipal.parse(text)
    with pytest.raises(InvalidPrincipalError):
        KafkaPrincipal("alice")


@pytest.mark.parametrize(
    "subject, name",
    [
        (
            (
                (("countryName", "US"),),
                (("organizationName", "Example"),),
                (("commonName", "client"),),
            ),
            "CN=client,O=Example,C=US",
        ),
        (
            (
                (("countryName", "Unknown"),),
                (("stateOrProvinceName", "Unknown"),),
                (("localityName", "Unknown"),),
                (("organizationName", "Unknown"),),
                (("organizationalUnitName", "Unknown"),),
                (("commonName", "writeuser"),),
            ),
            "CN=writeuser,OU=Unknown,O=Unknown,L=Unknown,ST=Unknown,C=Unknown",
        ),
        (((("commonName", "Smith, John+x"),),), r"CN=Smith\, John\+x"),
        (((("commonName", '#a=b;"c"<d>\\'),),), r"CN=\#a\=b\;\"c\"\<d\>\\"),
        (((("commonName", "  padded "),),), r"CN=\ \ padded\ "),
        (((("organizationName", "ünïcode"),),), "O=ünïcode"),
        (((("organizationalUnitName", "a"), ("commonName", "b")),), "OU=a+CN=b"),
        (
            ((("domainComponent", "com"),), (("domainComponent", "example"),), (("userId", "u1"),)),
            "UID=u1,DC=example,DC=com",
        ),
        (
            ((("emailAddress", "john@example.com"),),),
            "1.2.840.113549.1.9.1=#1610" + b"john@example.com".hex(),
        ),
        (((("serialNumber", "1234"),),), "2.5.4.5=#130431323334"),
        (((("title", "Dr"),),), "2.5.4.12=#0c024472"),
    ],
)
def test_distinguished_names(subject: tuple, name: str) -> None:
    assert distinguished_name(subject) == name
    assert principal_from_certificate_subject(subject) == KafkaPrincipal("User", name)


def test_no_certificate_is_anonymous() -> None:
    assert principal_from_certificate_subject(None) is ANONYMOUS
    assert principal_from_certificate_subject(()) is ANONYMOUS


def test_subject_of_a_real_certificate(tmp_path) -> None:
    """A certificate made by the cryptography library, decoded by Python's ssl module the way
    getpeercert() decodes a peer's, maps to the name Java writes."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    decode_cert = getattr(ssl._ssl, "_test_decode_cert", None)  # type: ignore[attr-defined]
    if decode_cert is None:
        pytest.skip("this Python has no ssl._ssl._test_decode_cert")
    oid = x509.NameOID
    subject = x509.Name(
        [
            x509.NameAttribute(oid.COUNTRY_NAME, "US"),
            x509.NameAttribute(oid.STATE_OR_PROVINCE_NAME, "CA"),
            x509.NameAttribute(oid.LOCALITY_NAME, "San Francisco"),
            x509.NameAttribute(oid.ORGANIZATION_NAME, "Example, Inc."),
            x509.NameAttribute(oid.ORGANIZATIONAL_UNIT_NAME, "Eng"),
            x509.NameAttribute(oid.COMMON_NAME, "client"),
            x509.NameAttribute(oid.EMAIL_ADDRESS, "john@example.com"),
            x509.NameAttribute(oid.DOMAIN_COMPONENT, "example"),
            x509.NameAttribute(oid.USER_ID, "u1"),
        ]
    )
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    path = tmp_path / "client.pem"
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    decoded = decode_cert(str(path))["subject"]
    email = "1.2.840.113549.1.9.1=#1610" + b"john@example.com".hex()
    assert distinguished_name(decoded) == (
        f"UID=u1,DC=example,{email},CN=client,OU=Eng,O=Example\\, Inc.,L=San Francisco,ST=CA,C=US"
    )
    # The assumed string type (IA5String) is the one in the certificate.
    assert bytes.fromhex("1610" + b"john@example.com".hex()) in subject.public_bytes()
