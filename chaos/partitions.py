"""Network partition shapes and the packet filter rules that make them: pure, no I/O.

A **shape** is the set of directed links whose packets are dropped: ``(sender, receiver)``,
each a node id or ``CLIENT`` (the test's clients, which all run in one place: the root network
namespace of the netns backend). Everything not named keeps flowing. The shapes, after
Jepsen's ``nemesis/partition`` family:

=============  =========================================================================
``split``      ``minority`` and the other nodes cannot reach each other, both ways
               (majority/minority when ``minority`` is smaller than half); clients reach
               every node.
``isolate``    one node reaches nobody and nobody reaches it, clients included: a machine
               unplugged (what the Docker backend's partition does).
``one-way``    packets from ``senders`` to ``receivers`` are dropped, the other way they
               pass; clients reach every node. With TCP this still breaks connections in
               both directions (the handshake or the acknowledgements of one side are
               lost), but each side notices differently: the senders' requests time out,
               the receivers' connection attempts hang without an answer.
``bridge``     the nodes other than ``middle`` fall into two halves that cannot reach each
               other, both ways; ``middle`` reaches both (3 nodes: A <-> B <-> C, A -/- C);
               clients reach every node.
=============  =========================================================================

``filter_rules(shape, addresses, client_address)`` turns a shape into the rules of each node's
network namespace; every node gets a (possibly empty) rule set, so applying the rules of the
empty shape heals everything. A drop ``(x, y)`` is filtered where the packet *arrives*, on
``y``'s INPUT by ``x``'s source address, so the sender sees a silent loss (as on a real
network), not the ``EPERM`` an OUTPUT drop gives; only a drop towards ``CLIENT``, which has no
namespace of ours, is filtered on the sending node's OUTPUT. ``iptables_restore_input`` and
``nft_input`` render a node's rules for ``iptables-restore`` or ``nft -f``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "CLIENT",
    "SHAPES",
    "Endpoint",
    "FilterRule",
    "Shape",
    "bridge",
    "filter_rules",
    "healed",
    "iptables_restore_input",
    "isolate",
    "nft_input",
    "one_way",
    "split",
]

#: The endpoint of the test's clients in a drop.
CLIENT = "client"
Endpoint = int | str
SHAPES = ("split", "isolate", "one-way", "bridge")
#: The nftables table our rules live in (the node namespaces hold nothing else).
NFT_TABLE = "flux_chaos"


@dataclass(frozen=True, slots=True)
class Shape:
    """A partition: ``drops`` are the ``(sender, receiver)`` pairs whose packets are lost."""

    name: str
    drops: frozenset[tuple[Endpoint, Endpoint]]

    def __post_init__(self) -> None:
        for sender, receiver in self.drops:
            assert sender != receiver, f"a drop from {sender} to itself"

    def reaches(self, sender: Endpoint, receiver: Endpoint) -> bool:
        """Packets from ``sender`` arrive at ``receiver``."""
        return (sender, receiver) not in self.drops

    def describe(self) -> dict[str, Any]:
        """For the history: the shape's name and its drops, sorted."""
        return {"shape": self.name, "drops": [list(pair) for pair in _sorted(self.drops)]}


def healed() -> Shape:
    """The shape without any drop."""
    return Shape("healed", frozenset())


def split(minority: Collection[int], nodes: Collection[int]) -> Shape:
    """``minority`` and the rest cut from each other, both ways; clients reach everyone."""
    side = set(minority)
    _check_nodes(side, nodes)
    rest = set(nodes) - side
    if not side or not rest:
        raise ValueError("a split needs nodes on both sides")
    return Shape("split", _both_ways(side, rest))


def isolate(node: int, nodes: Collection[int]) -> Shape:
    """``node`` cut from every other node and from the clients, both ways."""
    _check_nodes({node}, nodes)
    others: set[Endpoint] = {n for n in nodes if n != node}
    others.add(CLIENT)
    return Shape("isolate", _both_ways({node}, others))


