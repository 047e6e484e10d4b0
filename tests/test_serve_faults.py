"""Fault injection with real processes: a server that exits at start, one that runs out of
memory, one that hangs, one killed mid-trial, one whose every request fails, a port in use,
and SIGINT / SIGHUP / SIGKILL to the runner followed by --resume. Each fault must end as a
stored failed trial (or point) with the right reason, the sweep must go on, and no process
the sweep started may survive (checked by scanning /proc for the tag every server carries)."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.procs import tagged_pids, wait_gone

from core.results.store import StudyStore
from core.serve import process as proc_mod
from core.spec.study import EngineSpec
from core.sweep import build_spec, create_study
from core.sweep.runner import Runner
from tui.cli import main as knee

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
CADENCE = ROOT / "tests" / "support" / "cadence_server.py"


@pytest.fixture
def wrapper(tmp_path):
    """The cadence server, accepting (and ignoring) --variant=N so each variant is a trial."""
    w = tmp_path / "wrap.py"
    w.write_text(
        "import runpy, sys\n"
        "sys.argv = ['cadence_server.py'] + [a for a in sys.argv[1:] if not a.startswith(('--variant', '--tensor-parallel-size'))]\n"
        f"runpy.run_path({str(CADENCE)!r}, run_name='__main__')\n"
    )
    return w


def custom_spec(
    cmd, server_args="variant=[1,2]", client_args="max_concurrency=[2];num_prompts=6;random_input_len=16;random_output_len=16;tokenizer=words", **eng
):
    engine = EngineSpec(kind="custom", command=cmd, **{"start_timeout_s": 20, "stop_timeout_s": 5, **eng})
    return build_spec("cadence", engine=engine, framework=None, server_args=server_args, client_args=client_args)


def run(tmp_path, spec, name, on_event=None):
    store = StudyStore(tmp_path / "knee.db")
    create_study(store, spec, name)
    events = []

    def cb(k, d):
        events.append((time.monotonic(), k, d))
        if on_event:
            on_event(k, d)

    summary = Runner(store, name, on_event=cb, workspace=tmp_path).run()
    return store, summary, events


def test_exit_at_start_is_reported_within_a_second_with_the_log(tmp_path):
    cmd = f"{PY} -c \"import sys; print('fatal: model weights not found', flush=True); sys.exit(3)\""
    store, s, events = run(tmp_path, custom_spec(cmd), "exit")
    trials = store.trials("exit")
    assert [t.status for t in trials] == ["failed", "failed"]  # the sweep went on to trial 2
    assert all(t.reason.startswith("crashed_at_start:") and "code 3" in t.reason and "fatal: model weights not found" in t.reason for t in trials)
    started = {d["trial_id"]: t for t, k, d in events if k == "trial_started"}
    failed = {d["trial_id"]: t for t, k, d in events if k == "trial_failed"}
    assert all(failed[i] - started[i] < 1.5 for i in failed)
    assert all(p.status == "failed" and p.reason.startswith("crashed_at_start") for p in store.points("exit"))
    assert "fatal: model weights not found" in Path(trials[0].log_path).read_text()
    assert not proc_mod._LIVE and wait_gone("exit") == []


def test_out_of_memory_is_classified(tmp_path):
    cmd = f"{PY} -c \"import sys; print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB', flush=True); sys.exit(1)\""
    store, s, _ = run(tmp_path, custom_spec(cmd, server_args="variant=[1]"), "oom")
    assert store.trials("oom")[0].reason.startswith("oom:")


def test_hang_times_out_and_the_whole_group_is_killed(tmp_path):
    # The "server" starts a child (as vLLM starts its engine core) and never becomes ready.
    cmd = f"{PY} -c \"import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)\""
    store, s, _ = run(tmp_path, custom_spec(cmd, server_args="variant=[1]", start_timeout_s=1.5), "hang")
    t = store.trials("hang")[0]
    assert t.status == "failed" and t.reason.startswith("start_timeout:") and "not ready after 1.5 s" in t.reason
    # Stopping a server returns once its whole group is gone, child included: nothing of it
    # is left the moment the runner returns (no grace period to wait out).
    assert tagged_pids("hang") == []


def test_server_killed_mid_trial(tmp_path, wrapper):
    cmd = f"{PY} {wrapper} --port {{port}} --model {{model}} --ttft 0.01 --itl 0.01"
    killed = {}

    def on_event(k, d):
        if k == "server_ready" and d["trial_id"] == 0:
            killed["pid"] = d["pid"]
        if k == "progress" and d.get("phase") == "run" and d.get("trial_id") == 0 and "done" not in killed:
            killed["done"] = True
            os.kill(killed["pid"], signal.SIGKILL)

    spec = custom_spec(cmd, client_args="max_concurrency=[2,4];num_prompts=16;random_input_len=16;random_output_len=48;tokenizer=words")
    store, s, events = run(tmp_path, spec, "kill", on_event)
    trials = store.trials("kill")
    assert trials[0].status == "failed" and trials[0].reason.startswith("crashed:") and "code -9" in trials[0].reason
    pts0 = [p for p in store.points("kill") if p.trial_id == 0]
    assert len(pts0) == 2 and all(p.status == "failed" and p.reason.startswith("crashed") for p in pts0)
    pts1 = [p for p in store.points("kill") if p.trial_id == 1]
    assert trials[1].status == "ok" and len(pts1) == 2 and all(p.status == "ok" for p in pts1)
    assert s.launches == 2 and wait_gone("kill") == []


def test_every_request_failing_is_too_many_errors(tmp_path, wrapper):
    cmd = f"{PY} {wrapper} --port {{port}} --model {{model}} --fail-every 1"
    store, s, _ = run(tmp_path, custom_spec(cmd, server_args="variant=[1]"), "errs")
    p = store.points("errs")[0]
    assert p.status == "failed" and p.reason.startswith("too_many_errors: 6 of 6 requests failed") and "500" in p.reason
    assert store.trials("errs")[0].status == "failed" and wait_gone("errs") == []


def test_port_in_use_is_bad_input_and_stores_nothing(tmp_path, wrapper, capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        rc = knee(
            [
                "sweep",
                "--model",
                "cadence",
                "--engine",
                "custom",
                "--server-cmd",
                f"{PY} {wrapper} --port {{port}}",
                "--port",
                str(port),
                "--workspace",
                str(tmp_path),
            ]
        )
    assert rc == 2 and f"port {port}" in capsys.readouterr().err
    assert StudyStore(tmp_path / "knee.db").studies() == []


def _start_cli_sweep(tmp_path, wrapper, study):
    argv = [
        str(ROOT / ".venv" / "bin" / "knee") if (ROOT / ".venv" / "bin" / "knee").exists() else "knee",
        "sweep",
        "-q",
        "--model",
        "cadence",
        "--engine",
        "custom",
        "--server-cmd",
        f"{PY} {wrapper} --port {{port}} --model {{model}} --ttft 0.01 --itl 0.01",
        "--server-args",
        "variant=[1,2]",
        "--client-args",
        "max_concurrency=[2,4];num_prompts=16;random_input_len=16;random_output_len=48;tokenizer=words",
        "--workspace",
        str(tmp_path),
        "--study",
        study,
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_points(store_path, study, n, proc, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if store_path.exists():
            try:
                if len(StudyStore(store_path).points(study)) >= n:
                    return
            except Exception:
                pass
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError("no point stored in time")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_signal_to_the_runner_tears_down_and_resume_runs_only_missing_points(tmp_path, wrapper, sig):
    study = f"sig{int(sig)}"
    proc = _start_cli_sweep(tmp_path, wrapper, study)
    db = tmp_path / "knee.db"
    _wait_points(db, study, 1, proc)
    assert tagged_pids(study), "a server should be running mid-sweep"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert wait_gone(study) == []
    store = StudyStore(db)
    assert store.study(study)["status"] == "interrupted"
    before = {p.point_id: p.ended_at for p in store.points(study)}
    assert 1 <= len(before) < 4
    assert knee(["sweep", "-q", "--resume", "--study", study, "--workspace", str(tmp_path)]) == 0
    after = {p.point_id: p.ended_at for p in store.points(study)}
    assert len(after) == 4 and all(after[k] == v for k, v in before.items())
    starts = [e for e in store.events(study) if e.kind == "study_started"]
    assert starts[-1].data["resumed_points"] == len(before)
    assert wait_gone(study) == []


def test_sigkill_of_the_runner_leaves_no_server_and_resume_recovers(tmp_path, wrapper):
    study = "sigkill"
    proc = _start_cli_sweep(tmp_path, wrapper, study)
    db = tmp_path / "knee.db"
    _wait_points(db, study, 1, proc)
    proc.kill()  # no handler runs: the server gets SIGTERM from the kernel (PR_SET_PDEATHSIG)
    proc.communicate(timeout=10)
    assert wait_gone(study) == []
    store = StudyStore(db)
    assert store.study(study)["status"] == "running"  # what a killed runner leaves behind
    assert knee(["sweep", "-q", "--resume", "--study", study, "--workspace", str(tmp_path)]) == 0
    assert len([p for p in store.points(study) if p.status == "ok"]) == 4
    assert wait_gone(study) == []


def test_gpus_pinned_per_trial_and_tp_checked_against_them(tmp_path, wrapper):
    cmd = f"{PY} {wrapper} --port {{port}} --model {{model}}"
    spec = custom_spec(cmd, server_args="tensor_parallel_size=[2,4]", gpus=[3, 5, 6])
    store, s, events = run(tmp_path, spec, "gpus")
    t2, t4 = store.trials("gpus")
    assert t2.status == "ok" and t2.gpus == [3, 5]
    assert "knee: CUDA_VISIBLE_DEVICES=3,5" in Path(t2.log_path).read_text()
    assert t4.status == "failed" and t4.reason.startswith("infeasible: needs 4 GPUs, 3 available") and t4.launches == 0


def test_parallel_trials_on_disjoint_gpus(tmp_path, wrapper):
    """--parallel: trials run side by side in worker processes, each on GPUs no other running
    trial holds; a trial needing more GPUs than exist fails as infeasible; all is stored."""
    cmd = f"{PY} {wrapper} --port {{port}} --model {{model}} --ttft 0.01 --itl 0.01"
    spec = custom_spec(
        cmd,
        server_args="variant=[1,2,3];tensor_parallel_size=[1,2,8]",
        client_args="max_concurrency=[2];num_prompts=8;random_input_len=16;random_output_len=32;tokenizer=words",
        gpus=[0, 1, 2, 3],
    ).model_copy(update={"parallel": True})
    store, s, events = run(tmp_path, spec, "par")
    trials = store.trials("par")
    ok = [t for t in trials if t.status == "ok"]
    bad = [t for t in trials if t.status == "failed"]
    assert len(ok) == 6 and len(bad) == 3 and all("needs 8 GPUs" in t.reason for t in bad)
    assert s.launches == 6 and len([p for p in store.points("par") if p.status == "ok"]) == 6
    # Intervals from the relayed events: overlapping trials never share a GPU.
    start = {d["trial_id"]: (t, d["gpus"]) for t, k, d in events if k == "trial_started" and d.get("gpus")}
    end = {d["trial_id"]: t for t, k, d in events if k in ("trial_done", "trial_failed")}
    spans = [(start[i][0], end[i], set(start[i][1])) for i in start if i in end]
    overlaps = 0
    for i, a in enumerate(spans):
        for b in spans[i + 1 :]:
            if a[0] < b[1] and b[0] < a[1]:
                overlaps += 1
                assert not (a[2] & b[2]), "two running trials shared a GPU"
    assert overlaps > 0, "nothing ran side by side"
    for t in ok:
        assert f"CUDA_VISIBLE_DEVICES={','.join(map(str, t.gpus))}" in Path(t.log_path).read_text()
    assert [k for _, k, _ in events][-1] == "study_done"
    assert wait_gone("par") == []


# A vLLM start-up failure as vLLM 0.11+ logs it: the engine core's traceback with the cause,
# then the API server's traceback ending in a line that only points back at it, then
# shutdown noise. The tail alone shows none of the cause.
VLLM_INIT_FAILURE = r"""
import sys
cause = ("ValueError: Available memory on node 0 (3.10/15.50 GiB) on startup is less than desired CPU memory "
         "utilization (0.9, 13.95 GiB). To resolve: decrease `--gpu-memory-utilization` (e.g. `--gpu-memory-utilization 0.5`) "
         "or reduce CPU memory used by other processes.")
