"""`knee deploy` against moto's server over real HTTP on 127.0.0.1.

moto 5.2.5 runs in this process (``ThreadedMotoServer(ip_address="127.0.0.1", port=0)``) and
every boto3 call knee makes goes to it through ``AWS_ENDPOINT_URL``, with dummy credentials
and ``AWS_MAX_ATTEMPTS=1`` (moto's 500s would otherwise be retried). Nothing reaches the
network.

What moto lacks, and how the fixtures below extend it (``shared/reference/sagemaker.md`` §8):

- **GPU instance types.** ``FakeEndpointConfig.validate_instance_type`` knows only old CPU
  and G4 types and rejects ml.g5/g6/g6e/p4d/p5: patched to a no-op.
- **Inference-component variants.** A production variant without ``ModelName`` makes
  ``SageMakerModelBackend.validate_production_variants`` raise ``KeyError`` (HTTP 500):
  wrapped to validate only the variants that name a model.
- **Inference components** are not implemented at all. ``create``, ``describe``, ``list``,
  ``update_runtime_config`` and ``delete`` are added to ``SageMakerResponse`` (moto
  dispatches by the snake_case action name) over a dict of ICs. They check that the endpoint,
  its variant and the model exist; a new IC reports ``Creating`` on its first describe and
  ``InService`` afterwards (so knee's polling loop runs), and copy-count changes go through
  ``Updating``. ``list_tags`` is wrapped to answer for IC ARNs.
- **Delete order.** Stricter than moto: ``delete_endpoint`` is refused while inference
  components still use the endpoint (AWS's behaviour here is [uncertain]; knee deletes the
  ICs first either way), and ``delete_model`` is refused while an IC uses the model.
- **Streaming invocation.** moto has no ``InvokeEndpointWithResponseStream``. Its server
  routes ``/endpoints/<name>/invocations-response-stream`` to the control-plane app (the path
  does not end in "invocations"); the router is wrapped to send it to the runtime app, the
  URL is added there, and a handler answers with a real AWS event stream (binary frames with
  CRCs, ``PayloadPart`` events carrying OpenAI chat SSE chunks) that botocore parses as it
  would AWS's. It records each request so tests can check the body and the IC header.
- **Failure injection.** ``EXT["fail_ic"]`` makes a new IC go ``Failed``;
  ``EXT["fail_stream"]`` makes the stream carry a ``ModelStreamError``.
"""

from __future__ import annotations

import json
import struct
import zlib

import pytest

pytestmark = pytest.mark.moto

ROLE = "arn:aws:iam::123456789012:role/KneeTestRole"
TOKEN = "hf_PLANTEDtestTOKEN0123456789abcdefXYZ"  # fake; must appear in nothing knee writes
EXT: dict = {}


# ---- the moto extension -------------------------------------------------------------------------
def _event_frame(payload: bytes, event_type: str = "PayloadPart", message_type: str = "event") -> bytes:
    headers = b""
    kind = ":exception-type" if message_type == "exception" else ":event-type"
    for k, v in ((kind, event_type), (":content-type", "application/octet-stream"), (":message-type", message_type)):
        kb, vb = k.encode(), v.encode()
        headers += bytes([len(kb)]) + kb + bytes([7]) + struct.pack(">H", len(vb)) + vb
    total = 12 + len(headers) + len(payload) + 4
    prelude = struct.pack(">II", total, len(headers))
    msg = prelude + struct.pack(">I", zlib.crc32(prelude) & 0xFFFFFFFF) + headers + payload
    return msg + struct.pack(">I", zlib.crc32(msg) & 0xFFFFFFFF)


