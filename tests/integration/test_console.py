"""The web console in a real headless Chromium (Debian's ``chromium`` and ``chromium-driver``
through selenium) against a real 3-node cluster written to by confluent-kafka.

Each page loads without browser console errors and shows the cluster's real state; the topic
and group pages update live (Server-Sent Events) when the test produces more; creating a topic
and resetting a group's offsets from the page change the cluster. Screenshots of every page go
to ``FLUX_CONSOLE_SCREENSHOTS`` (default: the test's temporary directory).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flux.cluster.launcher import NodeProcess

from tests.integration.helpers import wait_until

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
TOPIC = "orders"
GROUP = "billing"


def _http(node: NodeProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://{node.ready['broker_http']}{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json"} if data else {},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def _produce(bootstrap: str, count: int, start: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1})
    for index in range(start, start + count):
        value = json.dumps({"order": index, "amount": index * 10})
        producer.produce(TOPIC, key=f"customer-{index % 7}", value=value, partition=index % 3)
    assert producer.flush(30) == 0


def _commit(bootstrap: str, offsets: dict[int, int]) -> None:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False}
    )
    try:
        consumer.commit(
            offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()], asynchronous=False
        )
    finally:
        consumer.close()


class _Subscribers:
    """Webhook subscribers on one local HTTP server: ``address("ok")`` acknowledges every
    message, ``address("fail")`` answers each with a 500."""

    def __init__(self) -> None:
        import http.server
        import threading

        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                ok = self.path.startswith("/ok/")
                if ok:
                    outer.acknowledged += 1
                self.send_response(200 if ok else 500)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.acknowledged = 0
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def address(self, name: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/{name}"

    def __enter__(self) -> _Subscribers:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _join(bootstrap: str) -> Any:
    """A consumer of the group, subscribed and assigned every partition of the topic."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "client.id": "console-test-client",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([TOPIC])
    deadline = time.monotonic() + 30
    while not consumer.assignment():
        assert time.monotonic() < deadline, "the consumer was never assigned"
        consumer.poll(0.1)
    return consumer


def _end_offsets(node: NodeProcess, topic: str) -> int:
    status, answer = _http(node, "GET", f"/topics/{topic}?offsets=all")
    assert status == 200, answer
    return sum(p.get("high_watermark", 0) for p in answer["partitions"])


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,1000",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


class Console:
    """The page under test: navigation, waits on what it shows, console errors, screenshots."""

    def __init__(self, driver: Any, node: NodeProcess, shots: Path) -> None:
        self.driver = driver
        self.base = f"http://{node.ready['broker_http']}/ui/"
        self.shots = shots

    def open(self, fragment: str) -> None:
        before = self.driver.execute_script(
            "return document.body && document.body.dataset.rendered"
        )
        if self.driver.current_url.startswith(self.base):
            self.driver.execute_script(  # the same address again draws the page again
                "if (location.hash === arguments[0]) render(); else location.hash = arguments[0]",
                fragment,
            )
        else:
            self.driver.get(self.base + fragment)
        wait_until(
            lambda: (
                self.driver.execute_script("return document.body.dataset.rendered")
                not in (None, before)
            ),
            timeout_s=20,
        )

    def text(self, selector: str) -> str:
        """What the element shows ("" while there is none: pages re-render as they update)."""
        return self.driver.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText : ''",
            selector,
        )

    def count(self, selector: str) -> int:
        return self.driver.execute_script(
            "return document.querySelectorAll(arguments[0]).length", selector
        )

    def fill(self, form: str, **fields: str) -> None:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import Select

        for name, value in fields.items():
            element = self.driver.find_element(By.CSS_SELECTOR, f"{form} [name={name}]")
            if element.tag_name == "select":
                Select(element).select_by_value(value)
            else:
                element.clear()
                element.send_keys(value)
        self.driver.find_element(By.CSS_SELECTOR, f"{form} button[type=submit]").click()

    def errors(self) -> list[dict[str, Any]]:
        return [entry for entry in self.driver.get_log("browser") if entry["level"] == "SEVERE"]

    def shoot(self, name: str) -> None:
        self.shots.mkdir(parents=True, exist_ok=True)
        self.driver.execute_script("window.scrollTo(0, 0)")
        self.driver.save_screenshot(str(self.shots / f"{name}.png"))


def _number(text: str) -> int:
    """A figure the page shows; -1 while it shows none yet."""
    try:
        return int(text.replace(",", ""))
    except ValueError:
        return -1


