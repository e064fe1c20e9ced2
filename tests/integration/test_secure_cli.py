"""`raftlog cluster up --secure` makes a CA, node certificates and an admin whose login is <data-dir>/client.properties (0600); the README's Security section works as written; that one file works as is with every CLI command (--command-config or RAFTLOG_COMMAND_CONFIG), with both Python clients (security=) and with `kcat -F`; the web console it starts logs visitors in with their SCRAM credentials; users and ACLs are managed from the CLI and enforced; wrong or missing settings get one clear line; no log holds the admin's password."""

from __future__ import annotations

import http.cookiejar
import json
import os
import queue
import random
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
import trio

from raftlog import aio
from raftlog.base.acl import AclBinding
from raftlog.base.client_properties import load_properties
from raftlog.base.errors import (
    ClusterAuthorizationFailedError,
    SaslAuthenticationFailedError,
    TopicAuthorizationFailedError,
)
from raftlog.cli.cluster import PORT_STRIDE, port_in_use
from raftlog.client import Admin, Consumer, Producer
from raftlog.client.errors import SslAuthenticationFailedError

RAFTLOG = [sys.executable, "-m", "raftlog.cli"]
BOB_PASSWORD = "bob-" + "x7Qe1-secret"
CAROL_PASSWORD = "carol-" + "Zr8-secret"


def _free_base_port() -> int:
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 30000, PORT_STRIDE)
        if not any(port_in_use("127.0.0.1", base + k) for k in range(5)):
            return base
    raise AssertionError("no free port range found")


