"""Telemetry per load point: vLLM's Prometheus ``/metrics`` and, where present, NVML.

A sampler thread scrapes about once a second while a load point runs and reduces the samples
to a few numbers stored with the point: requests running and waiting (mean, max), KV-cache
usage (mean, max), preemptions during the point, and per GPU memory, utilization and power.
Scrape failures never fail a measurement; they are counted. The runner's live progress
events carry the latest NVML sample of the trial's GPUs (:func:`gpu_live`, :func:`format_gpu`).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from core.serve import localhttp
from prometheus_client.parser import text_string_to_metric_families

# sample name → short key; vLLM renamed gpu_cache_usage_perc to kv_cache_usage_perc.
_GAUGES = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:gpu_cache_usage_perc": "kv_cache_usage",
}
_COUNTERS = {"vllm:num_preemptions_total": "preemptions", "vllm:num_preemptions": "preemptions"}


def parse_vllm_metrics(text: str) -> dict[str, float]:
    """Sum each known metric over its label sets (one engine per server, or DP ranks)."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = _GAUGES.get(s.name) or _COUNTERS.get(s.name)
            if key is None or s.name.endswith("_created"):
                continue
            if key == "kv_cache_usage":
                out[key] = max(out.get(key, 0.0), float(s.value))
            else:
                out[key] = out.get(key, 0.0) + float(s.value)
    return out


GIB = 1024**3


def gpu_live(samples: list[dict[str, float]]) -> dict[str, Any] | None:
    """One NVML sample of the trial's GPUs as the live panel's numbers: memory used and
    total over all of them (GiB), mean utilization, total power; None without memory."""
    mem = [s for s in samples if "mem_used_gb" in s and "mem_total_gb" in s]
    if not mem:
        return None
    out: dict[str, Any] = {
        "used_gib": sum(s["mem_used_gb"] for s in mem) * 1e9 / GIB,
        "total_gib": sum(s["mem_total_gb"] for s in mem) * 1e9 / GIB,
        "gpus": len(samples),
        "simulated": False,
    }
    util = [s["util_pct"] for s in samples if "util_pct" in s]
    if util:
        out["util_pct"] = sum(util) / len(util)
    power = [s["power_w"] for s in samples if "power_w" in s]
    if power:
        out["power_w"] = sum(power)
    return out


def format_gpu(g: dict[str, Any] | None) -> str:
    """``41.2/44.4 GiB (sim)`` or ``61.0/79.6 GiB · 87% · 312 W``: short enough for a live line."""
    if not g or g.get("used_gib") is None or g.get("total_gib") is None:
        return ""
    text = f"{g['used_gib']:.1f}/{g['total_gib']:.1f} GiB"
    if g.get("simulated"):
        return text + " (sim)"
    if g.get("util_pct") is not None:
        text += f" · {g['util_pct']:.0f}%"
    if g.get("power_w") is not None:
        text += f" · {g['power_w']:.0f} W"
    return text


class _Nvml:
    def __init__(self, gpus: list[int] | None):
        import pynvml  # optional dependency (nvidia-ml-py); ImportError = no NVML

        self.nv = pynvml
        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        self.indices = [g for g in (gpus if gpus is not None else range(n)) if g < n]
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in self.indices]

    def sample(self) -> list[dict[str, float]]:
        out = []
        for h in self.handles:
            d: dict[str, float] = {}
            # One query at a time: a GPU without power readings (some boards, MIG slices)
            # still reports its memory and utilization.
            try:
                mem = self.nv.nvmlDeviceGetMemoryInfo(h)
                d["mem_used_gb"] = mem.used / 1e9
                d["mem_total_gb"] = mem.total / 1e9
            except Exception:
                pass
            try:
                d["util_pct"] = float(self.nv.nvmlDeviceGetUtilizationRates(h).gpu)
            except Exception:
                pass
            try:
                d["power_w"] = self.nv.nvmlDeviceGetPowerUsage(h) / 1000.0
            except Exception:
                pass
            out.append(d)
        return out

    def close(self) -> None:
        try:
            self.nv.nvmlShutdown()
        except Exception:
            pass


class TelemetrySampler:
    """``with TelemetrySampler(url, gpus) as t: ...`` then ``t.summary()``."""

    def __init__(self, base_url: str | None, gpus: list[int] | None = None, interval_s: float = 1.0, api_key: str | None = None):
        self.base_url = base_url
        self.interval_s = interval_s
        self.gpus = gpus
        self.api_key = api_key
        self.samples: list[dict[str, float]] = []
        self.gpu_samples: list[tuple[float, list[dict[str, float]]]] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._first: dict[str, float] | None = None
        self._last: dict[str, float] | None = None
        self.latest: dict[str, float] = {}
        self.latest_gpus: list[dict[str, float]] = []  # the last NVML sample, one dict per GPU
        try:
            self._nvml: _Nvml | None = _Nvml(gpus)
        except Exception:
            self._nvml = None

    def __enter__(self) -> "TelemetrySampler":
        self._thread = threading.Thread(target=self._run, name="knee-telemetry", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(5)
        if self._nvml:
            self._nvml.close()

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        while not self._stop.is_set():
            self._sample(headers)
            self._stop.wait(self.interval_s)
        self._sample(headers)  # one last scrape so counters cover the whole point

    def _sample(self, headers: dict[str, str]) -> None:
        if self.base_url:
            try:
                status, text = localhttp.get(self.base_url + "/metrics", headers)
                if status == 200:
                    m = parse_vllm_metrics(text)
                    if m:
                        self._first = self._first or m
                        self._last = m
                        self.samples.append(m)
                        self.latest = m
                else:
                    self.errors += 1
            except Exception:
                self.errors += 1
        if self._nvml:
            gpus = self._nvml.sample()
            self.gpu_samples.append((time.monotonic(), gpus))
            self.latest_gpus = gpus

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"samples": len(self.samples), "scrape_errors": self.errors}
        for key in ("running", "waiting", "kv_cache_usage"):
            vals = [s[key] for s in self.samples if key in s]
            if vals:
                out[f"mean_{key}"] = sum(vals) / len(vals)
                out[f"max_{key}"] = max(vals)
        if self._first and self._last and "preemptions" in self._last:
            out["preemptions"] = self._last["preemptions"] - self._first.get("preemptions", 0.0)
        if self.gpu_samples:
            gpus = []
            for i in range(len(self.gpu_samples[0][1])):
                rows = [s[i] for _, s in self.gpu_samples if i < len(s)]
                g: dict[str, float] = {}
                for k in ("mem_used_gb", "util_pct", "power_w"):
                    vals = [r[k] for r in rows if k in r]
                    if vals:
                        g[f"max_{k}" if k == "mem_used_gb" else f"mean_{k}"] = max(vals) if k == "mem_used_gb" else sum(vals) / len(vals)
                gpus.append(g)
            out["gpus"] = gpus
            span = self.gpu_samples[-1][0] - self.gpu_samples[0][0]
            power = sum(g.get("mean_power_w", 0.0) for g in gpus)
            if span > 0 and power:
                out["gpu_energy_j"] = power * span
        return out
