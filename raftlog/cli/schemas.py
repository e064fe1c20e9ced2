"""`raftlog schemas register|list|describe|compatibility|delete`: the Schema Registry every
node serves (Confluent's REST API, raftlog/node/registry/), over HTTP.

    raftlog schemas register orders-value --file order.avsc            # AVRO by default
    raftlog schemas register orders-value --file order.proto --type PROTOBUF
    raftlog schemas list
    raftlog schemas describe orders-value [--version 2]
    raftlog schemas compatibility orders-value --file order-v2.avsc
    raftlog schemas compatibility orders-value --set FULL
    raftlog schemas delete orders-value [--version 1] [--permanent]

Where: --registry URL[,URL...] (env RAFTLOG_SCHEMA_REGISTRY; default: node 1 of `raftlog
cluster up`, http://127.0.0.1:9097); each URL is tried in turn while one does not answer.
With --command-config (a secure cluster's client.properties) the call is HTTPS with Basic
auth as the properties' SASL user, checked against their CA. Registered by raftlog/cli/main.py.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Final

import click

from raftlog.cli.common import CliFailure, command_config_option, emit_json, friendly, security, table

__all__ = ["schemas"]

DEFAULT_REGISTRY: Final = "http://127.0.0.1:9097"
MAX_SCHEMA_FILE_BYTES: Final = 8 << 20
TIMEOUT_S: Final = 15.0


def _urls(registry: str | None) -> list[str]:
    urls = [u.strip().rstrip("/") for u in (registry or DEFAULT_REGISTRY).split(",") if u.strip()]
    found = security()
    if found is not None and found.tls:
        urls = [u.replace("http://", "https://", 1) for u in urls]
    return urls


def _call(ctx: click.Context, method: str, path: str, body: Any = None) -> Any:
    """The JSON answer; CliFailure with Confluent's error message and code otherwise."""
    found = security()
    headers = {"Content-Type": "application/vnd.schemaregistry.v1+json", "Accept": "application/json"}
    context = None
    if found is not None:
        if found.username and found.password:
            token = base64.b64encode(f"{found.username}:{found.password}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        if found.tls:
            context = ssl.create_default_context(cafile=found.ca_location)
            context.check_hostname = found.check_hostname
    data = None if body is None else json.dumps(body).encode()
    last: Exception | None = None
    for url in ctx.obj["registry_urls"]:
        request = urllib.request.Request(url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            with exc:
                try:
                    error = json.loads(exc.read())
                except ValueError:
                    error = {}
            if exc.code >= 500:  # the writer is moving: another node may do
                last = CliFailure(f"{error.get('message', exc.reason)} (error {error.get('error_code', exc.code)})")
                continue
            raise CliFailure(f"{error.get('message', exc.reason)} (error {error.get('error_code', exc.code)})") from None
        except (urllib.error.URLError, OSError) as exc:
            last = CliFailure(f"no schema registry at {url}: {getattr(exc, 'reason', exc)}")
    raise last or CliFailure("no registry URL")


def _subject_path(subject: str) -> str:
    return urllib.parse.quote(subject, safe="")


def _schema_body(file: str, schema_type: str, references: tuple[str, ...]) -> dict[str, Any]:
    path = Path(file)
    if path.stat().st_size > MAX_SCHEMA_FILE_BYTES:
        raise CliFailure(f"{file} is over {MAX_SCHEMA_FILE_BYTES} bytes")
    body: dict[str, Any] = {"schema": path.read_text(), "schemaType": schema_type}
    refs = []
    for ref in references:
        name, _, rest = ref.partition("=")
        subject, _, version = rest.rpartition(":")
        if not name or not subject or not version.isdigit():
            raise CliFailure(f"--reference {ref!r}: use NAME=SUBJECT:VERSION")
        refs.append({"name": name, "subject": subject, "version": int(version)})
    if refs:
        body["references"] = refs
    return body


@click.group("schemas")
@click.option("--registry", envvar="RAFTLOG_SCHEMA_REGISTRY", default=None, metavar="URL[,URL...]",
              help=f"Schema Registry URL(s) of any nodes (env RAFTLOG_SCHEMA_REGISTRY; default {DEFAULT_REGISTRY}).")
@command_config_option
@click.pass_context
def schemas(ctx: click.Context, registry: str | None) -> None:
    """Register, list, describe, test and delete schemas in the cluster's Schema Registry."""
    ctx.ensure_object(dict)
    ctx.obj["registry"] = registry


def _ready(ctx: click.Context) -> click.Context:
    ctx.obj["registry_urls"] = _urls(ctx.obj.get("registry"))
    return ctx


_TYPES = click.Choice(["AVRO", "JSON", "PROTOBUF"], case_sensitive=False)


@schemas.command("register")
@click.argument("subject")
@click.option("--file", "file", required=True, type=click.Path(exists=True, dir_okay=False), help="The schema's file.")
@click.option("--type", "schema_type", type=_TYPES, default="AVRO", show_default=True)
@click.option("--reference", "references", multiple=True, metavar="NAME=SUBJECT:VERSION",
              help="A schema it refers to (repeatable).")
@click.pass_context
@friendly
def register(ctx: click.Context, subject: str, file: str, schema_type: str, references: tuple[str, ...]) -> None:
    """Register the schema in FILE under SUBJECT (the same schema again: the same id)."""
    answer = _call(_ready(ctx), "POST", f"/subjects/{_subject_path(subject)}/versions",
                   _schema_body(file, schema_type.upper(), references))
    click.echo(f"registered {subject}: schema id {answer['id']}")


@schemas.command("list")
@click.option("--deleted", is_flag=True, help="Include soft-deleted subjects.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts).")
@click.pass_context
@friendly
def list_subjects(ctx: click.Context, deleted: bool, as_json: bool) -> None:
    """The subjects, with their latest version and schema id."""
    ctx = _ready(ctx)
    names = _call(ctx, "GET", "/subjects" + ("?deleted=true" if deleted else ""))
    rows = []
    for name in names:
        try:
            latest = _call(ctx, "GET", f"/subjects/{_subject_path(name)}/versions/latest")
        except CliFailure:
            latest = {"version": "-", "id": "-", "schemaType": "-"}
        rows.append({"subject": name, "version": latest["version"], "id": latest["id"],
                     "type": latest.get("schemaType", "AVRO")})
    if as_json:
        emit_json(rows)
        return
    if not rows:
        click.echo("no subjects")
        return
    table([("SUBJECT", "VERSION", "ID", "TYPE")] + [(r["subject"], str(r["version"]), str(r["id"]), r["type"]) for r in rows])


@schemas.command("describe")
@click.argument("subject")
@click.option("--version", default="latest", show_default=True, help="A version number or latest.")
@click.pass_context
@friendly
def describe(ctx: click.Context, subject: str, version: str) -> None:
    """One version of SUBJECT (id, type, references, the schema) and its compatibility level."""
    ctx = _ready(ctx)
    answer = _call(ctx, "GET", f"/subjects/{_subject_path(subject)}/versions/{urllib.parse.quote(version)}")
    versions = _call(ctx, "GET", f"/subjects/{_subject_path(subject)}/versions")
    level = _call(ctx, "GET", f"/config/{_subject_path(subject)}?defaultToGlobal=true")["compatibilityLevel"]
    emit_json({**answer, "schemaType": answer.get("schemaType", "AVRO"), "versions": versions, "compatibility": level})


@schemas.command("compatibility")
@click.argument("subject")
@click.option("--file", "file", type=click.Path(exists=True, dir_okay=False),
              help="Test this schema against the subject (exit 1 when incompatible).")
@click.option("--type", "schema_type", type=_TYPES, default="AVRO", show_default=True)
@click.option("--set", "level", type=click.Choice(["BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE",
                                                   "FULL", "FULL_TRANSITIVE", "NONE"], case_sensitive=False),
              help="Set the subject's compatibility level instead.")
@click.pass_context
@friendly
def compatibility(ctx: click.Context, subject: str, file: str | None, schema_type: str, level: str | None) -> None:
    """Test a schema against SUBJECT's versions, set its level, or (neither) show its level."""
    ctx = _ready(ctx)
    path = _subject_path(subject)
    if level is not None:
        _call(ctx, "PUT", f"/config/{path}", {"compatibility": level.upper()})
        click.echo(f"{subject}: compatibility {level.upper()}")
        return
    if file is None:
        click.echo(_call(ctx, "GET", f"/config/{path}?defaultToGlobal=true")["compatibilityLevel"])
        return
    answer = _call(ctx, "POST", f"/compatibility/subjects/{path}/versions?verbose=true",
                   _schema_body(file, schema_type.upper(), ()))
    if answer["is_compatible"]:
        click.echo(f"compatible with {subject}")
        return
    raise CliFailure("incompatible with " + subject + ": " + "; ".join(answer.get("messages") or []))


@schemas.command("delete")
@click.argument("subject")
@click.option("--version", default=None, help="Delete this version only (a number or latest).")
@click.option("--permanent", is_flag=True, help="Hard delete (after a soft delete).")
@click.pass_context
@friendly
def delete(ctx: click.Context, subject: str, version: str | None, permanent: bool) -> None:
    """Soft-delete SUBJECT (or one version); --permanent removes what was soft-deleted."""
    ctx = _ready(ctx)
    path = f"/subjects/{_subject_path(subject)}"
    if version is not None:
        path += f"/versions/{urllib.parse.quote(version)}"
    answer = _call(ctx, "DELETE", path + ("?permanent=true" if permanent else ""))
    done = answer if isinstance(answer, list) else [answer]
    click.echo(f"deleted {subject} version(s) {', '.join(map(str, done))}{' permanently' if permanent else ''}")
