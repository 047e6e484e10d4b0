"""The JSON body of a streaming OpenAI-style request, shared by the OpenAI target
(:mod:`core.load.openai`) and SageMaker's OpenAI-compatible containers
(:mod:`core.load.sagemaker`)."""

from __future__ import annotations

from typing import Any

from core.load.datasets import Prompt


def streaming_request(
    prompt: Prompt,
    *,
    api: str,
    model: str | None,
    temperature: float | None,
    per_chunk_usage: bool,
    ignore_eos: bool,
    chat_max_key: str,
) -> dict[str, Any]:
    """The body of a streaming OpenAI-style request (``model`` left out when None); the
    OpenAI target and SageMaker's OpenAI-compatible containers send it."""
    stream_options: dict[str, Any] = {"include_usage": True}
    if per_chunk_usage:
        stream_options["continuous_usage_stats"] = True
    b: dict[str, Any] = {} if model is None else {"model": model}
    b.update(stream=True, stream_options=stream_options)
    if temperature is not None:
        # Unset by default, like vllm bench serve (which stopped forcing greedy): with
        # greedy decoding a model can emit tokens whose text the server holds back and
        # sends in a burst later, which moves TTFT and TPOT (seen on the tiny test model).
        b["temperature"] = temperature
    if api == "chat":
        b["messages"] = prompt.messages or [{"role": "user", "content": prompt.text}]
        b[chat_max_key] = prompt.output_tokens
    else:
        b["prompt"] = prompt.text
        b["max_tokens"] = prompt.output_tokens
    if ignore_eos:
        # vLLM extension: exact OSL. Other servers ignore unknown fields or reject them;
        # the user can turn it off (--no-ignore-eos).
        b["ignore_eos"] = True
    return b
