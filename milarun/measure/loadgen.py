"""milarun's own streaming client of an OpenAI-compatible server: requests at a fixed rate
and bounded concurrency, fixed input and output lengths, each token timed as it arrives.

Output tokens are counted into a rate log as they arrive: one block per ``TICK`` of wall
time holds the tokens received in it, so the log's 0.5 s slices are output tokens/s like
every test's examples/s. The first block is the ramp-up (the log's warm-up block, never
sliced): it lasts until the first request has finished, so the server's first-request
work (lazy initialisation, cache sizing, compilation) is outside the rate. When the log has
measured enough, sending stops and the log is finished: the drain of the requests still in
flight is outside the rate too, though their latencies count.

A server that misbehaves ends the run at its first bad request with :class:`ServerFailed`
naming the request and the kind of fault: ``no-answer`` (nothing within the request
timeout), ``http-error`` (a status other than 200), ``dropped`` (the connection closed
before the stream's end), ``garbage`` (a line that is not a completion chunk), ``short``
(fewer tokens than asked: an engine that stopped at EOS). No httpx import at module level.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from milarun.measure.experiment import ServerFailed
from milarun.measure.ratelog import RateLog

TICK = 0.1  # seconds of wall time per rate-log block
MAX_LINE = 1 << 16  # a chunk line longer than this is garbage, not a token


@dataclass(frozen=True)
class Load:
    """What to send: ``prompts`` (cycled; each a text or a list of token ids) to
    ``url``/v1/completions, ``output_len`` tokens each, at most ``concurrency`` at once,
    ``rate`` new requests a second (0: a new one as soon as one finishes, closed loop)."""

    url: str
    prompts: list[Any]
    output_len: int
    concurrency: int
    rate: float
    request_timeout: float
    body: dict[str, Any] = field(default_factory=dict)  # the engine's own fields


@dataclass
class Request:
    """One request's times (perf_counter seconds): when it was due, its tokens' arrivals."""

    index: int
    due: float
    measured: bool = False  # sent inside the measured phase
    token_times: list[float] = field(default_factory=list)
    done: float | None = None
    usage_tokens: int | None = None

    @property
    def tokens(self) -> int:
        return len(self.token_times)

    def ttft(self) -> float | None:
        return self.token_times[0] - self.due if self.token_times else None

    def tpot(self) -> float | None:
        """Time per output token after the first (MLPerf's TPOT, vLLM's)."""
        times = self.token_times
        return (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None

    def gaps(self) -> list[float]:
        times = self.token_times
        return [b - a for a, b in zip(times, times[1:])]


class Fault(Exception):
    """A request's fault: ``kind`` (no-answer, http-error, dropped, garbage, short)."""

    def __init__(self, kind: str, message: str):
        super().__init__(f"{kind}: {message}")
        self.kind = kind


def parse_chunk(line: str) -> tuple[int, int | None] | None:
    """(tokens in a ``data:`` line of the stream, its usage's completion_tokens); None for
    the end marker. Raises Fault("garbage") for anything else."""
    if not line.startswith("data:"):
        raise Fault("garbage", f"not an SSE data line: {line[:80]!r}")
    payload = line[5:].strip()
    if payload == "[DONE]":
        return None
    try:
        chunk = json.loads(payload)
    except ValueError:
        raise Fault("garbage", f"not JSON: {payload[:80]!r}") from None
    if not isinstance(chunk, dict):
        raise Fault("garbage", f"not a completion chunk: {payload[:80]!r}")
    if "error" in chunk:
        raise Fault("http-error", f"the stream says: {str(chunk['error'])[:200]}")
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        raise Fault("garbage", f"a chunk without choices: {payload[:80]!r}")
    usage = chunk.get("usage") or {}
    completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
    tokens = 0
    for choice in choices:
        if not isinstance(choice, dict):
            raise Fault("garbage", f"a choice that is no object: {payload[:80]!r}")
        if choice.get("token_ids"):  # vLLM with return_token_ids: exact
            tokens += len(choice["token_ids"])
        elif choice.get("text"):
            tokens += 1
    return tokens, completion if isinstance(completion, int) else None


async def stream_one(client: Any, load: Load, request: Request, on_tokens: Any) -> None:
    """Send one request and time its tokens; Fault on any misbehaviour."""
    import httpx

    prompt = load.prompts[request.index % len(load.prompts)]
    body = {
        **load.body,
        "prompt": prompt,
        "max_tokens": load.output_len,
        "stream": True,
        "temperature": 0.0,
    }
    ended = False
    try:
        async with client.stream("POST", f"{load.url}/v1/completions", json=body) as response:
            if response.status_code != 200:
                text = (await response.aread())[:300].decode(errors="replace")
                raise Fault("http-error", f"status {response.status_code}: {text}")
            async for line in response.aiter_lines():
                if not line.strip():
                    continue
                if len(line) > MAX_LINE:
                    raise Fault("garbage", f"a line of {len(line)} characters")
                parsed = parse_chunk(line)
                if parsed is None:
                    ended = True
                    break
                tokens, usage = parsed
                if usage is not None:
                    request.usage_tokens, ended = usage, True
                if tokens:
                    now = time.perf_counter()
                    request.token_times.extend([now] * tokens)
                    on_tokens(tokens)
    except httpx.TimeoutException:
        raise Fault("no-answer", f"nothing within {load.request_timeout:g} s") from None
    except (httpx.TransportError, httpx.StreamError) as err:
        raise Fault("dropped", f"{type(err).__name__}: {err}"[:300]) from None
    if not ended:
        raise Fault("dropped", f"the stream ended after {request.tokens} tokens, unfinished")
    got = request.usage_tokens if request.usage_tokens is not None else request.tokens
    if got < load.output_len:
        raise Fault("short", f"{got} tokens of {load.output_len} (EOS not ignored?)")
    request.done = time.perf_counter()


