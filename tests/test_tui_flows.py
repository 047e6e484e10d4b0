"""Pilot tests of the app's flows: typing a plan, switching screens, a sim sweep arriving,
choosing a Pareto point, the deploy preview and its confirmation, quitting mid-sweep."""

from __future__ import annotations

import pytest
from textual import events
from textual.widgets import Input, Select

from core.estimate.bands import band
from core.spec.plan import demo_plan
from tui.app import KneeApp, make_app
from tui.demo import DEMO_STUDY, demo_sweep_plan, settle
from tui.messages import SweepUpdated
from tui.screens.confirm import ConfirmDialog
from tui.screens.deploy import DeployScreen
from tui.screens.estimate import EstimateScreen
from tui.screens.pareto import ParetoScreen
from tui.screens.plan import PlanScreen
from tui.screens.quit_dialog import QuitDialog
from tui.screens.sweep import SweepScreen
from support.pilot import demo_storage, offline, wait_until  # noqa: F401 (fixtures)


async def set_field(pilot, field_id: str, text: str) -> None:
    inp = pilot.app.screen.query_one(f"#{field_id}", Input)
    inp.focus()
    inp.value = text
    await pilot.pause()


def note(app: KneeApp, field_id: str) -> str:
    return str(app.screen.query_one(f"#field-{field_id} .note").render())


async def test_typing_a_plan_updates_the_app_plan_and_shows_errors_inline():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, PlanScreen)
        await set_field(pilot, "constraints", "ttft<abc")
        field = app.screen.query_one("#field-constraints")
        assert field.has_class("-invalid")
        assert "has no number after '<'" in note(app, "constraints")
        assert app.plan.constraints == "e2e_latency:p99<60s"  # the last good plan stays

        await set_field(pilot, "constraints", "ttft:p95<500ms;e2e_latency:p99<60s")
        assert not field.has_class("-invalid")
        assert app.plan.constraints == "ttft:p95<500ms;e2e_latency:p99<60s"

        await set_field(pilot, "hardware", "8x H100")
        assert app.plan.gpu == "H100-SXM" and app.plan.num_gpus == 8 and app.plan.instance is None
        assert "8x H100-SXM" in note(app, "hardware")

        await set_field(pilot, "hardware", "ml.nonexistent.2xlarge")
        assert "unknown SageMaker instance type" in note(app, "hardware")
        await set_field(pilot, "input_len", "lots")
        assert "whole number" in note(app, "input_len")
        assert app.plan.num_gpus == 8  # still the last valid plan


async def test_unknown_model_is_reported_inline_without_blocking():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await set_field(pilot, "model", "no-such-org/no-such-model-xyz")
        await settle(pilot)
        assert app.screen.query_one("#field-model").has_class("-invalid")
        assert app.plan.model == "Qwen/Qwen3-4B"
        await set_field(pilot, "model", "Qwen/Qwen3-8B")
        await settle(pilot)
        assert app.plan.model == "Qwen/Qwen3-8B"
        assert "8.2B params" in note(app, "model")


async def test_plan_save_and_load_round_trip(tmp_path):
    path = tmp_path / "p.toml"
    app = make_app(plan_path=path)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await set_field(pilot, "output_len", "256")
        await pilot.press("ctrl+s")
        assert path.exists() and "output_len = 256" in path.read_text()
        await set_field(pilot, "plan-path", str(tmp_path / "missing.toml"))
        await pilot.press("ctrl+o")
        assert "does not exist" in str(app.screen.query_one("#file-note").render())
    reopened = make_app(plan_path=path)
    assert reopened.plan.output_len == 256


async def test_switching_screens_with_keys_and_the_estimate_follows_the_plan():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("escape", "2")  # leave the field so the digit switches modes
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, EstimateScreen)
        assert screen.memory_table.row_count == 3  # TP 1, 2, 4 on 4x L4
        assert screen.prediction_table.row_count > 0
        assert screen.view is not None and "ml.g6.12xlarge" in screen.view.title
        # The knee's error band, from held-out residuals (the demo runs on the simulator, vLLM's stand-in; Qwen3-4B is dense).
        knee = screen.view.report.best.at_knee
        rps = band("req_per_s", knee.req_per_s, "vllm", knee.kind)
        limits = str(screen.query_one("#est-limits").render())
        assert "knee's band (held-out runs)" in limits and f"{rps['low']:.2f}-{rps['high']:.2f} req/s" in limits
        for key, kind in (("f3", SweepScreen), ("f4", ParetoScreen), ("f5", DeployScreen), ("f1", PlanScreen)):
            await pilot.press(key)
            await pilot.pause()
            assert isinstance(app.screen, kind)
        app.plan = demo_plan().model_copy(update={"model": "Qwen/Qwen3-8B"})
        await pilot.press("f2")
        await settle(pilot)
        assert "Qwen/Qwen3-8B" in app.screen.view.title


