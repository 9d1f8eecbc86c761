"""A remote OpenAI-compatible vLLM server behind the :class:`llm.base.LLM` interface.

``POST {url}/chat/completions`` with ``stream=True`` over one ``httpx.AsyncClient``;
the request bodies and the server-sent events are the pure wire format of
:mod:`llm.openai_wire`. Closing the reply stream (``aclose()``, cancelling the
iterating task, or :meth:`RemoteVLLM.abort`) closes the HTTP response, and vLLM
aborts the request server-side when its client disconnects.

Token counts come from vLLM's ``stream_options.continuous_usage_stats`` (the
cumulative ``usage.completion_tokens`` carried by every chunk); a server that
sends no usage counts one token per chunk. The first delta carries
``usage.prompt_tokens`` and the time to it; vLLM streams the prompt's cached tokens
(``usage.prompt_tokens_details.cached_tokens``, only with ``--enable-prompt-tokens-details``)
in its final usage chunk alone, so they come last, on a delta with no text and no tokens.

:meth:`RemoteVLLM.prefill` is a non-streamed one-token chat completion with vLLM's
``add_generation_prompt: false`` (and ``continue_final_message`` for a final user
message); it never raises for a failure (the outcome says it) and counts for no health.

Errors are :class:`EngineError`: connection failures, timeouts (no byte for
``request_timeout_s``, first token or between tokens), dropped streams (including
one that ends without ``[DONE]``) and 5xx answers are ``retryable``; 4xx answers
(a bad request) are not.

Retry with backoff (:class:`llm.base.HealthTracker`): after a retryable failure,
new requests fail at once for ``retry_initial_s`` (doubling per consecutive
failure, at most ``retry_max_s``), so a turn during an outage ends with the
apology at once instead of waiting for a timeout; the first request after the
wait is tried for real, and its first token makes :meth:`RemoteVLLM.health` ok.

A chat request sent in a traced session carries the W3C ``traceparent`` header (the
session's trace, a span id the turn's LLM span takes: :mod:`voice_pipeline.telemetry.context`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncGenerator, Sequence
from typing import TYPE_CHECKING, Any, Final

from llm.base import (
    ChatMessage,
    HealthTracker,
    LLMDelta,
    LLMHealth,
    PrefillOutcome,
    PrefillResult,
    ToolCallDelta,
    ToolOffer,
)
from llm.openai_wire import SSEDone, parse_sse_line, prefill_body, stream_body, usage_counts
from llm.toolcalls import new_call_id
from llm.toolprompt import effective_offer, known_reply
from voice_pipeline.config import LLMConfig
from voice_pipeline.errors import ClosedError, ConfigError, EngineError
from voice_pipeline.telemetry.context import llm_headers

if TYPE_CHECKING:
    import httpx

#: connect timeout in seconds (capped by ``request_timeout_s``)
CONNECT_TIMEOUT_S: Final = 5.0
#: an idle pooled connection is closed after this long: under vLLM's own keep-alive
#: (``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``, 5 s), so the client never sends on a connection the
#: server is closing at that moment (httpx's default is 5 s too: a race)
KEEPALIVE_EXPIRY_S: Final = 2.0


class RemoteVLLM:
    """Streams chat replies from an OpenAI-compatible vLLM server at ``cfg.url``."""

    def __init__(self, cfg: LLMConfig) -> None:
        if not cfg.url:
            raise ConfigError("llm.url: required when llm.engine is 'remote'")
        import httpx

        self._cfg = cfg
        self._base = cfg.url.rstrip("/")
        self._model = cfg.remote_model
        self._model_lock = asyncio.Lock()
        timeout = httpx.Timeout(
            cfg.request_timeout_s,
            connect=min(CONNECT_TIMEOUT_S, cfg.request_timeout_s),
        )
        limits = httpx.Limits(
            max_connections=100, max_keepalive_connections=20, keepalive_expiry=KEEPALIVE_EXPIRY_S
        )
        self._client = httpx.AsyncClient(timeout=timeout, limits=limits)
        #: open reply streams by request id (None while connecting)
        self._streams: dict[str, httpx.Response | None] = {}
        self._aborted: set[str] = set()
        self._closed = False
        self._health = HealthTracker(cfg.retry_initial_s, cfg.retry_max_s)

    # ------------------------------------------------------------ interface

    async def stream(
        self, messages: Sequence[ChatMessage], request_id: str, tools: ToolOffer | None = None
    ) -> AsyncGenerator[LLMDelta, None]:
        """Yield the reply's new text chunk by chunk; closing it closes the HTTP stream.

        ``tools`` go as the OpenAI ``tools`` and ``tool_choice``; the server streams the
        calls (``delta.tool_calls``). ``auto`` needs a server started with
        ``--enable-auto-tool-choice --tool-call-parser ...`` (see :mod:`llm.vllm_tool_parser`),
        or it answers 400 (a non-retryable error). A forced call with only one possible value
        (a named tool that takes no arguments: :func:`llm.toolprompt.known_reply`) is made
        without asking the server."""
        import httpx

        self._require_open()
        offer = effective_offer(tools)
        if offer is not None and known_reply(offer) is not None:  # one possible call: no request
            name = offer.function or offer.tools[0].name
            yield LLMDelta("", 0, tool_calls=(ToolCallDelta(0, new_call_id(), name, "{}"),))
            return
        url = f"{self._base}/chat/completions"
        wait_s = self._health.wait_s(time.monotonic_ns())
        if wait_s > 0:  # backing off: fail fast, count nothing
            raise EngineError(
                f"the LLM server is failing ({self._health.reason}); next try in {wait_s:.1f} s",
                retryable=True,
            )
        counted = 0
        first = LLMDelta("", 0)
        sent_ns = time.monotonic_ns()
        answered = False  # a token arrived: the server works
        complete = False  # [DONE] or a finish_reason: the stream was not cut
        self._aborted.discard(request_id)
        self._streams[request_id] = None  # counted as open while connecting
        try:
            body = stream_body(
                await self._model_name(),
                messages,
                offer,
                max_tokens=self._cfg.max_tokens,
                temperature=self._cfg.temperature,
                top_p=self._cfg.top_p,
                repetition_penalty=self._cfg.repetition_penalty if offer is None else 1.0,
            )
            if request_id in self._aborted:
                return  # aborted while the model name was looked up
            request = self._client.build_request(
                "POST", url, json=body, headers={"X-Request-Id": request_id, **llm_headers()}
            )
            async with contextlib.aclosing(await self._send(request)) as response:
                if request_id in self._aborted:
                    return  # aborted while connecting; leaving closes the response
                self._streams[request_id] = response
                await self._check_status(response)
                async for line in response.aiter_lines():
                    if request_id in self._aborted:
                        return
                    event = parse_sse_line(line)
                    if event is None:
                        continue
                    if isinstance(event, SSEDone):
                        complete = True
                        break
                    complete = complete or event.finish_reason is not None
                    if event.completion_tokens is not None:
                        num, counted = event.completion_tokens - counted, event.completion_tokens
                    else:
                        num = 1 if event.text else 0
                    if event.text or num > 0 or event.tool_calls:
                        if not answered:
                            answered = True
                            self._health.succeeded()
                            first = LLMDelta(
                                event.text,
                                num,
                                prompt_tokens=event.prompt_tokens,
                                cached_tokens=event.cached_tokens,
                                prefill_ms=(time.monotonic_ns() - sent_ns) / 1e6,
                                tool_calls=event.tool_calls,
                            )
                            yield first
                        else:
                            yield LLMDelta(event.text, num, tool_calls=event.tool_calls)
                    elif answered and event.cached_tokens is not None and first.cached_tokens is None:
                        # vLLM streams the cached count only in its final usage chunk: say it
                        # then, on a delta with no text and no tokens (see LLMDelta)
                        cached = event.cached_tokens
                        yield dataclasses.replace(
                            first, text="", num_tokens=0, cached_tokens=cached, tool_calls=()
                        )
            if not complete and request_id not in self._aborted and not self._closed:
                raise EngineError(f"LLM server at {url}: the stream ended before [DONE]", retryable=True)
        except (httpx.HTTPError, httpx.StreamError) as exc:
            if request_id in self._aborted or self._closed:
                return  # we closed the response ourselves
            error = _transport_error(url, exc, self._cfg.request_timeout_s)
            self._failed(error)
            raise error from exc
        except EngineError as exc:
            self._failed(exc)
            raise
        finally:
            self._streams.pop(request_id, None)
            self._aborted.discard(request_id)

    async def _send(self, request: httpx.Request) -> httpx.Response:
        """``request`` sent, its answer streamed. A server that hangs up before answering is
        asked once more: a pooled keep-alive connection can be closed by the server just as a
        request goes out on it (seen on a loaded 2-core AVX2 EPYC: ``ReadError`` on a turn's
        first request), and nothing was generated for it. A refusal, a timeout or a stream
        cut after the answer began is not retried."""
        import httpx

        try:
            return await self._client.send(request, stream=True)
        except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError):
            return await self._client.send(request, stream=True)

    async def prefill(self, messages: Sequence[ChatMessage], request_id: str) -> PrefillResult:
        """A one-token chat completion on the prefix (see :meth:`llm.base.LLM.prefill`):
        vLLM's ``add_generation_prompt: false`` and, for a final user message,
        ``continue_final_message: true``. Never counts towards health (it only saves time)."""
        import httpx

        t0 = time.monotonic_ns()
        prompt: int | None = None
        cached: int | None = None

        def result(outcome: PrefillOutcome, error: str | None = None) -> PrefillResult:
            elapsed_ms = (time.monotonic_ns() - t0) / 1e6
            return PrefillResult(request_id, outcome, prompt or 0, cached, elapsed_ms, error)

        if self._closed or not messages:
            return result(PrefillOutcome.FAILED, "closed" if self._closed else "no messages")
        if self._health.wait_s(time.monotonic_ns()) > 0:
            return result(PrefillOutcome.FAILED, f"the LLM server is failing ({self._health.reason})")
        url = f"{self._base}/chat/completions"
        self._aborted.discard(request_id)
        self._streams[request_id] = None
        try:
            body = prefill_body(await self._model_name(), messages)
            if request_id in self._aborted:
                return result(PrefillOutcome.ABORTED)
            async with self._client.stream(
                "POST", url, json=body, headers={"X-Request-Id": request_id}
            ) as response:
                if request_id in self._aborted:
                    return result(PrefillOutcome.ABORTED)
                self._streams[request_id] = response
                await self._check_status(response)
                data = json.loads(await response.aread())
            _, prompt, cached = usage_counts(data.get("usage") if isinstance(data, dict) else None)
            return result(PrefillOutcome.WARMED)
        except (httpx.HTTPError, httpx.StreamError, EngineError, ValueError) as exc:
            if request_id in self._aborted or self._closed:
                return result(PrefillOutcome.ABORTED)
            return result(PrefillOutcome.FAILED, str(exc))
        finally:
            self._streams.pop(request_id, None)
            self._aborted.discard(request_id)

    async def abort(self, request_id: str) -> None:
        """Close the request's HTTP stream; the server aborts it, the iterator ends quietly."""
        if request_id not in self._streams:
            return
        self._aborted.add(request_id)
        response = self._streams.pop(request_id)
        if response is not None:
            await response.aclose()

    def unfinished_requests(self) -> int:
        """Reply streams this client has open."""
        return len(self._streams)

    def health(self) -> LLMHealth:
        return self._health.health(time.monotonic_ns())

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        for request_id in list(self._streams):
            await self.abort(request_id)
        await self._client.aclose()

    # ------------------------------------------------------------ internals

    def _failed(self, error: EngineError) -> None:
        """Count a failure that says the server is not answering (not a 4xx: our request)."""
        if error.retryable:
            self._health.failed(time.monotonic_ns(), str(error))

    def _require_open(self) -> None:
        if self._closed:
            raise ClosedError("the remote LLM client")

    async def _model_name(self) -> str:
        """``cfg.remote_model``, else the server's first model (asked once)."""
        import httpx

        if self._model is not None:
            return self._model
        async with self._model_lock:
            if self._model is None:
                url = f"{self._base}/models"
                try:
                    response = await self._client.get(url)
                except httpx.HTTPError as exc:
                    raise _transport_error(url, exc, self._cfg.request_timeout_s) from exc
                await self._check_status(response)
                try:
                    models = response.json()["data"]
                    self._model = str(models[0]["id"])
                except (ValueError, KeyError, IndexError, TypeError) as exc:
                    raise EngineError(
                        f"{url} listed no model: {response.text[:200]!r}", retryable=False
                    ) from exc
            return self._model

    @staticmethod
    async def _check_status(response: httpx.Response) -> None:
        if response.status_code == 200:
            return
        await response.aread()
        detail: Any = response.text[:500]
        try:
            data = response.json()
            if isinstance(data, dict) and isinstance(data.get("error"), dict):
                detail = data["error"].get("message", detail)
            elif isinstance(data, dict) and "message" in data:
                detail = data["message"]
        except ValueError:
            pass
        status = response.status_code
        retryable = status >= 500 or status in (408, 429)
        raise EngineError(
            f"LLM server answered {status} for {response.request.url}: {detail}", retryable=retryable
        )


def _transport_error(url: str, exc: Exception, timeout_s: float) -> EngineError:
    import httpx

    if isinstance(exc, httpx.ConnectTimeout):
        reason = "connecting timed out"
    elif isinstance(exc, httpx.ConnectError):
        reason = f"cannot connect ({exc})"
    elif isinstance(exc, httpx.TimeoutException):
        reason = f"no data for {timeout_s} s"
    else:
        reason = f"the stream broke ({type(exc).__name__}: {exc})"
    return EngineError(f"LLM server at {url}: {reason}", retryable=True)
