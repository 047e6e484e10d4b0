"""The Deploy screen: the SageMaker plan for the configuration chosen on the Pareto screen,
in full (container, environment, instance type and count, copies, cost, the boto3 requests),
applied only after a confirmation dialog, with progress, the result, and teardown.

Building a plan resolves a container image through the SageMaker SDK (slow to import), and
applying polls AWS for minutes: both run in thread workers and report through messages.
"""

from __future__ import annotations

import dataclasses
import threading

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.suggester import SuggestFromList
from textual.widgets import Input, Label, Log, Select, Static

from core.catalog import instances
from core.errors import KneeError
from tui.data.selection import Selection
from tui.messages import DeployPlanned, DeployProgress
from tui.screens.base import LEAVE_FIELD, KneeScreen
from tui.screens.confirm import ConfirmDialog
from tui.widgets.form_field import FormField

CONTAINERS = ("lmi", "vllm", "tgi")


class DeployScreen(KneeScreen):
    MODE = "deploy"
    # Focus starts on the plan, not a field, so the single-letter keys work at once.
    AUTO_FOCUS = "#deploy-body"
    BINDINGS = [
        Binding("a", "apply", "Apply…"),
        Binding("x", "teardown", "Tear down…"),
        Binding("c", "cancel_apply", "Cancel apply", show=False),
        LEAVE_FIELD,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.plan = None  # core.deploy.DeployPlan of the current target, when it builds
        self._cancel: threading.Event | None = None
        self._applied_name: str | None = None
        # Bumped on every rebuild: a build for older field values is dropped when it lands.
        self._generation = 0

    # ---- accessors ----------------------------------------------------------------------
    def field(self, field_id: str) -> FormField:
        return self.query_one(f"#field-{field_id}", FormField)

    @property
    def plan_text(self) -> Static:
        return self.query_one("#deploy-plan", Static)

    @property
    def progress_log(self) -> Log:
        return self.query_one("#deploy-progress", Log)

    def compose_body(self) -> ComposeResult:
        yield Static("Nothing chosen to deploy yet: pick a point on the Pareto screen ([b]4[/b]) and press [b]d[/b].", id="deploy-empty")
        with VerticalScroll(id="deploy-body"):
            yield Static("", id="deploy-source")
            yield Label("Target", classes="section")
            yield FormField(
                "instance", "instance", "", placeholder="ml.g6.12xlarge", suggester=SuggestFromList(sorted(instances()), case_sensitive=False)
            )
            yield FormField("container", "container", "lmi", choices=CONTAINERS)
            yield FormField("target_rps", "target req/s", "", placeholder="size the instance count for this load")
            yield FormField("role_arn", "role ARN", "", placeholder="arn:aws:iam::<account>:role/<name> (needed to apply)")
            yield FormField("region", "region", "us-east-1")
            yield Label("Plan", classes="section")
            yield Static("", id="deploy-plan", markup=False)
            yield Label("Progress", classes="section", id="progress-title")
            yield Log(id="deploy-progress", max_lines=400)

    def on_mount(self) -> None:
        self.watch(self.knee, "selection", self._selection_changed)

    def _selection_changed(self, sel: Selection | None) -> None:
        self.set_class(sel is not None, "-chosen")
        if sel is None:
            return
        self.query_one("#deploy-source", Static).update(
            f"[b]{sel.label}[/b]\n[dim]{sel.model} · measured on {sel.hardware or sel.gpu or '?'}"
            f"{' · simulated' if sel.point.simulated else ''}[/dim]"
        )
        if not self.field("instance").value and sel.instance:
            self.field("instance").value = sel.instance  # rebuilds through Input.Changed
        else:
            self.rebuild()

    # ---- building the plan --------------------------------------------------------------
    @on(Input.Changed)
    @on(Select.Changed)
    def _target_changed(self) -> None:
        self.rebuild()

    def target_values(self) -> dict[str, str]:
        return {f: self.field(f).value.strip() for f in ("instance", "container", "target_rps", "role_arn", "region")}

    def rebuild(self) -> None:
        sel = self.knee.selection
        if sel is None:
            return
        self._generation += 1
        self.plan = None  # until the current fields' plan is built
        values = self.target_values()
        errors: dict[str, str] = {}
        rps = None
        if values["target_rps"]:
            try:
                rps = float(values["target_rps"])
                if rps <= 0:
                    raise ValueError
            except ValueError:
                errors["target_rps"] = f"a positive number of requests per second, got {values['target_rps']!r}"
        if not values["instance"]:
            errors["instance"] = "type a SageMaker instance type, e.g. ml.g6.12xlarge"
        for f in ("instance", "target_rps", "role_arn", "region"):
            self.field(f).show(errors.get(f))
        if errors:
            self.plan_text.update("✗ no plan until the fields marked ✗ are fixed")
            self.plan_text.add_class("-error")
            return
        self.plan_text.update("building the plan…")
        self.build(sel, values, rps, self._generation)

    @work(thread=True, exclusive=True, group="deploy-plan", exit_on_error=False)
    def build(self, sel: Selection, values: dict[str, str], rps: float | None, generation: int = 0) -> None:
        from core.deploy import DeployTarget, build_plan
        from pydantic import ValidationError

        try:
            target = DeployTarget(
                instance=values["instance"],
                container=values["container"],
                region=values["region"] or "us-east-1",
                target_rps=rps,
                role_arn=values["role_arn"] or None,
            )
            plan = build_plan(sel.deploy_source(), target)
        except KneeError as e:
            self.post_message(DeployPlanned(None, str(e), generation))
            return
        except ValidationError as e:
            err = e.errors()[0]
            self.post_message(DeployPlanned(None, f"{'.'.join(map(str, err['loc']))}: {err['msg']}", generation))
            return
        self.post_message(DeployPlanned(plan, generation=generation))

    @on(DeployPlanned)
    def _planned(self, message: DeployPlanned) -> None:
        from core.deploy import render_text

        if message.generation != self._generation:
            return  # built for fields that have changed since
        self.plan = message.plan
        if message.error:
            # Name the field the reason is about when it is clear; otherwise under the plan.
            text = message.error
            field = "role_arn" if "role" in text.lower() else "instance" if "instance" in text.lower() or "TP" in text else None
            if field:
                self.field(field).show(text)
            self.plan_text.update(f"✗ {text}")
            self.plan_text.add_class("-error")
            return
        self.plan_text.remove_class("-error")
        self.plan_text.update(render_text(message.plan, full=True))

    # ---- apply and teardown -------------------------------------------------------------
    def action_apply(self) -> None:
        plan = self.plan
        if plan is None:
            self.notify("no valid plan to apply", severity="warning")
            return
        body = confirm_body(plan)

        def answered(yes: bool | None) -> None:
            if yes:
                self.apply(plan)

        self.app.push_screen(ConfirmDialog(f"Deploy {plan.name}?", body, "Deploy", danger=True), answered)

    def action_teardown(self) -> None:
        name = self._applied_name or (self.plan.name if self.plan else None)
        if name is None:
            self.notify("nothing to tear down", severity="warning")
            return
        region = self.plan.region if self.plan else "us-east-1"

        def answered(yes: bool | None) -> None:
            if yes:
                self.teardown(name, region)

        self.app.push_screen(
            ConfirmDialog(
                f"Delete {name}?",
                "Removes the endpoint, its inference components, endpoint configs and models (only those knee made).",
                "Delete",
                danger=True,
            ),
            answered,
        )

    def action_cancel_apply(self) -> None:
        if self._cancel is not None:
            self._cancel.set()
            self.notify("cancelling: what was created is rolled back")

    def _progress(self, event) -> None:
        self.post_message(DeployProgress(step=event.step, detail=f"{event.status}: {event.message}"))

    @work(thread=True, exclusive=True, group="deploy-apply", exit_on_error=False)
    def apply(self, plan) -> None:
        from core.deploy import ApplyOptions, apply_plan

        self._cancel = threading.Event()
        self.post_message(DeployProgress("apply", f"deploying {plan.name} to {plan.region}"))
        options = dataclasses.replace(self.knee.deploy_options or ApplyOptions(), cancel=self._cancel)
        try:
            result = apply_plan(plan, confirmed=True, clients=self.knee.deploy_clients, progress=self._progress, options=options)
        except KneeError as e:
            self.post_message(DeployProgress("apply", done=True, error=str(e)))
            return
        except Exception as e:  # botocore and network errors: report them, keep the app
            self.post_message(DeployProgress("apply", done=True, error=f"{type(e).__name__}: {e}"))
            return
        self.post_message(DeployProgress("apply", f"ready: {result.endpoint_name}", done=True, result=result))

    @work(thread=True, exclusive=True, group="deploy-apply", exit_on_error=False)
    def teardown(self, name: str, region: str) -> None:
        from core.deploy import delete_deployment

        self.post_message(DeployProgress("delete", f"deleting {name}"))
        try:
            result = delete_deployment(
                name, confirmed=True, region=region, clients=self.knee.deploy_clients, progress=self._progress, options=self.knee.deploy_options
            )
        except Exception as e:  # as for apply
            self.post_message(DeployProgress("delete", done=True, error=f"{type(e).__name__}: {e}"))
            return
        self.post_message(DeployProgress("delete", f"deleted {len(result.deleted)} resource(s)", done=True, result=result))

    @on(DeployProgress)
    def _on_progress(self, message: DeployProgress) -> None:
        self.add_class("-progress")
        log = self.progress_log
        if message.error:
            log.write_line(f"✗ {message.step}: {message.error}")
            self.notify(message.error, title=f"{message.step} failed", severity="error", timeout=10)
            return
        log.write_line(f"{message.step}: {message.detail}")
        result = message.result
        if message.done and result is not None and hasattr(result, "invoke_hint"):
            self._applied_name = result.name
            if result.smoke is not None:
                log.write_line(f"smoke test: {'ok' if result.smoke.ok else 'failed'} {result.smoke.text[:80]!r}")
            log.write_line(result.invoke_hint)

    def action_leave_field(self) -> None:
        self.set_focus(None)


def confirm_body(plan) -> str:
    """What the confirmation must say before anything billable is created: where, how many
    instances, what it costs, and every resource that will exist afterwards."""
    z = plan.sizing

    def money(v: float | None, unit: str) -> str:
        return "unknown" if v is None else f"${v:,.2f}{unit}"

    lines = [
        f"{plan.source.label}",
        f"{plan.container_title} on {z.instance_count} x {plan.instance.name} in {plan.region}",
        f"{z.total_copies} model cop{'y' if z.total_copies == 1 else 'ies'} of {z.gpus_per_copy} GPU(s) ({z.copies_per_instance} per instance)",
        f"cost {money(z.cost_per_hour, '/h')} · {money(z.cost_per_1m_output_tokens, ' per 1M output tokens')}"
        + (" (price uncertain)" if z.price_uncertain else ""),
        "",
        "creates (billable until torn down):",
        *(f"  {kind} {name}" for kind, name in plan.resources),
    ]
    lines += [f"! {w}" for w in plan.warnings]
    return "\n".join(lines)
