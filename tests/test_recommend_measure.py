"""`knee recommend --measure N` against moto's SageMaker on 127.0.0.1 and a loopback runtime.

The control plane is moto's server with knee's extensions (tests/test_deploy_moto.py: GPU
instance types, inference components, delete order); the streaming invocations go to
``support.sm_runtime_fake`` through ``AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME``, which answers only
for endpoints that exist in that moto server. Nothing reaches the network.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from support.sm_runtime_fake import RuntimeFake, moto_exists
from test_deploy_moto import EXT, NOTHING, ROLE, _leftovers, aws, moto_url  # noqa: F401 (fixtures)

pytestmark = pytest.mark.moto
ROOT = Path(__file__).resolve().parents[1]
BASE = [
    "recommend",
    "--model",
    "Qwen/Qwen3-4B",
    "--input-len",
    "64",
    "--output-len",
    "8",
    "--constraints",
    "e2e_latency:p99<60s",
    "--instances",
    "ml.g6*",
    "--goal",
    "cost",
]


@pytest.fixture
def runtime(aws, monkeypatch):
    fake = RuntimeFake(moto_exists(EXT["ics"]))
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", fake.url)
    yield fake
    fake.stop()


def _measure_args(tmp_path, *extra):
    return [
        *BASE,
        "--measure",
        "3",
        "--role",
        ROLE,
        "--yes",
        "--poll-interval",
        "0.01",
        "--measure-max-concurrency",
        "4",
        "--measure-prompts",
        "6",
        "--storage",
        str(tmp_path / "knee.db"),
        "--study",
        "m3",
        *extra,
    ]


def _cli(argv, capsys):
    from tui.cli import main

    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_measure_three_creates_benchmarks_stores_and_deletes(aws, runtime, capsys, tmp_path):
    rc, out, err = _cli(_measure_args(tmp_path, "--target-rps", "20"), capsys)
    assert rc == 0, err + out
    assert _leftovers(aws) == NOTHING
    assert "estimated cost: $" in out and "deploying knee-m" in out and "measuring c=" in out and "deleting knee-m" in out
    assert "Ranked again by MEASURED numbers" in out
    # Three endpoints took the load (each benchmarked through the runtime, plus its smoke test).
    endpoints = {i["endpoint"] for i in runtime.invocations}
    assert len(endpoints) == 3, endpoints
    created = sorted(endpoints)
    assert all(any(i["endpoint"] == e and i["kind"] == "lmi" for i in runtime.invocations) for e in created)

    from core.results import StudyStore

    store = StudyStore(str(tmp_path / "knee.db"), create=False)
    study = store.study("m3")
    assert study["source"] == "sagemaker" and study["status"] == "done" and study["info"]["measured_on"] == "sagemaker"
    trials = store.trials("m3")
    assert len(trials) == 3 and all(t.status == "ok" and t.predicted["measured_on"] == "sagemaker" for t in trials)
    assert len({t.predicted["instance"] for t in trials}) == 3
    points = store.points("m3")
    assert {p.trial_id for p in points} == {t.trial_id for t in trials}
    for p in points:
        assert p.source == "sagemaker" and not p.simulated and p.summary["measured_on"] == "sagemaker"
        assert p.summary["completed"] > 0 and p.summary["output_throughput"] > 0
    assert any("request_rate" in p.client_args for p in points)  # the target rate was measured too

    # knee results and knee deploy read it unchanged.
    rc, res_out, err = _cli(["results", "--study", "m3", "--storage", str(tmp_path / "knee.db"), "--json"], capsys)
    assert rc == 0, err
    assert len(json.loads(res_out)["trials"]) == 3
    t0 = trials[0]
    rc, plan_out, err = _cli(
        [
            "deploy",
            "plan",
            "--trial",
            str(t0.trial_id),
            "--study",
            "m3",
            "--storage",
            str(tmp_path / "knee.db"),
            "--instance",
            t0.predicted["instance"],
            "--json",
        ],
        capsys,
    )
    assert rc == 0, err
    assert json.loads(plan_out)["source"]["config"]["tp"] == t0.server_args["tensor_parallel_size"]


def test_json_result_alone_on_stdout(aws, runtime, capsys, tmp_path):
    argv = _measure_args(tmp_path, "--json")
    argv[argv.index("--measure") + 1] = "1"
    rc, out, err = _cli(argv, capsys)
    assert rc == 0, err
    res = json.loads(out)  # progress and the confirmation text went to stderr
    assert res["study"] == "m3" and res["leftovers"] == [] and len(res["rows"]) == 1
    row = res["rows"][0]
    assert row["measured_on"] == "sagemaker" and row["capacity_rps"] > 0 and row["max_concurrency_meeting_slo"] == 4
    assert "estimated cost" in err and "deploying knee-m" in err
    assert _leftovers(aws) == NOTHING


def test_the_measured_requests_take_the_ranked_length_shape(aws, runtime, capsys, tmp_path):
    """The finalists are measured on the lengths they were ranked on: 8 output tokens within
    ±50% are asked for as 4-12, not all as 8."""
    argv = _measure_args(tmp_path, "--json", "--range-ratio", "0.5")
    argv[argv.index("--measure") + 1] = "1"
    rc, out, err = _cli(argv, capsys)
    assert rc == 0, err
    assert json.loads(out)["leftovers"] == [] and _leftovers(aws) == NOTHING
    asked = [i["max_tokens"] for i in runtime.invocations if i["kind"] == "lmi"]
    assert len(asked) >= 6 and min(asked) >= 4 and max(asked) <= 12 and len(set(asked)) > 3


def test_failure_in_the_second_deployment_leaves_nothing(aws, runtime, capsys, tmp_path, monkeypatch):
    """moto refuses to create the second finalist's endpoint (the server runs in this process,
    so its backend is wrapped here): the run fails (exit 1) and every endpoint is gone."""
    from moto.sagemaker import models as sm_models
    from moto.sagemaker.exceptions import ValidationError

    orig = sm_models.SageMakerModelBackend.create_endpoint

    def create_endpoint(self, endpoint_name, *a, **kw):
        if "-2-" in endpoint_name:
            raise ValidationError("injected: insufficient capacity for the requested instance type")
        return orig(self, endpoint_name, *a, **kw)

    monkeypatch.setattr(sm_models.SageMakerModelBackend, "create_endpoint", create_endpoint)
    rc, out, err = _cli(_measure_args(tmp_path), capsys)
    assert rc == 1, out + err
    assert "injected: insufficient capacity" in err and "-2-" in err
    assert _leftovers(aws) == NOTHING
    assert "LEFT BEHIND" not in out

    from core.results import StudyStore

    assert StudyStore(str(tmp_path / "knee.db"), create=False).study("m3")["status"] == "failed"


def test_a_failed_teardown_names_what_is_left_and_how_to_delete_it(aws, runtime, capsys, tmp_path, monkeypatch):
    """moto refuses to delete one endpoint: the run says which one is still billed and prints
    the command that deletes it (exit 1); the others are gone."""
    from moto.sagemaker import models as sm_models
    from moto.sagemaker.exceptions import ValidationError

    orig = sm_models.SageMakerModelBackend.delete_endpoint

    def delete_endpoint(self, endpoint_name):
        if "-1-" in endpoint_name:
            raise ValidationError("injected: the endpoint cannot be deleted right now")
        return orig(self, endpoint_name)

    monkeypatch.setattr(sm_models.SageMakerModelBackend, "delete_endpoint", delete_endpoint)
    rc, out, err = _cli(_measure_args(tmp_path), capsys)
    assert rc == 1, out + err
    left = _leftovers(aws)["endpoints"]
    assert len(left) == 1 and "-1-" in left[0]
    assert f"LEFT BEHIND (still billed): {left[0]}" in out
    assert f"knee deploy delete --name {left[0]} --region us-east-1 --yes" in out
    # The printed command works once SageMaker lets go.
    monkeypatch.setattr(sm_models.SageMakerModelBackend, "delete_endpoint", orig)
    rc, out, err = _cli(["deploy", "delete", "--name", left[0], "--region", "us-east-1", "--yes", "--poll-interval", "0.01"], capsys)
    assert rc == 0, err
    assert _leftovers(aws) == NOTHING


@pytest.mark.parametrize("when", ["streaming test invocation", "measuring c="], ids=["deploying", "measuring"])
def test_sigint_tears_everything_down(aws, monkeypatch, tmp_path, when):
    """The CLI in its own process; SIGINT once it prints ``when``: while the endpoints are being
    deployed (their smoke tests in flight) or at its first load point. The runtime is slowed
    down (0.3 s a token) so the interrupt lands while requests are in flight."""
    fake = RuntimeFake(moto_exists(EXT["ics"]), itl_s=0.3)
    try:
        env = {**os.environ, "AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME": fake.url, "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, "-c", "import sys; from tui.cli import main; sys.exit(main(sys.argv[1:]))", *_measure_args(tmp_path)]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []
        try:
            for line in proc.stdout:
                lines.append(line)
                if when in line:
                    break
            assert any(when in s for s in lines), "".join(lines)
            if when == "measuring c=":
                assert len(_leftovers(aws)["endpoints"]) == 3  # all three were up, side by side
            proc.send_signal(signal.SIGINT)
            rest, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        out = "".join(lines) + rest
        assert proc.returncode == 130, out
        assert "interrupted" in out and "LEFT BEHIND" not in out
        assert _leftovers(aws) == NOTHING
    finally:
        fake.stop()
    from core.results import StudyStore

    assert StudyStore(str(tmp_path / "knee.db"), create=False).study("m3")["status"] == "interrupted"


@pytest.mark.parametrize(
    "argv, msg",
    [
        (["--measure", "0", "--role", ROLE], "--measure must be at least 1"),
        (["--measure", "3"], "needs an execution role"),
        (["--measure", "3", "--role", ROLE, "--region", "us-nowhere-1"], "unknown region 'us-nowhere-1'"),
        (["--measure", "3", "--role", "not-an-arn"], "bad --role"),
    ],
)
def test_bad_input_is_one_line_exit_2(aws, capsys, argv, msg):
    rc, out, err = _cli([*BASE, *argv, "--yes"], capsys)
    assert rc == 2 and msg in err and len(err.strip().splitlines()) <= 2, err
    assert _leftovers(aws) == NOTHING


def test_an_existing_study_name_is_refused_before_anything_is_created(aws, capsys, tmp_path):
    from core.results import StudyStore

    StudyStore(str(tmp_path / "knee.db")).create_study("m3", None, "Qwen/Qwen3-4B")
    rc, out, err = _cli(_measure_args(tmp_path), capsys)
    assert rc == 2 and "study 'm3' already exists" in err
    assert _leftovers(aws) == NOTHING


def test_without_yes_on_a_pipe_nothing_is_created(aws, capsys, monkeypatch, tmp_path):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    rc, out, err = _cli([*BASE, "--measure", "2", "--role", ROLE, "--storage", str(tmp_path / "k.db")], capsys)
    assert rc == 2 and "--yes" in err
    assert "estimated cost:" in out
    assert _leftovers(aws) == NOTHING


def test_sla_search_brackets_then_bisects():
    """The search itself, on a known edge: no endpoint needed."""
    from core.recommend.probe import sla_search

    for edge, seed in ((37, 8), (37, 200), (1, 16), (300, 4)):
        tried = []

        def meets(c, edge=edge):
            tried.append(c)
            return c <= edge

        lo, hi = sla_search(meets, seed, cap=256, max_probes=12)
        if edge >= 256:
            assert (lo, hi) == (256, None), tried
        else:
            assert lo is not None and hi is not None and lo <= edge < hi, (edge, tried)
            assert hi - lo <= max(1, int(0.05 * hi)), (edge, tried)
    # The probe cap holds, and a seed above the cap starts at the cap.
    tried = []
    sla_search(lambda c: tried.append(c) or True, 1, cap=1024, max_probes=3)
    assert tried == [1, 2, 4]
    tried = []
    sla_search(lambda c: tried.append(c) or False, 500, cap=64, max_probes=2)
    assert tried == [64, 32]


def test_cost_estimate_names_a_missing_price():
    from dataclasses import replace

    from core.recommend import RecommendRequest, recommend
    from core.recommend.measure import MeasureOptions, cost_estimate, plan_finalists

    rec = recommend(RecommendRequest(model="Qwen/Qwen3-4B", input_len=64, output_len=8, instances="ml.g6*"))
    from tui.data.recommend_measure import deploy_ops

    opts = MeasureOptions(n=2, role_arn=ROLE)
    finals = plan_finalists("Qwen/Qwen3-4B", rec.best_per_instance, opts, deploy_ops())
    est = cost_estimate(finals, opts)
    assert est.usd is not None and est.usd > 0 and "estimated cost: $" in est.text()
    finals[1].cand = replace(finals[1].cand, usd_per_hour=None)
    est = cost_estimate(finals, opts)
    assert est.usd is None and finals[1].cand.instance in est.text() and "unknown" in est.text()
    # The finalists are distinct endpoints, one instance each.
    assert len({f.plan.endpoint_name for f in finals}) == 2 and all(f.plan.sizing.instance_count == 1 for f in finals)
