"""Memory per tensor-parallel degree: weights, activations, runtime, KV cache and the
sequences of the workload's length that fit, with the reason when a degree does not fit."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from tui.data.estimate import MemoryRow


class MemoryTable(DataTable):
    DEFAULT_CSS = """
    MemoryTable { height: auto; max-height: 8; }
    """

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        self.add_columns("TP", "copies", "weights", "activ.", "KV cache", "KV tokens", "seqs", "fits")

    def show(self, rows: tuple[MemoryRow, ...]) -> None:
        self.clear()
        for r in rows:
            mp = r.plan
            gb = 1e9
            fits = Text("yes", style="green") if mp.fits else Text("no", style="red")
            self.add_row(
                str(r.tp),
                str(r.replicas),
                f"{mp.weight_bytes / gb:.1f} GB",
                f"{mp.activation_bytes / gb:.1f} GB",
                f"{max(mp.kv_bytes, 0) / gb:.1f} GB",
                f"{mp.kv_tokens:,}",
                str(r.max_seqs),
                fits,
                key=str(r.tp),
            )
