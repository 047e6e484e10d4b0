"""The Recommend screen's Measure action (``m``): the top N rows measured on SageMaker itself.

The flow, and why each step is where it is:

1. MeasureDialog asks N, the execution role and the region, checked by core before it closes.
2. The finalists are planned and the whole measurement's cost estimated by
   ``core.recommend.measure`` (the CLI's own estimate, not recomputed here), and shown in the
   one confirmation. Cancel is focused: Enter alone creates nothing.
3. ``core.recommend.measure.measure`` runs in a thread worker (it blocks for tens of minutes on
   real endpoints) with a ``cancel`` event: Escape or ctrl+c sets it, and core tears every
   endpoint down exactly as on the CLI's Ctrl-C. Its progress lines go to the panel.
4. At the end the table is ranked by the measured numbers, saying so, with the study's name.

``q`` is held while a measurement runs: quitting would leave billed endpoints behind.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from textual import work
from textual.message import Message

from core.errors import KneeError
from core.recommend import Recommendation
from core.recommend.measure import MeasureOptions, MeasureResult, cost_estimate, measure, plan_finalists
from tui.data.recommend_measure import Progress, confirm_text, deploy_ops
from tui.screens.base import KneeScreen
from tui.screens.confirm import ConfirmDialog
from tui.screens.measure_dialog import MeasureDialog
from tui.widgets.measure_progress import MeasureProgress


@dataclass
class MeasureLine(Message):
    line: str


@dataclass
class MeasureEnded(Message):
    result: MeasureResult | None
    error: str | None  # None on success; "cancelled" or the failure otherwise
    region: str


class MeasureMixin(KneeScreen):
    """RecommendScreen's base: the Measure action. The screen provides the ranking (``rec``,
    ``all_layouts``) and redraws its table with ``_fill_table``."""

    rec: Recommendation | None
    all_layouts: bool

    # Options the dialog does not ask, e.g. {"max_concurrency": 4, "min_prompts": 6} (tests).
    measure_overrides: dict[str, Any] | None = None

    def _measure_init(self) -> None:
        self.measuring = False
        self.measured: MeasureResult | None = None  # shown in the table until the request changes
        self.measured_region = ""
        self._cancel_measure = threading.Event()
        self._last_role = ""
        self._last_region = "us-east-1"

    @property
    def measure_panel(self) -> MeasureProgress:
        return self.query_one(MeasureProgress)

    def _fill_table(self, keep_cursor: bool = True) -> None:
        raise NotImplementedError

    def _finalist_candidates(self) -> list:
        """The rows as the table shows them: each instance's best layout, or every layout."""
        if self.rec is None:
            return []
        return list(self.rec.ranked if self.all_layouts else self.rec.best_per_instance)

    def action_measure(self) -> None:
        if self.measuring:
            self.notify("a measurement is running: Escape cancels it", severity="warning")
            return
        if self.rec is None or not self._finalist_candidates():
            self.notify("nothing ranked to measure yet", severity="warning")
            return
        knee = self.knee
        poll = getattr(knee.deploy_options, "poll_interval_s", None)
        dialog = MeasureDialog(
            storage=knee.sweep_control.storage, poll_interval_s=poll, overrides=self.measure_overrides, role=self._last_role, region=self._last_region
        )
        knee.push_screen(dialog, self._asked)

    def _asked(self, opts: MeasureOptions | None) -> None:
        if opts is None:
            return
        self._last_role, self._last_region = opts.role_arn or "", opts.region
        if self.rec is None:
            return
        req = self.rec.request
        try:
            finals = plan_finalists(req.model, self._finalist_candidates(), opts, deploy_ops())
            cost = cost_estimate(finals, opts)
        except KneeError as e:
            self.notify(f"cannot measure: {e}", severity="error")
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self._start_measure(req, finals, opts)

        self.knee.push_screen(
            ConfirmDialog(
                f"Create {len(finals)} SageMaker endpoint(s) and measure them?",
                confirm_text(finals, cost, opts.region),
                confirm="Create and measure",
                danger=True,
            ),
            confirmed,
        )

    def _start_measure(self, req, finals, opts: MeasureOptions) -> None:
        self.measuring = True
        self.knee.measuring_on_sagemaker = True  # the app refuses to quit from any screen
        self._cancel_measure = threading.Event()
        self.measure_panel.start(Progress.of(finals), f"measuring {len(finals)} on SageMaker ({opts.region}) · Escape: cancel, delete all")
        self.set_class(True, "-measuring")
        self.set_class(True, "-measure-panel")
        self._measure_worker(req, finals, opts)

    @work(thread=True, exclusive=True, group="measure", exit_on_error=False)
    def _measure_worker(self, req, finals, opts: MeasureOptions) -> None:
        post = self.post_message
        try:
            res = measure(
                req,
                finals,
                opts,
                deploy_ops(),
                clients=self.knee.deploy_clients,
                say=lambda line: post(MeasureLine(line)),
                cancel=self._cancel_measure,
            )
        except KeyboardInterrupt:  # core.recommend.measure.Cancelled: torn down already
            post(MeasureEnded(None, "cancelled", opts.region))
        except KneeError as e:
            post(MeasureEnded(None, f"failed: {e}", opts.region))
        except Exception as e:  # a bug must not take the app down; core tore everything down first
            post(MeasureEnded(None, f"failed: {type(e).__name__}: {e}", opts.region))
        else:
            post(MeasureEnded(res, None, opts.region))

    def on_measure_line(self, message: MeasureLine) -> None:
        self.measure_panel.say(message.line)

    def on_measure_ended(self, message: MeasureEnded) -> None:
        self.measuring = False
        self.knee.measuring_on_sagemaker = False
        self.set_class(False, "-measuring")
        res = message.result
        if res is None:
            what = "cancelled: every endpoint was torn down" if message.error == "cancelled" else message.error
            left = [x for x in self.measure_panel.lines if x.startswith("LEFT BEHIND")]
            self.measure_panel.title(f"measurement {what}" + (" · " + left[0] if left else ""))
            self.notify(f"measurement {what}", severity="warning" if message.error == "cancelled" else "error")
            return
        self.measured, self.measured_region = res, message.region
        gone = "LEFT BEHIND: see the log" if res.leftovers else "every endpoint deleted"
        self.measure_panel.title(f"measured: study {res.study} · {gone}")
        self._fill_table(keep_cursor=False)
        self.notify(
            f"ranked by measured numbers; stored as study {res.study}",
            title="measured on SageMaker",
            severity="error" if res.leftovers else "information",
        )

    def _measure_request_changed(self) -> None:
        """Another goal or target: the estimates again; the panel goes once nothing runs."""
        self.measured = None
        if not self.measuring:
            self.measure_panel.remove_class("-shown")
            self.set_class(False, "-measure-panel")

    def action_cancel_measure(self) -> bool:
        """Escape and ctrl+c while measuring: ask core to stop; True when there was one."""
        if not self.measuring:
            return False
        if not self._cancel_measure.is_set():
            self._cancel_measure.set()
            self.measure_panel.title("cancelling: tearing every endpoint down…")
        return True

    async def action_quit_unless_measuring(self) -> None:
        if self.measuring:
            self.notify("a measurement is running: Escape cancels it and deletes its endpoints first", severity="warning")
            return
        await self.app.run_action("quit")
