"""The Deploy screen against moto's SageMaker on 127.0.0.1: confirm, watch the progress,
see the result, tear it down. Reuses the moto server and its SageMaker extensions from
``tests/test_deploy_moto.py`` (inference components, streaming smoke test)."""

from __future__ import annotations


import pytest

from test_deploy_moto import NOTHING, ROLE, _fast, _leftovers, aws, moto_url  # noqa: F401 (fixtures)
from tui.app import make_app
from tui.demo import DEMO_STUDY, demo_sweep_plan, make_demo_study, settle
from tui.screens.confirm import ConfirmDialog
from support.pilot import wait_until

pytestmark = [pytest.mark.moto, pytest.mark.slow]


def _log(app) -> str:
    return "\n".join(str(line) for line in app.screen.progress_log.lines)


async def test_apply_with_confirmation_shows_progress_and_result_then_tears_down(aws, tmp_path):
    storage = str(tmp_path / "knee.db")
    make_demo_study(storage)
    app = make_app(demo_sweep_plan(), storage=storage, study=DEMO_STUDY, deploy_clients=aws, deploy_options=_fast())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f4")
        await wait_until(pilot, lambda: getattr(app.screen, "view", None) is not None, timeout=60.0)
        await pilot.press("d")
        await wait_until(pilot, lambda: getattr(app.screen, "plan", None) is not None, timeout=60.0)
        deploy = app.screen
        deploy.field("role_arn").value = ROLE
        await wait_until(pilot, lambda: deploy.plan is not None and deploy.plan.role_arn == ROLE, timeout=60.0)
        await settle(pilot)
        plan = deploy.plan

        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmDialog)
        assert _leftovers(aws) == NOTHING  # nothing before the answer
        await pilot.click("#confirm")
        await wait_until(pilot, lambda: "ready:" in _log(app) or "✗" in _log(app), timeout=60.0)
        log = _log(app)
        assert "ready: " + plan.endpoint_name in log, log
        assert "smoke test: ok" in log
        assert _leftovers(aws)["endpoints"] == [plan.endpoint_name]

        await pilot.press("x")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.click("#confirm")
        await wait_until(pilot, lambda: "deleted " in _log(app) or _log(app).count("✗") > 0, timeout=60.0)
        assert "deleted 4 resource(s)" in _log(app), _log(app)
        assert _leftovers(aws) == NOTHING
