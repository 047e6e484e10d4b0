"""The Recommend view's Measure action (issue 13) against moto's SageMaker on 127.0.0.1 and the
loopback runtime fake, set up exactly as tests/test_recommend_measure.py sets them up: the
dialog (at 80x24), the cost confirmation, per-finalist progress, the table ranked again by
measured numbers with the study stored, and Escape tearing everything down."""

from __future__ import annotations

import pytest

from core.results import StudyStore
from core.spec.plan import demo_plan
from support.pilot import offline, wait_until  # noqa: F401 (fixtures)
from support.sm_runtime_fake import RuntimeFake, moto_exists
from test_deploy_moto import EXT, NOTHING, ROLE, _fast, _leftovers, aws, moto_url  # noqa: F401 (fixtures)
from test_recommend_measure import runtime  # noqa: F401 (fixture)
from tui.app import make_app
from tui.demo import settle
from tui.screens.confirm import ConfirmDialog
from tui.screens.measure_dialog import MeasureDialog
from tui.screens.recommend import RecommendScreen

pytestmark = [pytest.mark.moto, pytest.mark.slow]
# Small load points: the SLA search starts (and stops) at the cap, 16 requests each.
OVERRIDES = {"max_concurrency": 4, "min_prompts": 6, "max_probes": 2}


def _app(tmp_path, aws):
    plan = demo_plan().model_copy(update={"input_len": 64, "output_len": 8})
    return make_app(plan, storage=str(tmp_path / "knee.db"), deploy_clients=aws, deploy_options=_fast())


def _ranked(app) -> bool:
    s = app.screen
    return isinstance(s, RecommendScreen) and s.rec is not None and s.table.row_count > 0 and not s.table.loading


def _inside(widget, width: int = 80, height: int = 24) -> bool:
    r = widget.region
    return r.width > 0 and r.height > 0 and r.x >= 0 and r.y >= 0 and r.right <= width and r.bottom <= height


async def _ask_and_confirm(pilot, app, aws, n: str = "2"):
    """m, the dialog (a bad role first, named in it), then the confirmation; returns its body."""
    screen = app.screen
    screen.measure_overrides = OVERRIDES
    await pilot.press("m")
    await pilot.pause()
    dialog = app.screen
    assert isinstance(dialog, MeasureDialog)
    assert all(_inside(dialog.query_one(q)) for q in ("#dialog", "#m-role", "#next", "#cancel"))  # fits 80x24
    dialog.query_one("#m-n").value = n
    dialog.query_one("#m-role").value = "not-an-arn"
    await pilot.click("#next")
    await pilot.pause()
    assert app.screen is dialog and "bad role 'not-an-arn'" in str(dialog.query_one("#m-error").render())
    role = dialog.query_one("#m-role")
    role.value = ROLE
    role.focus()
    await pilot.press("enter")  # Enter in a field submits, as Next does
    await pilot.pause()
    await wait_until(pilot, lambda: isinstance(app.screen, ConfirmDialog), timeout=10, what="the confirmation")
    confirm = app.screen
    assert _inside(confirm.query_one("#confirm")) and _inside(confirm.query_one("#cancel"))
    body = str(confirm.query_one("#body").render())
    assert _leftovers(aws) == NOTHING  # nothing before the answer
    await pilot.click("#confirm")
    return body


async def _open_recommend(pilot, app):
    """The Recommend view (F6), once its table is ranked; the screen."""
    await settle(pilot)
    await pilot.press("f6")
    await wait_until(pilot, lambda: _ranked(app), what="the ranked table")
    return app.screen


