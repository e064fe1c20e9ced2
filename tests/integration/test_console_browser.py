"""The web console in a real headless Chromium against a real three-node cluster and a real console process: a topic created on the page takes CLI-produced records shown with the right offsets, key filters and timestamp seeks work, a CLI consumer group's lag falls to 0 live on the page, offsets reset on the page (dry run first) are where the next CLI consume starts, bad input gets a clear page (never a 500), and a killed node and its partitions are marked, and a dynamic broker config is read and altered on the Brokers page."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

selenium = pytest.importorskip("selenium")
from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException, WebDriverException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

from raftlog.console.process import ConsoleChild  # noqa: E402


RAFTLOG = [sys.executable, "-m", "raftlog.cli"]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
# Set to a directory (e.g. docs) to refresh the README's screenshots from this run.
DOCS_DIR = os.environ.get("RAFTLOG_CONSOLE_SCREENSHOTS")
DOC_SHOTS = {"overview": "console-overview.png", "messages": "console-messages.png", "group": "console-group.png"}

pytestmark = pytest.mark.skipif(not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()),
                                reason="needs Debian's chromium and chromium-driver (scripts/test installs them)")


def cli(*args: str, bootstrap: str, check: bool = True, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RAFTLOG_BOOTSTRAP": bootstrap}
    env.pop("RAFTLOG_DEBUG", None)
    p = subprocess.run([*RAFTLOG, *args], input=stdin, capture_output=True, text=True, env=env, timeout=timeout)
    if check:
        assert p.returncode == 0, (args, p.stdout, p.stderr)
    return p


@pytest.fixture(scope="module")
def bootstrap(cluster: Any) -> str:
    return ",".join(cluster.client(n) for n in sorted(cluster.configs))


class Console:
    def __init__(self, child: ConsoleChild, url: str) -> None:
        self.child = child
        self.url = url


@pytest.fixture(scope="module")
def console(cluster: Any, bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """`raftlog console --port 0` as a child process (raftlog.console.process), stopped by PID."""
    child = ConsoleChild(bootstrap.split(","), [cluster.http(n) for n in sorted(cluster.configs)], port=0,
                         log_path=tmp_path_factory.mktemp("console") / "console.log")
    url = child.start(timeout_s=60)
    try:
        assert url is not None, child.problem
        yield Console(child, url)
    finally:
        code = child.stop()
        log = child.log_path.read_text(errors="replace")
        assert code == 0, f"the console did not stop cleanly ({code}): {log[-3000:]}"
        assert "Traceback" not in log, log[-3000:]


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("console-screenshots")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
                "--window-size=1280,800"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(120)  # the 10 MiB form post is slow for the renderer on a busy 2-core machine
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver: webdriver.Chrome, condition: Callable[[Any], Any], timeout_s: float = 20, what: str = "") -> Any:
    # A click that loads a new page leaves the old page's elements stale for a moment: retry.
    def retried(d: Any) -> Any:
        try:
            return condition(d)
        except WebDriverException as exc:
            # Chromium reports an element swapped out of the page between the find and the read
            # (an htmx swap) now and then as this "unknown error" instead of a stale reference:
            # the same race, retried the same way.
            if "does not belong to the document" not in (exc.msg or ""):
                raise
            return False

    return WebDriverWait(driver, timeout_s, poll_frequency=0.1,
                         ignored_exceptions=(StaleElementReferenceException, NoSuchElementException)
                         ).until(retried, message=what)


def shoot(driver: webdriver.Chrome, shots: Path, name: str) -> None:
    """Save the whole page (height grown to fit) under the test's temp dir (and docs/ when asked)."""
    width = driver.get_window_size()["width"]
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(width, min(max(800, height + 120), 3000))
    path = shots / f"{name}.png"
    driver.save_screenshot(str(path))
    driver.set_window_size(width, 800)
    assert path.stat().st_size > 1000
    if DOCS_DIR and name in DOC_SHOTS:
        Path(DOCS_DIR).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(DOCS_DIR) / DOC_SHOTS[name])