def test_the_console_shows_the_cluster_live_and_acts_on_it(
    cluster_factory: Any, browser: Any, tmp_path: Path
) -> None:
    # A failing push subscriber is retried long enough to be seen retrying.
    nodes = cluster_factory(3, subscriber={"retry_count": 100, "retry_interval_ms": 200})
    node = nodes[0]
    bootstrap = ",".join(n.bootstrap_servers for n in nodes)
    status, answer = _http(
        node, "POST", "/topics", {"name": TOPIC, "partitions": 3, "replication_factor": 3}
    )
    assert status == 201, answer
    _produce(bootstrap, 30, 0)
    _commit(bootstrap, {0: 4, 1: 4, 2: 4})  # lag 30 - 12 = 18
    wait_until(lambda: _end_offsets(node, TOPIC) == 30)
    shots = Path(os.environ.get("FLUX_CONSOLE_SCREENSHOTS", tmp_path / "screenshots"))
    page = Console(browser, node, shots)

    # Cluster: the three brokers, all up, one of them the active controller.
    _, cluster = _http(node, "GET", "/cluster")
    partitions = sum(len(topic["partitions"]) for topic in cluster["topics"])  # offsets too
    page.open("#/cluster")
    # The live stream filled the cards.
    wait_until(lambda: _number(page.text("#sum-partitions")) == partitions)
    assert page.count("#brokers tbody tr") == 3
    assert page.text("#sum-brokers") == "3"
    assert page.text("#sum-under") == "0" and page.text("#sum-offline") == "0"
    assert page.text("#sum-controller") in {"1", "2", "3"}
    assert page.count("#voters tbody tr") == 3
    page.shoot("cluster")

    # Topics: the topic made by the test; a topic created from the page exists in the cluster.
    page.open("#/topics")
    assert page.count(f'#topics tr[data-topic="{TOPIC}"]') == 1
    wait_until(lambda: page.text(f'[data-messages="{TOPIC}"]') == "30")
    wait_until(lambda: page.text(f'[data-rate="{TOPIC}"]') == "0")  # the live stream's rate
    page.fill("#create-topic", name="made-in-browser", partitions="2", replication_factor="3")
    wait_until(lambda: page.count('#topics tr[data-topic="made-in-browser"]') == 1, timeout_s=20)
    status, created = _http(node, "GET", "/topics/made-in-browser")
    assert status == 200 and len(created["partitions"]) == 2, created
    page.shoot("topics")

    # Topic: partitions with leaders and offsets; the count follows new records live.
    page.open(f"#/topics/{TOPIC}")
    assert page.count("#partitions tbody tr") == 3
    wait_until(lambda: _number(page.text("#topic-end")) == 30)
    _produce(bootstrap, 15, 30)
    wait_until(lambda: _number(page.text("#topic-end")) == 45, timeout_s=20)  # no reload
    wait_until(lambda: page.text("#topic-rate") not in ("…", ""))
    page.fill("#alter-config", name="retention.ms", value="86400000")
    wait_until(lambda: "retention.ms" in page.text("#configs"), timeout_s=20)
    status, described = _http(node, "GET", f"/topics/{TOPIC}")
    assert described["config"].get("retention.ms") == "86400000", described
    page.shoot("topic")

    # Messages: newest first, JSON pretty-printed; a test message produced from the page.
    page.open(f"#/topics/{TOPIC}/messages?partition=1&format=json")
    offsets = [
        int(row.get_attribute("data-offset"))
        for row in browser.find_elements("css selector", "#messages tbody tr")
    ]
    assert offsets == sorted(offsets, reverse=True) and len(offsets) == 15, offsets
    assert '"amount": 430' in page.text("#messages")  # order 43 went to partition 1
    page.fill("#produce", key="k-browser", value="hello from the console")
    wait_until(lambda: "hello from the console" in page.text("#messages"), timeout_s=20)
    page.shoot("messages")

    # Group: the lag the test committed, following new records live; a reset takes effect.
    page.open(f"#/groups/{GROUP}")
    wait_until(lambda: _number(page.text("#group-lag")) == 46 - 12)  # 45 + the page's message
    assert page.count("#offsets tbody tr") == 3
    _produce(bootstrap, 6, 100)
    wait_until(lambda: _number(page.text("#group-lag")) == 52 - 12, timeout_s=20)

    def column(index: int) -> int:
        cells = browser.find_elements("css selector", f"#offsets tbody td:nth-child({index})")
        return sum(_number(cell.text) for cell in cells)

    # The table follows too, without a reload: high watermarks 46 -> 52, lags to 40.
    wait_until(lambda: (column(3), column(4), column(5)) == (12, 52, 52 - 12), timeout_s=20)
    # A member: its client and assignment; once it leaves, the offsets can be reset.
    member = _join(bootstrap)
    try:
        page.open(f"#/groups/{GROUP}")
        wait_until(lambda: "orders: 0, 1, 2" in page.text("#members"), timeout_s=20)
        assert page.text("#group-state") == "Stable" and page.text("#group-members") == "1"
        assert "console-test-client" in page.text("#members")
        page.shoot("group")
    finally:
        member.close()
    wait_until(lambda: _http(node, "GET", f"/groups/{GROUP}")[1]["state"] == "Empty")
    page.open(f"#/groups/{GROUP}")
    page.fill("#reset-offsets", topic=TOPIC, to="latest")
    wait_until(
        lambda: sum(o["lag"] for o in _http(node, "GET", f"/groups/{GROUP}")[1]["offsets"]) == 0,
        timeout_s=20,
    )
    wait_until(lambda: _number(page.text("#group-lag")) == 0, timeout_s=20)

    page.open("#/groups")
    assert page.count(f'#groups tr[data-group="{GROUP}"]') == 1

    # Push subscriptions: one subscriber acknowledges everything, one fails every message.
    with _Subscribers() as subscribers:
        ids = {}
        for name in ("ok", "fail"):
            status, answer = _http(
                node,
                "POST",
                "/subscribe",
                {"address": subscribers.address(name), "topics": [TOPIC], "readOld": True},
            )
            assert status in (200, 201), answer
            ids[name] = answer["id"]
        page.open("#/subscriptions")
        assert page.count("#subscriptions tbody tr") == 2
        page.open(f"#/subscriptions/{ids['ok']}")
        assert page.count("#deliveries tbody tr") == 3
        wait_until(lambda: subscribers.acknowledged >= 52, timeout_s=30)  # all of orders
        wait_until(
            lambda: (
                page.open(f"#/subscriptions/{ids['ok']}")
                or _number(page.text("#subscription-pending")) == 0
            ),
            timeout_s=30,
        )
        page.shoot("subscription")
        page.open(f"#/subscriptions/{ids['fail']}")
        wait_until(
            lambda: (
                page.open(f"#/subscriptions/{ids['fail']}")
                or "of 100 at offset 0" in page.text("#deliveries")
            ),
            timeout_s=30,
        )
    assert page.errors() == []


