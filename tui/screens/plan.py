"""The Plan screen: what to serve, on what, for which workload and goals, and how to search.

Every keystroke re-checks the form (cheap checks only) and shows each field's problem on the
line below it. Resolving the model may reach the Hugging Face hub, so it runs in a thread
worker; the app's plan changes only when every field is good and the model is known.
"""

from __future__ import annotations

from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.suggester import SuggestFromList
from textual.widgets import Input, Label, Select, Static

from core.catalog import bundled_models, instances
from core.errors import KneeError
from core.spec.plan import Plan
from tui.data.plan_form import CHOICE_FIELDS, check_fields, fields_from_plan
from tui.messages import FieldLookedUp
from tui.screens.base import LEAVE_FIELD, KneeScreen
from tui.widgets.form_field import FormField
from tui.widgets.ordered_input import OrderedInput

SECTIONS: tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...] = (
    # (title, ((field id, label, placeholder), ...))
    (
        "Model and hardware",
        (
            ("model", "model", "HF id or local path, e.g. Qwen/Qwen3-4B"),
            ("hardware", "hardware", "ml.g6.12xlarge, or 4x L4 (no-p2p: GPUs without peer-to-peer)"),
        ),
    ),
    (
        "Workload",
        (
            ("input_len", "input tokens", "1024"),
            ("output_len", "output tokens", "512"),
            ("range_ratio", "range ratio", "0 = fixed lengths, 0.2 = ±20%"),
            ("dataset", "dataset", ""),
            ("dataset_path", "dataset file", "optional: a ShareGPT JSON or a corpus file"),
            ("lengths_from", "lengths file", "optional: your requests' token counts (usage JSONL, CSV, vllm bench result)"),
            ("num_prompts", "prompts", "1000"),
            ("answers", "answers end", ""),
            ("arrival", "arrival", ""),
        ),
    ),
    (
        "Goals",
        (
            ("constraints", "SLOs", "ttft:p95<500ms;e2e_latency:p99<60s"),
            ("min_request_rate", "min req/s", "5"),
            ("objective", "objective", ""),
        ),
    ),
    (
        "Engine and search space",
        (
            ("engine", "engine", ""),
            ("url", "server URL", "external engine: http://127.0.0.1:8000"),
            ("endpoint_name", "endpoint", "sagemaker engine: the endpoint name"),
            ("engine_version", "version", "empty: the current release (a sweep asks its server); e.g. 0.10.1"),
            ("server_args", "server args", "tensor_parallel_size=[1,2,4];max_num_seqs=[32,64,128]"),
            ("client_args", "client args", "max_concurrency=[8,16,32,64]"),
        ),
    ),
)