def _install_extension(mp: pytest.MonkeyPatch) -> None:
    from moto.moto_server import werkzeug_app
    from moto.sagemaker import models as sm_models
    from moto.sagemaker.exceptions import ValidationError
    from moto.sagemaker.responses import SageMakerResponse
    from moto.sagemakerruntime import urls as rt_urls
    from moto.sagemakerruntime.responses import SageMakerRuntimeResponse

    mp.setattr(sm_models.FakeEndpointConfig, "validate_instance_type", lambda self, t: None)
    orig_validate = sm_models.SageMakerModelBackend.validate_production_variants

    def validate(self, variants):
        return orig_validate(self, [v for v in variants if "ModelName" in v])

    mp.setattr(sm_models.SageMakerModelBackend, "validate_production_variants", validate)

    def ics(self) -> dict:
        return EXT["ics"]

    def arn(self, name):
        return f"arn:aws:sagemaker:{self.region}:{self.current_account}:inference-component/{name}"

    def create_inference_component(self):
        body = json.loads(self.body)
        name = body["InferenceComponentName"]
        backend = self.sagemaker_backend
        if name in ics(self):
            raise ValidationError(f'Cannot create already existing inference component "{arn(self, name)}".')
        ep = backend.endpoints.get(body["EndpointName"])
        if ep is None:
            raise ValidationError(f'Could not find endpoint "{body["EndpointName"]}".')
        if body["VariantName"] not in [v["VariantName"] for v in ep.production_variants]:
            raise ValidationError(f'Could not find variant "{body["VariantName"]}".')
        spec = body["Specification"]
        if spec.get("ModelName") not in backend._models:
            raise ValidationError(f'Could not find model "{spec.get("ModelName")}".')
        req = spec["ComputeResourceRequirements"]
        if req.get("MinMemoryRequiredInMb", 0) < 128:
            raise ValidationError("MinMemoryRequiredInMb must be at least 128")
        copies = body["RuntimeConfig"]["CopyCount"]
        ics(self)[name] = {
            "InferenceComponentName": name,
            "InferenceComponentArn": arn(self, name),
            "EndpointName": body["EndpointName"],
            "EndpointArn": ep.arn,
            "VariantName": body["VariantName"],
            "Specification": spec,
            "Tags": body.get("Tags", []),
            "RuntimeConfig": {"DesiredCopyCount": copies, "CurrentCopyCount": 0},
            "InferenceComponentStatus": "Creating",
            "_polls": 0,
        }
        EXT["ic_requests"].append(body)
        return json.dumps({"InferenceComponentArn": arn(self, name)})

    def describe_inference_component(self):
        name = json.loads(self.body)["InferenceComponentName"]
        ic = ics(self).get(name)
        if ic is None:
            raise ValidationError(f'Could not find inference component "{arn(self, name)}".')
        ic["_polls"] += 1
        if ic["InferenceComponentStatus"] in ("Creating", "Updating") and ic["_polls"] > 1:
            if EXT.get("fail_ic"):
                ic["InferenceComponentStatus"] = "Failed"
                ic["FailureReason"] = EXT["fail_ic"]
            else:
                ic["InferenceComponentStatus"] = "InService"
                ic["RuntimeConfig"]["CurrentCopyCount"] = ic["RuntimeConfig"]["DesiredCopyCount"]
        return json.dumps({k: v for k, v in ic.items() if not k.startswith("_") and k != "Tags"})

    def list_inference_components(self):
        body = json.loads(self.body or "{}")
        rows = [
            {k: ic[k] for k in ("InferenceComponentName", "InferenceComponentArn", "EndpointName", "VariantName", "InferenceComponentStatus")}
            for ic in ics(self).values()
            if body.get("EndpointNameEquals") in (None, ic["EndpointName"])
        ]
        return json.dumps({"InferenceComponents": rows})

    def update_inference_component_runtime_config(self):
        body = json.loads(self.body)
        ic = ics(self).get(body["InferenceComponentName"])
        if ic is None:
            raise ValidationError(f'Could not find inference component "{body["InferenceComponentName"]}".')
        ic["RuntimeConfig"]["DesiredCopyCount"] = body["DesiredRuntimeConfig"]["CopyCount"]
        ic["InferenceComponentStatus"] = "Updating"
        ic["_polls"] = 0
        return json.dumps({"InferenceComponentArn": ic["InferenceComponentArn"]})

    def delete_inference_component(self):
        name = json.loads(self.body)["InferenceComponentName"]
        if ics(self).pop(name, None) is None:
            raise ValidationError(f'Could not find inference component "{arn(self, name)}".')
        return "{}"

    for fn in (
        create_inference_component,
        describe_inference_component,
        list_inference_components,
        update_inference_component_runtime_config,
        delete_inference_component,
    ):
        mp.setattr(SageMakerResponse, fn.__name__, fn, raising=False)

    orig_list_tags = SageMakerResponse.list_tags

    def list_tags(self):
        res_arn = self._get_param("ResourceArn")
        if ":inference-component/" in res_arn:
            ic = ics(self).get(res_arn.rsplit("/", 1)[-1])
            return json.dumps({"Tags": ic["Tags"] if ic else []})
        return orig_list_tags(self)

    mp.setattr(SageMakerResponse, "list_tags", list_tags)

    orig_delete_endpoint = sm_models.SageMakerModelBackend.delete_endpoint

    def delete_endpoint(self, endpoint_name):
        users = [n for n, ic in EXT["ics"].items() if ic["EndpointName"] == endpoint_name]
        if users:
            raise ValidationError(f"Endpoint {endpoint_name} still has inference components: {users}")
        return orig_delete_endpoint(self, endpoint_name)

    mp.setattr(sm_models.SageMakerModelBackend, "delete_endpoint", delete_endpoint)
    orig_delete_model = sm_models.SageMakerModelBackend.delete_model

    def delete_model(self, model_name):
        users = [n for n, ic in EXT["ics"].items() if ic["Specification"].get("ModelName") == model_name]
        if users:
            raise ValidationError(f"Model {model_name} is used by inference components: {users}")
        return orig_delete_model(self, model_name)

    mp.setattr(sm_models.SageMakerModelBackend, "delete_model", delete_model)

    # Streaming invocation: route, URL and handler.
    orig_infer = werkzeug_app.DomainDispatcherApplication.infer_service_region_host

    def infer(self, environ, path):
        host = orig_infer(self, environ, path)
        if host and environ.get("PATH_INFO", "").endswith("/invocations-response-stream"):
            host = host.replace("api.sagemaker.", "runtime.sagemaker.", 1)
        return host

    mp.setattr(werkzeug_app.DomainDispatcherApplication, "infer_service_region_host", infer)
    mp.setitem(rt_urls.url_paths, "{0}/endpoints/(?P<name>[^/]+)/invocations-response-stream$", rt_urls.response.dispatch)

    def invoke_endpoint_with_response_stream(self):
        from moto.sagemaker.models import sagemaker_backends

        name = self.path.split("/")[2]
        ic_name = self.headers.get("X-Amzn-SageMaker-Inference-Component")
        EXT["invocations"].append({"endpoint": name, "inference_component": ic_name, "body": json.loads(self.body)})
        backend = sagemaker_backends[self.current_account][self.region]
        if name not in backend.endpoints:
            return 400, {"x-amzn-ErrorType": "ValidationError"}, json.dumps({"message": f"Endpoint {name} not found."})
        if ic_name is not None and EXT["ics"].get(ic_name, {}).get("InferenceComponentStatus") != "InService":
            return 400, {"x-amzn-ErrorType": "ValidationError"}, json.dumps({"message": f"Inference component {ic_name} not in service."})
        frames = b""
        if EXT.get("fail_stream"):
            frames += _event_frame(
                json.dumps({"Message": EXT["fail_stream"], "ErrorCode": "ModelError"}).encode(),
                event_type="ModelStreamError",
                message_type="exception",
            )
        else:
            for word in ("Hello", " there", "!"):
                chunk = {"choices": [{"index": 0, "delta": {"content": word}}]}
                frames += _event_frame(f"data: {json.dumps(chunk)}\n\n".encode())
            frames += _event_frame(b"data: [DONE]\n\n")
        return 200, {"Content-Type": "application/vnd.amazon.eventstream", "X-Amzn-SageMaker-Content-Type": "text/event-stream"}, frames

    mp.setattr(SageMakerRuntimeResponse, "invoke_endpoint_with_response_stream", invoke_endpoint_with_response_stream, raising=False)


