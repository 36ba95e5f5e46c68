"""A minimal Server-Sent Events reader over an httpx streaming response (keeps comments too)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Message:
    id: str | None = None
    event: str | None = None
    data: list[str] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)

    @property
    def json(self) -> Any:
        return json.loads("\n".join(self.data))


async def messages(response: httpx.Response) -> AsyncIterator[Message]:
    """Each dispatched message (fields up to a blank line); comment-only blocks come as messages
    with only `comments` set."""
    current = Message()
    async for line in response.aiter_lines():
        if line == "":
            if current.id is not None or current.data or current.comments:
                yield current
            current = Message()
            continue
        if line.startswith(":"):
            current.comments.append(line[1:].strip())
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "id":
            current.id = value
        elif name == "event":
            current.event = value
        elif name == "data":
            current.data.append(value)
