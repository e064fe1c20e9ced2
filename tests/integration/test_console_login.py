"""A console started for a secure cluster (SASL in --command-config) sends visitors to a login form, refuses forms without the session's CSRF token, never shows or logs the password, and answers a login the client cannot perform with a clear page; a plaintext console needs no login. (A real login against a secure cluster: test_secure_cli.py.)"""

from __future__ import annotations

import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from raftlog.cli.cluster import free_ports
from raftlog.console.process import ConsoleChild

PASSWORD = "correct-horse-battery-staple"


def start(tmp_path: Path, *extra: str) -> ConsoleChild:
    (dead,) = free_ports(1)  # no cluster: the login gate and the forms need none
    child = ConsoleChild([f"127.0.0.1:{dead}"], [], port=0, log_path=tmp_path / "console.log")
    child.argv += list(extra)
    return child


@pytest.fixture
def secure_console(tmp_path: Path) -> Iterator[tuple[str, ConsoleChild]]:
    props = tmp_path / "client.properties"
    props.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=admin\n"
                     f"sasl.password={PASSWORD}-file\nssl.ca.location={tmp_path}/ca.pem\n")
    child = start(tmp_path, "--command-config", str(props), "--timeout", "1")
    url = child.start(timeout_s=60)
    try:
        assert url is not None, child.problem
        yield url, child
    finally:
        assert child.stop() == 0


def opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))


def fetch(o: urllib.request.OpenerDirector, url: str, data: dict | None = None) -> tuple[int, str, str]:
    body = None if data is None else urllib.parse.urlencode(data).encode()
    try:
        with o.open(url, data=body, timeout=30) as r:
            return r.status, r.geturl(), r.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.geturl(), exc.read().decode()


def csrf_of(page: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, page[:1000]
    return match.group(1)


def test_secure_console_asks_for_a_login_and_guards_its_forms(secure_console):
    url, child = secure_console
    o = opener()
    status, where, page = fetch(o, url + "/topics?x=1")
    assert status == 200 and "/login?next=" in where and 'name="password"' in page
    # A login form without the session's token is refused before anything else happens.
    status, _, page = fetch(opener(), url + "/login", {"username": "alice", "password": PASSWORD})
    assert status == 403 and "security token" in page
    # With it: the client is asked to log in as alice; the file's CA does not exist, and it says so.
    status, _, page = fetch(o, url + "/login?next=/topics", {"csrf": csrf_of(page_of(o, url)), "username": "alice",
                                                             "password": PASSWORD})
    assert status == 401 and "login failed" in page and "ssl.ca.location" in page, page[-1500:]
    assert PASSWORD not in page and "Traceback" not in page
    # Still not logged in: pages keep sending us to the form.
    status, where, _ = fetch(o, url + "/groups")
    assert "/login" in where
    status, _, page = fetch(o, url + "/topics", {"name": "t", "partitions": "1", "replication_factor": "1"})
    assert status == 401
    log = child.log_path.read_text(errors="replace")
    assert PASSWORD not in log and "Traceback" not in log


def page_of(o: urllib.request.OpenerDirector, url: str) -> str:
    return fetch(o, url + "/login")[2]


def test_plaintext_console_needs_no_login_and_says_when_the_cluster_is_away(tmp_path: Path):
    child = start(tmp_path, "--timeout", "1")
    url = child.start(timeout_s=60)
    try:
        assert url is not None, child.problem
        status, where, page = fetch(opener(), url + "/")
        assert status == 503 and "/login" not in where and "Traceback" not in page
        assert "no raftlog node answered at 127.0.0.1:" in page and "is the cluster up?" in page, page[-1500:]
        status, _, page = fetch(opener(), url + "/healthz")
        assert status == 200
    finally:
        assert child.stop() == 0