@pytest.fixture(scope="module")
def moto_url():
    from moto.server import ThreadedMotoServer

    mp = pytest.MonkeyPatch()
    _install_extension(mp)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        mp.undo()


@pytest.fixture
def aws(moto_url, monkeypatch, tmp_path):
    """Fresh moto state, dummy credentials, every client pointed at the server."""
    import requests

    requests.post(f"{moto_url}/moto-api/reset", timeout=10)
    EXT.clear()
    EXT.update(ics={}, ic_requests=[], invocations=[])
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": moto_url,
        "AWS_MAX_ATTEMPTS": "1",
        "AWS_CONFIG_FILE": str(tmp_path / "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-creds"),
        "HOME": str(tmp_path / "home"),
        "HF_HUB_OFFLINE": "1",
    }.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    (tmp_path / "home").mkdir()
    from core.deploy import make_clients

    return make_clients("us-east-1")


def _leftovers(clients) -> dict:
    sm = clients.sagemaker
    return {
        "models": [m["ModelName"] for m in sm.list_models()["Models"]],
        "endpoint_configs": [c["EndpointConfigName"] for c in sm.list_endpoint_configs()["EndpointConfigs"]],
        "endpoints": [e["EndpointName"] for e in sm.list_endpoints()["Endpoints"]],
        "inference_components": list(EXT["ics"]),
    }


