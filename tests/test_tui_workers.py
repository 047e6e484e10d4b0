"""What the TUI shows of a study several ``knee sweep --join`` workers share (issue 14): the
Sweep screen's worker table and host column, and the Pareto chart's hardware classes for a
study on mixed hardware. Real store, real lease functions (core.sweep.lease); the two
workers are written as their leases, not run, so the test is quick and its states exact."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from core.results.store import StudyStore
from core.sweep import lease
from tui.app import make_app
from tui.demo import demo_sweep_plan, make_demo_study, settle
from tui.widgets.pareto_plot import ParetoLegend
from tui.widgets.trial_table import TrialTable
from tui.widgets.worker_table import HOST_COLUMN, WorkerTable
from support.pilot import offline, wait_until  # noqa: F401 (fixtures)

A = lease.Worker("alpha:101:aa", "alpha", 101)
B = lease.Worker("beta:202:bb", "beta", 202)


def _join(storage: str, study: str, mixed: bool = False) -> dict[str, str]:
    """Make ``study`` one that workers A and B share: A finished one configuration and holds
        another, B holds a third with a point in flight; every stored point names its storer (A's
    two configurations' points A, the rest B).
        With ``mixed``, A ran on 8 H100s and B on 4 A100s. Returns point id -> host."""
    store = StudyStore(storage)
    try:
        trials = store.trials(study)
        assert len(trials) >= 3, "the demo study has too few configurations for two workers"
        lease.seed(store, study, [SimpleNamespace(trial_key=t.trial_key, server_args=t.server_args, predicted=None) for t in trials])
        first = lease.claim(store, study, A, 60.0)
        lease.end(store, study, A, first.trial_id, "done")
        second = lease.claim(store, study, A, 60.0)
        held = lease.claim(store, study, B, 60.0)
        by_a = {first.trial_id, second.trial_id}
        lease.renew(store, study, B, held.trial_id, 60.0, inflight="in-flight-point")
        hosts = {}
        for p in store.points(study):
            w = A if p.trial_id in by_a else B
            store.save_point(p, worker={"worker": w.id, "host": w.host, "pid": w.pid})
            hosts[p.point_id] = w.host
        if mixed:
            for t in trials:
                w = A if t.trial_id in by_a else B
                gpu = ("H100", 8) if w is A else ("A100", 4)
                store.record_trial_host(study, t.trial_id, w.id, host=w.host, gpu_type=gpu[0], gpu_count=gpu[1], engine="sim", simulated=True)
            info = store.study(study)["info"]
            store.set_study(
                study, info={**info, "join": True, "mixed_hardware": True, "hardware": {"gpu_type": "H100", "gpu_count": 8, "simulated": True}}
            )
        return hosts
    finally:
        store.close()


@pytest.fixture(scope="module")
def joined_storage(tmp_path_factory):
    storage = str(tmp_path_factory.mktemp("joined") / "knee.db")
    make_demo_study(storage, "joined")
    hosts = _join(storage, "joined", mixed=True)
    make_demo_study(storage, "alone")  # the same sweep by one runner: no workers
    return storage, hosts


@pytest.mark.parametrize("size", [(120, 36), (80, 24)])
async def test_the_sweep_screen_lists_both_workers_and_a_host_per_point(joined_storage, size):
    storage, hosts = joined_storage
    app = make_app(demo_sweep_plan(), storage=storage, study="joined")
    async with app.run_test(size=size) as pilot:
        await pilot.press("f3")
        screen = app.screen
        table = screen.query_one(WorkerTable)
        await wait_until(pilot, lambda: table.row_count == 2, what="both workers in the worker table")
        await settle(pilot)
        assert screen.has_class("-workers") and table.display and table.region.height >= 3
        rows = {table.get_row_at(i)[0]: table.get_row_at(i) for i in range(table.row_count)}
        assert set(rows) == {"alpha:101", "beta:202"}
        assert rows["alpha:101"][1].plain == "running" and rows["alpha:101"][4].plain == "1"
        assert rows["beta:202"][1].plain == "running" and "point in flight" in rows["beta:202"][2]
        assert rows["beta:202"][4].plain == "0"
        trials = screen.query_one(TrialTable)
        # The trial table keeps room for rows under the worker table, even at 24 lines.
        assert trials.region.height >= 4
        await wait_until(
            pilot,
            lambda: HOST_COLUMN in trials.columns and all(trials.get_cell(k, HOST_COLUMN) == h for k, h in hosts.items()),
            what="the host of every point",
        )


async def test_a_study_without_workers_shows_no_worker_table_nor_host_column(joined_storage):
    storage, _ = joined_storage
    # Following the joined study first: the worker table and host column go with it.
    app = make_app(demo_sweep_plan(), storage=storage, study="joined")
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("f3")
        screen = app.screen
        trials = screen.query_one(TrialTable)
        await wait_until(pilot, lambda: HOST_COLUMN in trials.columns, what="the joined study's host column")
        app.follow("alone")
        await wait_until(
            pilot, lambda: app.sweep is not None and app.sweep.study == "alone" and trials.row_count > 0, what="the study one runner ran"
        )
        await settle(pilot)
        assert app.sweep is not None and app.sweep.workers == ()
        assert not screen.has_class("-workers") and screen.query_one(WorkerTable).region.height == 0
        assert HOST_COLUMN not in trials.columns


async def test_pareto_of_a_mixed_hardware_study_marks_each_hardware_class(joined_storage):
    storage, _ = joined_storage
    app = make_app(demo_sweep_plan(), storage=storage, study="joined")
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("f4")
        screen = app.screen
        await wait_until(pilot, lambda: screen.view is not None, what="the Pareto view")
        await settle(pilot)
        view = screen.view
        assert view.classes == ("A100 x4", "H100 x8")
        glyphs = {view.class_glyph(k) for k in view.host_classes}
        assert len(glyphs) == 2 and None not in glyphs
        legend = " ".join(str(i) for i in screen.query_one(ParetoLegend).items)
        assert "H100 x8" in legend and "A100 x4" in legend
        assert any(g in screen.plot.chart.ansi for g in glyphs - {"●"})  # drawn, not only listed
        # The point table's first column carries the same shape as the chart.
        from tui.widgets.point_table import PointTable

        table = screen.query_one(PointTable)
        first = {str(table.get_row_at(i)[0]) for i in range(table.row_count)}
        assert first & (glyphs - {"●"})


async def test_pareto_of_a_study_on_one_kind_of_box_has_no_hardware_key(joined_storage):
    storage, _ = joined_storage
    app = make_app(demo_sweep_plan(), storage=storage, study="alone")
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("f4")
        screen = app.screen
        await wait_until(pilot, lambda: screen.view is not None, what="the Pareto view")
        await settle(pilot)
        assert screen.view.classes == () and screen.view.host_classes == {}
        legend = " ".join(str(i) for i in screen.query_one(ParetoLegend).items)
        assert " x8" not in legend


def test_worker_rows_shorten_the_states_knee_results_prints():
    from tui.data.workers import worker_views

    views = worker_views(
        [
            {
                "worker": "h:1:a",
                "host": "h",
                "pid": 1,
                "state": "presumed dead (its lease expired and was taken over)",
                "trial_id": None,
                "inflight": None,
                "heartbeat_age_s": 75.6,
                "configurations_done": 2,
            },
            {
                "worker": "g:2:b",
                "host": "g",
                "pid": 2,
                "state": "silent (its lease expired; another worker will take the configuration over)",
                "trial_id": 4,
                "inflight": None,
                "heartbeat_age_s": 61.2,
                "configurations_done": 0,
            },
            {
                "worker": "f:3:c",
                "host": "f",
                "pid": 3,
                "state": "waiting for a configuration",
                "trial_id": None,
                "inflight": None,
                "heartbeat_age_s": None,
                "configurations_done": 1,
            },
        ]
    )
    assert [(v.name, v.state, v.held, v.heartbeat_s, v.done) for v in views] == [
        ("h:1", "presumed dead", "", 75, 2),
        ("g:2", "silent", "trial 4", 61, 0),
        ("f:3", "waiting", "", None, 1),
    ]


def test_a_point_takes_the_hardware_of_the_launch_that_stored_it():
    from tui.data.workers import point_classes

    pts = [SimpleNamespace(point_id="p1", trial_id=0), SimpleNamespace(point_id="p2", trial_id=0), SimpleNamespace(point_id="p3", trial_id=1)]
    launches = [
        {"trial_id": 0, "worker": "a", "gpu_type": "H100", "gpu_count": 8},
        {"trial_id": 0, "worker": "b", "gpu_type": "A100", "gpu_count": 4},  # a re-run after a died
        {"trial_id": 1, "worker": "b", "gpu_type": "A100", "gpu_count": 4},
    ]
    stored_by = {"p1": {"worker": "a"}, "p2": {"worker": "b"}}  # p3's storer was not recorded
    assert point_classes(pts, stored_by, launches) == {"p1": "H100 x8", "p2": "A100 x4", "p3": "A100 x4"}
