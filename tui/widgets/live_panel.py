"""The live panel of the point being measured: progress, requests running and waiting, KV
cache use, GPU memory (NVML, or the simulator's, marked sim), and a sparkline of output tokens
per second. The first line says whether the sweep runs, is pausing or paused."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import ProgressBar, Sparkline, Static

from tui.data.sweep_state import SweepSnapshot


class LivePanel(Vertical):
    DEFAULT_CSS = """
    LivePanel {
        height: auto;
        border: round $primary-muted;
        border-title-color: $text-accent;
        padding: 0 1;
        #live-text { height: auto; }
        ProgressBar { height: 1; }
        Bar { width: 1fr; }
        Sparkline { height: 2; }
    }
    """

    def compose(self) -> ComposeResult:
        yield Static("no sweep followed", id="live-text")
        yield ProgressBar(total=None, show_eta=False, id="live-progress")
        yield Sparkline([], id="live-spark")

    def on_mount(self) -> None:
        self.border_title = "live"

    def show(self, snap: SweepSnapshot | None) -> None:
        text = self.query_one("#live-text", Static)
        bar = self.query_one(ProgressBar)
        spark = self.query_one(Sparkline)
        if snap is None:
            text.update("no sweep followed")
            bar.update(total=None, progress=0)
            spark.data = []
            return
        live = snap.live
        done, planned = snap.done_points, snap.planned_points
        state = snap.state
        # Paused (or about to be) is a state to notice: a sweep that is not moving.
        word = f"[b $warning]{state}[/]" if state in ("paused", "pausing", "stopping") else f"[b]{state}[/b]"
        lines = [f"{word} · points {done}/{planned or '?'}" + (" · [i]simulated[/i]" if snap.simulated else "")]
        if live.trial_id is not None:
            lines.append(
                f"trial {live.trial_id} {live.load}: {live.completed}/{live.total or '?'} requests"
                + (f", {live.failed} failed" if live.failed else "")
            )
        parts = []
        if live.running is not None:
            parts.append(f"running {live.running}")
        if live.waiting is not None:
            parts.append(f"waiting {live.waiting}")
        if live.kv_usage is not None:
            parts.append(f"KV {live.kv_usage:.0%}")
        if parts:
            lines.append(" · ".join(parts))
        if live.gpu_memory:
            lines.append(f"GPU mem {live.gpu_memory}")
        if live.tokens_per_s:
            lines.append(f"output tok/s: {live.tokens_per_s[-1]:,.0f}")
        text.update("\n".join(lines))
        bar.update(total=planned or None, progress=done)
        spark.data = list(live.tokens_per_s)