NOTHING = {"models": [], "endpoint_configs": [], "endpoints": [], "inference_components": []}


def _plan(tp: int = 1, container: str = "lmi", **target):
    from core.deploy import DeploySource, DeployTarget, build_plan
    from core.spec.serving import ServerConfig

    src = DeploySource(
        config=ServerConfig(model="Qwen/Qwen3-4B", tp=tp, max_num_seqs=64, max_num_batched_tokens=4096),
        gpu="L4",
        num_gpus=tp,
        request_throughput=1.5,
        output_throughput=700.0,
        trial_id="t-12",
    )
    return build_plan(src, DeployTarget(instance="ml.g6.12xlarge", container=container, role_arn=ROLE, **target))


def _fast():
    from core.deploy import ApplyOptions

    return ApplyOptions(poll_interval_s=0.01, timeout_s=10)


# ---- tests ----------------------------------------------------------------------------------------
def test_inference_components_full_cycle(aws):
    from core.deploy import apply_plan, delete_deployment, describe_deployment, scale_deployment

    plan = _plan(tp=1)
    assert plan.style == "inference-components" and plan.sizing.copies_per_instance == 4
    events = []
    result = apply_plan(plan, confirmed=True, clients=aws, progress=events.append, options=_fast())
    # The printed "Benchmark it:" command names the component (knee bench needs it for an IC endpoint).
    assert f"--inference-component {plan.inference_component_name}" in result.invoke_hint

    # Exactly the planned resources, in the planned order.
    assert result.created == plan.resources
    assert [k for k, _ in result.created] == ["model", "endpoint_config", "endpoint", "inference_component"]
    left = _leftovers(aws)
    assert left == {
        "models": [plan.model_name],
        "endpoint_configs": [plan.endpoint_config_name],
        "endpoints": [plan.endpoint_name],
        "inference_components": [plan.inference_component_name],
    }
    # The IC request is the planned one, and knee polled through Creating.
    assert EXT["ic_requests"] == [plan.calls[-1].params]
    assert any("Creating" in e.message for e in events) and any("InService" in e.message for e in events)
    # Knee's tags on every resource.
    sm = aws.sagemaker
    arn = sm.describe_endpoint(EndpointName=plan.endpoint_name)["EndpointArn"]
    assert {"Key": "knee:managed-by", "Value": "knee"} in sm.list_tags(ResourceArn=arn)["Tags"]
    # Streaming smoke test went to the IC with the chat body.
    assert result.smoke is not None and result.smoke.ok and result.smoke.text == "Hello there!"
    assert EXT["invocations"] == [{"endpoint": plan.endpoint_name, "inference_component": plan.inference_component_name, "body": plan.smoke_body}]

    st = describe_deployment(plan.name, clients=aws)
    assert st.managed_by_knee and st.endpoint["status"] == "InService"
    assert st.inference_components[0]["copies"] == 4 and st.inference_components[0]["gpus_per_copy"] == 1.0

    st = scale_deployment(plan.name, copies=2, clients=aws, options=_fast())
    assert st.inference_components[0]["copies"] == 2 and st.inference_components[0]["desired_copies"] == 2

    res = delete_deployment(plan.name, confirmed=True, clients=aws, options=_fast())
    assert [k for k, _ in res.deleted] == ["inference_component", "endpoint", "endpoint_config", "model"]
    assert _leftovers(aws) == NOTHING