async def test_the_first_key_2_on_a_fresh_app_switches_to_estimate_and_keeps_the_plan():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("2")  # what the mode bar and the README say: switch screens
        await settle(pilot)
        assert isinstance(app.screen, EstimateScreen)
        assert app.plan == demo_plan()
        await pilot.press("1")
        await pilot.pause()
        plan_screen = app.screen
        assert isinstance(plan_screen, PlanScreen)
        assert plan_screen.field("model").value == "Qwen/Qwen3-4B"


async def test_digits_type_into_a_field_the_user_entered_and_switch_screens_after_escape():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("tab")  # into the first field, as a user would
        assert isinstance(app.focused, Input) and app.focused.id == "model"
        await pilot.click("#input_len")
        await pilot.press("end", "ctrl+u", *"2048")  # clear the field, type a number
        await settle(pilot)
        assert isinstance(app.screen, PlanScreen)
        assert app.screen.field("input_len").value == "2048"
        assert app.plan.input_len == 2048
        await pilot.press("escape", "2")
        await settle(pilot)
        assert isinstance(app.screen, EstimateScreen)
        assert app.plan.input_len == 2048


def _keys_at_once(app: KneeApp, *keys: tuple[str, str | None]) -> None:
    """Hand the app several keys in one go, as its terminal driver does when they arrive in
    one read (a slow SSH link, a loaded machine, tmux send-keys): nothing runs in between."""
    for key, character in keys:
        app.post_message(events.Key(key, character))


def _typed(text: str) -> list[tuple[str, str | None]]:
    names = {"/": "slash", "-": "minus", ".": "full_stop"}
    return [(names.get(c, c), c) for c in text]


async def test_keys_arriving_together_apply_in_the_order_they_were_typed():
    """Textual runs an input's editing keys after bubbling them up to the app, so the characters
    typed after ctrl+u were inserted first and then cleared (Textualize/textual#6605); the
    fields' input runs them in order. Escape leaves the field before a digit after it arrives."""
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("tab")
        assert isinstance(app.focused, Input) and app.focused.id == "model"
        _keys_at_once(app, ("ctrl+u", "\x15"), *_typed("Qwen/Qwen3-8B"))
        await settle(pilot)
        plan_screen = app.screen
        assert isinstance(plan_screen, PlanScreen)
        assert plan_screen.field("model").value == "Qwen/Qwen3-8B"
        _keys_at_once(app, *_typed("x"), ("backspace", "\x7f"), *_typed("-AWQ"))
        await settle(pilot)
        assert plan_screen.field("model").value == "Qwen/Qwen3-8B-AWQ"
        _keys_at_once(app, ("escape", "\x1b"), ("2", "2"))
        await settle(pilot)
        assert isinstance(app.screen, EstimateScreen)
        assert plan_screen.field("model").value == "Qwen/Qwen3-8B-AWQ"


async def test_escape_closes_an_open_dropdown_and_stays_in_the_form():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        select = app.screen.query_one("#dataset", Select)
        select.focus()
        await pilot.press("enter")
        await settle(pilot)
        assert select.expanded
        await pilot.press("escape")
        await settle(pilot)
        assert not select.expanded
        assert app.focused is select  # the list closed; the field still has the focus


async def test_starting_a_sim_sweep_and_watching_rows_arrive(tmp_path):
    updates: list[SweepUpdated] = []
    app = make_app(demo_sweep_plan(), storage=str(tmp_path / "knee.db"))
    async with app.run_test(size=(100, 30), message_hook=lambda m: updates.append(m) if isinstance(m, SweepUpdated) else None) as pilot:
        await settle(pilot)
        await pilot.press("f3", "n")
        await wait_until(pilot, lambda: app.sweep is not None and app.sweep.status == "done")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, SweepScreen)
        assert screen.table.row_count == 12  # 4 trials x 3 loads
        assert app.sweep.done_points == 12 and app.sweep.simulated
        assert updates, "the follower posted no updates"
        # Rows arrived through the store, in order, and the cursor followed the newest.
        assert screen.table.selected().trial_id == 3
        await pilot.press("up")
        assert screen.follow_newest is False


