"""What the server is asked to do: token lengths, dataset and arrival pattern."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Where prompts come from (Workload.dataset).
DatasetKind = Literal["random", "sharegpt", "shared-prefix", "corpus"]


class LengthDist(BaseModel):
    """A token-length distribution.

    ``fixed``: always ``mean``. ``uniform``: in [mean·(1−range_ratio), mean·(1+range_ratio)]
    (vllm bench serve's convention). ``normal``: mean and std, clipped at 1.
    ``empirical``: drawn from ``values``.
    """

    model_config = ConfigDict(frozen=True)

    kind: Literal["fixed", "uniform", "normal", "empirical"] = "fixed"
    mean: float = Field(gt=0)
    range_ratio: float = Field(default=0.0, ge=0.0, le=1.0)
    std: float = Field(default=0.0, ge=0.0)
    values: tuple[int, ...] = ()

    @model_validator(mode="after")
    def _check(self) -> "LengthDist":
        if self.kind == "empirical" and not self.values:
            raise ValueError("an empirical length distribution needs values")
        return self

    @classmethod
    def of(cls, n: float) -> "LengthDist":
        return cls(kind="fixed", mean=n)

    @property
    def upper(self) -> int:
        if self.kind == "uniform":
            return int(self.mean * (1 + self.range_ratio))
        if self.kind == "normal":
            return int(self.mean + 3 * self.std)
        if self.kind == "empirical":
            return max(self.values)
        return int(self.mean)

    @property
    def lower(self) -> int:
        """The shortest length the distribution gives (at least 1)."""
        if self.kind == "uniform":
            return max(1, int(self.mean * (1 - self.range_ratio)))
        if self.kind == "normal":
            return max(1, int(self.mean - 3 * self.std))
        if self.kind == "empirical":
            return max(1, min(self.values))
        return max(1, int(self.mean))


class Workload(BaseModel):
    """Requests to send: lengths, dataset and how they arrive."""

    model_config = ConfigDict(frozen=True)

    input: LengthDist = LengthDist(mean=1024)
    output: LengthDist = LengthDist(mean=512)
    dataset: DatasetKind = "random"
    dataset_path: str | None = None
    shared_prefix_len: int = Field(default=0, ge=0)  # tokens common to all prompts
    num_prompts: int = Field(default=1000, ge=1)
    warmup: int = Field(default=0, ge=0)
    seed: int = 0
    # The client asks the server to ignore EOS, so every answer runs to its drawn length;
    # False: the model may stop first (``vllm bench serve``'s default), and a ShareGPT
    # answer ends at its EOS, capped at its reply's length (core/spec/lengths.py).
    ignore_eos: bool = True

    @classmethod
    def fixed(cls, input_len: int, output_len: int, **kw) -> "Workload":
        return cls(input=LengthDist.of(input_len), output=LengthDist.of(output_len), **kw)

    @property
    def max_total_len(self) -> int:
        return self.input.upper + self.output.upper

    @property
    def prepended_len(self) -> int:
        """Tokens prepended to every drawn prompt: the ``shared-prefix`` dataset puts its shared
        prefix (a system prompt common to every request) before the drawn input, as the load
        generator and the simulator build it; the other datasets draw prompts that share
        nothing, whatever shared_prefix_len says."""
        return self.shared_prefix_len if self.dataset == "shared-prefix" else 0