def test_a_reset_of_a_group_with_members_is_refused_and_bad_configs_are_named(
    cluster_factory: Any,
) -> None:
    """The HTTP endpoints behind the console's actions: clear errors, nothing changed."""
    [node] = cluster_factory(1)
    status, _ = _http(node, "POST", "/topics", {"name": TOPIC, "partitions": 3})
    assert status == 201
    _produce(node.bootstrap_servers, 9, 0)  # 3 records in each partition
    consumer = _join(node.bootstrap_servers)
    try:
        status, answer = _http(node, "POST", f"/groups/{GROUP}/offsets", {"topic": TOPIC, "to": 0})
        assert status == 409 and "active members" in answer["error"], answer
    finally:
        consumer.close()
    status, answer = _http(node, "POST", f"/groups/{GROUP}/offsets", {"topic": TOPIC, "to": "soon"})
    assert status == 400 and answer["field"] == "to", answer
    status, answer = _http(node, "POST", f"/groups/{GROUP}/offsets", {"topic": TOPIC, "to": 2})
    assert status == 200 and answer["offsets"] == {"0": 2, "1": 2, "2": 2}, answer
    status, answer = _http(node, "POST", f"/groups/{GROUP}/offsets", {"topic": TOPIC, "to": 99})
    assert answer["offsets"] == {"0": 3, "1": 3, "2": 3}, answer  # clamped into the log
    _, group = _http(node, "GET", f"/groups/{GROUP}")
    assert [(o["committed"], o["lag"]) for o in group["offsets"]] == [(3, 0)] * 3, group
    status, answer = _http(
        node, "PATCH", f"/topics/{TOPIC}/configs", {"configs": {"retention.msec": "5"}}
    )
    assert status == 400 and "retention.msec" in json.dumps(answer), answer
    status, answer = _http(node, "PATCH", f"/topics/{TOPIC}/configs", {"configs": []})
    assert status == 400 and answer["field"] == "configs", answer
    _, described = _http(node, "GET", f"/topics/{TOPIC}")
    assert "retention.msec" not in described["config"]


def test_messages_are_browsed_from_a_time(cluster_factory: Any) -> None:
    from confluent_kafka import Producer

    [node] = cluster_factory(1)
    producer = Producer({"bootstrap.servers": node.bootstrap_servers})
    base = 1_700_000_000_000
    for second in range(5):
        producer.produce("timed", value=f"at-{second}", partition=0, timestamp=base + second * 1000)
    assert producer.flush(30) == 0
    path = "/topics/timed/partitions/0/messages"
    status, answer = _http(node, "GET", f"{path}?timestamp={base + 2500}&limit=10")
    assert status == 200, answer
    assert [m["value"] for m in answer["messages"]] == ["at-3", "at-4"]
    _, answer = _http(node, "GET", f"{path}?timestamp={base}&limit=2")
    assert [m["offset"] for m in answer["messages"]] == [0, 1]
    _, answer = _http(node, "GET", f"{path}?timestamp={base + 60_000}")
    assert answer["messages"] == [] and answer["next_offset"] == 5, answer
    status, answer = _http(node, "GET", f"{path}?timestamp=soon")
    assert status == 400 and answer["field"] == "timestamp", answer


