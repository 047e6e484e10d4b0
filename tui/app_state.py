"""What the screens use of the app, as a Protocol: the state they read and the actions they
call. Screens type ``self.knee`` with it instead of importing the app class, which imports
every screen (an import the other way would make a circle)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from textual.screen import Screen

from core.spec.plan import Plan
from tui.data.selection import Selection
from tui.data.sweep_control import SweepControl
from tui.data.sweep_state import SweepSnapshot


class KneeAppState(Protocol):
    """Implemented by :class:`tui.app.KneeApp` (its reactives and actions)."""

    plan: Plan
    plan_path: Path | None
    sweep: SweepSnapshot | None
    selection: Selection | None
    sweep_control: SweepControl
    deploy_clients: Any  # None: boto3 clients made when applying
    deploy_options: Any  # None: core.deploy.ApplyOptions()
    measuring_on_sagemaker: bool  # set by the Recommend screen while endpoints exist

    def use_plan(self, plan: Plan) -> None: ...

    def start_sweep(self, plan: Plan) -> None: ...

    def attach_latest(self) -> None: ...

    def push_screen(self, screen: Screen | str, *_args: Any, **_kwargs: Any) -> Any: ...
