"""Server arguments as the engines and the stores see them: argv emission, llm-optimizer's
config id, and the typed :class:`ServerConfig` an argument dict describes.

In ``core.spec`` (the lowest layer) because the sweep, the results store, the engines and
deploy all read them; the sweep's grammar parses them, it does not own them.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from core.errors import bad_input_from
from core.spec.serving import ServerConfig

# server arg name → ServerConfig field (vLLM and SGLang spellings, and llm-optimizer's short ones)
SERVER_FIELDS = {
    "tensor_parallel_size": "tp",
    "tp_size": "tp",
    "tp": "tp",
    "data_parallel_size": "dp",
    "dp_size": "dp",
    "dp": "dp",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "chunked_prefill_size": "max_num_batched_tokens",
    "max_num_seqs": "max_num_seqs",
    "max_running_requests": "max_num_seqs",
    "max_model_len": "max_model_len",
    "context_length": "max_model_len",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "mem_fraction_static": "gpu_memory_utilization",
    "quantization": "quantization",
    "kv_cache_dtype": "kv_cache_dtype",
    "enable_prefix_caching": "enable_prefix_caching",
}


def _render(value: Any) -> str:
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def emit_args(args: dict[str, Any]) -> list[str]:
    """argv items for server args: ``--kebab-name=value``; True → ``--flag``; False →
    ``--no-flag`` (as ``vllm bench sweep`` does); dicts and lists as JSON; None → nothing."""
    argv = []
    for name, value in args.items():
        flag = "--" + name.replace("_", "-")
        if value is None:
            continue
        if value is True:
            argv.append(flag)
        elif value is False:
            argv.append("--no-" + name.replace("_", "-"))
        else:
            argv.append(f"{flag}={_render(value)}")
    return argv


def server_config(model: str, server_args: dict[str, Any]) -> ServerConfig:
    fields: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for name, value in server_args.items():
        f = SERVER_FIELDS.get(name)
        if f is None:
            extra[name] = value
        elif f == "enable_prefix_caching" and name == "disable_radix_cache":
            fields[f] = not value
        else:
            fields[f] = value
    if server_args.get("disable_radix_cache") is True:
        fields["enable_prefix_caching"] = False
        extra.pop("disable_radix_cache", None)
    try:
        return ServerConfig(model=model, extra_args=extra, **fields)
    except ValidationError as e:
        # Name the argument as the user typed it (tensor_parallel_size, not tp).
        names = {f: n for n, f in SERVER_FIELDS.items() if n in server_args}
        raise bad_input_from(e, "server arg ", names, ServerConfig) from None


def config_id(client_args: dict[str, Any], server_args: dict[str, Any]) -> str:
    """llm-optimizer's config_id (``cli.py::get_config_id``), for file names and its records."""
    parts = []
    if client_args:
        parts.append("client_" + "-".join(f"{k}-{v}" for k, v in sorted(client_args.items())))
    if server_args:
        parts.append("server_" + "-".join(f"{k}-{v}" for k, v in sorted(server_args.items())))
    return "_".join(parts) or "default"