class SecureCluster:
    """`raftlog cluster up --secure --nodes 1` (or `args` of `cluster up`, run in `cwd`) in a
    subprocess, stopped by its PID."""

    def __init__(self, data_dir: Path, base_port: int, args: list[str] | None = None, cwd: Path | None = None) -> None:
        self.data_dir = data_dir
        self.base_port = base_port
        args = args or ["--secure", "--nodes", "1", "--data-dir", str(data_dir), "--console-port", "0"]
        self.proc = subprocess.Popen(
            [*RAFTLOG, "cluster", "up", *args, "--base-port", str(base_port), "--no-restart"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, cwd=cwd,
        )  # fmt: skip
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.proc.stdout:
            for line in self.proc.stdout:
                self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_line(self, pattern: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r} within {timeout_s} s: {self.lines}") from None
            if line is None:
                raise AssertionError(f"cluster up exited ({self.proc.wait()}) before {pattern!r}: {self.lines}")
            self.lines.append(line)
            if re.search(pattern, line):
                return line

    def node_pids(self) -> list[int]:
        return [int(m.group(1)) for line in self.lines if (m := re.match(r"^\d+\s+\S+\s+\S+.*?\s(\d+)\s+/", line))]

    def console(self) -> tuple[str, int]:
        line = next(line for line in self.lines if line.startswith("console: "))
        match = re.match(r"^console: (http://\S+) \(pid (\d+), log ", line)
        assert match, line
        return match.group(1), int(match.group(2))

    @property
    def properties(self) -> Path:
        return self.data_dir / "client.properties"

    @property
    def client(self) -> str:
        return f"127.0.0.1:{self.base_port + 1}"

    @property
    def kafka(self) -> str:
        return f"127.0.0.1:{self.base_port}"

    @property
    def http(self) -> str:
        return f"127.0.0.1:{self.base_port + 4}"

    def stop(self) -> None:
        pids = self.node_pids() + [pid for line in self.lines
                                   if (m := re.search(r"^console: .*\(pid (\d+),", line)) for pid in [int(m.group(1))]]
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for pid in pids:  # only if the supervisor failed to stop them
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._reader.join(10)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    sup = SecureCluster(tmp_path_factory.mktemp("secure-cli") / "data", _free_base_port())
    try:
        sup.wait_line(r"^cluster \S+ is up$", 90)
        sup.wait_line(r"^stop: Ctrl-C", 5)
        yield sup
    finally:
        sup.stop()


def raftlog(cluster: SecureCluster, *args: str, config: Path | None = None, stdin: str = "",
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    extra = ["--command-config", str(config)] if config is not None else []
    environment = {**os.environ, "RAFTLOG_BOOTSTRAP": cluster.client, **(env or {})}
    environment.pop("RAFTLOG_COMMAND_CONFIG", None) if env is None or "RAFTLOG_COMMAND_CONFIG" not in env else None
    return subprocess.run([*RAFTLOG, *args, *extra], input=stdin, capture_output=True, text=True, timeout=120,
                          env=environment)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout


def one_line_failure(result: subprocess.CompletedProcess[str], code: str) -> str:
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()  # (produce prints its summary line first)
    assert lines and lines[-1].startswith("raftlog: ") and code in lines[-1], result.stderr
    assert "Traceback" not in result.stderr
    return lines[-1]


def admin_password(cluster: SecureCluster) -> str:
    return load_properties(cluster.properties)["sasl.password"]


def login_as(cluster: SecureCluster, tmp: Path, user: str, password: str) -> Path:
    props = load_properties(cluster.properties)
    props.update({"sasl.username": user, "sasl.password": password})
    path = tmp / f"{user}.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    path.chmod(0o600)
    return path


def test_first_run_writes_a_private_admin_login(cluster):
    mode = stat.S_IMODE(cluster.properties.stat().st_mode)
    assert mode == 0o600, oct(mode)
    props = load_properties(cluster.properties)
    assert props["security.protocol"] == "SASL_SSL" and props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert props["sasl.username"] == "admin" and len(props["sasl.password"]) >= 24
    assert Path(props["ssl.ca.location"]).is_file()
    out = "\n".join(cluster.lines)
    assert str(cluster.properties) in out and f"kcat -F {cluster.properties}" in out
    assert props["sasl.password"] not in out
    # The password is stored nowhere else: only salted keys went to the nodes.
    for path in cluster.data_dir.rglob("*"):
        if path.is_file() and path != cluster.properties:
            assert props["sasl.password"].encode() not in path.read_bytes(), path


def test_every_command_takes_the_file_or_the_environment(cluster):
    out = ok(raftlog(cluster, "topics", "create", "cli-t", "-p", "2", "-r", "1", config=cluster.properties))
    assert "created topic cli-t" in out
    env = {"RAFTLOG_COMMAND_CONFIG": str(cluster.properties)}
    assert "cli-t" in ok(raftlog(cluster, "topics", "list", env=env)).split()
    ok(raftlog(cluster, "produce", "cli-t", "--no-create", stdin="one\ntwo\n", env=env))
    got = ok(raftlog(cluster, "consume", "cli-t", "--from-beginning", "-n", "2", env=env))
    assert sorted(got.split()) == ["one", "two"]
    status = json.loads(ok(raftlog(cluster, "--command-config", str(cluster.properties), "cluster", "status", "--json")))
    assert status["controller_id"] == 1
    # Without it: one line saying what to do.
    line = one_line_failure(raftlog(cluster, "topics", "list", "--timeout", "3"), "")
    assert "--command-config" in line


def test_wrong_settings_get_one_clear_line(cluster, tmp_path):
    wrong = login_as(cluster, tmp_path, "admin", "not-the-password")
    line = one_line_failure(raftlog(cluster, "topics", "list", config=wrong), "SASL_AUTHENTICATION_FAILED")
    assert "not-the-password" not in line and admin_password(cluster) not in line
    no_ca = tmp_path / "no-ca.properties"
    no_ca.write_text("".join(l for l in cluster.properties.read_text().splitlines(True) if "ssl.ca" not in l))
    one_line_failure(raftlog(cluster, "topics", "list", config=no_ca), "SSL_AUTHENTICATION_FAILED")
    typo = tmp_path / "typo.properties"
    typo.write_text(cluster.properties.read_text() + "sasl.pasword=x\n")
    result = raftlog(cluster, "topics", "list", config=typo)
    assert result.returncode == 2 and "sasl.pasword" in result.stderr and admin_password(cluster) not in result.stderr


def test_users_and_acls_from_the_cli(cluster, tmp_path):
    admin = cluster.properties
    for topic in ("bob-ok", "bob-no"):
        ok(raftlog(cluster, "topics", "create", topic, "-p", "1", "-r", "1", config=admin))
    ok(raftlog(cluster, "users", "add", "bob", "--password-stdin", stdin=BOB_PASSWORD + "\n", config=admin))
    assert "bob" in ok(raftlog(cluster, "users", "list", config=admin))
    ok(raftlog(cluster, "acls", "add", "--allow", "bob", "--operation", "write", "--operation", "describe",
               "--topic", "bob-", "--resource-pattern-type", "prefixed", config=admin))
    ok(raftlog(cluster, "acls", "add", "--deny", "User:bob", "--operation", "write", "--topic", "bob-no",
               config=admin))
    listed = json.loads(ok(raftlog(cluster, "acls", "list", "--principal", "bob", "--json", config=admin)))
    assert sorted((a["permission"], a["operation"], a["resource_name"]) for a in listed) == [
        ("allow", "describe", "bob-"), ("allow", "write", "bob-"), ("deny", "write", "bob-no")]
    bob = login_as(cluster, tmp_path, "bob", BOB_PASSWORD)
    ok(raftlog(cluster, "produce", "bob-ok", "--no-create", stdin="hi\n", config=bob))
    one_line_failure(raftlog(cluster, "produce", "bob-no", "--no-create", stdin="hi\n", config=bob),
                     "TOPIC_AUTHORIZATION_FAILED")
    one_line_failure(raftlog(cluster, "topics", "create", "bob-new", config=bob), "TOPIC_AUTHORIZATION_FAILED")
    one_line_failure(raftlog(cluster, "users", "list", config=bob), "CLUSTER_AUTHORIZATION_FAILED")
    # The deny goes: now bob may write there too.
    assert "removed 1 ACL" in ok(raftlog(cluster, "acls", "remove", "--deny", "bob", "--topic", "bob-no", config=admin))
    ok(raftlog(cluster, "produce", "bob-no", "--no-create", stdin="hi\n", config=bob))
    ok(raftlog(cluster, "users", "remove", "bob", config=admin))
    one_line_failure(raftlog(cluster, "topics", "list", config=bob), "SASL_AUTHENTICATION_FAILED")
    one_line_failure(raftlog(cluster, "users", "remove", "bob", config=admin), "RESOURCE_NOT_FOUND")


def test_users_add_refuses_plaintext_and_a_password_argument(cluster, tmp_path):
    plain = tmp_path / "plain.properties"
    plain.write_text("security.protocol=PLAINTEXT\n")
    result = raftlog(cluster, "users", "add", "carol", "--password-stdin", stdin="pw\n", config=plain)
    assert result.returncode == 1 and "without TLS" in result.stderr
    result = raftlog(cluster, "users", "add", "carol", "--password", "pw", config=cluster.properties)
    assert result.returncode == 2  # no such option: a password never goes on the command line


def test_the_python_clients_take_the_same_file_and_keys(cluster, tmp_path):
    props = load_properties(cluster.properties)
    with Admin(cluster.client, security=str(cluster.properties)) as admin:
        admin.create_topic("py-t", 1, 1)
    with Producer(cluster.client, security=props) as producer:
        assert producer.send("py-t", b"blocking").result(timeout=30)[0] == 0

    async def aio_round_trip() -> list[bytes]:
        async with aio.Producer(cluster.client, security=props) as producer:
            await (await producer.send("py-t", b"trio"))
        async with aio.Consumer(cluster.client, security=props, auto_offset_reset="earliest") as consumer:
            consumer.assign([("py-t", 0)])
            got: list[bytes] = []
            with trio.fail_after(30):
                while len(got) < 2:
                    got += [r.value for r in await consumer.poll(1000)]
            return got

    assert sorted(trio.run(aio_round_trip)) == [b"blocking", b"trio"]
    with Consumer(cluster.client, security=props, auto_offset_reset="earliest") as consumer:
        consumer.assign([("py-t", 0)])
        deadline = time.monotonic() + 30
        seen: list[bytes] = []
        while len(seen) < 2 and time.monotonic() < deadline:
            seen += [r.value for r in consumer.poll(1000)]
    assert sorted(seen) == [b"blocking", b"trio"]


def test_a_refused_login_fails_at_once_not_at_the_deadline(cluster):
    wrong = {**load_properties(cluster.properties), "sasl.password": "wrong-password"}
    # Long deadlines: had the client retried, it would fail with a timeout type, much later.
    with Admin(cluster.client, security=wrong, request_timeout_ms=120_000) as admin:
        with pytest.raises(SaslAuthenticationFailedError):
            admin.list_topics()
    with Producer(cluster.client, security=wrong, max_block_ms=120_000) as producer:
        with pytest.raises(SaslAuthenticationFailedError):
            producer.send("py-t", b"x")
    with Consumer(cluster.client, security=wrong, request_timeout_ms=120_000) as consumer:
        consumer.assign([("py-t", 0)])
        with pytest.raises(SaslAuthenticationFailedError):
            for _ in range(60):
                consumer.poll(500)
    no_ca = {k: v for k, v in load_properties(cluster.properties).items() if k != "ssl.ca.location"}
    with Admin(cluster.client, security=no_ca, request_timeout_ms=120_000) as admin:
        with pytest.raises(SslAuthenticationFailedError):
            admin.list_topics()

    async def aio_refused() -> None:
        async with aio.Admin(cluster.client, security=wrong, request_timeout_ms=120_000) as admin:
            with pytest.raises(SaslAuthenticationFailedError):
                await admin.list_topics()
        async with aio.Producer(cluster.client, security=wrong, max_block_ms=120_000) as producer:
            with pytest.raises(SaslAuthenticationFailedError):
                await producer.send("py-t", b"x")

    trio.run(aio_refused)


def test_an_acl_refusal_reaches_the_python_producer(cluster, tmp_path):
    admin_props = load_properties(cluster.properties)
    with Admin(cluster.client, security=admin_props) as admin:
        admin.create_topic("py-denied", 1, 1)
        admin.upsert_user("dave", BOB_PASSWORD)
    dave = {**admin_props, "sasl.username": "dave", "sasl.password": BOB_PASSWORD}
    # Without DESCRIBE the metadata answer refuses the topic: send raises at once (not after
    # max_block_ms); with DESCRIBE but no WRITE, the record's future fails instead.
    with Producer(cluster.client, security=dave, max_block_ms=120_000) as producer:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("py-denied", b"x")
    with Admin(cluster.client, security=admin_props) as admin:
        admin.create_acls([AclBinding("topic", "py-denied", "literal", "User:dave", "*", "describe", "allow")])
    with Producer(cluster.client, security=dave, max_block_ms=120_000) as producer:
        # Idempotence needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic (Kafka's rule).
        with pytest.raises(ClusterAuthorizationFailedError):
            producer.send("py-denied", b"x").result(timeout=60)
    with Producer(cluster.client, security=dave, max_block_ms=120_000, enable_idempotence=False) as producer:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("py-denied", b"x").result(timeout=60)


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (scripts/test installs it as root)")
def test_kcat_reads_the_same_file(cluster):
    ok(raftlog(cluster, "topics", "create", "kcat-t", "-p", "1", "-r", "1", config=cluster.properties))
    kcat = ["kcat", "-F", str(cluster.properties), "-b", cluster.kafka]
    produced = subprocess.run([*kcat, "-P", "-t", "kcat-t"], input="via-kcat\n", capture_output=True, text=True,
                              timeout=60)
    assert produced.returncode == 0, produced.stderr
    listed = subprocess.run([*kcat, "-L", "-J"], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "kcat-t" in [t["topic"] for t in json.loads(listed.stdout)["topics"]]
    consumed = subprocess.run([*kcat, "-C", "-t", "kcat-t", "-o", "beginning", "-c", "1", "-e"],
                              capture_output=True, text=True, timeout=60)
    assert consumed.returncode == 0 and consumed.stdout.split() == ["via-kcat"], consumed.stderr
    # The same file with a wrong password: kcat is refused.
    wrong = cluster.data_dir.parent / "wrong.properties"
    wrong.write_text(cluster.properties.read_text().replace(admin_password(cluster), "wrong-password"))
    refused = subprocess.run(["kcat", "-F", str(wrong), "-b", cluster.kafka, "-L", "-m", "10"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "SASL authentication error" in refused.stderr, refused.stderr


def _browser() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))


def _fetch(opener: urllib.request.OpenerDirector, url: str, form: dict[str, str] | None = None) -> tuple[int, str]:
    body = None if form is None else urllib.parse.urlencode(form).encode()
    try:
        with opener.open(url, data=body, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()


def _csrf(page: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', page)
    assert match, page[:500]
    return match.group(1)


def test_the_console_logs_in_with_a_users_scram_credentials(cluster):
    ok(raftlog(cluster, "topics", "create", "console-t", "-p", "1", "-r", "1", config=cluster.properties))
    url, _pid = cluster.console()
    # A wrong password: refused by the cluster, said on the page, never echoed.
    browser = _browser()
    status, page = _fetch(browser, url + "/login")
    status, page = _fetch(browser, url + "/login", {"csrf": _csrf(page), "username": "admin",
                                                    "password": "not-the-password"})
    assert status == 401 and "SASL_AUTHENTICATION_FAILED" in page and "not-the-password" not in page
    # The admin's own login: the console then acts as the admin.
    status, page = _fetch(browser, url + "/login")
    status, page = _fetch(browser, url + "/login?next=/topics", {"csrf": _csrf(page), "username": "admin",
                                                                 "password": admin_password(cluster)})
    assert status == 200 and "console-t" in page, page[-1000:]
    assert admin_password(cluster) not in page
    # `cluster up` gave the console the nodes' http_token: per-replica log ends come from the
    # node's /health details (without the token a node says only up or down: "1 (?)").
    status, page = _fetch(browser, url + "/topics/console-t")
    assert status == 200 and '<span class="replica">1 (0)' in page, page[-2000:]
    # A user with no ACLs logs in too, and the cluster's refusals are the console's 403s.
    ok(raftlog(cluster, "users", "add", "carol", "--password-stdin", stdin=CAROL_PASSWORD + "\n",
               config=cluster.properties))
    carol = _browser()
    status, page = _fetch(carol, url + "/login")
    status, page = _fetch(carol, url + "/login?next=/", {"csrf": _csrf(page), "username": "carol",
                                                          "password": CAROL_PASSWORD})
    # Logged in, then the overview: describing the cluster is refused to her.
    assert status == 403 and "Not allowed for your user" in page, page[-1000:]
    assert "CLUSTER_AUTHORIZATION_FAILED" in page and CAROL_PASSWORD not in page


def test_zz_no_log_holds_a_secret(cluster):
    # Last in this module: every log the cluster and its tools wrote, grepped for the passwords.
    secrets_ = [admin_password(cluster), BOB_PASSWORD, CAROL_PASSWORD]
    for path in [*cluster.data_dir.rglob("*.log")]:
        text = path.read_text(errors="replace")
        for secret in secrets_:
            assert secret not in text, f"{path} holds a secret"
    assert not any(s in line for line in cluster.lines for s in secrets_)


# The Security section moved from README to this page of the docs site (issue 47).
README = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "secure-cluster.md"
ALICE_PASSWORD = "alice-Pa55word"  # the README's


def readme_security() -> tuple[list[str], str, str]:
    """The README's Security section: its `raftlog cluster up` command, its shell commands
    (the second sh block) and its Python example."""
    section = README.read_text()
    sh = re.findall(r"```sh\n(.*?)```", section, re.S)
    python = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(sh) == 2 and len(python) == 1, "the README's Security section changed shape: adapt this test"
    up = shlex.split(sh[0].strip(), comments=True)
    assert up[:3] == ["raftlog", "cluster", "up"] and "--secure" in up, up
    return up[3:], sh[1], python[0]


@pytest.fixture(scope="module")
def readme_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    # The README's `cluster up` as written, plus a free port range and no console.
    args, _, _ = readme_security()
    cwd = tmp_path_factory.mktemp("readme")
    data_dir = cwd / args[args.index("--data-dir") + 1]
    sup = SecureCluster(data_dir, _free_base_port(), args=[*args, "--no-console"], cwd=cwd)
    try:
        sup.wait_line(r"^cluster \S+ is up$", 180)
        sup.wait_line(r"^stop: Ctrl-C", 5)
        yield sup
    finally:
        sup.stop()


@pytest.mark.skipif(shutil.which("kcat") is None or shutil.which("curl") is None,
                    reason="the README's commands use kcat and curl (scripts/test installs them as root)")
def test_the_readme_security_section_works_as_written(readme_cluster):
    cluster = readme_cluster
    cwd = cluster.data_dir.parent
    _, commands, example = readme_security()
    # The README's ports are node 1's defaults (kafka 9092, native 9093 via RAFTLOG_BOOTSTRAP's
    # default, http 9096); this cluster has its own range.
    commands = commands.replace("127.0.0.1:9092", cluster.kafka).replace("127.0.0.1:9096", cluster.http)
    assert "9093" not in commands and "--bootstrap" not in commands
    refused: dict[int, str] = {}
    script = ["set -euo pipefail", "trap 'echo \"README command failed: $BASH_COMMAND\" >&2' ERR"]
    for n, line in enumerate(commands.splitlines(), 1):
        match = re.search(r"#\s*refused: (\w+)\s*$", line)
        if match:  # must fail, saying why
            refused[n] = match.group(1)
            command = line[: match.start()].strip()
            line = f'if {command} 2>refused-{n}.err; then echo "line {n} was not refused" >&2; exit 3; fi'
        script.append(line)
    assert len(refused) >= 2
    env = {k: v for k, v in os.environ.items() if k != "RAFTLOG_COMMAND_CONFIG"}
    env.update(RAFTLOG_BOOTSTRAP=cluster.client, PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
    run = subprocess.run(["bash", "-c", "\n".join(script)], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, (run.stdout, run.stderr)
    for n, code in refused.items():
        said = (cwd / f"refused-{n}.err").read_text()
        assert said.startswith("raftlog: ") and code in said and "Traceback" not in said, (n, said)
    out = run.stdout
    assert "added 2 ACLs" in out and "User:alice" in out
    assert "k1 first order" in out and "k2 from alice" in out  # alice's kcat read both
    assert "# TYPE raftlog_auth_failures_total counter" in out  # /metrics answered the token
    assert "alice.properties" in os.listdir(cwd) and stat.S_IMODE((cwd / "alice.properties").stat().st_mode) == 0o600
    # The Python example: the raftlog producer and confluent-kafka with the same file.
    example = example.replace("127.0.0.1:9093", cluster.client).replace("127.0.0.1:9092", cluster.kafka)
    ran = subprocess.run([sys.executable, "-c", example], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 0 and ran.stdout.strip() == "b'from python'", (ran.stdout, ran.stderr)
    # Neither password is in any log or anything printed.
    secrets_ = [admin_password(cluster), ALICE_PASSWORD]
    for path in cluster.data_dir.rglob("*.log"):
        text = path.read_text(errors="replace")
        assert not any(s in text for s in secrets_), f"{path} holds a secret"
    printed = "\n".join([*cluster.lines, run.stdout, run.stderr, ran.stdout, ran.stderr])
    assert not any(s in printed for s in secrets_)