USER_V1 = {
    "type": "record",
    "name": "User",
    "namespace": "com.example",
    "fields": [{"name": "name", "type": "string"}],
}
#: Backward compatible with v1 (the new field has a default).
USER_V2 = {
    **USER_V1,
    "fields": [*USER_V1["fields"], {"name": "email", "type": ["null", "string"], "default": None}],
}
PAYMENT = {"type": "object", "properties": {"amount": {"type": "number"}}}
#: Refers to users-value version 1 by its full name.
ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "com.example",
    "fields": [{"name": "buyer", "type": "com.example.User"}],
}


def test_the_schemas_page_shows_subjects_versions_and_schemas(
    cluster_factory: Any, browser: Any, tmp_path: Path
) -> None:
    nodes = cluster_factory(3)
    node = nodes[0]
    ids = []
    for schema in (USER_V1, USER_V2):  # registered through another broker than the page's
        status, answer = _http(
            nodes[1],
            "POST",
            "/schemas/subjects/users-value/versions",
            {"schema": json.dumps(schema)},
        )
        assert status == 200, answer
        ids.append(answer["id"])
    status, answer = _http(
        nodes[2],
        "POST",
        "/schemas/subjects/payments-value/versions",
        {"schema": json.dumps(PAYMENT), "schemaType": "JSON"},
    )
    assert status == 200, answer
    payment_id = answer["id"]
    reference = {"name": "com.example.User", "subject": "users-value", "version": 1}
    status, answer = _http(
        node,
        "POST",
        "/schemas/subjects/orders-value/versions",
        {"schema": json.dumps(ORDER), "references": [reference]},
    )
    assert status == 200, answer
    status, answer = _http(node, "PUT", "/schemas/config/users-value", {"compatibility": "FULL"})
    assert status == 200, answer
    shots = Path(os.environ.get("FLUX_CONSOLE_SCREENSHOTS", tmp_path / "screenshots"))
    page = Console(browser, node, shots)

    # The list: each subject with its versions, latest id and type (filled in after the table).
    page.open("#/schemas")
    assert page.count("#subjects tbody tr") == 3
    assert page.count('#subjects tr[data-subject="users-value"]') == 1
    wait_until(lambda: page.text('[data-latest-id="users-value"]') == str(ids[1]))
    versions = browser.find_elements("css selector", '[data-versions="users-value"] a')
    assert [link.text for link in versions] == ["1", "2"]
    assert page.text('[data-latest-version="users-value"]') == "2"
    assert page.text('[data-type="users-value"]') == "AVRO"
    wait_until(lambda: page.text('[data-type="payments-value"]') == "JSON")
    assert page.text('[data-latest-id="payments-value"]') == str(payment_id)
    page.shoot("schemas")

    # A subject: its versions, its compatibility level, the latest schema pretty-printed.
    page.open("#/schemas/users-value")
    assert page.text("#subject-name") == "users-value"
    assert page.text("#subject-compatibility") == "FULL"
    assert page.count("#versions tbody tr") == 2
    assert page.text("#schema-version") == "2"
    assert page.text("#schema-text") == json.dumps(USER_V2, indent=2)
    assert page.count("#schema-references") == 0 and "\nnull\n" not in page.text("main")
    page.shoot("schema")

    # Another version from its link; a subject without its own level shows the global one.
    browser.find_element("css selector", '#versions tr[data-version="1"] a').click()
    wait_until(lambda: page.text("#schema-version") == "1", timeout_s=20)
    assert page.text("#schema-text") == json.dumps(USER_V1, indent=2)
    assert "users-value?version=1" in browser.current_url
    page.open("#/schemas/payments-value")
    assert page.text("#subject-compatibility") == "BACKWARD"
    assert '"amount": {' in page.text("#schema-text")
    page.open("#/schemas/orders-value")
    assert "com.example.User → users-value v1" in page.text("#schema-references")
    assert "com.example.User → users-value v1" in page.text("#versions")
    page.open("#/schemas/nobody-value")
    assert "40401" in page.text("#page-error") or "not found" in page.text("#page-error")
    assert [e for e in page.errors() if "nobody-value" not in e["message"]] == []