def test_single_model_full_cycle(aws):
    from core.deploy import apply_plan, delete_deployment, describe_deployment, scale_deployment

    plan = _plan(tp=4, container="vllm")
    assert plan.style == "single-model" and plan.inference_component_name is None
    result = apply_plan(plan, confirmed=True, clients=aws, options=_fast())
    assert [k for k, _ in result.created] == ["model", "endpoint_config", "endpoint"]
    cfg = aws.sagemaker.describe_endpoint_config(EndpointConfigName=plan.endpoint_config_name)
    variant = cfg["ProductionVariants"][0]
    assert variant["ModelName"] == plan.model_name and variant["InstanceType"] == "ml.g6.12xlarge"
    assert variant["InferenceAmiVersion"] == "al2-ami-sagemaker-inference-gpu-3-1"  # the vLLM DLC is cu130
    assert EXT["invocations"][0]["inference_component"] is None
    env = aws.sagemaker.describe_model(ModelName=plan.model_name)["PrimaryContainer"]["Environment"]
    assert env["SM_VLLM_TENSOR_PARALLEL_SIZE"] == "4" and env["SM_VLLM_MAX_NUM_SEQS"] == "64"

    st = scale_deployment(plan.name, instances=2, clients=aws, options=_fast())
    assert st.endpoint["variants"][0]["desired_instances"] == 2
    assert describe_deployment(plan.name, clients=aws).inference_components == []

    res = delete_deployment(plan.name, confirmed=True, clients=aws, options=_fast())
    assert [k for k, _ in res.deleted] == ["endpoint", "endpoint_config", "model"]
    assert _leftovers(aws) == NOTHING


def test_rollback_after_inference_component_fails(aws):
    from core.deploy import apply_plan
    from core.errors import RunFailed

    EXT["fail_ic"] = "CUDA out of memory while loading the model"
    plan = _plan(tp=1)
    events = []
    with pytest.raises(RunFailed, match="out of memory"):
        apply_plan(plan, confirmed=True, clients=aws, progress=events.append, options=_fast())
    assert _leftovers(aws) == NOTHING
    rollback = [e for e in events if e.step == "rollback"]
    assert rollback[-1].status == "done"


def test_rollback_after_smoke_test_fails(aws):
    from core.deploy import apply_plan
    from core.errors import RunFailed

    EXT["fail_stream"] = "the model produced no tokens"
    with pytest.raises(RunFailed, match="smoke test failed.*ModelStreamError.*the model produced no tokens"):
        apply_plan(_plan(tp=1), confirmed=True, clients=aws, options=_fast())
    assert _leftovers(aws) == NOTHING


def test_rollback_after_a_failed_create_call(aws):
    """A create call the service rejects midway (here the endpoint config: its variant is
    replaced by one without an instance type) removes the model created before it."""
    from core.deploy import apply_plan
    from core.errors import RunFailed

    plan = _plan(tp=4, container="lmi")
    bad = plan.calls[1].model_copy(update={"params": {**plan.calls[1].params, "ProductionVariants": [{"VariantName": "x"}]}})
    plan = plan.model_copy(update={"calls": [plan.calls[0], bad, *plan.calls[2:]]})
    with pytest.raises(RunFailed):
        apply_plan(plan, confirmed=True, clients=aws, options=_fast())
    assert _leftovers(aws) == NOTHING


def test_cancel_from_the_ui_rolls_back(aws):
    """A UI stops an apply by setting ``ApplyOptions.cancel``; the wait loop notices within a
    poll and the run rolls back like any failure."""
    import threading

    from core.deploy import ApplyOptions, apply_plan
    from core.errors import RunFailed

    cancel = threading.Event()

    def on_event(ev):
        if ev.step == "create_inference_component" and ev.status == "done":
            cancel.set()

    with pytest.raises(RunFailed, match="cancelled"):
        apply_plan(
            _plan(tp=1), confirmed=True, clients=aws, progress=on_event, options=ApplyOptions(poll_interval_s=0.01, timeout_s=10, cancel=cancel)
        )
    assert _leftovers(aws) == NOTHING


