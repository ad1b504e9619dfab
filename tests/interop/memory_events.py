"""An in-memory SSE event store for the Python SDK's streamable-HTTP server (mcp 1.30 and 2.3 share the
interface: mcp.server.streamable_http.EventStore), so a test fixture can prime its streams, close them to
be polled and replay them after Last-Event-ID (SEP-1699, 2025-11-25 transports.mdx §Resumability and
Redelivery). Keeps the newest EVENTS_KEPT events of all streams."""

from __future__ import annotations

import collections
from typing import Any

from mcp.server.streamable_http import EventMessage, EventStore


class MemoryEvents(EventStore):
    EVENTS_KEPT = 4096

    def __init__(self) -> None:
        self.events: collections.OrderedDict[str, tuple[str, Any]] = collections.OrderedDict()
        self.n = 0

    async def store_event(self, stream_id: str, message: Any) -> str:
        self.n += 1
        event_id = str(self.n)
        self.events[event_id] = (stream_id, message)
        while len(self.events) > self.EVENTS_KEPT:
            self.events.popitem(last=False)
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: Any) -> str | None:
        if last_event_id not in self.events:
            return None
        stream = self.events[last_event_id][0]
        after = False
        for event_id, (sid, message) in list(self.events.items()):
            if after and sid == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
            after = after or event_id == last_event_id
        return stream
