"""The Sweep screen: follow a runner process through its study store.

The trial table updates in place; the live panel shows the point being measured; the log
shows the selected trial's server log (or its events). The cursor follows the newest row
until the user moves it (``f`` follows again). The sweep itself runs in its own process:
``n`` starts one for the current plan, ``a`` attaches to the latest study, ``p`` pauses it
after the point in flight and continues it (a request in the study store, so it reaches a
runner on another machine too), ``s`` stops it at once, ``r`` resumes a stopped one, and
leaving the app leaves it running.

A study several ``knee sweep --join`` workers share gains a worker table above the trials
(who holds which configuration, heartbeat age, configurations done) and a host column in
the trial table; a study run by one runner shows neither.
"""

from __future__ import annotations

import time

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Static

from core.errors import KneeError
from tui.data.sweep_state import SweepSnapshot
from tui.screens.base import KneeScreen
from tui.widgets.live_panel import LivePanel
from tui.widgets.trial_log import TrialLog, read_tail
from tui.widgets.trial_table import TrialTable
from tui.widgets.worker_table import HOST_COLUMN, WorkerTable, sync_hosts


class SweepScreen(KneeScreen):
    MODE = "sweep"
    BINDINGS = [
        Binding("n", "new_sweep", "New"),
        Binding("a", "attach", "Attach"),
        # One key, two labels: the footer says what p does now (check_action picks).
        Binding("p", "pause", "Pause"),
        Binding("p", "proceed", "Continue"),
        Binding("s", "stop", "Stop"),
        Binding("r", "resume", "Resume"),
        Binding("f", "follow", "Follow"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.follow_newest = True
        self._log_shown: tuple[int, str] | None = None
        self._log_read_at = 0.0
        self._state = ""

    # ---- accessors ----------------------------------------------------------------------
    @property
    def table(self) -> TrialTable:
        return self.query_one(TrialTable)

    @property
    def live(self) -> LivePanel:
        return self.query_one(LivePanel)

    @property
    def log_view(self) -> TrialLog:
        return self.query_one(TrialLog)

    @property
    def empty(self) -> Static:
        return self.query_one("#sweep-empty", Static)

    def compose_body(self) -> ComposeResult:
        yield Static(
            "No sweep followed yet.\n\n[b]n[/b]  sweep the current plan in its own process "
            "(the sim engine takes seconds)\n[b]a[/b]  attach to the latest study in the workspace",
            id="sweep-empty",
        )
        yield WorkerTable(id="workers")
        yield TrialTable(id="trials")
        with Horizontal(id="sweep-bottom"):
            with Vertical(id="sweep-live-col"):
                yield LivePanel(id="live")
            yield TrialLog(id="trial-log")

    def on_mount(self) -> None:
        self.watch(self.knee, "sweep", self._sweep_changed)

    def on_resize(self) -> None:
        # On a 24-line terminal the table keeps most of the height.
        self.set_class(self.size.height < 28, "-short")

    # ---- following --------------------------------------------------------------------------
    def _sweep_changed(self, snap: SweepSnapshot | None) -> None:
        self.set_class(snap is not None, "-following")
        self.live.show(snap)
        state = snap.state if snap is not None else ""
        if state != self._state:
            self._state = state
            self.refresh_bindings()  # Pause or Continue in the footer
        if snap is None:
            return
        # A runner killed without a word: say so (the note names its pid), and how to go on.
        self.mode_bar.set_status(f"{snap.study} · {state}" + (" · runner gone, r resumes" if snap.note else ""))
        with self.app.batch_update():
            self.table.sync(snap.rows)
            self._show_workers(snap)
        if self.follow_newest and self.table.row_count:
            newest = self._newest_key(snap)
            if newest is not None:
                self.table.move_cursor(row=self.table.get_row_index(newest), scroll=True)
        self._show_log()

    def _show_workers(self, snap: SweepSnapshot) -> None:
        self.set_class(bool(snap.workers), "-workers")
        self.query_one(WorkerTable).sync(snap.workers)
        if snap.workers:
            sync_hosts(self.table, snap.point_hosts)
        elif HOST_COLUMN in self.table.columns:  # now following a study one runner ran
            self.table.remove_column(HOST_COLUMN)

    @staticmethod
    def _newest_key(snap: SweepSnapshot) -> str | None:
        running = [r for r in snap.rows if r.status == "running"]
        rows = running or list(snap.rows)
        return rows[-1].key if rows else None

    @on(TrialTable.UserMoved)
    def _user_moved(self) -> None:
        self.follow_newest = False  # stop jumping to the newest row until f

    @on(DataTable.RowHighlighted, "#trials")
    def _highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self._show_log()

    def _show_log(self) -> None:
        snap = self.knee.sweep
        row = self.table.selected()
        if snap is None or row is None:
            return
        path = snap.log_paths.get(row.trial_id)
        if path:
            # Snapshots come ~12 times a second; a server log is re-read at most once a second.
            now = time.monotonic()
            if (row.trial_id, path) != self._log_shown or now - self._log_read_at >= 1.0:
                self._log_shown, self._log_read_at = (row.trial_id, path), now
                self.read_log(row.trial_id, path)
        else:
            lines = snap.events_per_trial.get(row.trial_id, ())
            kind = "simulated trial: events" if snap.simulated else "events"
            self.log_view.show(f"trial {row.trial_id} · {kind}", lines)

    @work(thread=True, exclusive=True, group="trial-log")
    def read_log(self, trial_id: int, path: str) -> None:
        try:
            lines = read_tail(path)
        except OSError as e:
            lines = [f"cannot read {path}: {e.strerror}"]
        self.app.call_from_thread(self.log_view.show, f"trial {trial_id} · {path}", lines)

    # ---- actions ------------------------------------------------------------------------
    def action_new_sweep(self) -> None:
        self.follow_newest = True
        self.knee.start_sweep(self.knee.plan)

    def action_attach(self) -> None:
        self.follow_newest = True
        self.knee.attach_latest()

    def action_follow(self) -> None:
        self.follow_newest = True
        if self.knee.sweep is not None:
            self._sweep_changed(self.knee.sweep)

    def check_action(self, action: str, _parameters: tuple[object, ...]) -> bool | None:
        if action in ("pause", "proceed"):
            snap = self.knee.sweep
            held = snap is not None and snap.running and snap.requested == "pause"
            return held == (action == "proceed")  # the other one is hidden
        return True

    def action_pause(self) -> None:
        self._toggle_pause()

    def action_proceed(self) -> None:
        self._toggle_pause()

    def _toggle_pause(self) -> None:
        # Either label toggles what the store holds now: the snapshot can be half a second old.
        snap = self.knee.sweep
        if snap is None or not snap.running:
            self.notify("no running sweep to pause", severity="warning")
            return
        control = self.knee.sweep_control
        try:
            if control.requested(snap.study) == "pause":
                control.proceed(snap.study)
                self.notify(f"{snap.study}: continuing with the next load point")
            else:
                control.pause(snap.study)
                self.notify(f"{snap.study}: pausing after the load point in flight; p continues, s stops")
        except KneeError as e:
            self.notify(str(e), severity="error")
        self.refresh_bindings()

    def action_stop(self) -> None:
        snap = self.knee.sweep
        if snap is None or not snap.running:
            self.notify("no running sweep to stop", severity="warning")
            return
        if self.knee.sweep_control.stop(snap.study):
            self.notify(f"{snap.study}: stopping; the point in flight is dropped, r resumes")

    def action_resume(self) -> None:
        snap = self.knee.sweep
        if snap is None:
            self.notify("no sweep to resume", severity="warning")
            return
        if snap.running and snap.requested == "pause":
            self._toggle_pause()  # paused, not stopped: the same runner goes on
            return
        try:
            self.knee.sweep_control.resume(snap.study)
        except KneeError as e:
            self.notify(str(e), severity="error")
            return
        self.notify(f"{snap.study}: resumed; only missing points run")