def test_a_cancel_as_the_last_wait_ends_stops_before_the_smoke_test(aws):
    """Cancelled the moment the inference component reports InService: the run rolls back
    without sending the smoke test's request."""
    import threading

    from core.deploy import ApplyOptions, apply_plan
    from core.errors import RunFailed

    cancel = threading.Event()
    steps = []

    def on_event(ev):
        steps.append(ev.step)
        if ev.step == "wait_inference_component" and "InService" in ev.message:
            cancel.set()

    with pytest.raises(RunFailed, match="cancelled"):
        apply_plan(
            _plan(tp=1), confirmed=True, clients=aws, progress=on_event, options=ApplyOptions(poll_interval_s=0.01, timeout_s=10, cancel=cancel)
        )
    assert "wait_inference_component" in steps and "smoke_test" not in steps
    assert _leftovers(aws) == NOTHING


def test_apply_is_idempotent_and_never_removes_what_it_reused(aws):
    from core.deploy import apply_plan

    plan = _plan(tp=1)
    apply_plan(plan, confirmed=True, clients=aws, options=_fast())
    again = apply_plan(plan, confirmed=True, clients=aws, options=_fast())
    assert again.created == [] and again.reused == plan.resources
    # A failure on a re-run removes nothing that the first run made.
    from core.errors import RunFailed

    EXT["fail_stream"] = "boom"
    with pytest.raises(RunFailed):
        apply_plan(plan, confirmed=True, clients=aws, options=_fast())
    assert len(_leftovers(aws)["inference_components"]) == 1


def test_names_taken_by_foreign_resources_are_refused_untouched(aws):
    from core.deploy import apply_plan, delete_deployment
    from core.errors import BadInput

    plan = _plan(tp=4)
    aws.sagemaker.create_model(ModelName=plan.model_name, ExecutionRoleArn=ROLE, PrimaryContainer={"Image": "someone/else:1"})
    with pytest.raises(BadInput, match="not made by knee"):
        apply_plan(plan, confirmed=True, clients=aws, options=_fast())
    assert _leftovers(aws)["models"] == [plan.model_name]
    res = delete_deployment(plan.name, confirmed=True, clients=aws, options=_fast())
    assert res.deleted == [] and res.skipped[0][1] == plan.model_name
    assert _leftovers(aws)["models"] == [plan.model_name]


def test_apply_refuses_without_confirmation_or_role(aws):
    from core.deploy import DeploySource, DeployTarget, apply_plan, build_plan
    from core.errors import BadInput
    from core.spec.serving import ServerConfig

    with pytest.raises(BadInput, match="confirmation"):
        apply_plan(_plan(), confirmed=False, clients=aws)
    no_role = build_plan(DeploySource(config=ServerConfig(model="Qwen/Qwen3-4B")), DeployTarget(instance="ml.g6.xlarge"))
    with pytest.raises(BadInput, match="execution role"):
        apply_plan(no_role, confirmed=True, clients=aws)
    assert _leftovers(aws) == NOTHING


