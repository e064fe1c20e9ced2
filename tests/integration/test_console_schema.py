"""The console's schema views in a real headless Chromium, against three real nodes and a real
console process given the registry: the message browser decodes an Avro, a Protobuf and a JSON
Schema value (and shows a record naming an unknown id as undecodable, with the reason), the
subjects page lists versions, a diff of two versions, compatibility set on the page, and a
message produced from the page with a schema is read back decoded."""

from __future__ import annotations

import base64
import http.client
import json
import urllib.parse
from typing import Any, Iterator

import pytest

pytest.importorskip("selenium")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

from raftlog.console.process import ConsoleChild  # noqa: E402
from test_console_browser import CHROMEDRIVER, CHROMIUM, Console, browser, wait  # noqa: E402,F401

pytestmark = pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER), reason="needs chromium")

AVRO_V1 = json.dumps({"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"}]})
AVRO_V2 = json.dumps({"type": "record", "name": "User", "fields": [
    {"name": "name", "type": "string"}, {"name": "age", "type": "int", "default": 0}]})
PROTO = 'syntax = "proto3";\nmessage Point { int32 x = 1; string label = 2; }\n'
JSON_SCHEMA = json.dumps({"type": "object", "properties": {"sku": {"type": "string"}}})


def rest(cluster, method, path, body=None):
    address = urllib.parse.urlparse(cluster.schema_registry(1))
    conn = http.client.HTTPConnection(address.hostname, address.port, timeout=60)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body).encode(),
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data else None
    finally:
        conn.close()


@pytest.fixture(scope="module")
def console(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """`raftlog console --schema-registry ...` as a child process, stopped by PID."""
    child = ConsoleChild([cluster.client(n) for n in sorted(cluster.configs)],
                         [cluster.http(n) for n in sorted(cluster.configs)], port=0,
                         log_path=tmp_path_factory.mktemp("console") / "console.log")
    child.argv += ["--schema-registry", cluster.schema_registry(2)]
    url = child.start(timeout_s=60)
    try:
        assert url is not None, child.problem
        yield Console(child, url)
    finally:
        code = child.stop()
        log = child.log_path.read_text(errors="replace")
        assert code == 0 and "Traceback" not in log, log[-3000:]


@pytest.fixture(scope="module")
def records(cluster) -> dict[str, int]:
    """A topic with one record of each format and one naming an unknown id; the schema ids."""
    [cid] = [c["cluster_id"] for c in rest(cluster, "GET", "/v3/clusters")[1]["data"]]
    assert rest(cluster, "POST", f"/v3/clusters/{cid}/topics",
                {"topic_name": "typed", "partitions_count": 1, "replication_factor": 3})[0] == 200
    ids = {}
    for subject, body in (("typed-value", {"schema": AVRO_V1}), ("typed-value", {"schema": AVRO_V2}),
                          ("points-value", {"schema": PROTO, "schemaType": "PROTOBUF"}),
                          ("skus-value", {"schema": JSON_SCHEMA, "schemaType": "JSON"})):
        status, got = rest(cluster, "POST", f"/subjects/{subject}/versions", body)
        assert status == 200, got
        ids[subject] = got["id"]
    for value in ({"type": "AVRO", "subject": "typed-value", "data": {"name": "ann", "age": 41}},
                  {"type": "PROTOBUF", "schema_id": ids["points-value"], "data": {"x": 7, "label": "seven"}},
                  {"type": "JSONSCHEMA", "schema_id": ids["skus-value"], "data": {"sku": "A-1"}},
                  {"type": "BINARY", "data": base64.b64encode(b"\x00\x00\x00\x27\x0f!").decode()}):
        status, got = rest(cluster, "POST", f"/v3/clusters/{cid}/topics/typed/records", {"partition_id": 0, "value": value})
        assert status == 200, got
    return ids


def test_the_browser_decodes_each_format_and_says_why_one_does_not(browser, console, records):  # noqa: F811
    browser.get(f"{console.url}/topics/typed/messages?partition=0&seek=beginning&format=schema")
    values = wait(browser, lambda d: [e.text for e in d.find_elements(By.CSS_SELECTOR, "pre.val")
                                      if e.text and e.text != "null"] or None, 60, "decoded values")
    shown = "\n".join(values)
    assert '"name": "ann"' in shown and '"age": 41' in shown
    assert '"x": 7' in shown and '"label": "seven"' in shown
    assert '"sku": "A-1"' in shown
    notes = " ".join(e.text for e in browser.find_elements(By.CSS_SELECTOR, ".note"))
    assert f"AVRO schema {records['typed-value']}" in notes and f"PROTOBUF schema {records['points-value']}" in notes
    assert "undecodable: unknown schema id 9999" in notes


def test_subjects_versions_diff_and_compatibility_on_the_page(browser, console, records):  # noqa: F811
    browser.get(f"{console.url}/schemas")
    rows = wait(browser, lambda d: {r.get_attribute("data-subject"): r.text
                                    for r in d.find_elements(By.CSS_SELECTOR, "#subjects tbody tr[data-subject]")} or None,
                30, "subjects")
    assert {"typed-value", "points-value", "skus-value"} <= set(rows)
    browser.find_element(By.LINK_TEXT, "typed-value").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "a[data-version='2']"), 30, "versions")
    browser.get(f"{console.url}/schemas/typed-value?v=2&diff=1")
    diff = wait(browser, lambda d: d.find_element(By.ID, "diff").text, 30, "the diff")
    assert any(line.startswith("+") and '"age"' in line for line in diff.splitlines()), diff
    Select(browser.find_element(By.NAME, "level")).select_by_visible_text("FULL")
    browser.find_element(By.CSS_SELECTOR, "#config-form button").click()
    assert wait(browser, lambda d: d.find_element(By.ID, "level").text == "FULL", 30, "the new level")


def test_produce_with_a_schema_from_the_page(browser, console, records, cluster):  # noqa: F811
    browser.get(f"{console.url}/topics/typed/messages?partition=0")
    form = wait(browser, lambda d: d.find_element(By.ID, "produce-form"), 30, "the produce form")
    form.find_element(By.NAME, "partition").send_keys("0")
    form.find_element(By.NAME, "value").send_keys('{"name": "zed", "age": 3}')
    form.find_element(By.NAME, "subject").send_keys("typed-value")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(browser, lambda d: d.find_elements(By.ID, "produced"), 60, "the produced notice")
    browser.get(f"{console.url}/topics/typed/messages?partition=0&seek=beginning&format=schema")
    shown = wait(browser, lambda d: "\n".join(e.text for e in d.find_elements(By.CSS_SELECTOR, "pre.val")) or None,
                 60, "values")
    assert '"name": "zed"' in shown
    assert rest(cluster, "GET", "/config/typed-value")[1] == {"compatibilityLevel": "FULL"}
