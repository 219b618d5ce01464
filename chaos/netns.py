"""A private network of Linux network namespaces for a local chaos cluster (partitions without
Docker).

``netns_network(nodes)`` builds, for one run::

    root namespace (the test and its clients)          namespace <name>-br
      fx<token> 10.A.B.254/24  ---- veth ----  client ---+
                                                       br0 (bridge)
    namespace <name>-n1: eth0 10.A.B.1/24 --- veth --- n1 ---+
    namespace <name>-n2: eth0 10.A.B.2/24 --- veth --- n2 ---+   ...

Each node process runs in its own namespace (``command_prefix(node)``: ``ip netns exec NS``)
and binds and advertises its namespace's address; the clients in the root namespace reach every
node over the bridge. The bridge lives in a namespace of its own, not in the root namespace:
bridged traffic there would pass the root namespace's FORWARD chain, which Docker sets to DROP.
``apply(shape)`` installs a ``flux.chaos.partitions.Shape`` as packet filter rules inside the
node namespaces (``iptables-restore``, or ``nft`` where iptables is missing), replacing all
earlier rules; ``heal()`` removes them. The root namespace's own rules and routes are never
touched: only one veth link with one address is added there.

Parallel runs (pytest -n auto, several runs of ``fluxctl chaos``) never collide: names carry the
creating process id and a random token, and the /24 is drawn at random from 10.64.0.0/10 under
a file lock among those that overlap no route of the root namespace. Everything is removed by
``close()`` (the context manager calls it, also on errors); namespaces left behind by a process
that died before it could clean up (SIGKILL) are removed, with any process still inside them, by
the next ``netns_network`` on the machine (``sweep_stale``).

Requirements: Linux, root, ``ip`` (iproute2) and ``iptables-restore`` or ``nft``;
``netns_unavailable_reason()`` names what is missing, and ``netns_network`` refuses with
``NetnsUnavailableError`` saying it.

Thread-safety: one thread drives a network (the nemesis); ``close`` after it finished.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .partitions import Shape, filter_rules, healed, iptables_restore_input, nft_input

__all__ = [
    "NetnsError",
    "NetnsNetwork",
    "NetnsUnavailableError",
    "netns_network",
    "netns_unavailable_reason",
    "stale_namespaces",
    "sweep_stale",
]

#: Namespace names: ``flux-<pid>-<token>-br`` and ``flux-<pid>-<token>-n<node>``.
NAME_PREFIX = "flux"
_NAME_PATTERN = re.compile(rf"^{NAME_PREFIX}-(\d+)-([0-9a-f]+)-(br|n\d+)$")
#: Subnets are /24s drawn from this block (10.64.0.0 - 10.127.255.255).
SUBNET_POOL = ipaddress.ip_network("10.64.0.0/10")
#: The clients' address in each subnet (node n gets .n).
CLIENT_HOST = 254
#: Draws of a free /24 before giving up.
SUBNET_ATTEMPTS = 200
#: Serializes choosing a subnet and adding its route among the runs on this machine.
LOCK_FILE = Path("/run/lock/flux-chaos-netns.lock")
#: One ``ip`` / ``iptables-restore`` command gives up after this long.
COMMAND_TIMEOUT_S = 30.0
#: Linux's interface name limit (IFNAMSIZ - 1).
LINK_NAME_MAX = 15


class NetnsError(RuntimeError):
    """A command building or changing the network failed; the message quotes it."""


class NetnsUnavailableError(NetnsError):
    """This machine (or user) cannot run the netns backend; the message says why."""


def netns_unavailable_reason() -> str | None:
    """Why the netns backend cannot run here (not Linux, not root, ``ip`` or a packet filter
    tool missing, namespaces refused), or None when it can."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add); run as root or use --docker"
    if shutil.which("ip") is None:
        return "the `ip` command (apt-get install iproute2) is missing"
    if _filter_tool() is None:
        return "neither iptables-restore (apt-get install iptables) nor nft (nftables) is found"
    return None


def _filter_tool() -> str | None:
    for tool in ("iptables-restore", "nft"):
        if shutil.which(tool) is not None:
            return tool
    return None