class PlanScreen(KneeScreen):
    MODE = "plan"
    # The form, not a field, has the focus at first: the first key a newcomer presses (a
    # digit from the mode bar) switches screens instead of replacing the model. Tab or a
    # click enters a field, where digits type; Escape leaves it.
    AUTO_FOCUS = "#plan-form"
    BINDINGS = [
        Binding("ctrl+s", "save", "Save plan"),
        Binding("ctrl+o", "load", "Load plan"),
        LEAVE_FIELD,
        Binding("ctrl+r", "reset_demo", "Demo plan", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        # ref -> (summary, error): the model lookup is slow once, instant after
        # (field, what was checked) -> (summary, error): a model reference is slow to look up
        # once and instant after; a lengths file is read once per version (path@mtime).
        self._looked_up: dict[tuple[str, str], tuple[str | None, str | None]] = {}

    # ---- accessors ----------------------------------------------------------------------
    def field(self, field_id: str) -> FormField:
        return self.query_one(f"#field-{field_id}", FormField)

    @property
    def fields(self) -> list[FormField]:
        return list(self.query(FormField))

    @property
    def summary(self) -> Static:
        return self.query_one("#plan-summary", Static)

    # ---- layout -------------------------------------------------------------------------
    def compose_body(self) -> ComposeResult:
        values = fields_from_plan(self.knee.plan)
        suggest = {
            "model": SuggestFromList(bundled_models(), case_sensitive=False),
            "hardware": SuggestFromList(sorted(instances()), case_sensitive=False),
        }
        with VerticalScroll(id="plan-form"):
            for title, rows in SECTIONS:
                yield Label(title, classes="section")
                for fid, label, placeholder in rows:
                    yield FormField(
                        fid,
                        label,
                        values[fid],
                        placeholder=placeholder,
                        choices=CHOICE_FIELDS.get(fid),
                        suggester=suggest.get(fid),
                    )
            yield Label("Plan file", classes="section")
            with Horizontal(id="file-row"):
                yield Label("path", classes="label")
                yield OrderedInput(str(self.knee.plan_path or "knee-plan.toml"), compact=True, id="plan-path")
            yield Static("", id="file-note", markup=False)
        yield Static("", id="plan-summary")

    def on_mount(self) -> None:
        self.recheck()

    # ---- validation ---------------------------------------------------------------------
    @on(Input.Changed)
    @on(Select.Changed)
    def _changed(self, event: Input.Changed | Select.Changed) -> None:
        if event.control.id != "plan-path":
            self.recheck()

    def values(self) -> dict[str, str]:
        return {f.field_id: f.value for f in self.fields}

    def recheck(self) -> None:
        """Check every field and publish the plan when all are good."""
        plan, errors, hints = check_fields(self.values())
        model_ref = self.field("model").value.strip()
        if "model" not in errors and model_ref:
            known = self._looked_up.get(("model", model_ref))
            if known is None:
                hints["model"] = "looking the model up…"
                self.resolve_model(model_ref)
                plan = None
            elif known[1]:
                errors["model"] = known[1]
                plan = None
            else:
                hints["model"] = known[0] or ""
        lengths = self.field("lengths_from").value.strip()
        if "lengths_from" not in errors and lengths:
            # Summarised like the model: read in a worker (a log may be large), once per version.
            path = Path(lengths).expanduser().resolve()
            try:
                key = f"{path}@{path.stat().st_mtime_ns}"
            except OSError:  # gone since check_fields saw it
                key = f"{path}@gone"
                self._looked_up["lengths_from", key] = (None, f"no file at {lengths}")
            read = self._looked_up.get(("lengths_from", key))
            if read is None:
                hints["lengths_from"] = "reading the file…"
                self.read_lengths_file(str(path), key)
                plan = None
            elif read[1]:
                errors["lengths_from"] = read[1]
                plan = None
            else:
                hints["lengths_from"] = f"{read[0]}: replaces input/output tokens, range ratio and the dataset's shape"
        for f in self.fields:
            f.show(errors.get(f.field_id), hints.get(f.field_id))
        self._engine_fields()
        if errors:
            self.summary.update(f"[$text-error]{len(errors)} field(s) need attention[/] — the estimate keeps the last good plan")
        elif plan is not None:
            self.summary.update("[$text-success]plan is valid[/] · [b]2[/b] estimate · [b]3[/b] sweep")
            if plan != self.knee.plan:
                self.knee.plan = plan

    def _engine_fields(self) -> None:
        engine = self.field("engine").value
        self.field("url").display = engine == "external"
        self.field("endpoint_name").display = engine == "sagemaker"
        self.field("engine_version").display = engine != "sagemaker"

    @work(thread=True, exclusive=True, group="model-lookup")
    def resolve_model(self, ref: str) -> None:
        from core.catalog import load_model
        from tui.data.estimate import model_summary

        try:
            summary, error = model_summary(load_model(ref)), None
        except KneeError as e:
            summary, error = None, str(e)
        except Exception as e:  # the hub or transformers failing in their own ways
            summary, error = None, f"could not read {ref}: {e}"
        self.post_message(FieldLookedUp("model", ref, summary, error))

    @work(thread=True, exclusive=True, group="lengths-file")
    def read_lengths_file(self, path: str, key: str) -> None:
        from core.spec.length_log import read_lengths

        try:
            summary, error = read_lengths(path).describe(), None
        except KneeError as e:
            summary, error = None, str(e)
        except OSError as e:
            summary, error = None, f"could not read {path}: {e.strerror}"
        self.post_message(FieldLookedUp("lengths_from", key, summary, error))

    @on(FieldLookedUp)
    def _looked_up_done(self, message: FieldLookedUp) -> None:
        self._looked_up[message.field, message.key] = (message.summary, message.error)
        self.recheck()

    # ---- actions ------------------------------------------------------------------------
    def fill(self, plan: Plan) -> None:
        """Put ``plan`` into the form (each field's Changed message re-checks the form)."""
        for fid, value in fields_from_plan(plan).items():
            self.field(fid).value = value

    def _note(self, text: str, error: bool = False) -> None:
        note = self.query_one("#file-note", Static)
        note.update(text)
        note.set_class(error, "-error")

    def action_save(self) -> None:
        path = Path(self.query_one("#plan-path", Input).value.strip()).expanduser()
        plan, errors, _ = check_fields(self.values())
        if plan is None:
            self._note("fix the fields marked ✗ before saving", error=True)
            return
        try:
            plan.save(path)
        except OSError as e:
            self._note(f"could not write {path}: {e.strerror}", error=True)
            return
        self.knee.plan_path = path
        self._note(f"saved {path}")

    def action_load(self) -> None:
        path = self.query_one("#plan-path", Input).value.strip()
        try:
            plan = Plan.load(Path(path).expanduser())
        except KneeError as e:
            self._note(str(e), error=True)
            return
        self.knee.plan_path = Path(path)
        self.fill(plan)
        self._note(f"loaded {path}")

    def action_reset_demo(self) -> None:
        from core.spec.plan import demo_plan

        self.fill(demo_plan())

    def action_leave_field(self) -> None:
        # Lets the number keys switch modes again after typing in a field.
        self.set_focus(None)
