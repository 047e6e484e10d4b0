"""Control of a running sweep: pause, continue and stop through the store, the heartbeat, and
signals.

Pause, continue and stop go through the store (:meth:`StudyStore.request_state`), so any
process or machine that shares it can ask: the runner reads the request before each load
point (and before each server launch), and while paused every ``CONTROL_POLL_S``. A pause
lets the point in flight finish and be stored, emits ``paused``, keeps the trial's server up
and waits; ``run`` emits ``continued`` and goes on with the next point. A stop is also
watched for on a thread while a point runs or a server starts, and ends the run as a signal
does (server torn down, study interrupted, ``--resume`` runs what is missing).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

CONTROL_POLL_S = 0.5  # how often a pause/continue/stop request is read from the store
BEAT_S = 2.0  # heartbeat spacing (remote viewers call a runner dead after liveness.RUNNER_STALE_S without one)

log = logging.getLogger(__name__)


class _Interrupted(Exception):
    """A signal or a stop request ends the run: the point in flight is dropped."""


class RunControl:
    """The control half of :class:`core.sweep.run.Runner` (a mixin: it uses the runner's
    ``store``, ``study``, ``summary``, ``worker_trial``, ``install_signals`` and ``emit``)."""

    store: Any
    study: str
    summary: Any
    worker_trial: str | None
    install_signals: bool
    emit: Callable[..., None]

    def _init_control(self) -> None:
        self.cancel = threading.Event()  # every wait of the runner (launch, load client, rest) honours it
        self._last_beat = 0.0
        self._interrupt_signal: int | None = None
        self._stop_requested = False  # a "stop" read from the store (set by the watcher thread)
        self._watch_done = threading.Event()

    def _beat(self) -> None:
        now = time.time()
        if now - self._last_beat > BEAT_S:
            self.store.heartbeat(self.study)
            self._last_beat = now

    # ---- pause / continue / stop through the store --------------------------------------------
    def _watch_control(self) -> None:
        # A stop must reach a runner that is launching a server or measuring a long point,
        # and a runner on another machine cannot be signalled: this thread reads the request
        # and sets the cancel event every wait in the runner already honours (the launch's
        # readiness poll, the load client, the rest between launches).
        # It also keeps the heartbeat fresh while no event is emitted (a server loading a
        # large model for minutes): a viewer on another host calls a silent runner dead.
        while not self._watch_done.wait(min(CONTROL_POLL_S, BEAT_S)):
            try:
                if self.worker_trial is None:
                    self._beat()
                if self._requested() == "stop":
                    return
            except Exception as e:  # noqa: BLE001 - a busy or briefly unreachable store must not end the sweep
                log.debug("control poll of %s failed: %s", self.study, e)
                continue

    def _start_watch(self) -> None:
        threading.Thread(target=self._watch_control, name="knee-control", daemon=True).start()

    def _requested(self) -> str:
        if self._stop_requested:
            return "stop"
        state = self.store.requested_state(self.study)
        if state == "stop":
            self._stop_requested = True
            self.cancel.set()
        return state

    def _checkpoint(self, trial_id: int | None = None, server_up: bool = False) -> None:
        """Before a load point or a launch: stop, or wait out a pause, if the store asks."""
        state = self._requested()
        if state == "stop":
            raise _Interrupted("stop")
        if state != "pause":
            return
        # A parallel coordinator announces the pause once for all of its workers.
        announce = self.worker_trial is None
        t0 = time.monotonic()
        if announce:
            self.emit("paused", trial_id=trial_id, server_up=server_up, points_run=self.summary.points_run)
        while state == "pause":
            time.sleep(CONTROL_POLL_S)  # a signal still interrupts the wait
            self._beat()  # paused is alive: viewers on other machines go by the heartbeat
            state = self._requested()
        if state == "stop":
            raise _Interrupted("stop")
        if announce:
            self.emit("continued", trial_id=trial_id, paused_s=time.monotonic() - t0)

    def _finish_control(self) -> None:
        """The request was for this run: a later --resume starts running, not paused or stopped."""
        self._watch_done.set()
        try:
            if self.store.requested_state(self.study) != "run":
                self.store.request_state(self.study, "run")
        except Exception as e:  # noqa: BLE001 - the study is over either way; the next run resets it
            log.warning("could not reset the control request of %s: %s", self.study, e)

    # ---- signals ----------------------------------------------------------------------------
    def _handler(self, signum, _frame):  # noqa: ANN001
        if self._interrupt_signal is not None:
            return  # already stopping: a second Ctrl-C must not cut the teardown short
        self._interrupt_signal = signum
        self.cancel.set()
        raise _Interrupted(signal.Signals(signum).name)

    def _install(self) -> dict[Any, Any]:
        """Install the handlers (main thread only); returns the old ones for :meth:`_restore`."""
        if not self.install_signals or threading.current_thread() is not threading.main_thread():
            return {}
        old = {}
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            old[s] = signal.signal(s, self._handler)
        return old

    @staticmethod
    def _restore(old: dict[Any, Any]) -> None:
        for s, h in old.items():
            signal.signal(s, h)

    def _interrupt_name(self, stopped: bool) -> str:
        """What ended the run, for the interrupted event: a stop request, or the signal."""
        if stopped:
            return "stop request"
        return signal.Signals(self._interrupt_signal).name if self._interrupt_signal else "SIGINT"
