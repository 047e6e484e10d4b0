"""SVG snapshots of every screen at 100x30, the main ones at 80x24, and the light theme.

Deterministic by construction: the demo study is simulated (seeded, virtual time) under a
fixed name, nothing on screen shows a clock, workers are awaited and cursors do not blink
(``tui.demo.settle``). Update with ``pytest --snapshot-update tests/test_tui_snapshots.py``.
"""

from __future__ import annotations


import pytest

from tui.app import make_app
from tui.demo import DEMO_STUDY, demo_sweep_plan, settle
from tui.screens.quit_dialog import QuitDialog
from support.pilot import demo_storage, offline, wait_until as _until  # noqa: F401 (fixtures)

WIDE = (100, 30)
NARROW = (80, 24)


def goto(mode_key: str, ready=None):
    async def run_before(pilot) -> None:
        await settle(pilot)
        await pilot.press(mode_key)
        if ready is not None:
            await _until(pilot, lambda: ready(pilot.app))
        await settle(pilot)

    return run_before


def _followed(app) -> bool:
    return app.sweep is not None and app.sweep.status == "done"


def _pareto_ready(app) -> bool:
    return getattr(app.screen, "view", None) is not None


def followed_app(storage: str):
    return make_app(demo_sweep_plan(), storage=storage, study=DEMO_STUDY)


@pytest.mark.parametrize("size", [WIDE, NARROW], ids=["100x30", "80x24"])
def test_plan(snap_compare, size):
    assert snap_compare(make_app(), run_before=goto("f1"), terminal_size=size)


def test_plan_with_errors(snap_compare):
    async def run_before(pilot) -> None:
        await settle(pilot)
        screen = pilot.app.screen
        screen.field("constraints").value = "ttft<fast"
        screen.field("input_len").value = "0"
        screen.field("hardware").value = "ml.g9.huge"
        await settle(pilot)

    assert snap_compare(make_app(), run_before=run_before, terminal_size=WIDE)


def _estimate_ready(app) -> bool:
    """The estimate's message handled, its rows in the table: the worker finishing is not
    enough on a loaded box (the table was once captured empty, its columns header-wide).
    And the table has sized its columns to those rows: a DataTable does that on its next
    idle, and a capture before it drew the header at the old widths (session 32)."""
    if getattr(app.screen, "view", None) is None:
        return False
    table = app.screen.prediction_table
    return table.row_count > 0 and not getattr(table, "_require_update_dimensions", False)


@pytest.mark.parametrize("size", [WIDE, NARROW], ids=["100x30", "80x24"])
def test_estimate(snap_compare, size):
    assert snap_compare(make_app(), run_before=goto("f2", _estimate_ready), terminal_size=size)


def test_estimate_light_theme(snap_compare):
    app = make_app()
    app.theme = "textual-light"
    assert snap_compare(app, run_before=goto("f2", _estimate_ready), terminal_size=WIDE)


def test_sweep_empty(snap_compare, tmp_path):
    assert snap_compare(make_app(storage=str(tmp_path / "none.db")), run_before=goto("f3"), terminal_size=WIDE)


@pytest.mark.parametrize("size", [WIDE, NARROW], ids=["100x30", "80x24"])
def test_sweep(snap_compare, demo_storage, size):
    assert snap_compare(followed_app(demo_storage), run_before=goto("f3", _followed), terminal_size=size)


@pytest.mark.parametrize("size", [WIDE, NARROW], ids=["100x30", "80x24"])
def test_pareto(snap_compare, demo_storage, size):
    assert snap_compare(followed_app(demo_storage), run_before=goto("f4", _pareto_ready), terminal_size=size)


def test_pareto_light_theme(snap_compare, demo_storage):
    app = followed_app(demo_storage)
    app.theme = "textual-light"
    assert snap_compare(app, run_before=goto("f4", _pareto_ready), terminal_size=WIDE)


def test_deploy_empty(snap_compare):
    assert snap_compare(make_app(), run_before=goto("f5"), terminal_size=WIDE)


def _to_deploy(then: str | None = None):
    async def run_before(pilot) -> None:
        await goto("f4", _pareto_ready)(pilot)
        await pilot.press("d")
        await _until(pilot, lambda: getattr(pilot.app.screen, "plan", None) is not None)
        await settle(pilot)
        if then:
            await pilot.press(then)
            await settle(pilot)

    return run_before


def test_deploy(snap_compare, demo_storage):
    assert snap_compare(followed_app(demo_storage), run_before=_to_deploy(), terminal_size=WIDE)


def test_deploy_confirmation(snap_compare, demo_storage):
    assert snap_compare(followed_app(demo_storage), run_before=_to_deploy("a"), terminal_size=WIDE)


def test_quit_dialog(snap_compare):
    async def run_before(pilot) -> None:
        await settle(pilot)
        pilot.app.push_screen(QuitDialog(DEMO_STUDY))
        await settle(pilot)

    assert snap_compare(make_app(), run_before=run_before, terminal_size=WIDE)


def _recommend_ready(app) -> bool:
    s = app.screen
    return getattr(s, "rec", None) is not None and s.table.row_count > 0 and not s.table.loading


@pytest.mark.parametrize("size", [WIDE, NARROW], ids=["100x30", "80x24"])
def test_recommend(snap_compare, size):
    assert snap_compare(make_app(), run_before=goto("f6", _recommend_ready), terminal_size=size)
