"""The console's share-group pages (KIP-932; views.py routes them): /share-groups lists the
share groups of every coordinator, /share-groups/{group} one group's members with their
assignments, and per share partition its start offset, log end, lag and in-flight records
(state, delivery count, holder), read with the visitor's own clients (ACLs apply)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from raftlog.base.errors import GroupIdNotFoundError
from raftlog.client.share_admin import ShareGroupAdmin
from raftlog.console.errors import UnknownGroupError
from raftlog.console.views import render, run_blocking

__all__ = ["share_groups", "share_group"]


def _list(cs: Any) -> list[dict[str, Any]]:
    return ShareGroupAdmin.of(cs.admin).list_groups()


def _describe(cs: Any, group_id: str) -> dict[str, Any]:
    return ShareGroupAdmin.of(cs.admin).describe_group(group_id)


async def share_groups(request: Request) -> Response:
    rows = await run_blocking(request, _list)
    return render(request, "share_groups.html", rows=rows)


async def share_group(request: Request) -> Response:
    group_id = request.path_params["group"]
    try:
        desc = await run_blocking(request, _describe, group_id)
    except GroupIdNotFoundError as exc:
        raise UnknownGroupError(f"unknown share group: {group_id}") from exc
    lags = [r["lag"] for r in desc["partitions"] if r["lag"] is not None]
    return render(request, "share_group.html", group=desc, total_lag=sum(lags) if lags else None)
