"""A real sweep asks its first server which release it runs (GET /version) and predicts the
rest of the study with that release's profile: vLLM schedules a step ahead from 0.14, so an
older server is priced without it. Without an answer knee takes the current release. The
server is knee's simulated one, a real process launched as the vllm engine, which answers
/version with the release it plays (--engine-version)."""

from core.estimate.params import engine_profile
from core.sweep.predict import SurrogatePredictor
from support.sim_sweep import shown, sweep_simulated_server


def test_an_unknown_vllm_release_is_the_current_one_which_schedules_ahead():
    assert engine_profile("vllm").get("async_scheduling") == 1
    assert engine_profile("sim").get("async_scheduling") == 1
    assert engine_profile("vllm", "1.0").get("async_scheduling") == 1
    assert not engine_profile("vllm", "0.13.0").get("async_scheduling")
    assert not engine_profile("tgi").get("async_scheduling")  # not vLLM: its own profile


def _sweep(tmp_path, server_flags: str):
    return sweep_simulated_server(tmp_path, "ver", "vllm", server_flags, "A100-80GB", 1, "max_num_seqs=[64]")


def test_a_sweep_predicts_with_the_release_its_server_reports(tmp_path):
    store, runner, ready = _sweep(tmp_path, "--engine-version 0.10.1")
    assert ready and ready[0]["engine_version"] == "0.10.1"
    assert store.spec("ver").engine.version == "0.10.1"  # stored: a resume and the Pareto view see it
    predictors = runner._predictors()
    assert predictors and all(p.engine_version == "0.10.1" for p in predictors)
    assert all(p._cost(1, "auto").steps_ahead == 0 for p in predictors)  # 0.10 schedules no step ahead
    # A later study on the stored spec predicts the same way without asking.
    again = SurrogatePredictor.for_spec(store.spec("ver"), runner._surrogate.arch, runner._surrogate.hardware)
    assert again.engine_version == "0.10.1"

    printed, trial_log = shown(store, "ver", ready[0])
    assert "version 0.10.1" in printed
    assert any("server ready: version 0.10.1" in line for line in trial_log)


def test_a_server_that_reports_no_release_is_predicted_as_the_current_one(tmp_path):
    store, runner, ready = _sweep(tmp_path, "")
    assert ready and "engine_version" not in ready[0]
    assert store.spec("ver").engine.version is None
    assert all(p._cost(1, "auto").steps_ahead == 1 for p in runner._predictors())


def test_a_source_build_that_names_no_release_is_taken_as_the_current_one(tmp_path):
    # setuptools-scm's fallback for a checkout without release tags says nothing of the release.
    store, runner, ready = _sweep(tmp_path, "--engine-version 0.1.dev5+g1234abc")
    assert ready and "engine_version" not in ready[0]
    assert store.spec("ver").engine.version is None
    assert all(p._cost(1, "auto").steps_ahead == 1 for p in runner._predictors())
    # The launch's own record keeps what the server said.
    assert any("vllm 0.1.dev5+g1234abc" == h.get("engine_version") for h in store.trial_hosts("ver"))


def test_the_plan_names_the_release_its_estimate_and_sweep_use(tmp_path):
    """The Plan screen's engine version field (the twin of --engine-version): checked, shown
    in the estimate's note, saved with the plan and handed to the sweep it starts."""
    from core.estimate.report import estimate
    from core.spec.plan import Plan
    from tui.data.plan_form import check_fields, fields_from_plan
    from tui.data.sweep_control import spec_from_plan

    values = fields_from_plan(Plan())
    assert values["engine_version"] == ""
    _, errors, _ = check_fields({**values, "engine_version": "latest"})
    assert errors["engine_version"] == "must be a release number such as 0.10.1"
    plan, errors, hints = check_fields({**values, "engine_version": "0.10.1"})
    assert plan is not None and not errors and plan.engine_version == "0.10.1"
    assert hints["engine_version"] == "predicted as vLLM 0.10.1"

    note = next(n for n in estimate(plan).notes if n.startswith("engine profile"))
    assert note.startswith("engine profile: vllm 0.10.1;")
    assert "the current release" in next(n for n in estimate(Plan()).notes if n.startswith("engine profile"))
    plan.save(tmp_path / "plan.toml")
    assert Plan.load(tmp_path / "plan.toml").engine_version == "0.10.1"
    assert Plan.load(tmp_path / "plan.toml").model_copy(update={"engine_version": None}) == Plan()
    assert spec_from_plan(plan).engine.version == "0.10.1"


def test_vllm_started_with_v1_off_is_predicted_as_its_v0_engine_where_the_release_had_one():
    """VLLM_USE_V1=0 in a server's environment runs vLLM's V0 engine on 0.8-0.10 (prefill
    first, no chunked prefill by default): a sweep of such servers, and a published row that
    says so, are priced with V0's profile once the release is known; from 0.11, without a
    release, or with the variable at 1, nothing changes."""
    from core.catalog import load_model, resolve_hardware
    from core.estimate.params import engine_under_env
    from core.spec.serving import LoadPoint, ServerConfig
    from core.spec.workload import Workload

    off = {"VLLM_USE_V1": "0"}
    assert engine_under_env("vllm", "0.9.1", off) == "vllm-v0" and engine_under_env("vLLM", "0.8.0", off) == "vllm-v0"
    assert engine_under_env("vllm", "0.11.0", off) == "vllm" and engine_under_env("vllm", None, off) == "vllm"
    assert engine_under_env("vllm", "0.9.1", {"VLLM_USE_V1": "1"}) == "vllm" and engine_under_env("vllm", "0.9.1", None) == "vllm"
    assert engine_under_env("sglang", "0.9.1", off) == "sglang"

    arch, hw = load_model("Qwen/Qwen3-4B"), resolve_hardware(gpu="A100-80GB", num_gpus=1)
    v0 = SurrogatePredictor(arch, hw, "vllm", None, off)
    assert v0.profile_engine == "vllm"  # no release known yet: the current one, which has no V0
    v0.use_engine_version("0.9.1")
    v1 = SurrogatePredictor(arch, hw, "vllm", "0.9.1")
    assert v0.profile_engine == "vllm-v0" and v1.profile_engine == "vllm"
    assert v0._cost(1, "auto").profile == engine_profile("vllm-v0") and v1._cost(1, "auto").profile == engine_profile("vllm", "0.9.1")
    cfg, wl = ServerConfig(model="Qwen/Qwen3-4B"), Workload.fixed(1024, 256, num_prompts=200)
    slow, fast = (p.predict(cfg, wl, LoadPoint(request_rate=4.0))["mean_tpot_ms"] for p in (v0, v1))
    assert slow > 1.1 * fast  # V0 stalls decodes for every arriving prompt and steps slower

    from bench.rows import engine_of

    row = {"engine": "vllm", "engine_version": "0.9.1", "notes": "server started with VLLM_USE_V1=0 (V0 engine)"}
    assert engine_of(row) == "vllm-v0" and engine_of({**row, "notes": "defaults"}) == "vllm"
    assert engine_of({**row, "notes": "VLLM_USE_V1=1"}) == "vllm"
