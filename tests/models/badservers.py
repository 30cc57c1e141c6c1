"""Small real HTTP servers on loopback that speak (or break) the OpenAI completions stream,
for the inference client's tests: each runs an asyncio server in a thread of the test."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Iterator

# What each server does with a POST /v1/completions: stream well ("good"), never answer
# ("silent"), answer 500 ("error"), close the connection mid-stream ("drop"), stream lines
# that are no completion chunks ("garbage"), stop before the tokens asked ("short").
BEHAVIOURS = ("good", "silent", "error", "drop", "garbage", "short")


def _chunk(text: str, usage: int | None = None) -> bytes:
    body: dict = {"choices": [{"index": 0, "text": text}]}
    if usage is not None:
        body["usage"] = {"completion_tokens": usage}
    return f"data: {json.dumps(body)}\n\n".encode()


async def _answer(behaviour: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ),
        0,
    )
    body = json.loads(await reader.readexactly(length)) if length else {}
    wanted = int(body.get("max_tokens") or 4)
    if behaviour == "silent":
        await asyncio.sleep(3600)
    if behaviour == "error":
        text = b'{"error": "model exploded"}'
        writer.write(
            b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(text)}\r\n\r\n".encode()
            + text
        )
        await writer.drain()
        writer.close()
        return
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
    if behaviour == "garbage":
        writer.write(b"hello, this is not a stream\n\n")
    else:
        count = wanted if behaviour in ("good",) else max(1, wanted // 2)
        for i in range(count):
            writer.write(_chunk(f" t{i + 3}"))
            await writer.drain()
            await asyncio.sleep(0.002)
        if behaviour == "drop":
            writer.transport.abort()  # no end of stream, no usage: a dropped connection
            return
        writer.write(_chunk("", usage=count))
    await writer.drain()
    writer.close()


@contextlib.contextmanager
def serving(behaviour: str) -> Iterator[str]:
    """A server of ``behaviour`` on a free loopback port; its URL."""
    assert behaviour in BEHAVIOURS
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict = {}

    async def handle(reader, writer):
        with contextlib.suppress(Exception):
            await _answer(behaviour, reader, writer)

    async def start():
        holder["server"] = await asyncio.start_server(handle, "127.0.0.1", 0)
        ready.set()

    def run():
        loop.run_until_complete(start())
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(10)
    port = holder["server"].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:

        async def shut() -> None:
            holder["server"].close()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)
            loop.stop()

        asyncio.run_coroutine_threadsafe(shut(), loop)
        thread.join(5)
        loop.close()