p = "(EngineCore_DP0 pid=4242) ERROR 11-23 21:00:05 [core.py:708] "
print("INFO 11-23 21:00:00 [api_server.py:1885] vLLM API server version 0.11.0")
print(p + "EngineCore failed to start.")
print(p + "Traceback (most recent call last):")
print(p + '  File "/venv/vllm/v1/worker/cpu_worker.py", line 84, in init_device')
print(p + "    raise ValueError(")
print(p + cause)
print("Process EngineCore_DP0:")
print("Traceback (most recent call last):")
for i in range(12):
    print(f'  File "/venv/vllm/v1/engine/core.py", line {700 + i}, in run_engine_core')
    print("    engine_core = EngineCoreProc(*args, **kwargs)")
print(cause)
q = "(APIServer pid=4200) "
print(q + "Traceback (most recent call last):")
for i in range(15):
    print(q + f'  File "/venv/vllm/entrypoints/openai/api_server.py", line {100 + i}, in build_async_engine_client')
    print(q + "    async with build_async_engine_client_from_engine_args(")
print(q + "    raise RuntimeError(")
print(q + "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': 1}")
print("/usr/lib/python3.11/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: There appear to be 1 leaked semaphore objects to clean up at shutdown")
print("  warnings.warn('resource_tracker: There appear to be %d '")
sys.exit(1)
"""


def test_exit_at_start_reports_the_root_cause_not_vllms_closing_line(tmp_path, capsys):
    script = tmp_path / "fake_vllm.py"
    script.write_text(VLLM_INIT_FAILURE)
    cmd = f"{PY} {script} --port {{port}}"
    rc = knee(
        [
            "sweep",
            "--model",
            "cadence",
            "--engine",
            "custom",
            "--server-cmd",
            cmd,
            "--server-args",
            "variant=[1]",
            "--client-args",
            "max_concurrency=[2];num_prompts=6",
            "--workspace",
            str(tmp_path),
            "--study",
            "cause",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 1
    failed = [ln for ln in err.splitlines() if "FAILED:" in ln]
    assert failed and "server exited with code 1 before it was ready: ValueError: Available memory on node 0" in failed[0]
    assert "decrease `--gpu-memory-utilization`" in failed[0] and "See root cause above" not in failed[0]
    t = StudyStore(tmp_path / "knee.db").trials("cause")[0]
    first = t.reason.splitlines()[0]
    assert first.startswith("crashed_at_start: server exited with code 1 before it was ready: ValueError: Available memory on node 0")
    assert wait_gone("cause") == []


@pytest.mark.parametrize(
    "log, cause",
    [
        # the pointer line is skipped; the exception before it is the cause
        (
            "Traceback\nKeyError: 'rope_type'\nRuntimeError: Worker failed with error 'x', please check the stack trace above for the root cause\n",
            "KeyError: 'rope_type'",
        ),
        # a plain Python crash: its last exception line
        (
            "loading\nTraceback (most recent call last):\ntorch.OutOfMemoryError: CUDA out of memory.\nUserWarning: leaked semaphore\n",
            "torch.OutOfMemoryError: CUDA out of memory.",
        ),
        # a pointer with nothing before it: the pointer is better than nothing
        (
            "RuntimeError: Engine core initialization failed. See root cause above.\n",
            "RuntimeError: Engine core initialization failed. See root cause above.",
        ),
        # no exception at all: the server's last line, not knee's own
        ("knee: launching: x\nerror: model weights not found\n", "error: model weights not found"),
        ("knee: launching: x\n", None),
        # a server killed while serving: its access log is no cause
        ('INFO: Uvicorn running\nINFO: 127.0.0.1 - "POST /v1/completions HTTP/1.1" 200 OK\n', None),
    ],
)
def test_root_cause_picks_the_line_that_says_why(log, cause):
    assert proc_mod.root_cause(log) == cause


def test_crash_during_a_load_point_reports_the_root_cause(tmp_path, wrapper):
    """A server that dies while serving (SIGUSR1 makes this one log a CUDA fault the way
    vLLM does and exit): the failed point's first line names the fault."""
    crashy = tmp_path / "crashy.py"
    crashy.write_text(
        "import os, signal, sys\n"
        "def die(*_):\n"
        "    print('ERROR 11-23 21:00:05 [core.py:1] EngineCore encountered a fatal error.', flush=True)\n"
        "    print('torch.AcceleratorError: CUDA error: an illegal memory access was encountered', flush=True)\n"
        "    print('vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.', flush=True)\n"
        "    os._exit(1)\n"
        "signal.signal(signal.SIGUSR1, die)\n"
        f"sys.argv = [{str(wrapper)!r}] + sys.argv[1:]\n"
        f"exec(compile(open({str(wrapper)!r}).read(), {str(wrapper)!r}, 'exec'))\n"
    )
    cmd = f"{PY} {crashy} --port {{port}} --model {{model}} --ttft 0.01 --itl 0.01"
    sent = {}

    def on_event(k, d):
        if k == "server_ready":
            sent["pid"] = d["pid"]
        if k == "progress" and d.get("phase") == "run" and "done" not in sent:
            sent["done"] = True
            os.kill(sent["pid"], signal.SIGUSR1)

    spec = custom_spec(
        cmd, server_args="variant=[1]", client_args="max_concurrency=[2];num_prompts=16;random_input_len=16;random_output_len=48;tokenizer=words"
    )
    store, s, events = run(tmp_path, spec, "midcrash", on_event)
    p = [p for p in store.points("midcrash") if p.status == "failed"][0]
    assert (
        p.reason.splitlines()[0]
        == "crashed: server exited with code 1 during the load point: torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
    )
    assert wait_gone("midcrash") == []
