"""A configuration chosen on the Pareto screen, and what Deploy builds from it."""

from __future__ import annotations

from dataclasses import dataclass

from core.deploy.source import DeploySource
from core.spec.study import PointRow


@dataclass(frozen=True)
class Selection:
    point: PointRow
    model: str
    gpu: str | None  # GPU type the study ran on ("L4"), from the study's info
    instance: str | None  # the plan's SageMaker instance, the default deploy target
    hardware: str = ""  # "ml.g6.12xlarge (4x L4)"

    @property
    def label(self) -> str:
        from tui.data.sweep_rows import args_text, load_text

        return f"trial {self.point.trial_id} · {args_text(self.point.server_args)} · {load_text(self.point.client_args)}"

    def deploy_source(self) -> DeploySource:
        """The slice of the point that deploy needs: the server config and the throughput it
        reached at this load point (per replica: one server of tp x dp GPUs)."""
        from core.sweep.space import server_config

        cfg = server_config(self.model, self.point.server_args)
        s = self.point.summary
        rps, tps = s.get("request_throughput"), s.get("output_throughput")
        from tui.data.sweep_rows import load_text

        note = load_text(self.point.client_args) or "default load"
        if self.point.meets_slo:
            note += ", meets the SLOs"
        return DeploySource(
            config=cfg,
            gpu=self.gpu,
            num_gpus=cfg.num_gpus,
            request_throughput=rps if rps and rps > 0 else None,
            output_throughput=tps if tps and tps > 0 else None,
            simulated=self.point.simulated,
            trial_id=str(self.point.trial_id),
            study=self.point.study,
            note=note,
        )