async def test_choosing_a_pareto_point_sends_it_to_deploy(demo_storage):
    app = make_app(demo_sweep_plan(), storage=demo_storage, study=DEMO_STUDY)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("f4")
        screen = app.screen
        await wait_until(pilot, lambda: screen.view is not None)
        await settle(pilot)
        assert screen.view.knee is not None
        # The best point under the SLOs is preselected (in the demo study it is the knee).
        assert screen.table.selected_key() == screen.view.recommended == screen.view.knee.key
        await pilot.press("down")
        chosen = screen.table.selected_key()
        assert "trial" in str(screen.detail.render())
        # Its prediction, with the band the chart draws.
        await wait_until(pilot, lambda: any(d.key == chosen for d in screen.view.predicted))
        guess = next(d for d in screen.view.predicted if d.key == chosen)
        ax = screen.view.ax
        expected = f"predicted {ax.name} {ax.fmt(guess.x, unit=True)} ({ax.fmt(guess.x_band[0])}-{ax.fmt(guess.x_band[1])})"
        assert expected in str(screen.detail.render())
        await pilot.press("v")  # another pair of axes keeps the selection
        assert screen.table.selected_key() == chosen
        await pilot.press("d")
        await settle(pilot)
        assert isinstance(app.screen, DeployScreen)
        assert app.selection is not None and app.selection.point.point_id == chosen


async def test_pareto_preselects_the_best_point_meeting_the_slos_not_a_knee_that_misses_them(tmp_path):
    from core.results import recommend
    from core.results.store import StudyStore
    from tui.demo import make_demo_study
    from tui.widgets.pareto_plot import MARKERS

    storage = str(tmp_path / "knee.db")
    # The demo sweep under a tighter E2E goal: its knee (E2E p99 37.5 s) now misses it.
    make_demo_study(storage, "tight", demo_sweep_plan().model_copy(update={"constraints": "e2e_latency:p99<30s"}))
    store = StudyStore(storage)
    _, best_point = recommend(store, "tight")
    store.close()
    app = make_app(demo_sweep_plan(), storage=storage, study="tight")
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("f4")
        screen = app.screen
        await wait_until(pilot, lambda: screen.view is not None)
        await settle(pilot)
        view = screen.view
        assert view.points[view.knee.key].meets_slo is False
        assert screen.table.selected_key() == best_point.point_id == view.recommended
        assert view.points[view.recommended].meets_slo is True
        assert "recommended" in str(screen.detail.render())
        # The knee stays marked, on the chart and in the table.
        assert view.marker(view.knee.key) == "knee"
        assert screen.table.get_row(view.knee.key)[0].plain == MARKERS["knee"][0]
        await pilot.press("d")
        await settle(pilot)
        assert isinstance(app.screen, DeployScreen)
        assert app.selection.point.point_id == best_point.point_id and app.selection.point.meets_slo


async def test_reopening_the_app_in_a_workspace_with_studies_follows_the_latest(tmp_path):
    from tui.demo import make_demo_study

    storage = str(tmp_path / "knee.db")
    make_demo_study(storage, "older")
    make_demo_study(storage, "newer")
    app = make_app(storage=storage)  # as `knee` opens it: no study named
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("4")
        screen = app.screen
        await wait_until(pilot, lambda: screen.view is not None, what="the latest study on the Pareto screen")
        await settle(pilot)
        assert app.sweep is not None and app.sweep.study == "newer"
        assert screen.has_class("-loaded")  # not "No study followed yet"
        assert screen.table.row_count > 0


async def test_a_new_workspace_follows_nothing_and_creates_nothing(tmp_path):
    app = make_app(storage=str(tmp_path / ".knee" / "knee.db"))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("4")
        await settle(pilot)
        assert app.sweep is None and not app.screen.has_class("-loaded")
        assert not (tmp_path / ".knee").exists()