def one_way(senders: Collection[int], receivers: Collection[int]) -> Shape:
    """Packets from each of ``senders`` to each of ``receivers`` dropped; back they pass."""
    if set(senders) & set(receivers):
        raise ValueError(f"nodes {sorted(set(senders) & set(receivers))} on both ends")
    drops = frozenset((s, r) for s in senders for r in receivers)
    if not drops:
        raise ValueError("a one-way partition needs senders and receivers")
    return Shape("one-way", drops)


def bridge(middle: int, nodes: Collection[int]) -> Shape:
    """The other nodes (in id order) split into two halves cut from each other, both ways;
    ``middle`` reaches both halves. Needs at least 3 nodes."""
    _check_nodes({middle}, nodes)
    others = sorted(n for n in nodes if n != middle)
    if len(others) < 2:
        raise ValueError("a bridge needs at least 3 nodes")
    half = len(others) // 2
    return Shape("bridge", _both_ways(set(others[:half]), set(others[half:])))


def _both_ways(
    left: Iterable[Endpoint], right: Iterable[Endpoint]
) -> frozenset[tuple[Endpoint, Endpoint]]:
    right = list(right)
    return frozenset(pair for a in left for b in right for pair in ((a, b), (b, a)))


def _check_nodes(named: Collection[int], nodes: Collection[int]) -> None:
    unknown = set(named) - set(nodes)
    if unknown:
        raise ValueError(f"nodes {sorted(unknown)} are not among {sorted(nodes)}")


def _sorted(pairs: Iterable[tuple[Endpoint, Endpoint]]) -> list[tuple[Endpoint, Endpoint]]:
    return sorted(pairs, key=lambda pair: tuple((isinstance(e, str), str(e)) for e in pair))


@dataclass(frozen=True, slots=True, order=True)
class FilterRule:
    """Drop packets on ``chain`` (``input``: arriving from ``address``; ``output``: leaving
    for ``address``)."""

    chain: Literal["input", "output"]
    address: str


def filter_rules(
    shape: Shape, addresses: Mapping[int, str], client_address: str
) -> dict[int, list[FilterRule]]:
    """Each node's rules (every node of ``addresses``, an empty list where nothing is
    dropped), sorted; see the module docstring for where a drop is filtered."""
    rules: dict[int, set[FilterRule]] = {node: set() for node in addresses}
    for sender, receiver in shape.drops:
        if receiver == CLIENT:
            assert isinstance(sender, int), "the clients are never cut from themselves"
            rules[_known(sender, addresses)].add(FilterRule("output", client_address))
        else:
            assert isinstance(receiver, int), receiver
            source = client_address if sender == CLIENT else addresses[_known(sender, addresses)]
            rules[_known(receiver, addresses)].add(FilterRule("input", source))
    return {node: sorted(node_rules) for node, node_rules in sorted(rules.items())}


def _known(node: Endpoint, addresses: Mapping[int, str]) -> int:
    if not isinstance(node, int) or node not in addresses:
        raise ValueError(f"no address for node {node!r} (known: {sorted(addresses)})")
    return node


def iptables_restore_input(rules: Sequence[FilterRule]) -> str:
    """``iptables-restore`` input replacing the whole filter table with ``rules``."""
    lines = ["*filter", ":INPUT ACCEPT [0:0]", ":FORWARD ACCEPT [0:0]", ":OUTPUT ACCEPT [0:0]"]
    for rule in rules:
        if rule.chain == "input":
            lines.append(f"-A INPUT -s {rule.address}/32 -j DROP")
        else:
            lines.append(f"-A OUTPUT -d {rule.address}/32 -j DROP")
    lines.append("COMMIT")
    return "\n".join(lines) + "\n"


def nft_input(rules: Sequence[FilterRule]) -> str:
    """``nft -f`` input replacing the table ``NFT_TABLE`` with ``rules`` (the ``add`` before
    ``delete`` makes the first application work too)."""
    lines = [
        f"add table ip {NFT_TABLE}",
        f"delete table ip {NFT_TABLE}",
        f"table ip {NFT_TABLE} {{",
        "  chain input {",
        "    type filter hook input priority 0; policy accept;",
        *(f"    ip saddr {r.address} drop" for r in rules if r.chain == "input"),
        "  }",
        "  chain output {",
        "    type filter hook output priority 0; policy accept;",
        *(f"    ip daddr {r.address} drop" for r in rules if r.chain == "output"),
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"