def text_of(driver: webdriver.Chrome, css: str) -> str:
    return driver.find_element(By.CSS_SELECTOR, css).text


def rows(driver: webdriver.Chrome) -> list[dict[str, str]]:
    """The message table's rows as {partition, offset, key, value}."""
    out = []
    for tr in driver.find_elements(By.CSS_SELECTOR, "#records tbody tr[data-offset]"):
        cells = tr.find_elements(By.TAG_NAME, "td")
        out.append({"partition": cells[0].text, "offset": cells[1].text, "key": cells[3].text, "value": cells[4].text})
    return out


def http_get(url: str) -> tuple[int, str, dict[str, str]]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode(errors="replace"), dict(exc.headers)


def consumed(bootstrap: str, topic: str, n: int, *extra: str) -> list[dict]:
    out = cli("consume", topic, "--format", "json", "--max-messages", str(n), "--timeout-ms", "15000", *extra,
              bootstrap=bootstrap).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------


def test_pages_are_keyboard_navigable_and_fit_a_phone(browser, console):
    browser.get(console.url + "/")
    body = browser.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.TAB)
    assert browser.switch_to.active_element.text == "Skip to content"
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    assert browser.switch_to.active_element.get_attribute("id") == "main"
    browser.get(console.url + "/topics")
    links = browser.find_elements(By.CSS_SELECTOR, "header nav a")
    assert [a.text for a in links] == ["Overview", "Topics", "Brokers", "Groups", "Share groups", "Transactions", "Offsets"]
    browser.set_window_size(390, 844)
    try:
        for path in ("/", "/topics", "/groups", "/topics/__consumer_offsets/messages"):
            browser.get(console.url + path)
            overflow = browser.execute_script("return document.documentElement.scrollWidth - window.innerWidth")
            assert overflow <= 1, (path, overflow)   # wide tables scroll inside their box, not the page
    finally:
        browser.set_window_size(1280, 800)


def test_create_topic_on_the_page_then_browse_cli_records(browser, console, bootstrap, shots):
    browser.get(console.url + "/topics")
    form = browser.find_element(By.ID, "create-topic")
    form.find_element(By.NAME, "name").send_keys("clicks")
    for name, value in (("partitions", "3"), ("replication_factor", "3")):
        field = form.find_element(By.NAME, name)
        field.clear()
        field.send_keys(value)
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    # The create answers at the controller's commit, then the topic's page loads: both slow at
    # CI's load (20 s once was not enough).
    wait(browser, lambda d: d.find_elements(By.ID, "created"), timeout_s=60, what="the created notice")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")) == 3
    assert "3 partitions, replication factor 3" in cli("topics", "describe", "clicks", bootstrap=bootstrap).stdout

    lines = "".join(f"user-{i % 5}:click-{i}\n" for i in range(40))
    cli("produce", "clicks", "--key-separator", ":", "--no-create", bootstrap=bootstrap, stdin=lines)
    truth = consumed(bootstrap, "clicks", 40, "--from-beginning")
    assert len(truth) == 40
    by_partition: dict[int, list[dict]] = {}
    for r in truth:
        by_partition.setdefault(r["partition"], []).append(r)
    p, recs = max(by_partition.items(), key=lambda kv: len(kv[1]))

    browser.get(console.url + f"/topics/clicks/messages?partition={p}&limit=100")
    shown = rows(browser)
    assert [(r["offset"], r["key"], r["value"]) for r in shown] == \
        [(str(r["offset"]), r["key"], r["value"]) for r in sorted(recs, key=lambda r: r["offset"])]
    shoot(browser, shots, "messages")

    # Filter by key over every partition: exactly that key's records.
    browser.get(console.url + "/topics/clicks/messages")
    browser.find_element(By.ID, "filter-key").send_keys("user-3")
    browser.find_element(By.ID, "browse-go").click()
    wait(browser, lambda d: "key=user-3" in d.current_url)
    got = sorted((int(r["partition"]), int(r["offset"])) for r in rows(browser))
    assert got == sorted((r["partition"], r["offset"]) for r in truth if r["key"] == "user-3") and len(got) == 8

    # Seek by timestamp: records produced after a moment, and only those.
    cut = int(time.time() * 1000) + 1
    wait_until = time.monotonic() + 1
    while time.monotonic() < wait_until and int(time.time() * 1000) <= cut:
        pass  # the next records must carry a later millisecond than `cut`
    cli("produce", "clicks", "--key-separator", ":", "--no-create", bootstrap=bootstrap,
        stdin="".join(f"late-{i}:after-{i}\n" for i in range(6)))
    iso = dt.datetime.fromtimestamp(cut / 1000, tz=dt.timezone.utc).isoformat(timespec="milliseconds")
    browser.get(console.url + "/topics/clicks/messages")
    Select(browser.find_element(By.ID, "seek")).select_by_value("timestamp")
    browser.find_element(By.ID, "timestamp").send_keys(iso)
    browser.find_element(By.ID, "browse-go").click()
    wait(browser, lambda d: "seek=timestamp" in d.current_url)
    values = sorted(r["value"] for r in rows(browser))
    assert values == sorted(f"after-{i}" for i in range(6)), values


