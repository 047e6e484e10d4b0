"""The headless sweep display (tui/cli/progress.py) reads events through core.spec.events."""

from __future__ import annotations

import io

from tui.cli.progress import ProgressPrinter

W = "hostA:123:abc"


def _lines(events: list[tuple[str, dict]], *, show_workers: bool = False) -> list[str]:
    buf = io.StringIO()
    p = ProgressPrinter(stream=buf, study="s1")
    p.show_workers = show_workers
    for kind, data in events:
        p.handle(kind, data)
    return buf.getvalue().splitlines()


def test_lifecycle_lines():
    lines = _lines(
        [
            (
                "study_started",
                {
                    "model": "m/x",
                    "engine": "vllm",
                    "strategy": "grid",
                    "planned_trials": 4,
                    "planned_points": 12,
                    "resumed_points": 3,
                    "simulated": True,
                },
            ),
            ("trial_started", {"trial_id": 1, "server_args": {"tp": 2, "max_num_seqs": 64}, "gpus": [0, 1], "worker": W}),
            ("server_ready", {"trial_id": 1, "start_s": 12.34, "pid": 999}),
            (
                "point_done",
                {
                    "trial_id": 1,
                    "load": "c=8",
                    "status": "ok",
                    "meets_slo": True,
                    "output_throughput": 1000.0,
                    "request_throughput": 3.21,
                    "p99_e2el_ms": 4500.0,
                    "mean_ttft_ms": 120.0,
                },
            ),
            ("point_done", {"trial_id": 1, "load": "c=32", "status": "failed", "reason": "boom\nmore"}),
            ("point_skipped", {"trial_id": 3, "server_args": {"tp": 4}, "reason": "infeasible"}),
            ("trial_failed", {"trial_id": 3, "reason": "oom\n" + "\n".join(f"log {i}" for i in range(9))}),
            ("trial_done", {"trial_id": 1, "status": "ok", "points": 3}),  # not shown
            (
                "study_done",
                {
                    "points_run": 10,
                    "points_failed": 1,
                    "points_resumed": 2,
                    "launches": 3,
                    "trials_skipped": 1,
                    "gpu_seconds": 7200.0,
                    "wall_s": 99.9,
                },
            ),
        ]
    )
    assert lines == [
        "sweep s1: m/x on vllm [SIMULATED], grid search, 4 configs / 12 load points, 3 already stored",
        "[trial 1] tp=2 max_num_seqs=64 gpus=0,1",
        "  server ready in 12.3 s (pid 999)",
        "         c=8     1000.0 tok/s    3.21 req/s  TTFT   0.12 s  p99 E2E    4.5 s  meets SLOs",
        "        c=32  FAILED: boom",
        "[skip] tp=4: infeasible",
        "  FAILED: oom",
        *[f"    | log {i}" for i in range(4, 9)],
        "sweep done: 10 load points run, 1 failed, 2 resumed, 3 server launches, 1 configs skipped, GPU time 2.00 h (simulated), wall 99.9 s",
    ]


def test_worker_lines_only_when_workers_share_the_study():
    events = [
        ("trial_started", {"trial_id": 2, "server_args": {}, "worker": W}),
        ("lease_taken_over", {"trial_id": 2, "from_worker": W, "rerun_point": "p7"}),
        ("worker_interrupted", {"worker": W, "signal": "SIGTERM", "points_run": 2}),
    ]
    assert _lines(events, show_workers=True) == [
        "[trial 2] (defaults) on hostA pid 123",
        "[trial 2] taken over from hostA pid 123 (its lease expired); point p7 runs again (re-run)",
        "worker hostA pid 123 interrupted (SIGTERM): 2 load points run",
    ]
    assert _lines(events) == [
        "[trial 2] (defaults)",
        "[trial 2] taken over from hostA pid 123 (its lease expired); point p7 runs again (re-run)",
    ]


def test_unknown_kinds_and_ill_typed_events_print_nothing():
    assert _lines([("some_future_kind", {"x": 1}), ("trial_started", {"trial_id": "not a number"})]) == []
