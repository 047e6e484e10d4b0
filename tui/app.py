"""The knee app: five modes over the UI-free core, and the state they share.

This module wires; it does not handle. Each screen owns its widgets and workers; the app
holds what several screens read (the plan, the followed sweep, the chosen configuration) as
reactives that the screens watch, and the actions every screen can reach (switch mode, start
a sweep, quit). :func:`make_app` builds it for the command line, the tests and the
screenshot script alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.reactive import var
from textual.screen import Screen

from core.spec.plan import Plan, demo_plan
from tui.screens.estimate import EstimateScreen
from tui.screens.plan import PlanScreen

MODE_KEYS = (("plan", "Plan", "1", "f1"), ("estimate", "Estimate", "2", "f2"), ("sweep", "Sweep", "3", "f3"),
             ("pareto", "Pareto", "4", "f4"), ("deploy", "Deploy", "5", "f5"))


class KneeApp(App[None]):
    TITLE = "knee"
    CSS_PATH = "app.tcss"
    MODES = {"plan": PlanScreen, "estimate": EstimateScreen}
    DEFAULT_MODE = "plan"
    BINDINGS = [
        # The mode bar shows the digits, so the footer leaves them out.
        *(Binding(key, f"app.switch_mode('{mode}')", title, show=False, tooltip=f"Show the {title} screen")
          for mode, title, key, _ in MODE_KEYS),
        # Function keys switch modes even while typing in a field (the digits type).
        *(Binding(fkey, f"app.switch_mode('{mode}')", title, show=False, priority=True)
          for mode, title, _, fkey in MODE_KEYS),
        Binding("q", "quit", "Quit"),
        Binding("t", "toggle_theme", "Light/dark", show=False),
    ]

    plan: var[Plan] = var(demo_plan(), init=False)
    """The last valid plan; the Plan screen sets it, the others watch it."""

    def __init__(self, plan: Plan | None = None, plan_path: Path | None = None, **services: Any) -> None:
        super().__init__()
        self.plan_path = plan_path
        self.services = services
        if plan is not None:
            self.plan = plan

    # ---- shared actions -------------------------------------------------------------------
    def use_plan(self, plan: Plan) -> None:
        """Replace the plan and show it in the Plan form (which re-checks it)."""
        self.plan = plan
        if "plan" in self._screen_stacks and self._screen_stacks["plan"]:
            screen = self._screen_stacks["plan"][-1]
            if isinstance(screen, PlanScreen):
                screen.fill(plan)

    def start_sweep(self, plan: Plan) -> None:
        raise NotImplementedError  # replaced when the sweep follower is wired

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.current_theme.dark else "textual-dark"

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for mode, title, key, _ in MODE_KEYS:
            yield SystemCommand(f"Go to {title}", f"Switch to the {title} screen ({key})",
                                lambda m=mode: self.switch_mode(m))
        yield SystemCommand("Demo plan", "Reset the plan to the demo (Qwen3-4B on ml.g6.12xlarge)",
                            lambda: self.use_plan(demo_plan()))
        yield SystemCommand("Toggle light/dark", "Switch between the light and dark themes (t)",
                            self.action_toggle_theme)


def make_app(plan: Plan | None = None, plan_path: str | Path | None = None, **services: Any) -> KneeApp:
    """The one way to build the app: the CLI, the tests and the screenshot script call it.

    Args:
        plan: the plan to open on (the demo plan when None).
        plan_path: where Save writes and Load reads by default.
        services: replacements for the app's back ends (tests pass fakes of what cannot run
            here, e.g. a SageMaker client).
    """
    path = Path(plan_path) if plan_path else None
    if plan is None and path is not None and path.exists():
        plan = Plan.load(path)
    return KneeApp(plan=plan or demo_plan(), plan_path=path, **services)