def test_group_lag_falls_to_zero_live_and_reset_is_where_the_cli_resumes(browser, console, bootstrap, shots):
    cli("topics", "create", "orders", "--partitions", "2", "--replication-factor", "3", bootstrap=bootstrap)
    cli("produce", "orders", "--key-separator", ":", "--no-create", bootstrap=bootstrap,
        stdin="".join(f"k{i}:order-{i}\n" for i in range(30)))
    first = consumed(bootstrap, "orders", 5, "--group", "billing", "--from-beginning")
    assert len(first) == 5
    # More records after the group's commit, so it surely lags whatever the CLI committed (it
    # may commit past what it printed: its fetch position).
    cli("produce", "orders", "--key-separator", ":", "--no-create", bootstrap=bootstrap,
        stdin="".join(f"k{i}:order-{i}\n" for i in range(30, 50)))

    browser.get(console.url + "/groups")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-group="billing"]'), what="the group listed")
    described = json.loads(cli("groups", "describe", "billing", "--json", bootstrap=bootstrap).stdout)
    cli_lag = sum(p["lag"] for p in described["partitions"])
    assert cli_lag > 0 and int(text_of(browser, 'tr[data-group="billing"] td.lag')) == cli_lag
    browser.get(console.url + "/groups/billing")
    assert int(text_of(browser, "#total-lag")) == cli_lag   # the page says what the CLI says
    rest = consumed(bootstrap, "orders", 1000, "--group", "billing", "--timeout-ms", "3000")
    assert len(rest) >= 1
    # The page is not reloaded: its live stream brings the lag down.
    wait(browser, lambda d: d.find_element(By.ID, "total-lag").text == "0", timeout_s=30, what="lag 0 on the page")
    wait(browser, lambda d: d.execute_script(
        "const c = document.querySelector('#lag-chart canvas'); return c && c.width > 0"), what="a drawn lag chart")
    shoot(browser, shots, "group")

    # Reset to offset 3 on every partition: a dry run first, then applied.
    Select(browser.find_element(By.ID, "reset-strategy")).select_by_value("offset")
    browser.find_element(By.ID, "reset-value").send_keys("3")
    browser.find_element(By.ID, "reset-dry-run").click()
    wait(browser, lambda d: d.find_elements(By.ID, "reset-plan"), what="the dry-run plan")
    assert "Dry run" in text_of(browser, "#reset-result")
    assert int(text_of(browser, "#total-lag")) == 0     # nothing changed yet
    browser.find_element(By.CSS_SELECTOR, "#reset-apply button").click()
    wait(browser, lambda d: "Applied" in d.find_element(By.ID, "reset-result").text, what="the applied reset")
    planned = {}
    for tr in browser.find_elements(By.CSS_SELECTOR, "#reset-plan tbody tr"):
        topic, part, _was, new = (td.text for td in tr.find_elements(By.TAG_NAME, "td"))
        planned[int(part)] = int(new)
    assert set(planned) == {0, 1} and all(v == 3 for v in planned.values())
    starts: dict[int, int] = {}
    for r in consumed(bootstrap, "orders", 1000, "--group", "billing", "--timeout-ms", "3000"):
        starts.setdefault(r["partition"], r["offset"])
    assert starts == planned, (starts, planned)


