"""Watch: chunked JSON events, bookmarks, ``sendInitialEvents``, and 410 for a compacted resourceVersion."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from aiohttp import web

from ..machinery import errors
from ..machinery.errors import ApiError
from ..machinery.registry import ResourceType
from ..machinery.store import Obj, Watch, compact_json
from .context import ServerContext
from .reads import selector_predicate
from .rendering import as_table
from .request_info import MediaRange, ResourceRequest, int_param, parse_accept
from .responses import JSON_TYPE

_WATCH_CHUNK_EVENTS = 500


async def watch(ctx: ServerContext, request: web.Request, target: ResourceRequest) -> web.StreamResponse:
    rtype, store, query = target.rtype, ctx.twin.store, request.query
    predicate, _ = selector_predicate(request, rtype, name=target.name)
    timeout = min(float(int_param(query, "timeoutSeconds", default=int(ctx.max_watch_timeout))), ctx.max_watch_timeout)
    bookmarks = query.get("allowWatchBookmarks", "").lower() in ("1", "true")
    initial_events = query.get("sendInitialEvents", "").lower() in ("1", "true")
    rv_text = query.get("resourceVersion", "")
    since: int | None = None
    if rv_text not in ("", "0") and not initial_events:
        try:
            since = int(rv_text)
        except ValueError:
            raise errors.bad_request(f"invalid resource version: {rv_text}") from None
    table_media = next(
        (
            m
            for m in parse_accept(request.headers.get("Accept"))
            if m.params.get("as") == "Table" and m.params.get("g") == "meta.k8s.io"
        ),
        None,
    )
    response = web.StreamResponse(status=200, headers={"Content-Type": JSON_TYPE, "Cache-Control": "no-cache, private"})
    response.enable_chunked_encoding()
    try:
        watcher = store.watch(rtype, namespace=target.namespace, predicate=predicate, since=since)
    except ApiError as problem:
        # A watch from a compacted resourceVersion opens, then reports 410 as an ERROR event.
        await response.prepare(request)
        await response.write(_event_line("ERROR", problem.to_status()))
        await response.write_eof()
        return response
    ctx.watchers.add(watcher)
    await response.prepare(request)
    stream = _Stream(ctx, request, rtype, response, watcher, table_media=table_media, bookmarks=bookmarks)
    try:
        await stream.run(timeout=timeout, initial_events=initial_events)
    except (ConnectionResetError, ConnectionError):
        pass
    finally:
        watcher.close()
        ctx.watchers.discard(watcher)
    return response


@dataclass
class _Stream:
    """One open watch: its events as JSON lines (or Table rows), with bookmarks when the client allows them."""

    ctx: ServerContext
    request: web.Request
    rtype: ResourceType
    response: web.StreamResponse
    watcher: Watch
    table_media: MediaRange | None
    bookmarks: bool
    first_table: bool = True

    def render(self, obj: Obj) -> Obj:
        if self.table_media is None:
            return obj
        table = as_table(
            self.ctx,
            self.rtype,
            [obj],
            self.table_media,
            self.request,
            list_meta={"resourceVersion": obj["metadata"].get("resourceVersion", "")},
            headers=self.first_table,
        )
        self.first_table = False
        return table

    def bookmark(self, annotations: dict[str, str] | None = None) -> bytes:
        meta: Obj = {"resourceVersion": str(self.ctx.twin.store.resource_version)}
        if annotations:
            meta["annotations"] = annotations
        return _event_line(
            "BOOKMARK", {"kind": self.rtype.kind, "apiVersion": self.rtype.api_version, "metadata": meta}
        )

    async def run(self, *, timeout: float, initial_events: bool) -> None:
        """Write events until the timeout, the watcher's end or the server's shutdown; then the closing bookmark."""
        ctx, response, watcher, bookmarks = self.ctx, self.response, self.watcher, self.bookmarks
        initial_pending = watcher.queue.qsize() if initial_events else 0
        deadline = time.monotonic() + max(0.0, timeout)
        next_bookmark = time.monotonic() + ctx.bookmark_interval
        if initial_events and initial_pending == 0 and bookmarks:
            await response.write(self.bookmark({"k8s.io/initial-events-end": "true"}))
        while not ctx.stopping.is_set():
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                break
            wait = min(remaining, max(0.05, next_bookmark - now)) if bookmarks else remaining
            try:
                item = await asyncio.wait_for(watcher.queue.get(), timeout=wait)
            except TimeoutError:
                if bookmarks and watcher.queue.empty() and time.monotonic() >= next_bookmark:
                    await response.write(self.bookmark())
                    next_bookmark = time.monotonic() + ctx.bookmark_interval
                continue
            # Events already queued (a watch's initial state can be thousands) go out in one write.
            chunk: list[bytes] = []
            while item is not None:
                event_type, obj = item
                chunk.append(_event_line(event_type, self.render(obj)))
                if initial_pending:
                    initial_pending -= 1
                    if initial_pending == 0 and bookmarks:
                        chunk.append(self.bookmark({"k8s.io/initial-events-end": "true"}))
                if watcher.queue.empty() or len(chunk) >= _WATCH_CHUNK_EVENTS:
                    break
                item = watcher.queue.get_nowait()
            if chunk:
                await response.write(b"".join(chunk))
            if item is None:
                break
        if bookmarks and not ctx.stopping.is_set() and watcher.queue.empty():
            # A last bookmark lets the client resume exactly where this watch ended.
            await response.write(self.bookmark())
        await response.write_eof()


def _event_line(event_type: str, obj: Obj) -> bytes:
    return compact_json({"type": event_type, "object": obj}) + b"\n"
