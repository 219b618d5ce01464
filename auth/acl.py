"""Kafka ACLs: bindings, describe/delete filters and the authorization decision. Pure: no I/O.

The enums carry Kafka's wire codes (``org.apache.kafka.common.acl`` and ``.resource``); a code
this version does not know reads as UNKNOWN, as Kafka's ``fromCode`` does. ``TWO_PHASE_COMMIT``
(KIP-939) is listed so a newer client's code is not misread.

A binding to create (``validate_binding``, Kafka's ``AclControlManager.validateNewAcl`` and the
broker's CreateAcls checks, plus two of Flux's) has no UNKNOWN or ANY field, a LITERAL or
PREFIXED pattern, ALLOW or DENY, a non-empty resource name, the name "kafka-cluster" for the
CLUSTER resource and a "Type:name" principal. Flux also requires the wildcard name "*" to be
LITERAL (a PREFIXED "*" would match only names starting with "*", surely a mistake) and the
host to be "*" or an IP address: Kafka compares hosts with the client's IP address, so a host
name would silently never match.

A filter (``AclBindingFilter.matches``, Kafka's ``ResourcePatternFilter`` and
``AccessControlEntryFilter``): ANY (or None) matches any value of a field, and a name, principal
or host of None any string. For the resource name, pattern type ANY or the binding's own type
means that exact name; MATCH means every binding that would apply to a resource of that name:
LITERAL with the name or "*", and PREFIXED with a prefix of it. A filter with an UNKNOWN field
matches nothing, and ``validate_filter`` refuses it, as Kafka's DeleteAcls does.

The decision (``Authorizer.authorize``, Kafka's ``StandardAuthorizerData``):

- A super user ("User:alice" in ``super_users``) may do anything.
- The ACLs of a resource are those of its type whose pattern is LITERAL with its name, LITERAL
  "*", or PREFIXED with a prefix of its name. If there are none, for any principal, the answer
  is ``allow_everyone_if_no_acl_found``.
- Of those, an ACL applies to a request if its principal is the requester or "User:*", its host
  is the client's address or "*" (IPv6 forms compared as addresses), and its operation is the
  requested one, or ALL, or, for an ALLOW ACL only, implies it: READ, WRITE, DELETE and ALTER
  imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS. (DENY READ does not deny DESCRIBE.)
- Any applying DENY denies; otherwise any applying ALLOW allows; otherwise denied.

``AclIndex`` keeps bindings by resource type, literal name and prefix, so a decision reads only
the bindings that can apply (one dict probe per distinct prefix length in use), not all.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, TypeVar

from flux.auth.errors import InvalidAclError, InvalidPrincipalError
from flux.auth.principal import KafkaPrincipal

__all__ = [
    "CLUSTER_RESOURCE_NAME",
    "MAX_ACL_STRING_CHARS",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBinding",
    "AclBindingFilter",
    "AclIndex",
    "AclOperation",
    "AclPermissionType",
    "Authorizer",
    "PatternType",
    "ResourceType",
    "validate_binding",
    "validate_filter",
]

#: The resource name or host that matches any (with pattern type LITERAL for names).
WILDCARD = "*"
#: The principal of ACLs that apply to everyone.
WILDCARD_PRINCIPAL = "User:*"
#: The only name of the CLUSTER resource.
CLUSTER_RESOURCE_NAME = "kafka-cluster"

_Enum = TypeVar("_Enum", bound="_WireEnum")


class _WireEnum(IntEnum):
    """An enum of Kafka wire codes whose code 0 is UNKNOWN, returned for codes not listed."""

    @classmethod
    def _missing_(cls, value: object) -> Any:
        return cls(0) if isinstance(value, int) else None

    @classmethod
    def parse(cls: type[_Enum], text: str) -> _Enum:
        """The member named ``text`` in any case; UNKNOWN for other text (Kafka's
        ``fromString``)."""
        return cls.__members__.get(text.upper(), cls(0))


class ResourceType(_WireEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_WireEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_WireEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(_WireEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: Operations whose ALLOW also allows DESCRIBE, and DESCRIBE_CONFIGS.
_IMPLIES_DESCRIBE = frozenset(
    {
        AclOperation.DESCRIBE,
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DELETE,
        AclOperation.ALTER,
    }
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})


@dataclass(frozen=True)
class AclBinding:
    """One ACL: ``principal`` is (ALLOW or DENY) ``operation`` from ``host`` on the resources
    of ``resource_type`` matching ``resource_name`` under ``pattern_type``. Immutable."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def to_dict(self) -> dict[str, Any]:
        """For the metadata log: enums by name."""
        return {
            "resource_type": self.resource_type.name,
            "resource_name": self.resource_name,
            "pattern_type": self.pattern_type.name,
            "principal": self.principal,
            "host": self.host,
            "operation": self.operation.name,
            "permission": self.permission.name,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AclBinding:
        try:
            return cls(
                resource_type=ResourceType[data["resource_type"]],
                resource_name=str(data["resource_name"]),
                pattern_type=PatternType[data["pattern_type"]],
                principal=str(data["principal"]),
                host=str(data["host"]),
                operation=AclOperation[data["operation"]],
                permission=AclPermissionType[data["permission"]],
            )
        except KeyError as error:
            raise InvalidAclError(f"malformed ACL binding: no or unknown {error}") from None


#: Longest resource name or principal of an ACL (the controller's record strings hold 4096).
MAX_ACL_STRING_CHARS = 4096


def validate_binding(binding: AclBinding) -> None:
    """Raise ``InvalidAclError`` unless ``binding`` may be created (see the module docs)."""
    if binding.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidAclError(f"Invalid resourceType {binding.resource_type.name}")
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAclError(f"Invalid patternType {binding.pattern_type.name}")
    if binding.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidAclError(f"Invalid operation {binding.operation.name}")
    if binding.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise InvalidAclError(f"Invalid permissionType {binding.permission.name}")
    if not binding.resource_name:
        raise InvalidAclError("Resource name should not be empty")
    for name, value in (("resource name", binding.resource_name), ("principal", binding.principal)):
        if len(value) > MAX_ACL_STRING_CHARS:
            # The controller's records hold at most this many characters: a longer name used to
            # be refused only when the record was applied, as an error without an answer.
            raise InvalidAclError(f"The {name} is longer than {MAX_ACL_STRING_CHARS} characters")
    if (
        binding.resource_type == ResourceType.CLUSTER
        and binding.resource_name != CLUSTER_RESOURCE_NAME
    ):
        raise InvalidAclError(
            f"The only valid name for the CLUSTER resource is {CLUSTER_RESOURCE_NAME}"
        )
    if binding.resource_name == WILDCARD and binding.pattern_type != PatternType.LITERAL:
        raise InvalidAclError("The wildcard resource name '*' is only valid with LITERAL")
    try:
        KafkaPrincipal.parse(binding.principal)
    except InvalidPrincipalError as error:
        raise InvalidAclError(f"Invalid principal: {error}") from None
    if binding.host != WILDCARD and _canonical_ip(binding.host) is None:
        raise InvalidAclError(f"Invalid host {binding.host!r}: expected '*' or an IP address")


@dataclass(frozen=True)
class AclBindingFilter:
    """Selects bindings for DescribeAcls and DeleteAcls; ANY or None matches any value."""

    resource_type: ResourceType | None = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType | None = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation | None = AclOperation.ANY
    permission: AclPermissionType | None = AclPermissionType.ANY

    def matches(self, binding: AclBinding) -> bool:
        return (
            self._resource_matches(binding)
            and self.principal in (None, binding.principal)
            and self.host in (None, binding.host)
            and self.operation in (None, AclOperation.ANY, binding.operation)
            and self.permission in (None, AclPermissionType.ANY, binding.permission)
        )

    def _resource_matches(self, binding: AclBinding) -> bool:
        if self.resource_type not in (None, ResourceType.ANY, binding.resource_type):
            return False
        pattern = self.pattern_type
        if pattern not in (None, PatternType.ANY, PatternType.MATCH, binding.pattern_type):
            return False
        if self.resource_name is None:
            return True
        if pattern != PatternType.MATCH:
            return self.resource_name == binding.resource_name
        return _pattern_applies(binding, self.resource_name)


def validate_filter(acl_filter: AclBindingFilter) -> None:
    """Raise ``InvalidAclError`` for a filter with an UNKNOWN field (Kafka's DeleteAcls)."""
    if (
        acl_filter.resource_type == ResourceType.UNKNOWN
        or acl_filter.pattern_type == PatternType.UNKNOWN
    ):
        raise InvalidAclError("Unknown patternFilter.")
    if (
        acl_filter.operation == AclOperation.UNKNOWN
        or acl_filter.permission == AclPermissionType.UNKNOWN
    ):
        raise InvalidAclError("Unknown entryFilter.")


def _pattern_applies(binding: AclBinding, resource_name: str) -> bool:
    """Whether the binding's resource pattern covers a resource named ``resource_name``."""
    if binding.pattern_type == PatternType.LITERAL:
        return binding.resource_name in (resource_name, WILDCARD)
    if binding.pattern_type == PatternType.PREFIXED:
        return resource_name.startswith(binding.resource_name)
    return False


def _canonical_ip(text: str) -> str | None:
    """The address in one spelling (an IPv4-mapped IPv6 address as IPv4), or None."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def _host_matches(acl_host: str, host: str) -> bool:
    if acl_host == WILDCARD or acl_host == host:
        return True
    # Only IPv6 has several spellings of one address ("::1", "0:0:0:0:0:0:0:1", mapped IPv4).
    if ":" not in acl_host and ":" not in host:
        return False
    canonical = _canonical_ip(acl_host)
    return canonical is not None and canonical == _canonical_ip(host)


def _operation_matches(binding: AclBinding, operation: AclOperation) -> bool:
    if binding.operation in (operation, AclOperation.ALL):
        return True
    if binding.permission != AclPermissionType.ALLOW:
        return False
    if operation == AclOperation.DESCRIBE:
        return binding.operation in _IMPLIES_DESCRIBE
    if operation == AclOperation.DESCRIBE_CONFIGS:
        return binding.operation in _IMPLIES_DESCRIBE_CONFIGS
    return False


class AclIndex:
    """The bindings in force, indexed for ``Authorizer.authorize``: per resource type, literal
    names (including "*") to bindings, and prefixes to bindings with a count of the prefix
    lengths in use. Holds only LITERAL and PREFIXED bindings. Not thread-safe: one owner (the
    metadata listener) mutates it; readers on other threads need their own copy."""

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        self._all: dict[AclBinding, None] = {}
        self._literal: dict[ResourceType, dict[str, dict[AclBinding, None]]] = {}
        self._prefixed: dict[ResourceType, dict[str, dict[AclBinding, None]]] = {}
        self._prefix_lengths: dict[ResourceType, Counter[int]] = {}
        for binding in bindings:
            self.add(binding)

    def __len__(self) -> int:
        return len(self._all)

    def __iter__(self) -> Iterator[AclBinding]:
        return iter(self._all)

    def __contains__(self, binding: object) -> bool:
        return binding in self._all

    def _group(self, binding: AclBinding) -> dict[str, dict[AclBinding, None]]:
        if binding.pattern_type == PatternType.LITERAL:
            return self._literal.setdefault(binding.resource_type, {})
        if binding.pattern_type == PatternType.PREFIXED:
            return self._prefixed.setdefault(binding.resource_type, {})
        raise InvalidAclError(f"Invalid patternType {binding.pattern_type.name}")

    def add(self, binding: AclBinding) -> bool:
        """Add ``binding``; False if it was already there."""
        group = self._group(binding)
        if binding in self._all:
            return False
        self._all[binding] = None
        group.setdefault(binding.resource_name, {})[binding] = None
        if binding.pattern_type == PatternType.PREFIXED:
            lengths = self._prefix_lengths.setdefault(binding.resource_type, Counter())
            lengths[len(binding.resource_name)] += 1
        return True

    def remove(self, binding: AclBinding) -> bool:
        """Remove ``binding``; False if it was not there."""
        if binding not in self._all:
            return False
        del self._all[binding]
        group = self._group(binding)
        bindings = group[binding.resource_name]
        del bindings[binding]
        if not bindings:
            del group[binding.resource_name]
        if binding.pattern_type == PatternType.PREFIXED:
            lengths = self._prefix_lengths[binding.resource_type]
            lengths[len(binding.resource_name)] -= 1
            if not lengths[len(binding.resource_name)]:
                del lengths[len(binding.resource_name)]
        return True

    def matching(self, resource_type: ResourceType, resource_name: str) -> list[AclBinding]:
        """The bindings whose pattern covers this resource: LITERAL with its name or "*",
        PREFIXED with a prefix of it."""
        found: list[AclBinding] = []
        literal = self._literal.get(resource_type, {})
        found.extend(literal.get(resource_name, ()))
        if resource_name != WILDCARD:
            found.extend(literal.get(WILDCARD, ()))
        prefixed = self._prefixed.get(resource_type, {})
        for length in self._prefix_lengths.get(resource_type, ()):
            if length <= len(resource_name):
                found.extend(prefixed.get(resource_name[:length], ()))
        return found

    def find(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings ``acl_filter`` matches (DescribeAcls, DeleteAcls), in insertion order."""
        return [binding for binding in self._all if acl_filter.matches(binding)]


class Authorizer:
    """Kafka's StandardAuthorizer decision over a set of bindings (see the module docs).
    Immutable configuration; safe to share."""

    def __init__(
        self,
        super_users: frozenset[str] = frozenset(),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found

    def __repr__(self) -> str:
        return (
            f"Authorizer(super_users={sorted(self.super_users)!r}, "
            f"allow_everyone_if_no_acl_found={self.allow_everyone_if_no_acl_found})"
        )

    def authorize(
        self,
        acls: AclIndex | Iterable[AclBinding],
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str,
    ) -> bool:
        """Whether ``principal`` connected from ``host`` may do ``operation`` on the resource.
        ``acls`` is an ``AclIndex`` or any iterable of bindings (read in full)."""
        if operation in (AclOperation.UNKNOWN, AclOperation.ANY, AclOperation.ALL):
            raise ValueError(f"cannot authorize the operation {operation.name}")
        if resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise ValueError(f"cannot authorize on the resource type {resource_type.name}")
        if principal in self.super_users:
            return True
        if isinstance(acls, AclIndex):
            candidates: Iterable[AclBinding] = acls.matching(resource_type, resource_name)
        else:
            candidates = (
                binding
                for binding in acls
                if binding.resource_type == resource_type
                and _pattern_applies(binding, resource_name)
            )
        resource_has_acls = allowed = False
        for binding in candidates:
            resource_has_acls = True
            if (
                binding.principal in (principal, WILDCARD_PRINCIPAL)
                and _host_matches(binding.host, host)
                and _operation_matches(binding, operation)
            ):
                if binding.permission == AclPermissionType.DENY:
                    return False
                allowed = allowed or binding.permission == AclPermissionType.ALLOW
        if allowed:
            return True
        return not resource_has_acls and self.allow_everyone_if_no_acl_found