async def test_deploy_preview_and_cancelling_the_confirmation(demo_storage):
    app = make_app(demo_sweep_plan(), storage=demo_storage, study=DEMO_STUDY)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("f4")
        await wait_until(pilot, lambda: app.screen.view is not None)
        await pilot.press("d")
        await wait_until(pilot, lambda: getattr(app.screen, "plan", None) is not None)
        await settle(pilot)
        deploy = app.screen
        text = str(deploy.plan_text.render())
        for part in ("Container", "ml.g6.12xlarge", "Cost", "Environment", "Requests (boto3, JSON)", "create_endpoint"):
            assert part in text
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.click("#cancel")
        await pilot.pause()
        assert app.screen is deploy
        assert not deploy.has_class("-progress")  # nothing was applied
        assert not [w for w in app.workers if w.group == "deploy-apply"]

        await set_field(pilot, "target_rps", "fast")
        assert "positive number" in note(app, "target_rps")
        await set_field(pilot, "target_rps", "")
        await set_field(pilot, "role_arn", "not-an-arn")
        await settle(pilot)
        assert "malformed execution role ARN" in str(deploy.plan_text.render())


async def test_a_plan_built_for_older_fields_never_replaces_the_current_one(demo_storage, monkeypatch):
    """A deploy plan build that was superseded (its thread worker cancelled but still
    running) must not overwrite the plan of the fields as they are now. The stale build is
    held until the current one has been shown, then let go."""
    import threading

    import core.deploy

    real = core.deploy.build_plan
    held, release = threading.Event(), threading.Event()

    def build_plan(source, target):
        if target.role_arn is None and target.target_rps == 2.0:  # the build that goes stale
            held.set()
            release.wait(30)
        return real(source, target)

    monkeypatch.setattr(core.deploy, "build_plan", build_plan)
    planned: list = []
    app = make_app(demo_sweep_plan(), storage=demo_storage, study=DEMO_STUDY)
    hook = lambda m: planned.append(m) if type(m).__name__ == "DeployPlanned" else None  # noqa: E731
    async with app.run_test(size=(120, 36), message_hook=hook) as pilot:
        await pilot.press("f4")
        await wait_until(pilot, lambda: app.screen.view is not None)
        await pilot.press("d")
        await wait_until(pilot, lambda: getattr(app.screen, "plan", None) is not None)
        await settle(pilot)
        deploy = app.screen
        await set_field(pilot, "target_rps", "2")
        await wait_until(pilot, held.is_set, what="the first build to start")
        await set_field(pilot, "role_arn", "not-an-arn")
        await settle(pilot)
        assert "malformed execution role ARN" in str(deploy.plan_text.render())
        release.set()
        await wait_until(pilot, lambda: any(m.plan is not None and m.plan.role_arn is None for m in planned), what="the stale plan to arrive")
        await pilot.pause()
        assert "malformed execution role ARN" in str(deploy.plan_text.render())
        assert deploy.plan is None  # nothing to apply: the fields as they are make no plan


def test_a_late_result_of_a_superseded_worker_never_drops_the_current_one():
    """A cancelled thread worker runs to its end, so its result can land behind the one
    that replaced it; coalescing must not let the late one drop the current one."""
    from tui.messages import DeployPlanned, EstimateReady, FieldLookedUp

    current, late = DeployPlanned("plan B", generation=2), DeployPlanned("plan A", generation=1)
    assert not current.can_replace(late) and late.can_replace(current)
    assert not FieldLookedUp("model", "org/b", "b", None).can_replace(FieldLookedUp("model", "org/a", "a", None))
    assert FieldLookedUp("model", "org/a", None, "x").can_replace(FieldLookedUp("model", "org/a", "a", None))
    # A file read and a model looked up under the same text are different lookups.
    assert not FieldLookedUp("lengths_from", "org/a", "a", None).can_replace(FieldLookedUp("model", "org/a", "a", None))
    plan_b = demo_plan().model_copy(update={"model": "Qwen/Qwen3-8B"})
    assert not EstimateReady(plan_b, None).can_replace(EstimateReady(demo_plan(), None))


@pytest.mark.slow
async def test_quitting_during_a_sweep_asks_and_can_leave_it_running(tmp_path):
    storage = str(tmp_path / "knee.db")
    # Enough simulated work to still be running when the question is asked.
    plan = demo_plan().model_copy(
        update={
            "server_args": "tensor_parallel_size=[1,2,4];max_num_seqs=[16,32,64,128,256]",
            "client_args": "max_concurrency=[8,16,32,64,128,256];num_prompts=3000",
        }
    )
    app = make_app(plan, storage=storage)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("f3", "n")
        await wait_until(pilot, lambda: app.sweep is not None and app.sweep.running)
        study = app.sweep.study
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, QuitDialog)
        await pilot.press("escape")  # stay
        await pilot.pause()
        assert not isinstance(app.screen, QuitDialog) and app.is_running
        await pilot.press("q")
        await pilot.pause()
        await pilot.press("l")  # leave it running
        await pilot.pause()
    from core.results.store import StudyStore
    from core.sweep import runner_alive

    store = StudyStore(storage)
    try:
        assert runner_alive(store.study(study)), "leaving the app stopped the sweep"
    finally:
        app.sweep_control.stop(study)
        store.close()


