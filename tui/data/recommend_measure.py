"""What the Recommend screen's Measure action shows, with no Textual in sight: the answers of
its dialog checked, the confirmation's text, each finalist's stage read from the progress
lines, and the table's rows once SageMaker has measured them.

Everything billed goes through ``core.recommend.measure`` (plan, cost estimate, measure,
teardown); this module only shapes its inputs and outputs for the screen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.errors import BadInput
from core.recommend.measure import CostEstimate, Finalist, MeasureOptions, MeasureResult, check_options
from tui.data.recommend import Row, _num, key_of, layout_label, short_instance

DEFAULT_N = 3
DEFAULT_REGION = "us-east-1"


def deploy_ops():
    """core.deploy's functions for core.recommend.measure (the two packages are siblings in
    the import contract, so the UI layer hands them over: the Recommend screen and
    `knee recommend --measure` alike)."""
    import core.deploy as d
    from core.deploy.apply import check_region
    from core.deploy.plan import valid_role
    from core.recommend.measure import DeployOps

    return DeployOps(
        build_plan=d.build_plan,
        DeploySource=d.DeploySource,
        DeployTarget=d.DeployTarget,
        ApplyOptions=d.ApplyOptions,
        apply_plan=d.apply_plan,
        delete_deployment=d.delete_deployment,
        describe_deployment=d.describe_deployment,
        make_clients=d.make_clients,
        check_region=check_region,
        valid_role=valid_role,
    )


def measure_options(
    n_text: str, role: str, region: str, *, storage: str, poll_interval_s: float | None = None, overrides: dict[str, Any] | None = None
) -> tuple[MeasureOptions | None, str | None]:
    """The dialog's answers as MeasureOptions, checked by core (role ARN, region, N), or the
    one-line reason they cannot be: (options, None) or (None, why)."""
    text = n_text.strip() or str(DEFAULT_N)
    try:
        n = int(text)
    except ValueError:
        return None, f"N must be a whole number, got {text!r}"
    if n < 1:
        return None, f"N must be at least 1, got {n}"
    if not role.strip():
        return None, "enter the SageMaker execution role (arn:aws:iam::<account>:role/<name>)"
    opts = MeasureOptions(n=n, role_arn=role.strip(), region=region.strip() or DEFAULT_REGION, storage=storage)
    if poll_interval_s is not None:
        opts.poll_interval_s = poll_interval_s
    for k, v in (overrides or {}).items():
        setattr(opts, k, v)
    try:
        check_options(opts, deploy_ops())
    except BadInput as e:
        # The CLI's flag names mean nothing here: the dialog's fields do.
        return None, str(e).replace("--role", "role").replace("--region", "region")
    return opts, None


def confirm_text(finals: list[Finalist], cost: CostEstimate, region: str) -> str:
    """The one confirmation: what is created, for how long, at what estimated cost (the
    estimate is core's, as the CLI shows it)."""
    lines = [
        f"{len(finals)} endpoint(s) in {region}, one instance each, side by side; each is "
        "benchmarked, then deleted. Escape while it runs tears them all down.",
        "",
    ]
    for f in finals:
        c = f.cand
        price = f"${c.usd_per_hour:.2f}/h" if c.usd_per_hour is not None else "no price"
        lines.append(f"{short_instance(c.instance)} {layout_label(c)}: {price}, about {cost.minutes[f.plan.endpoint_name]:.0f} min")
    if region != DEFAULT_REGION:
        lines.append("prices are the catalog's us-east-1 ones")
    lines += ["", cost.text()]
    return "\n".join(lines)


# Progress lines core.recommend.measure says, by their first word, and the stage each means.
STAGES = (
    ("deploying ", "deploying"),
    ("ready: ", "ready"),
    ("benchmarking ", "benchmarking"),
    ("deleting ", "deleting"),
    ("deleted ", "deleted"),
    ("could not delete ", "NOT deleted"),
)


@dataclass
class Progress:
    """Each finalist's stage, in the order they were planned."""

    stages: dict[str, str] = field(default_factory=dict)  # endpoint name -> stage
    labels: dict[str, str] = field(default_factory=dict)  # endpoint name -> "g6e.xlarge TP1×1"
    finished: str | None = None  # "done", "cancelled", "failed: ..." once over

    @classmethod
    def of(cls, finals: list[Finalist]) -> "Progress":
        p = cls()
        for f in finals:
            p.stages[f.plan.endpoint_name] = "planned"
            p.labels[f.plan.endpoint_name] = f"{short_instance(f.cand.instance)} {layout_label(f.cand)}"
        return p

    def read(self, line: str) -> None:
        """Move a finalist along when ``line`` says so (other lines only go to the log)."""
        for prefix, stage in STAGES:
            if line.startswith(prefix):
                name = line[len(prefix) :].split(" ", 1)[0]
                if name in self.stages:
                    self.stages[name] = stage
                return

    def lines(self) -> list[str]:
        return [f"{self.stages[n]:<12} {self.labels[n]}  {n}" for n in self.stages]


def measured_rows(res: MeasureResult) -> list[Row]:
    """The finalists ranked by what SageMaker measured: req/s measured (predicted), and in the
    last column the highest concurrency that met the SLOs, or why none did."""
    out = []
    for i, r in enumerate(res.rows, 1):
        c = r.cand
        measured = "–" if r.request_rps is None else _num(r.request_rps)
        note = r.note or (f"met SLOs to c={r.max_concurrency}" if r.max_concurrency else "")
        out.append(
            Row(
                key=key_of(c),
                rank=i,
                instance=short_instance(c.instance),
                layout=layout_label(c),
                count="" if r.instances_needed is None else str(r.instances_needed),
                usd_per_hour="–" if r.usd_per_hour_total is None else f"{r.usd_per_hour_total:,.2f}",
                usd_per_1m="–" if r.usd_per_1m_output_tokens is None else f"{r.usd_per_1m_output_tokens:.3f}",
                capacity=f"{measured} meas ({_num(c.capacity_rps)} pred)",
                bottleneck=note,
                frontier=False,
                candidate=c,
            )
        )
    return out


def measured_summary(res: MeasureResult, region: str, goal: str) -> str:
    return (
        f"Ranked by MEASURED numbers (SageMaker, {region}; goal {goal}) · study {res.study} · any change of goal or target ranks the estimates again"
    )