def _run(argv: Sequence[str], *, stdin: str | None = None, check: bool = True) -> str:
    """Run a command; its stdout. ``NetnsError`` with its stderr if it failed and ``check``."""
    try:
        done = subprocess.run(
            list(argv),
            input=stdin,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise NetnsError(f"{' '.join(argv)}: {error}") from None
    if check and done.returncode != 0:
        raise NetnsError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


class NetnsNetwork:
    """The namespaces, links and addresses of one run (see the module docstring)."""

    def __init__(self, nodes: Sequence[int], *, token: str | None = None) -> None:
        assert nodes and all(1 <= node < CLIENT_HOST for node in nodes), nodes
        self.nodes = sorted(nodes)
        self.token = token or secrets.token_hex(3)
        self.name = f"{NAME_PREFIX}-{os.getpid()}-{self.token}"
        self.bridge_namespace = f"{self.name}-br"
        self.client_link = f"fx{self.token}{os.getpid()}"[:LINK_NAME_MAX]
        self.subnet: ipaddress.IPv4Network | None = None
        self.shape = healed()
        self._ip = shutil.which("ip") or "ip"
        self._filter = _filter_tool() or "iptables-restore"
        self._created: list[str] = []  # namespaces that exist, in creation order

    # -- addresses ----------------------------------------------------------------------------

    def namespace(self, node: int) -> str:
        return f"{self.name}-n{node}"

    def address(self, node: int) -> str:
        """The node's address (it binds and advertises it)."""
        assert self.subnet is not None, "the network is not created"
        return str(self.subnet.network_address + node)

    @property
    def addresses(self) -> dict[int, str]:
        return {node: self.address(node) for node in self.nodes}

    @property
    def client_address(self) -> str:
        """The root namespace's address in the subnet: where the clients' packets come from."""
        assert self.subnet is not None, "the network is not created"
        return str(self.subnet.network_address + CLIENT_HOST)

    def command_prefix(self, node: int) -> list[str]:
        """Prepended to a node's command line: runs it in the node's namespace (``ip netns
        exec`` execs the command, so the process id is the node's)."""
        return [self._ip, "netns", "exec", self.namespace(node)]

    # -- building and removing ------------------------------------------------------------------

    def create(self) -> None:
        """Build the namespaces, the bridge and the links; on failure remove what was built."""
        try:
            self._add_namespace(self.bridge_namespace)
            self._ip_in(self.bridge_namespace, "link", "add", "br0", "type", "bridge")
            self._ip_in(self.bridge_namespace, "link", "set", "br0", "up")
            with _subnet_lock():
                self.subnet = _free_subnet(self._routes())
                self._add_client_link()
            for node in self.nodes:
                self._add_node(node)
        except BaseException:
            self.close()
            raise

    def _add_namespace(self, namespace: str) -> None:
        _run([self._ip, "netns", "add", namespace])
        self._created.append(namespace)
        self._ip_in(namespace, "link", "set", "lo", "up")

    def _add_client_link(self) -> None:
        _run([self._ip, "link", "add", self.client_link, "type", "veth", "peer", "name",
              "client", "netns", self.bridge_namespace])  # fmt: skip
        self._ip_in(self.bridge_namespace, "link", "set", "client", "master", "br0", "up")
        _run([self._ip, "addr", "add", f"{self.client_address}/24", "dev", self.client_link])
        _run([self._ip, "link", "set", self.client_link, "up"])

    def _add_node(self, node: int) -> None:
        namespace = self.namespace(node)
        self._add_namespace(namespace)
        port = f"n{node}"
        self._ip_in(self.bridge_namespace, "link", "add", port, "type", "veth", "peer", "name",
                    "eth0", "netns", namespace)  # fmt: skip
        self._ip_in(self.bridge_namespace, "link", "set", port, "master", "br0", "up")
        self._ip_in(namespace, "addr", "add", f"{self.address(node)}/24", "dev", "eth0")
        self._ip_in(namespace, "link", "set", "eth0", "up")

    def close(self) -> None:
        """Remove the client link and every namespace of this network (their links go with
        them). Idempotent; errors are ignored so that everything gets its chance. Processes
        still inside a namespace keep it alive until they exit: stop the nodes first."""
        _run([self._ip, "link", "del", self.client_link], check=False)
        for namespace in reversed(self._created):
            _run([self._ip, "netns", "del", namespace], check=False)
        self._created.clear()

    def _ip_in(self, namespace: str, *argv: str) -> None:
        _run([self._ip, "-n", namespace, *argv])

    def _routes(self) -> list[ipaddress.IPv4Network]:
        """Every IPv4 prefix the root namespace routes or owns (all tables)."""
        return _route_prefixes(_run([self._ip, "-j", "-4", "route", "show", "table", "all"]))

    # -- partitions -----------------------------------------------------------------------------

    def apply(self, shape: Shape) -> dict[str, Any]:
        """Make ``shape`` the network's only partition (rules of earlier shapes go); what was
        installed, for the history."""
        rules = filter_rules(shape, self.addresses, self.client_address)
        for node, node_rules in rules.items():
            if self._filter == "nft":
                command, text = ["nft", "-f", "-"], nft_input(node_rules)
            else:
                # -w: the legacy variant shares one lock file among all namespaces.
                command = ["iptables-restore", "-w", str(int(COMMAND_TIMEOUT_S))]
                text = iptables_restore_input(node_rules)
            _run([*self.command_prefix(node), *command], stdin=text)
        self.shape = shape
        return shape.describe()

    def heal(self) -> None:
        """Remove every rule: each node reaches every other and the clients."""
        self.apply(healed())


def _route_prefixes(routes_json: str) -> list[ipaddress.IPv4Network]:
    prefixes = []
    for route in json.loads(routes_json or "[]"):
        destination = route.get("dst", "")
        if destination in ("", "default"):
            continue
        with contextlib.suppress(ValueError):
            prefixes.append(ipaddress.ip_network(destination, strict=False))
    return prefixes


def _free_subnet(
    taken: Sequence[ipaddress.IPv4Network], rng: random.Random | None = None
) -> ipaddress.IPv4Network:
    """A random /24 of ``SUBNET_POOL`` overlapping none of ``taken``."""
    rng = rng or random.Random(secrets.randbits(64))
    count = SUBNET_POOL.num_addresses // 256
    for _ in range(SUBNET_ATTEMPTS):
        candidate = ipaddress.ip_network(
            (int(SUBNET_POOL.network_address) + 256 * rng.randrange(count), 24)
        )
        if not any(candidate.overlaps(prefix) for prefix in taken):
            return candidate
    raise NetnsError(f"no free /24 in {SUBNET_POOL} after {SUBNET_ATTEMPTS} draws")


@contextlib.contextmanager
def _subnet_lock() -> Iterator[None]:
    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_namespaces(names: Sequence[str], alive: Callable[[int], bool] = _pid_alive) -> list[str]:
    """The names among ``names`` made by this module for a process that no longer runs."""
    stale = []
    for name in names:
        match = _NAME_PATTERN.match(name)
        if match and not alive(int(match.group(1))):
            stale.append(name)
    return stale


def sweep_stale() -> list[str]:
    """Remove the namespaces of runs whose process died without cleaning up (SIGKILL), after
    SIGKILLing the node processes still inside them (they were that run's nodes); the names
    removed."""
    ip = shutil.which("ip") or "ip"
    listing = _run([ip, "netns", "list"], check=False)
    names = [line.split()[0] for line in listing.splitlines() if line.strip()]
    stale = stale_namespaces(names)
    for name in stale:
        for pid_text in _run([ip, "netns", "pids", name], check=False).split():
            with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
                os.kill(int(pid_text), signal.SIGKILL)
        _run([ip, "netns", "del", name], check=False)
    return stale


@contextlib.contextmanager
def netns_network(nodes: Sequence[int]) -> Iterator[NetnsNetwork]:
    """A new network for ``nodes`` (see the module docstring), removed on exit."""
    reason = netns_unavailable_reason()
    if reason is not None:
        raise NetnsUnavailableError(f"the netns backend cannot run: {reason}")
    sweep_stale()
    network = NetnsNetwork(nodes)
    network.create()
    try:
        yield network
    finally:
        network.close()
