"""How close knee's estimator came on published runs like the one being predicted.

A band (core/estimate/bands.py) says how wide the error can be anywhere; a track record says
how well knee has done on the hardware and engine in hand: the median absolute error per
metric over published measurements on that GPU with that engine, each predicted by
parameters fitted without its source (leave-one-source-out) or, for the held-out files'
rows (bench/data/heldout*.jsonl), by the shipped parameters, which never saw them; rows whose
source does not publish their lengths are left out. ``bands.json``'s
``track_record`` holds it (bench/bands.py ``track_record``), per GPU, engine and model kind
(MoE or dense), per engine and kind, per GPU and engine, per GPU, per engine and over every
row; a group is kept with 10 rows from 2 sources. :func:`lookup` returns the most specific
group there is, so a dense model on an RTX 4090 with vLLM reads "too few RTX 4090 dense runs,
dense models with vLLM on any GPU" rather than a figure from five rows of one benchmark, and
DeepSeek-R1 on an H200 reads the MoE runs' record, not one pooled with dense models' runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.estimate.bands import METRIC_LABELS, engine_key, kind_label, provenance, table


@dataclass(frozen=True)
class TrackRecord:
    """The held-out error on one group of published runs."""

    scope: str  # what the runs have in common with the prediction: "H200 MoE with vllm", "L4 with vllm", "vllm", "all"
    exact: bool  # the group is this GPU with this engine (for this model kind, when one was asked)
    rows: int
    sources: int
    median_ape: dict[str, float]  # metric -> median |predicted - measured| / measured
    median_ratio: dict[str, float]  # metric -> median measured / predicted (>1: knee was low)
    asked: str = ""  # the runs the prediction is like: "L4 runs with vllm" (said when the record fell back)

    def as_dict(self) -> dict[str, object]:
        return {
            "scope": self.scope,
            "exact": self.exact,
            "rows": self.rows,
            "sources": self.sources,
            "median_ape": self.median_ape,
            "median_measured_over_predicted": self.median_ratio,
            "predictions": table().get("predictions"),
            "held_out_files": table().get("track_record_held_out_files", []),
        }

    def line(self) -> str:
        """One line: "median held-out error on 88 published H100-SXM with vllm runs (7
        sources): TTFT 39%, ITL 23%, ..."."""
        cells = ", ".join(f"{METRIC_LABELS.get(m, m)} {v:.0%}" for m, v in self.median_ape.items())
        runs = "published runs" if self.scope == "all" else f"published {self.scope} runs"
        held = "held-out " if provenance() == "held-out runs" else ""
        fallback = "" if self.exact or not self.asked else f" (too few published {self.asked} to judge them alone)"
        return f"median {held}error on {self.rows} {runs} ({self.sources} sources): {cells}{fallback}"


def lookup(gpu: str | None, engine: str | None, kind: str | None = None) -> TrackRecord | None:
    """The track record of the most specific group with one: this GPU with this engine for
    this model kind ("moe" or "dense"), this engine for this kind, then (any kind) this GPU
    with this engine, this GPU, this engine, then every row. A model's kind comes first: on
    published runs knee's error on MoE models is several times its error on dense ones on the
    same GPU and engine. None where bands.json carries none."""
    t = table().get("track_record")
    if not t:
        return None
    eng = engine_key(engine)
    label = kind_label(kind)
    tries: list[tuple[str, str | None, str]] = []
    if kind:
        tries += [
            ("gpu_engine_kind", f"{gpu}|{eng}|{kind}", f"{gpu} {label} with {eng}"),
            ("engine_kind", f"{eng}|{kind}", f"{label} with {eng}"),
        ]
    tries += [("gpu_engine", f"{gpu}|{eng}", f"{gpu} with {eng}"), ("gpu", gpu, f"{gpu}"), ("engine", eng, eng)]
    asked = f"{gpu} {label} runs with {eng}" if kind else f"{gpu} runs with {eng}"
    for level, key, scope in tries:
        rec = t.get(level, {}).get(key) if key else None
        if rec:
            return _record(rec, scope, level == ("gpu_engine_kind" if kind else "gpu_engine"), asked)
    return _record(t["all"], "all", False, asked) if t.get("all") else None


def _record(rec: dict, scope: str, exact: bool, asked: str) -> TrackRecord:
    ms = rec.get("metrics", {})
    return TrackRecord(
        scope,
        exact,
        int(rec["rows"]),
        int(rec["sources"]),
        {m: float(v["median_ape"]) for m, v in ms.items()},
        {m: float(v["median_ratio"]) for m, v in ms.items()},
        asked,
    )
