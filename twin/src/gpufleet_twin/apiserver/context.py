"""What the handlers of one API server share: the twin, its schema catalog and RBAC policy, the open watches."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from . import openapi, rbac, serviceaccount_tokens
from .cluster import Twin

# A real server ends a watch after a random 30-60 minutes; clients re-establish it.
DEFAULT_WATCH_TIMEOUT = 1800.0
DEFAULT_BOOKMARK_INTERVAL = 60.0
# Who a request acts as: the admin, a user token, a ServiceAccount token, or whom it impersonates.
USER = web.RequestKey("user", serviceaccount_tokens.UserInfo)


class ServerContext:
    """The state of one API server over one Twin (``ApiServer`` is one; the handler modules take it)."""

    def __init__(
        self,
        twin: Twin,
        *,
        bookmark_interval: float = DEFAULT_BOOKMARK_INTERVAL,
        max_watch_timeout: float = DEFAULT_WATCH_TIMEOUT,
    ) -> None:
        self.twin = twin
        self.catalog = openapi.SchemaCatalog(twin.registry)
        self.bookmark_interval = bookmark_interval
        self.max_watch_timeout = max_watch_timeout
        self.server_address = "127.0.0.1:443"
        self.watchers: set[Any] = set()
        self.stopping = asyncio.Event()
        self.policy = rbac.StorePolicy(twin.store, twin.registry)