def test_bad_input_gets_a_clear_page_never_a_500(browser, console, bootstrap, cluster):
    cli("topics", "create", "odd", "--partitions", "1", "--replication-factor", "3", bootstrap=bootstrap)
    cases = [
        ("/topics/no-such-topic", 404, "unknown topic: no-such-topic"),
        ("/topics/no-such-topic/messages", 404, "unknown topic"),
        ("/topics/odd/messages?partition=0&seek=offset&offset=999999", 200, "past the end of partition 0"),
        ("/topics/odd/messages?seek=timestamp&timestamp=last+tuesday", 400, "timestamp"),
        ("/topics/odd/messages?partition=9", 400, "not a partition of this topic"),
        ("/topics/odd/messages?limit=100000", 400, "limit"),
        ("/topics/odd/records/0/999/value", 400, "no record at offset 999"),
        ("/groups/no-such-group", 404, "unknown group: no-such-group"),
        ("/no/such/page", 404, "No such page"),
    ]
    for path, status, fragment in cases:
        code, body, headers = http_get(console.url + path)
        assert code == status and fragment in body and "Traceback" not in body, (path, code, body[-600:])
        assert float(headers["server-timing"].split("dur=")[1]) < 5000
    # A non-UTF-8 key, shown as hex with a note and downloadable as base64.
    with producer_for(bootstrap) as producer:
        producer.send("odd", b"plain", key=b"\xff\xfe\x00").result(timeout=20)
    browser.get(console.url + "/topics/odd/messages")
    key_cell = browser.find_element(By.CSS_SELECTOR, "#records tbody tr td.key")
    assert "not UTF-8" in key_cell.text and "ff fe 00" in key_cell.text
    href = key_cell.find_element(By.CSS_SELECTOR, "a.dl").get_attribute("href")
    code, body, _ = http_get(href)
    assert code == 200 and body == "//4A"
    # A 10 MiB value from the produce form: refused with a clear message, the page still works.
    browser.execute_script("document.querySelector('#produce-form textarea[name=value]').value = 'x'.repeat(10 * 1024 * 1024)")
    browser.find_element(By.CSS_SELECTOR, "#produce-form button").click()
    wait(browser, lambda d: d.find_elements(By.ID, "produce-error"), timeout_s=60, what="the produce error")
    assert "MESSAGE_TOO_LARGE" in text_of(browser, "#produce-error")
    # A form without its CSRF token is refused.
    code, body, _ = http_post(console.url + "/topics", {"name": "sneaky", "partitions": "1", "replication_factor": "1"})
    assert code == 403 and "security token" in body
    assert "sneaky" not in cli("topics", "list", bootstrap=bootstrap).stdout
    # And a test message with a header goes through and is shown where the page says.
    browser.get(console.url + "/topics/odd/messages")
    form = browser.find_element(By.ID, "produce-form")
    form.find_element(By.NAME, "key").send_keys("hello")
    form.find_element(By.NAME, "value").send_keys('{"n": 1}')
    form.find_element(By.NAME, "headers").send_keys("trace: abc")
    form.find_element(By.CSS_SELECTOR, "button").click()
    wait(browser, lambda d: d.find_elements(By.ID, "produced"))
    shown = rows(browser)
    assert len(shown) == 1 and shown[0]["key"] == "hello"
    offset = int(shown[0]["offset"])
    assert consumed(bootstrap, "odd", 1, "--partition", "0", "--offset", str(offset))[0]["value"] == '{"n": 1}'
    browser.get(console.url + "/topics/odd/messages?header=trace%3Dabc&format=json")
    assert [r["offset"] for r in rows(browser)] == [str(offset)]


