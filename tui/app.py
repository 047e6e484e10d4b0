"""The knee app: five modes over the UI-free core, and the state they share.

This module wires; it does not handle. Each screen owns its widgets and workers; the app
holds what several screens read (the plan, the followed sweep, the chosen configuration) as
reactives that the screens watch, and the actions every screen can reach (switch mode,
start or attach to a sweep, quit). :func:`make_app` builds it for the command line, the
tests and the screenshot script alike.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.reactive import var
from textual.screen import Screen
from textual.worker import get_current_worker

from core.errors import KneeError
from core.spec.plan import Plan, demo_plan
from tui.data.selection import Selection
from tui.data.sweep_control import SweepControl
from tui.data.sweep_state import SweepFollower, SweepSnapshot
from tui.messages import SweepStartFailed, SweepUpdated
from tui.screens.deploy import DeployScreen
from tui.screens.estimate import EstimateScreen
from tui.screens.pareto import ParetoScreen
from tui.screens.plan import PlanScreen
from tui.screens.quit_dialog import QuitDialog
from tui.screens.recommend import RecommendScreen
from tui.screens.sweep import SweepScreen
from tui.widgets.mode_bar import MODES as MODE_TITLES

# One list of modes (the mode bar's): the nth is digit n and F-n.
MODE_KEYS = tuple((mode, title, str(n), f"f{n}") for n, (mode, title) in enumerate(MODE_TITLES, 1))
# The follower reads the store at 15 Hz, so the screen shows >= 10 updates/s under a live sweep
# even when a loaded machine costs it some ticks (bench/tui_load.py: at 12 Hz it reached 10.2/s
# on a quiet 2-core box and ~7/s on a busy one); SweepUpdated coalesces what the UI has not drawn.
POLL_S = 1 / 15
IDLE_POLL_S = 1.0  # after the sweep ended (a resume elsewhere is still noticed)


class KneeApp(App[None]):
    TITLE = "knee"
    # Every screen's stylesheet is parsed once at start-up: a screen-level CSS_PATH would be
    # parsed, and the whole DOM restyled, on the first visit to that screen.
    CSS_PATH = ["app.tcss", *(f"screens/{mode}.tcss" for mode, _ in MODE_TITLES)]
    MODES = {
        "plan": PlanScreen,
        "estimate": EstimateScreen,
        "sweep": SweepScreen,
        "pareto": ParetoScreen,
        "deploy": DeployScreen,
        "recommend": RecommendScreen,
    }
    DEFAULT_MODE = "plan"
    BINDINGS = [
        # The mode bar shows the digits, so the footer leaves them out.
        *(Binding(key, f"app.switch_mode('{mode}')", title, show=False, tooltip=f"Show the {title} screen") for mode, title, key, _ in MODE_KEYS),
        # Function keys switch modes even while typing in a field (where the digits type).
        *(Binding(fkey, f"app.switch_mode('{mode}')", title, show=False, priority=True) for mode, title, _, fkey in MODE_KEYS),
        Binding("q", "quit", "Quit"),
        Binding("t", "toggle_theme", "Light/dark", show=False),
    ]

    plan: var[Plan] = var(demo_plan(), init=False)
    """The last valid plan; the Plan screen sets it, Estimate and Sweep read it."""
    sweep: var[SweepSnapshot | None] = var(None, init=False)
    """The followed sweep, replaced (never mutated) at most every ``POLL_S``."""
    selection: var[Selection | None] = var(None, init=False)
    """The configuration chosen on the Pareto screen, for Deploy."""

    def __init__(
        self,
        plan: Plan | None = None,
        plan_path: Path | None = None,
        storage: str | None = None,
        study: str | None = None,
        deploy_clients: Any = None,
        deploy_options: Any = None,
    ) -> None:
        super().__init__()
        self.plan_path = plan_path
        self.sweep_control = SweepControl(storage)
        self.deploy_clients = deploy_clients  # None: boto3 clients made when applying
        self.deploy_options = deploy_options  # None: core.deploy.ApplyOptions() (15 s polls)
        self._initial_study = study
        self._followed: str | None = None  # the study last asked to follow
        self.measuring_on_sagemaker = False  # set by the Recommend screen while endpoints exist
        if plan is not None:
            self.plan = plan

    def on_mount(self) -> None:
        if self._initial_study:
            self.follow(self._initial_study)
        else:
            # Reopened in a workspace that has studies: show the latest, as `knee attach` would.
            self._follow_latest()

    @work(thread=True, exclusive=True, group="follow-latest", exit_on_error=False)
    def _follow_latest(self) -> None:
        try:
            name = self.sweep_control.latest()  # None, and nothing created, in a new workspace
        except KneeError:
            return  # an unreadable store is reported when the user acts on it
        if name is not None:
            self.call_from_thread(self._follow_unless_following, name)

    def _follow_unless_following(self, study: str) -> None:
        if self._followed is None:  # a sweep the user started meanwhile wins
            self.follow(study)

    # ---- plan ---------------------------------------------------------------------------
    def use_plan(self, plan: Plan) -> None:
        """Replace the plan and show it in the Plan form (which re-checks it)."""
        self.plan = plan
        stack = self._screen_stacks.get("plan") or []
        if stack and isinstance(stack[-1], PlanScreen):
            stack[-1].fill(plan)

    # ---- sweeps -------------------------------------------------------------------------
    def start_sweep(self, plan: Plan) -> None:
        """Start a runner process for ``plan`` and follow it on the Sweep screen."""
        self.switch_mode("sweep")
        self.notify(f"starting a {plan.engine} sweep of {plan.model}…")
        self._start_sweep(plan)

    @work(thread=True, exclusive=True, group="sweep-start", exit_on_error=False)
    def _start_sweep(self, plan: Plan) -> None:
        try:
            name = self.sweep_control.start(plan)
        except KneeError as e:
            self.post_message(SweepStartFailed(str(e)))
            return
        self.call_from_thread(self.follow, name)

    @on(SweepStartFailed)
    def _start_failed(self, message: SweepStartFailed) -> None:
        self.notify(message.error, title="cannot start the sweep", severity="error", timeout=10)

    def attach_latest(self) -> None:
        try:
            name = self.sweep_control.latest()
        except KneeError as e:
            self.notify(str(e), severity="error")
            return
        if name is None:
            self.notify(f"no studies in {self.sweep_control.storage}", severity="warning")
            return
        self.follow(name)

    def follow(self, study: str) -> None:
        """Follow ``study`` (replacing any followed before)."""
        self._followed = study
        self.sweep = None
        self._follow(study)

    @work(thread=True, exclusive=True, group="follow", exit_on_error=False)
    def _follow(self, study: str) -> None:
        worker = get_current_worker()
        try:
            follower = SweepFollower(self.sweep_control.store, study)
        except KneeError as e:
            self.post_message(SweepStartFailed(str(e)))
            return
        ended = False
        next_tick = time.monotonic()
        try:
            while not worker.is_cancelled:
                try:
                    snap = follower.poll()
                except KneeError as e:
                    self.post_message(SweepStartFailed(str(e)))
                    return
                if snap is not None:
                    self.post_message(SweepUpdated(snap))
                    ended = not snap.running and snap.status in ("done", "interrupted")
                # A fixed cadence (not a fixed sleep), so reading the store does not slow it.
                next_tick += IDLE_POLL_S if ended else POLL_S
                time.sleep(max(0.0, next_tick - time.monotonic()))
                next_tick = max(next_tick, time.monotonic() - POLL_S)
        finally:
            follower.close()

    @on(SweepUpdated)
    def _sweep_updated(self, message: SweepUpdated) -> None:
        self.sweep = message.snapshot

    # ---- quitting -----------------------------------------------------------------------
    async def action_quit(self) -> None:
        if self.measuring_on_sagemaker:
            # Quitting now would leave billed endpoints behind: the Recommend screen's
            # Escape cancels the measurement and deletes them first.
            self.notify("a measurement on SageMaker is running: on Recommend, Escape cancels it and deletes its endpoints", severity="warning")
            return
        snap = self.sweep
        if snap is None or not snap.running:
            self.exit()
            return

        def chosen(answer: str | None) -> None:
            if answer == "stop":
                self.sweep_control.stop(snap.study)
            if answer in ("stop", "leave"):
                self.exit()

        self.push_screen(QuitDialog(snap.study), chosen)

    # ---- look ---------------------------------------------------------------------------
    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.current_theme.dark else "textual-dark"

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for mode, title, key, _ in MODE_KEYS:
            yield SystemCommand(f"Go to {title}", f"Switch to the {title} screen ({key})", lambda m=mode: self.switch_mode(m))
        yield SystemCommand("Start sweep", "Sweep the current plan in its own process", lambda: self.start_sweep(self.plan))
        yield SystemCommand("Attach to the latest sweep", "Follow the newest study in the workspace", self.attach_latest)
        yield SystemCommand("Demo plan", "Reset the plan to the demo (Qwen3-4B on ml.g6.12xlarge)", lambda: self.use_plan(demo_plan()))
        yield SystemCommand("Toggle light/dark", "Switch between the light and dark themes (t)", self.action_toggle_theme)
        # The catalogs, searchable by the palette's fuzzy match: pick a model or an instance.
        from core.catalog import bundled_models, instances

        for ref in bundled_models():
            yield SystemCommand(
                f"Model: {ref}", "Plan this model (bundled architecture)", lambda r=ref: self.use_plan(self.plan.model_copy(update={"model": r}))
            )
        for inst in sorted(instances().values(), key=lambda i: i.name):
            price = f", ${inst.price_per_hour:.2f}/h" if inst.price_per_hour else ""
            yield SystemCommand(
                f"Instance: {inst.name}",
                f"{inst.num_gpus}x {inst.gpu}{price}",
                lambda n=inst.name: self.use_plan(self.plan.model_copy(update={"instance": n, "gpu": None, "num_gpus": None})),
            )


def make_app(
    plan: Plan | None = None,
    plan_path: str | Path | None = None,
    *,
    storage: str | None = None,
    study: str | None = None,
    deploy_clients: Any = None,
    deploy_options: Any = None,
) -> KneeApp:
    """The one way to build the app: the CLI, the tests and the screenshot script call it.

    Args:
        plan: the plan to open on (else the file at ``plan_path``, else the demo plan).
        plan_path: where Save writes and Load reads by default.
        storage: the study store (default ``.knee/knee.db``, or ``$KNEE_WORKSPACE``).
        study: a study to follow from the start (``knee attach`` opens the app this way).
        deploy_clients: AWS clients for Deploy (``core.deploy.apply.AwsClients``); tests pass
            clients bound to moto; None makes real ones when the user applies.
        deploy_options: a ``core.deploy.ApplyOptions`` template (poll interval, timeouts) for
            apply and teardown; tests poll moto fast.
    """
    path = Path(plan_path) if plan_path else None
    if plan is None and path is not None and path.exists():
        plan = Plan.load(path)
    return KneeApp(
        plan=plan or demo_plan(), plan_path=path, storage=storage, study=study, deploy_clients=deploy_clients, deploy_options=deploy_options
    )