class Runner:
    """One load against one server, its tokens counted into ``log``."""

    def __init__(self, load: Load, log: RateLog, done: Callable[[RateLog], bool]):
        self.load, self.log, self.done = load, log, done
        self.requests: list[Request] = []
        self.fault: tuple[Request, Fault] | None = None
        self.measuring = False  # after the ramp-up block
        self.span: tuple[float, float | None] | None = None  # the measured phase
        self.stopped = asyncio.Event()
        self._pending = 0  # tokens received since the open block began

    def _count(self, tokens: int) -> None:
        self._pending += tokens

    async def _one(self, client: Any, request: Request, slots: asyncio.Semaphore) -> None:
        try:
            await stream_one(client, self.load, request, self._count)
        except Fault as fault:
            if self.fault is None:
                self.fault = (request, fault)
            self.stopped.set()
        finally:
            slots.release()

    async def _send(self, client: Any, tasks: list[asyncio.Task]) -> None:
        slots = asyncio.Semaphore(self.load.concurrency)
        start = time.perf_counter()
        gap = 1.0 / self.load.rate if self.load.rate > 0 else 0.0
        index = 0
        while not self.stopped.is_set():
            due = start + index * gap if gap else time.perf_counter()
            delay = due - time.perf_counter()
            if delay > 0:
                try:
                    await asyncio.wait_for(self.stopped.wait(), delay)
                    break
                except TimeoutError:
                    pass
            await slots.acquire()
            if self.stopped.is_set():
                slots.release()
                break
            request = Request(index, due if gap else time.perf_counter(), self.measuring)
            self.requests.append(request)
            tasks.append(asyncio.create_task(self._one(client, request, slots)))
            index += 1

    async def _tick(self) -> None:
        """Blocks of TICK seconds, each holding the tokens that arrived in it."""
        log = self.log
        block = log.block(0)
        block.__enter__()
        while not self.stopped.is_set():
            await asyncio.sleep(TICK)
            ramping = not self.measuring
            if ramping and not any(r.done for r in self.requests):
                continue  # the ramp-up block goes on until a request has finished
            block.count, self._pending = self._pending, 0
            block.__exit__(None, None, None)
            if ramping:
                self.span = (time.perf_counter(), None)
            self.measuring = True
            if not ramping and self.done(log):
                break
            block = log.block(0)
            block.__enter__()
        else:  # stopped by a fault: the open block is not counted
            return
        log.finish()
        if self.span is not None:
            self.span = (self.span[0], time.perf_counter())
        self.stopped.set()

    async def run(self) -> None:
        import httpx

        limits = httpx.Limits(max_connections=self.load.concurrency + 1)
        timeout = httpx.Timeout(self.load.request_timeout, connect=10.0)
        tasks: list[asyncio.Task] = []
        async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
            ticker = asyncio.create_task(self._tick())
            await self._send(client, tasks)
            await ticker
            if tasks:  # the drain: latencies count, tokens no longer in the rate
                await asyncio.wait(tasks, timeout=self.load.request_timeout + 5.0)
            for task in tasks:
                task.cancel()


@dataclass(frozen=True)
class Outcome:
    """The requests sent and the seconds of the measured phase (None: never reached)."""

    requests: list[Request]
    span: float | None


def run_load(load: Load, log: RateLog, done: Callable[[RateLog], bool]) -> Outcome:
    """Send ``load`` until ``done(log)``. ServerFailed at the first bad request, its
    ``detail`` the Outcome so far (what was measured before it is kept)."""
    runner = Runner(load, log, done)
    asyncio.run(runner.run())
    start, end = runner.span or (0.0, None)
    outcome = Outcome(runner.requests, None if end is None else end - start)
    if runner.fault is not None:
        request, fault = runner.fault
        finished = sum(1 for r in runner.requests if r.done)
        raise ServerFailed(
            f"request {request.index + 1} ({finished} finished before it): {fault}", outcome
        )
    return outcome


def percentile(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100, linear interpolation as numpy's default); None
    without values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def latency_metrics(
    requests: list[Request], ttft_limit: float, tpot_limit: float, span: float | None
) -> dict[str, float]:
    """TTFT, TPOT and inter-token latency at p50 and p99 (ms), and the goodput (the share
    of requests within both limits, and their output tokens/s over ``span`` seconds of
    sending) over the finished requests sent in the measured phase (all finished ones
    when none was)."""
    finished = [r for r in requests if r.done is not None]
    chosen = [r for r in finished if r.measured] or finished
    out: dict[str, float] = {"requests": float(len(chosen))}
    if not chosen:
        return out
    series = {
        "ttft": [t for r in chosen if (t := r.ttft()) is not None],
        "tpot": [t for r in chosen if (t := r.tpot()) is not None],
        "itl": [g for r in chosen for g in r.gaps()],
    }
    for name, values in series.items():
        for q in (50, 99):
            value = percentile(values, q)
            if value is not None:
                out[f"{name}_p{q}_ms"] = 1000.0 * value
    good = [
        r for r in chosen if (r.ttft() or 0.0) <= ttft_limit and (r.tpot() or 0.0) <= tpot_limit
    ]
    out["goodput_percent"] = 100.0 * len(good) / len(chosen)
    if span:
        out["goodput_tokens_per_s"] = sum(r.tokens for r in good) / span
        out["goodput_requests_per_s"] = len(good) / span
    return out