async def test_garbage_in_every_plan_field_is_reported_and_never_crashes():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        screen = app.screen
        for inp in list(screen.query("#plan-form Input")):
            if inp.id == "plan-path":
                continue
            before = inp.value
            inp.value = "%%% not valid ;;; [1,"
            await settle(pilot)
            if inp.id in ("dataset_path",):
                assert "no file at" in note(app, inp.id)
            elif inp.id in ("url", "endpoint_name"):
                pass  # hidden unless their engine is chosen
            else:
                assert screen.query_one(f"#field-{inp.id}").has_class("-invalid"), inp.id
                assert note(app, inp.id).startswith("✗ ")
            inp.value = before
            await settle(pilot)
        assert app.is_running and app.plan == demo_plan()


def _palette_highlight(app) -> str:
    from textual.command import CommandList

    found = app.screen.query(CommandList)
    if not found or found.first().highlighted is None:
        return ""
    lst = found.first()
    return str(lst.get_option_at_index(lst.highlighted).prompt)


async def test_the_palette_picks_an_instance_from_the_catalog():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"instance ml.p4d.24xlarge")
        # The palette searches in a worker and shows its hits in batches: wait for the hit.
        await wait_until(pilot, lambda: _palette_highlight(app).startswith("Instance: ml.p4d.24xlarge"), what="the palette to highlight the instance")
        await pilot.press("enter")
        await settle(pilot)
        assert app.plan.instance == "ml.p4d.24xlarge"
        assert app.screen.field("hardware").value == "ml.p4d.24xlarge"


async def test_a_model_that_does_not_fit_is_explained_on_the_estimate():
    app = make_app(demo_plan().model_copy(update={"model": "meta-llama/Llama-3.1-70B", "instance": None, "gpu": "L4", "num_gpus": 1}))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("f2")
        await settle(pilot)
        limits = str(app.screen.query_one("#est-limits").render())
        assert "no configuration fits" in limits
        # The nearest miss and what would fit (core.estimate.fit_advice), not each degree's shortfall.
        assert "141.1 GB per GPU even at TP1" in limits and "it fits on 8x L4" in limits and "ml.g6.48xlarge" in limits
        assert "TP1: weights need" not in limits


LONG_PLAN = {  # enough simulated work to still be running when a key is pressed
    "server_args": "tensor_parallel_size=[1,2,4];max_num_seqs=[16,32,64,128,256]",
    "client_args": "max_concurrency=[8,16,32,64,128,256];num_prompts=3000",
}


@pytest.mark.slow
async def test_stop_interrupts_the_runner_and_resume_continues_the_study(tmp_path):
    app = make_app(demo_plan().model_copy(update=LONG_PLAN), storage=str(tmp_path / "knee.db"))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("f3", "n")
        await wait_until(pilot, lambda: app.sweep is not None and app.sweep.running)
        study = app.sweep.study
        await pilot.press("s")
        await wait_until(pilot, lambda: app.sweep.status == "interrupted" and not app.sweep.runner_alive)
        done_before = app.sweep.done_points
        await pilot.press("r")
        await wait_until(pilot, lambda: app.sweep.running)
        assert app.sweep.study == study  # the same study goes on
        await wait_until(pilot, lambda: app.sweep.done_points > done_before, timeout=60)
        await pilot.press("s")
        await wait_until(pilot, lambda: app.sweep.status == "interrupted" and not app.sweep.runner_alive)