def _run_cli(argv, capsys):
    from tui.cli import main

    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_cycle_and_planted_token_never_leaks(aws, capsys, tmp_path, monkeypatch):
    """Plant an HF token, drive plan/apply/status/scale/delete through the command line, and
    search everything knee printed or wrote for it. The token must reach the container
    environment (the one place it belongs) and nowhere else."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "trial.json"
    src.write_text(
        json.dumps(
            {
                "config": {"model": "Qwen/Qwen3-4B", "tp": 1, "max_num_seqs": 48},
                "gpu": "L4",
                "num_gpus": 1,
                "request_throughput": 2.0,
                "output_throughput": 800.0,
                "trial_id": "12",
            }
        )
    )
    outputs = []
    common = ["--from-json", str(src), "--instance", "ml.g6.12xlarge", "--role", ROLE]

    for save in ("plan.json", "plan.py", "plan.txt"):
        rc, out, err = _run_cli(["deploy", "plan", *common, "--save", str(tmp_path / save)], capsys)
        assert rc == 0, err
        outputs += [out, err]
    assert "4 copies per instance" in out and "per 1M output tokens" in out
    assert "<secret env:HF_TOKEN>" in out  # the reference is shown, never the value
    rc, out, err = _run_cli(["deploy", "plan", *common, "--json"], capsys)
    outputs += [out, err]
    plan = json.loads(out)
    name = plan["name"]
    assert plan["sizing"]["copies_per_instance"] == 4 and plan["secret"] == {"kind": "env", "name": "HF_TOKEN", "variable": "HF_TOKEN"}

    rc, out, err = _run_cli(["deploy", "apply", "--plan", str(tmp_path / "plan.json"), "--yes", "--poll-interval", "0.01"], capsys)
    outputs += [out, err]
    assert rc == 0, err
    assert "Smoke test: ok" in out
    env = aws.sagemaker.describe_model(ModelName=plan["model_name"])["PrimaryContainer"]["Environment"]
    assert env["HF_TOKEN"] == TOKEN  # delivered where it is needed

    for argv in (
        ["deploy", "status", "--name", name],
        ["deploy", "status", "--name", name, "--json"],
        ["deploy", "scale", "--name", name, "--copies", "3", "--poll-interval", "0.01"],
    ):
        rc, out, err = _run_cli(argv, capsys)
        assert rc == 0, err
        outputs += [out, err]
    assert "3 copies" in out

    rc, out, err = _run_cli(["deploy", "delete", "--name", name, "--yes", "--poll-interval", "0.01"], capsys)
    outputs += [out, err]
    assert rc == 0 and "Deleted:" in out
    assert _leftovers(aws) == NOTHING

    # Failure path too: its error text goes through the redactor.
    EXT["fail_ic"] = f"container crashed; env HF_TOKEN={TOKEN}"
    rc, out, err = _run_cli(["deploy", "apply", "--plan", str(tmp_path / "plan.json"), "--yes", "--poll-interval", "0.01"], capsys)
    outputs += [out, err]
    assert rc == 1 and "container crashed" in err and "rolled back" in err
    assert _leftovers(aws) == NOTHING

    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "trial.json"]
    assert {"plan.json", "plan.py", "plan.txt"} <= {p.name for p in written}
    for text in outputs + [p.read_text(errors="replace") for p in written]:
        assert TOKEN not in text
        assert TOKEN[3:20] not in text  # nor a recognisable piece of it


def test_token_from_secrets_manager(aws, capsys, tmp_path):
    import boto3

    boto3.client("secretsmanager", region_name="us-east-1").create_secret(Name="knee/hf", SecretString=json.dumps({"HF_TOKEN": TOKEN}))
    rc, out, err = _run_cli(
        [
            "deploy",
            "apply",
            "--model",
            "Qwen/Qwen3-4B",
            "--tp",
            "4",
            "--instance",
            "ml.g6.12xlarge",
            "--role",
            ROLE,
            "--hf-token-secret",
            "knee/hf",
            "--yes",
            "--poll-interval",
            "0.01",
        ],
        capsys,
    )
    assert rc == 0, err
    assert TOKEN not in out + err and "<secret secretsmanager:knee/hf>" in out
    models = aws.sagemaker.list_models()["Models"]
    env = aws.sagemaker.describe_model(ModelName=models[0]["ModelName"])["PrimaryContainer"]["Environment"]
    assert env["HF_TOKEN"] == TOKEN

    rc, out, err = _run_cli(
        [
            "deploy",
            "apply",
            "--model",
            "Qwen/Qwen3-4B",
            "--tp",
            "4",
            "--instance",
            "ml.g6.12xlarge",
            "--role",
            ROLE,
            "--hf-token-secret",
            "knee/missing",
            "--name",
            "other",
            "--yes",
        ],
        capsys,
    )
    assert rc == 2 and "cannot read secret 'knee/missing'" in err


def test_cli_apply_without_yes_on_a_pipe_changes_nothing(aws, capsys, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    rc, out, err = _run_cli(["deploy", "apply", "--model", "Qwen/Qwen3-4B", "--instance", "ml.g6.12xlarge", "--role", ROLE], capsys)
    assert rc == 2 and "--yes" in err
    assert _leftovers(aws) == NOTHING


def test_delete_of_unknown_name_is_a_clean_noop(aws, capsys):
    rc, out, err = _run_cli(["deploy", "delete", "--name", "knee-nothing-here", "--yes"], capsys)
    assert rc == 0 and "Nothing to delete" in out