def http_post(url: str, fields: dict[str, str]) -> tuple[int, str, dict[str, str]]:
    data = urllib.parse.urlencode(fields).encode()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, method="POST"), timeout=30) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode(errors="replace"), dict(exc.headers)


def producer_for(bootstrap: str) -> Any:
    from raftlog.client import Producer

    return Producer(bootstrap, request_timeout_ms=10_000)


def test_overview_then_a_killed_node_and_its_partitions_are_marked(browser, console, cluster, shots):
    browser.get(console.url + "/")
    assert text_of(browser, "#brokers-live") == "3 / 3"
    assert browser.find_elements(By.ID, "partitions-ok")
    wait(browser, lambda d: d.execute_script(
        "const c = document.querySelector('#rates-chart canvas'); return c && c.width > 0"), what="a drawn rates chart")
    shoot(browser, shots, "overview")

    victim = 3
    cluster.kill(victim)
    try:
        def marked(d: Any) -> bool:
            d.get(console.url + "/")
            row = d.find_element(By.ID, f"broker-{victim}")
            return row.get_attribute("data-state") == "down" and d.find_elements(By.CSS_SELECTOR, "#attention tr[data-partition]")

        wait(browser, marked, timeout_s=30, what=f"broker {victim} marked down with its partitions")
        assert text_of(browser, "#brokers-live") == "2 / 3"
        marked_rows = browser.find_elements(By.CSS_SELECTOR, "#attention tbody tr")
        assert any(f"broker {victim}" in tr.text for tr in marked_rows)
        assert int(text_of(browser, "#under-replicated")) + int(text_of(browser, "#offline-count")) >= 1
        # Once the controller's session for it times out, the metadata says fenced too.
        def fenced(d: Any) -> bool:
            d.get(console.url + "/")
            return "fenced" in d.find_element(By.ID, f"broker-{victim}").text.split()

        wait(browser, fenced, timeout_s=30, what=f"broker {victim} fenced in the metadata")
        shoot(browser, shots, "overview-node-down")
        browser.get(console.url + "/topics/clicks")
        states = [tr.get_attribute("class") for tr in browser.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")]
        assert states and all(s in ("under-replicated", "offline") for s in states), states
    finally:  # the later tests create topics of RF 3: the victim back and unfenced
        cluster.start(victim)
        cluster.wait_ready(timeout_s=90)


def test_broker_configs_page_reads_and_alters_a_dynamic_config(browser, console, cluster):
    """The Brokers page lists the dynamic broker configs; one set there for broker 2 is what
    broker 2 then answers to Kafka's DescribeConfigs, and removing it there takes it away."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})

    def num_partitions_of_2() -> str:
        res = ConfigResource(ResourceType.BROKER, "2")
        return admin.describe_configs([res])[res].result(timeout=30)["num.partitions"].value

    def row(name: str) -> str:
        for tr in browser.find_elements(By.CSS_SELECTOR, "#broker-configs tbody tr"):
            if tr.find_element(By.CSS_SELECTOR, "td").text == name:
                return tr.text
        raise AssertionError(f"no row {name}")

    def submit(action: str, value: str = "") -> None:
        browser.get(console.url + "/brokers/configs")
        form = browser.find_element(By.ID, "alter-broker-config")
        Select(form.find_element(By.NAME, "key")).select_by_visible_text("num.partitions")
        form.find_element(By.NAME, "broker").send_keys("2")
        form.find_element(By.NAME, "value").send_keys(value)
        form.find_element(By.CSS_SELECTOR, f"button[value={action}]").click()
        wait(browser, lambda d: d.find_elements(By.ID, "altered"), what="the altered notice")

    browser.get(console.url + "/brokers/configs")
    assert {"num.partitions", "compression.type", "max.connections"} <= {
        td.text for td in browser.find_elements(By.CSS_SELECTOR, "#broker-configs tbody tr td:first-child")}
    before = num_partitions_of_2()
    def shown(present: bool) -> bool:
        # The page reads the console's node's metadata image, which may apply the change a
        # moment after the controller answered: reload until it does.
        browser.get(console.url + "/brokers/configs")
        return ("2: 7" in row("num.partitions")) == present

    submit("set", "7")
    cluster.wait_for(lambda: shown(True), 30, "the page showing broker 2's num.partitions at 7")
    cluster.wait_for(lambda: num_partitions_of_2() == "7", 60, "broker 2's num.partitions at 7")
    submit("reset")
    cluster.wait_for(lambda: shown(False), 30, "the page without broker 2's num.partitions")
    cluster.wait_for(lambda: num_partitions_of_2() == before, 60, f"broker 2's num.partitions back at {before}")


def test_share_group_page_shows_members_and_in_flight_records(browser, console, bootstrap):
    from raftlog.client.share_consumer import ShareConsumer

    cli("topics", "create", "tasks", "--partitions", "1", "--replication-factor", "3", bootstrap=bootstrap)
    cli("produce", "tasks", "--no-create", bootstrap=bootstrap, stdin="".join(f"task-{i}\n" for i in range(5)))
    with ShareConsumer(bootstrap.split(","), "page-workers", auto_offset_reset="earliest",
                       acknowledgement_mode="explicit") as c:
        c.subscribe(["tasks"])
        held: list = []
        deadline = time.monotonic() + 60
        while len(held) < 5 and time.monotonic() < deadline:
            held += c.poll(timeout_ms=500)
        assert len(held) == 5, held
        browser.get(console.url + "/share-groups")
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-group="page-workers"]'),
             what="the share group listed")
        browser.get(console.url + "/share-groups/page-workers")
        assert text_of(browser, "#group-members") == "1"
        assert "tasks: 0" in text_of(browser, "#share-members")
        assert "0-4 ACQUIRED" in text_of(browser, 'tr[data-tp="tasks-0"] td[data-col="in-flight"]')
        for r in held:
            c.acknowledge(r, "accept")
        assert all(e is None for e in c.commit_sync().values())
        browser.get(console.url + "/share-groups/page-workers")
        assert text_of(browser, 'tr[data-tp="tasks-0"] td[data-col="start"]') == "5"
        assert text_of(browser, 'tr[data-tp="tasks-0"] td[data-col="in-flight"]') == "-"
        assert text_of(browser, "#total-lag") == "0"
    browser.get(console.url + "/share-groups/no-such-share-group")
    assert "Not found" in browser.page_source


def test_kip848_group_page_shows_epochs_and_assignment(browser, console, bootstrap, cluster):
    confluent = pytest.importorskip("confluent_kafka")
    cli("topics", "create", "kip848-orders", "--partitions", "2", "--replication-factor", "3", bootstrap=bootstrap)
    cli("produce", "kip848-orders", "--no-create", bootstrap=bootstrap, stdin="".join(f"o-{i}\n" for i in range(6)))
    c = confluent.Consumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": "kip848-page",
                            "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["kip848-orders"])
        got: list = []
        deadline = time.monotonic() + 60
        while len(got) < 6 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        assert len(got) == 6, got
        c.commit(asynchronous=False)
        browser.get(console.url + "/groups/kip848-page")
        assert text_of(browser, "#group-type") == "consumer"
        assert text_of(browser, "#group-assignor") in ("uniform", "range")
        cells = browser.find_elements(By.CSS_SELECTOR, '#members td[data-col="assigned"]')
        assert [c.text for c in cells] == ["kip848-orders-0, kip848-orders-1"]
        assert int(text_of(browser, '#members td[data-col="epoch"]')) >= 1
        assert text_of(browser, '#members td[data-col="revoking"]') == "-"
    finally:
        c.close()


def test_transactions_page_and_a_groups_lag_to_the_lso(browser, console, bootstrap, cluster):
    """An open transaction (confluent-kafka) on two partitions: the Transactions page shows its
    id, producer id, epoch and partitions, and per partition its first offset holding the LSO
    back below the high watermark; a group's page shows the lag to the LSO beside the lag to
    the log end. After the commit the transaction leaves the page and the LSO passes the marker."""
    confluent = pytest.importorskip("confluent_kafka")
    cli("topics", "create", "txn-page", "--partitions", "2", "--replication-factor", "3", bootstrap=bootstrap)
    cli("produce", "txn-page", "--no-create", "--partition", "0", bootstrap=bootstrap,
        stdin="".join(f"plain-{i}\n" for i in range(3)))  # offsets 0-2 of partition 0
    group = confluent.Consumer({"bootstrap.servers": cluster.kafka_bootstrap(), "group.id": "txn-page-readers"})
    try:  # the group has read the plain records; the first commit may meet a coordinator still loading
        cluster.wait_for(lambda: _committed(confluent, group, "txn-page"), 60, "the group's first commit")
    finally:
        group.close()
    p = confluent.Producer({"bootstrap.servers": cluster.kafka_bootstrap(), "transactional.id": "page-app"})
    p.init_transactions(60)
    p.begin_transaction()
    for i in range(2):
        p.produce("txn-page", f"t{i}".encode(), partition=0)
    p.produce("txn-page", b"t2", partition=1)
    assert p.flush(60) == 0
    try:
        browser.get(console.url + "/transactions")
        row = 'tr[data-tid="page-app"]'
        assert text_of(browser, f'{row} td[data-col="state"]') == "Ongoing"
        assert text_of(browser, f'{row} td[data-col="partitions"]') == "txn-page-0, txn-page-1"
        pid = text_of(browser, f'{row} td[data-col="producer-id"]')
        part0 = f'#txn-partitions tr[data-tp="txn-page-0"][data-producer="{pid}"]'
        assert text_of(browser, f'{part0} td[data-col="first-offset"]') == "3"
        assert text_of(browser, f'{part0} td[data-col="tid"]') == "page-app"
        assert (text_of(browser, f'{part0} td[data-col="lso"]'), text_of(browser, f'{part0} td[data-col="hw"]')) == ("3", "5")
        assert text_of(browser, '#txn-partitions tr[data-tp="txn-page-1"] td[data-col="first-offset"]') == "0"
        browser.get(console.url + "/groups/txn-page-readers")
        tp0 = 'tr[data-tp="txn-page-0"]'
        assert [text_of(browser, f'{tp0} td[data-col="{c}"]') for c in ("committed", "end", "lag", "lso", "stable-lag")] \
            == ["3", "5", "2", "3", "0"]
        p.commit_transaction(60)
    finally:
        p.flush(10)

    def finished(d: Any) -> bool:
        d.get(console.url + "/transactions")
        return not d.find_elements(By.CSS_SELECTOR, 'tr[data-tid="page-app"]')

    wait(browser, finished, 60, "the committed transaction leaves the page")
    assert "No open transactions." in text_of(browser, "#transactions")

    def stable_after_marker(d: Any) -> bool:
        d.get(console.url + "/groups/txn-page-readers")
        return text_of(d, 'tr[data-tp="txn-page-0"] td[data-col="lso"]') == "6"  # 2 records + the COMMIT marker

    wait(browser, stable_after_marker, 60, "the LSO passes the marker")


def _committed(confluent: Any, consumer: Any, topic: str) -> bool:
    try:
        consumer.commit(offsets=[confluent.TopicPartition(topic, 0, 3)], asynchronous=False)
    except confluent.KafkaException:
        return False  # NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS: retriable
    return True