@pytest.mark.slow
async def test_p_pauses_the_sweep_after_its_point_and_p_again_continues(tmp_path):
    from core.results.store import StudyStore

    app = make_app(demo_plan().model_copy(update=LONG_PLAN), storage=str(tmp_path / "knee.db"))
    notes: list[str] = []
    app.notify = lambda message, **kw: notes.append(str(message))  # what the user is told
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("f3", "n")
        await wait_until(pilot, lambda: app.sweep is not None and app.sweep.running and app.sweep.done_points >= 1)
        screen, study = app.screen, app.sweep.study
        assert screen.active_bindings["p"].binding.description == "Pause"
        await pilot.press("p")
        assert "pausing after the load point in flight" in notes[-1]
        await wait_until(pilot, lambda: app.sweep.state == "paused", what="the paused state")
        await pilot.pause(0.2)
        assert app.sweep.running  # the runner waits; it did not exit
        assert str(screen.live.query_one("#live-text").render()).startswith("paused")
        assert str(screen.mode_bar.query_one("#status").render()) == f"{study} · paused"
        assert screen.active_bindings["p"].binding.description == "Continue"
        store = StudyStore(app.sweep_control.storage)
        stored = len(store.points(study))
        await pilot.pause(1.5)
        assert len(store.points(study)) == stored  # nothing measured while paused
        await pilot.press("p")
        assert "continuing" in notes[-1]
        await wait_until(pilot, lambda: app.sweep.state == "running" and len(store.points(study)) > stored, what="points after continuing")
        assert screen.active_bindings["p"].binding.description == "Pause"
        kinds = [e.kind for e in store.events(study) if e.kind in ("paused", "continued")]
        assert kinds == ["paused", "continued"]
        await pilot.press("s")
        await wait_until(pilot, lambda: app.sweep.status == "interrupted" and not app.sweep.runner_alive)
        assert "stopping" in notes[-1]
        store.close()


async def test_engine_choice_shows_its_own_fields_with_their_checks():
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        screen = app.screen
        assert not screen.field("url").display
        screen.query_one("#engine").value = "external"
        await settle(pilot)
        assert screen.field("url").display
        assert "needs the server's URL" in note(app, "url")
        assert app.plan.engine == "sim"  # not valid yet
        await set_field(pilot, "url", "ftp://example")
        assert "is not an http(s) URL" in note(app, "url")
        await set_field(pilot, "url", "http://127.0.0.1:8000")
        assert app.plan.engine == "external" and app.plan.url == "http://127.0.0.1:8000"


async def test_the_selected_trial_shows_the_tail_of_its_server_log(tmp_path):
    from core.results.store import StudyStore
    from core.sweep import create_study
    from tui.data.sweep_control import spec_from_plan

    log = tmp_path / "trial-0.log"
    log.write_text("".join(f"INFO line {i}\n" for i in range(5000)) + "INFO Application startup complete.\n")
    storage = str(tmp_path / "knee.db")
    store = StudyStore(storage)
    create_study(store, spec_from_plan(demo_sweep_plan()), name="with-log")
    store.upsert_trial("with-log", "{}", {"tensor_parallel_size": 1}, status="failed", reason="crashed: exit 1", log_path=str(log))
    store.close()
    app = make_app(storage=storage, study="with-log")
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("f3")
        await wait_until(pilot, lambda: app.sweep is not None and app.screen.table.row_count == 1)
        await settle(pilot)
        shown = app.screen.log_view.lines
        assert shown[-1] == "INFO Application startup complete."
        assert len(shown) <= 200  # only the tail is read
        row = app.screen.table.selected()
        assert row.status == "failed" and row.reason == "crashed: exit 1"


async def test_a_lengths_file_in_the_plan_is_read_once_and_summarised(tmp_path):
    """The Plan screen reads a lengths file in a worker, shows what it holds (or the line it
    cannot read), and the plan takes it only once it reads."""
    import json as _json

    good, bad = tmp_path / "usage.jsonl", tmp_path / "bad.jsonl"
    good.write_text("".join(_json.dumps({"usage": {"prompt_tokens": 100 + i, "completion_tokens": 20 + i}}) + "\n" for i in range(40)))
    bad.write_text('{"prompt_tokens": 5, "completion_tokens": 1}\n{"prompt": "x"}\n')
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await set_field(pilot, "lengths_from", str(good))
        await wait_until(pilot, lambda: "40 requests" in note(app, "lengths_from"), what="the lengths file's summary")
        assert "means 120 in / 40 out" in note(app, "lengths_from")
        await wait_until(pilot, lambda: app.plan.lengths_from == str(good.resolve()), what="the plan taking the file")
        await set_field(pilot, "lengths_from", str(bad))
        await wait_until(pilot, lambda: "✗" in note(app, "lengths_from"), what="the bad file's error")
        assert "bad.jsonl line 2: no token counts" in note(app, "lengths_from")
        assert app.plan.lengths_from == str(good.resolve())  # the last good plan stays