async def test_measure_two_creates_benchmarks_deletes_and_reranks(aws, runtime, tmp_path, monkeypatch):
    monkeypatch.setenv("KNEE_WORKSPACE", str(tmp_path / "workspace"))
    app = _app(tmp_path, aws)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _open_recommend(pilot, app)
        top2 = [r.candidate.instance for r in list(screen._rows.values())[:2]]

        body = await _ask_and_confirm(pilot, app, aws)
        # core's own estimate, for the two top rows
        assert "estimated cost: $" in body and "2 endpoint(s) in us-east-1" in body
        assert all(i.removeprefix("ml.") in body for i in top2)

        await wait_until(pilot, lambda: screen.measuring, what="the measurement to start")
        assert "Escape: cancel" in str(screen.measure_panel.query_one("#mp-title").render())
        try:
            await wait_until(pilot, lambda: not screen.measuring, timeout=60, what="the measurement to end")
        except AssertionError as e:
            raise AssertionError(f"{e}:\n" + "\n".join(screen.measure_panel.lines)) from None
        await settle(pilot)
        log = "\n".join(screen.measure_panel.lines)
        assert screen.measured is not None, log

        # Two endpoints, each deployed, benchmarked and deleted; nothing left in moto.
        names = list(screen.measure_panel.progress.stages)
        assert len(names) == 2 and all(screen.measure_panel.progress.stages[n] == "deleted" for n in names), log
        for n in names:
            assert f"deploying {n}" in log and f"benchmarking {n}" in log and f"deleting {n}" in log
        assert {i["endpoint"] for i in runtime.invocations} == set(names)
        assert _leftovers(aws) == NOTHING

        # The table is ranked by the measured numbers, saying so, with the stored study.
        res = screen.measured
        study = res.study
        summary = str(screen.query_one("#rec-summary").render())
        assert "MEASURED" in summary and study in summary
        shown = list(screen._rows.values())
        assert [r.candidate for r in shown] == [r.cand for r in res.rows] and len(shown) == 2
        assert all(" meas (" in r.capacity for r in shown)
        assert {r.candidate.instance for r in shown} == set(top2)

        store = StudyStore(str(tmp_path / "knee.db"), create=False)
        assert store.study(study)["status"] == "done" and store.study(study)["source"] == "sagemaker"
        trials = store.trials(study)
        assert len(trials) == 2 and all(t.status == "ok" and t.predicted["measured_on"] == "sagemaker" for t in trials)

        # A new request (another goal) shows the estimates again.
        await pilot.press("o")
        await wait_until(pilot, lambda: _ranked(app) and screen.rec.request.goal == "throughput", what="the re-rank")
        assert screen.measured is None and "MEASURED" not in str(screen.query_one("#rec-summary").render())


async def test_escape_while_measuring_tears_every_endpoint_down(aws, tmp_path, monkeypatch):
    """The runtime is slowed down (0.3 s a token) so Escape lands while the load is in flight."""
    monkeypatch.setenv("KNEE_WORKSPACE", str(tmp_path / "workspace"))
    fake = RuntimeFake(moto_exists(EXT["ics"]), itl_s=0.3)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", fake.url)
    try:
        app = _app(tmp_path, aws)
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await _open_recommend(pilot, app)
            await _ask_and_confirm(pilot, app, aws)
            panel = screen.measure_panel
            await wait_until(pilot, lambda: any("measuring c=" in x for x in panel.lines), timeout=120, what="the first load point")
            assert len(_leftovers(aws)["endpoints"]) == 2  # both up, side by side
            await pilot.press("q")  # held: quitting now would leave them billed
            await pilot.pause()
            assert app.is_running and screen.measuring
            await app.run_action("quit")  # the app's own quit (ctrl+q, any screen) holds too
            await pilot.pause()
            assert app.is_running and screen.measuring
            await pilot.press("escape")
            await wait_until(pilot, lambda: not screen.measuring, timeout=180, what="the teardown")
            log = "\n".join(panel.lines)
            assert "interrupted" in log and "LEFT BEHIND" not in log, log
            assert screen.measured is None and "cancelled" in str(panel.query_one("#mp-title").render())
    finally:
        fake.stop()
    assert _leftovers(aws) == NOTHING
    store = StudyStore(str(tmp_path / "knee.db"), create=False)
    assert [s["status"] for s in store.studies()] == ["interrupted"]
