"""Executing a plan against SageMaker: create, wait, smoke-test, roll back, scale, delete.

No UI here: every step reports through a ``progress`` callback taking a
:class:`DeployEvent`, and every text that leaves this module (events, errors, results) has
gone through a :class:`~core.deploy.secrets.Redactor` holding the HF token, because
botocore error messages may echo request values.

Ordering (``shared/reference/sagemaker.md`` §6): resources are created model → endpoint
config → endpoint → inference component, and removed in the reverse order, waiting for an
inference component and an endpoint to be gone before removing what they use. A failure at
any point after confirmation removes what *this run* created and nothing else; resources
that already existed under the plan's names (a repeated apply) are reused, never removed.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from pydantic import BaseModel

from core.deploy.plan import MANAGED_TAG, VARIANT, DeployPlan, valid_role
from core.deploy.secrets import Redactor, resolve
from core.errors import BadInput, KneeError, RunFailed


@dataclass(frozen=True)
class DeployEvent:
    """One progress report. ``status``: start, wait (a poll while waiting), done, reused,
    skipped, failed, rollback."""

    step: str
    status: str
    message: str
    resource: str | None = None
    elapsed_s: float = 0.0


Progress = Callable[[DeployEvent], None]


@dataclass
class AwsClients:
    sagemaker: Any
    runtime: Any
    secretsmanager: Any | None = None


def make_clients(region: str, endpoint_url: str | None = None) -> AwsClients:
    """boto3 clients for ``region``. ``AWS_ENDPOINT_URL`` and ``AWS_MAX_ATTEMPTS`` in the
    environment are honoured by boto3 itself (the tests point them at moto)."""
    import boto3
    from botocore.config import Config

    check_region(region)
    session = boto3.session.Session(region_name=region)
    cfg = Config(connect_timeout=10, read_timeout=120)
    kw: dict[str, Any] = {"region_name": region, "config": cfg}
    if endpoint_url:
        kw["endpoint_url"] = endpoint_url
    return AwsClients(sagemaker=session.client("sagemaker", **kw),
                      runtime=session.client("sagemaker-runtime", **kw),
                      secretsmanager=session.client("secretsmanager", **kw))


def check_region(region: str) -> None:
    """An unknown region is the user's typo, not a network error: botocore's bundled
    endpoint data says which regions have SageMaker, offline."""
    import boto3

    session = boto3.session.Session()
    known = {r for p in session.get_available_partitions() for r in session.get_available_regions("sagemaker", p)}
    if region not in known:
        import difflib

        close = difflib.get_close_matches(region, sorted(known), n=3)
        raise BadInput(f"unknown region {region!r}: SageMaker is not offered there",
                       f"did you mean {', '.join(close)}?" if close else "e.g. us-east-1")


@dataclass
class ApplyOptions:
    poll_interval_s: float = 15.0
    timeout_s: float = 3600.0  # per wait (endpoint, inference component)
    smoke_test: bool = True
    rollback: bool = True  # remove what this run created when something fails
    cancel: threading.Event | None = None  # set by a UI to stop; treated as a failure


class SmokeResult(BaseModel):
    ok: bool
    first_byte_s: float | None = None
    total_s: float | None = None
    events: int = 0
    bytes: int = 0
    text: str = ""  # what the model said, best effort
    error: str | None = None


class ApplyResult(BaseModel):
    name: str
    endpoint_name: str
    created: list[tuple[str, str]]
    reused: list[tuple[str, str]]
    smoke: SmokeResult | None = None
    elapsed_s: float
    invoke_hint: str


class DeleteResult(BaseModel):
    name: str
    deleted: list[tuple[str, str]]
    not_found: list[tuple[str, str]]
    skipped: list[tuple[str, str, str]]  # kind, name, why


class DeploymentStatus(BaseModel):
    name: str
    endpoint: dict[str, Any] | None
    inference_components: list[dict[str, Any]]
    models: list[str]
    endpoint_configs: list[str]
    managed_by_knee: bool


# ---- helpers ------------------------------------------------------------------------------
def _err_code(e: Exception) -> str:
    return getattr(e, "response", {}).get("Error", {}).get("Code", "") if hasattr(e, "response") else ""


def _is_not_found(e: Exception) -> bool:
    msg = str(e).lower()
    return _err_code(e) in ("ValidationException", "ResourceNotFound", "ResourceNotFoundException") and (
        "could not find" in msg or "not found" in msg or "does not exist" in msg or "cannot find" in msg)


def _client_error(e: Exception) -> bool:
    from botocore.exceptions import BotoCoreError, ClientError

    return isinstance(e, (ClientError, BotoCoreError))


def _translate(e: Exception, what: str, redact: Redactor | None = None) -> KneeError:
    """A botocore failure as the error the user sees: missing credentials are theirs to
    fix (exit 2); anything else is a failed run (exit 1)."""
    from botocore.exceptions import NoCredentialsError, NoRegionError, PartialCredentialsError

    if isinstance(e, (NoCredentialsError, PartialCredentialsError)):
        return BadInput("no AWS credentials found", "set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY")
    if isinstance(e, NoRegionError):
        return BadInput("no AWS region", "pass --region")
    if _err_code(e) in ("AccessDeniedException", "AccessDenied", "UnrecognizedClientException", "ExpiredTokenException",
                        "InvalidClientTokenId"):
        return BadInput(f"{what}: AWS refused the credentials ({_err_code(e)})", "check the profile and its permissions")
    msg = f"{what}: {e}"
    return RunFailed(redact(msg) if redact else msg)


@contextmanager
def _aws_errors(what: str, redact: Redactor | None = None):
    """A botocore failure inside the block leaves as the user's error (:func:`_translate`,
    prefixed with ``what``); anything else, knee's own errors included, passes unchanged.
    One policy for every public entry point that talks to SageMaker."""
    try:
        yield
    except Exception as e:
        if _client_error(e):
            raise _translate(e, what, redact) from None
        raise


_DESCRIBE = {
    "model": ("describe_model", "ModelName", "ModelArn"),
    "endpoint_config": ("describe_endpoint_config", "EndpointConfigName", "EndpointConfigArn"),
    "endpoint": ("describe_endpoint", "EndpointName", "EndpointArn"),
    "inference_component": ("describe_inference_component", "InferenceComponentName", "InferenceComponentArn"),
}
_DELETE = {
    "model": ("delete_model", "ModelName"),
    "endpoint_config": ("delete_endpoint_config", "EndpointConfigName"),
    "endpoint": ("delete_endpoint", "EndpointName"),
    "inference_component": ("delete_inference_component", "InferenceComponentName"),
}


class _Run:
    """State shared by the steps of one apply, scale or delete."""

    def __init__(self, clients: AwsClients, progress: Progress | None, options: ApplyOptions, redact: Redactor):
        self.c = clients
        self.progress = progress
        self.o = options
        self.redact = redact
        self.t0 = time.monotonic()

    def emit(self, step: str, status: str, message: str, resource: str | None = None) -> None:
        if self.progress is not None:
            self.progress(DeployEvent(step, status, self.redact(message), resource, time.monotonic() - self.t0))

    def check_cancel(self) -> None:
        if self.o.cancel is not None and self.o.cancel.is_set():
            raise RunFailed("cancelled")

    def sleep(self) -> None:
        # Wake early on cancel so a UI's stop button is answered within a poll.
        if self.o.cancel is not None:
            self.o.cancel.wait(self.o.poll_interval_s)
        else:
            time.sleep(self.o.poll_interval_s)
        self.check_cancel()

    def describe(self, kind: str, name: str) -> dict[str, Any] | None:
        op, key, _ = _DESCRIBE[kind]
        try:
            return getattr(self.c.sagemaker, op)(**{key: name})
        except Exception as e:
            if _client_error(e) and _is_not_found(e):
                return None
            raise

    def tags(self, arn: str) -> dict[str, str]:
        try:
            resp = self.c.sagemaker.list_tags(ResourceArn=arn)
        except Exception as e:
            if _client_error(e):
                return {}
            raise
        return {t["Key"]: t["Value"] for t in resp.get("Tags", [])}

    def knee_made(self, kind: str, desc: dict[str, Any]) -> bool:
        arn = desc.get(_DESCRIBE[kind][2])
        return bool(arn) and self.tags(arn).get(MANAGED_TAG) == "knee"

    def wait_endpoint(self, name: str, gone: bool = False) -> dict[str, Any] | None:
        def ready(d: dict[str, Any]) -> bool:
            status = d.get("EndpointStatus")
            if status in ("Failed", "OutOfService"):
                raise RunFailed(f"endpoint {name} is {status}: {d.get('FailureReason', 'no reason given')}")
            return status == "InService"

        return self._poll("endpoint", name, "EndpointStatus", gone, ready)

    def wait_ic(self, name: str, gone: bool = False, copies: int | None = None) -> dict[str, Any] | None:
        # No boto3 waiter exists for inference components: poll the status.
        def copies_shown(d: dict[str, Any]) -> str:
            rc = d.get("RuntimeConfig", {})
            return f"{d.get('InferenceComponentStatus')}, copies {rc.get('CurrentCopyCount', '?')}/{rc.get('DesiredCopyCount', '?')}"

        def ready(d: dict[str, Any]) -> bool:
            status = d.get("InferenceComponentStatus")
            if status == "Failed":
                raise RunFailed(f"inference component {name} failed: {d.get('FailureReason', 'no reason given')}")
            return status == "InService" and (copies is None or d.get("RuntimeConfig", {}).get("CurrentCopyCount") == copies)

        return self._poll("inference_component", name, "InferenceComponentStatus", gone, ready, copies_shown)

    def _poll(
        self,
        kind: str,
        name: str,
        status_key: str,
        gone: bool,
        ready: Callable[[dict[str, Any]], bool],
        shown: Callable[[dict[str, Any]], Any] | None = None,
    ) -> dict[str, Any] | None:
        """Describe a resource every poll interval until ``ready`` says so (it raises on a
        failed status) or, with ``gone``, until it is not found; reports each change of
        ``shown`` (the status by default) and fails after the run's timeout. One loop for
        endpoints and inference components, which differ only in what they show and when
        they are ready."""
        what = f"{kind.replace('_', ' ')} {name}"
        start = time.monotonic()
        last = None
        while True:
            d = self.describe(kind, name)
            if d is None:
                if gone:
                    self.emit("delete", "done", f"{what} deleted", name)
                    return None
                raise RunFailed(f"{what} disappeared while waiting for it")
            status = d.get(status_key)
            now = shown(d) if shown is not None else status
            if now != last:
                self.emit(f"wait_{kind}", "wait", f"{what}: {now}", name)
                last = now
            if not gone and ready(d):
                return d
            if time.monotonic() - start > self.o.timeout_s:
                raise RunFailed(f"{what} still {status} after {self.o.timeout_s:.0f} s")
            self.sleep()

    def delete(self, kind: str, name: str) -> bool:
        """Delete one resource and wait until it is gone; False if it was not there."""
        op, key = _DELETE[kind]
        self.emit("delete", "start", f"deleting {kind.replace('_', ' ')} {name}", name)
        try:
            getattr(self.c.sagemaker, op)(**{key: name})
        except Exception as e:
            if _client_error(e) and _is_not_found(e):
                self.emit("delete", "skipped", f"{kind.replace('_', ' ')} {name} not found", name)
                return False
            raise
        if kind == "inference_component":
            self.wait_ic(name, gone=True)
        elif kind == "endpoint":
            self.wait_endpoint(name, gone=True)
        else:
            self.emit("delete", "done", f"{kind.replace('_', ' ')} {name} deleted", name)
        return True


# ---- smoke test ---------------------------------------------------------------------------
def _text_from_stream(raw: str) -> str:
    """Generated text from SSE lines (OpenAI chat chunks or TGI token events), best effort."""
    out = []
    for line in raw.splitlines():
        line = line.strip()
        if line.startswith("data:"):
            line = line[5:].strip()
        if not line or line == "[DONE]":
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            for ch in obj.get("choices") or []:
                out.append((ch.get("delta") or {}).get("content") or ch.get("text") or "")
            if isinstance(obj.get("token"), dict):
                out.append(obj["token"].get("text", ""))
    return "".join(out)


def smoke_test(plan: DeployPlan, clients: AwsClients, redact: Redactor | None = None) -> SmokeResult:
    """One streaming invocation through ``InvokeEndpointWithResponseStream``."""
    redact = redact or Redactor()
    kw: dict[str, Any] = {"EndpointName": plan.endpoint_name, "ContentType": "application/json",
                          "Body": json.dumps(plan.smoke_body).encode()}
    if plan.inference_component_name:
        kw["InferenceComponentName"] = plan.inference_component_name
    t0 = time.monotonic()
    first = None
    n = size = 0
    raw = bytearray()
    try:
        resp = clients.runtime.invoke_endpoint_with_response_stream(**kw)
        for event in resp["Body"]:
            if "PayloadPart" in event:
                chunk = event["PayloadPart"].get("Bytes", b"")
                if first is None and chunk:
                    first = time.monotonic() - t0
                n += 1
                size += len(chunk)
                if len(raw) < 65536:
                    raw += chunk
            elif "ModelStreamError" in event or "InternalStreamFailure" in event:
                err = event.get("ModelStreamError") or event.get("InternalStreamFailure") or {}
                return SmokeResult(ok=False, events=n, bytes=size, error=redact(str(err.get("Message", err))))
    except Exception as e:
        if not _client_error(e):
            raise
        return SmokeResult(ok=False, events=n, bytes=size, error=redact(str(e)))
    text = _text_from_stream(raw.decode(errors="replace"))
    ok = size > 0
    return SmokeResult(ok=ok, first_byte_s=first, total_s=time.monotonic() - t0, events=n, bytes=size,
                       text=redact(text[:200]), error=None if ok else "the stream carried no bytes")


# ---- apply --------------------------------------------------------------------------------
def apply_plan(plan: DeployPlan, *, confirmed: bool, clients: AwsClients | None = None,
               progress: Progress | None = None, options: ApplyOptions | None = None) -> ApplyResult:
    """Create the plan's resources. ``confirmed`` must be True: the caller has shown the
    plan and the user agreed (``--yes`` counts). Raises :class:`BadInput` before anything
    is created (no role, unresolvable token, a name taken by something knee did not make)
    and :class:`RunFailed` after rolling back when a step fails."""
    if not confirmed:
        raise BadInput("apply needs explicit confirmation", "review the plan, then confirm (or pass --yes)")
    if not plan.role_arn or not valid_role(plan.role_arn):
        raise BadInput("apply needs an execution role", "pass --role arn:aws:iam::<account>:role/<name>")
    options = options or ApplyOptions()
    clients = clients or make_clients(plan.region)
    redact = Redactor()
    token = None
    if plan.secret is not None:
        token = resolve(plan.secret, clients.secretsmanager)
        redact.add(token)
    run = _Run(clients, progress, options, redact)
    created: list[tuple[str, str]] = []
    reused: list[tuple[str, str]] = []

    # Look before creating anything: a name held by a resource knee did not make is the
    # user's to resolve, and nothing must be touched.
    existing: dict[tuple[str, str], dict[str, Any]] = {}
    with _aws_errors(f"cannot check SageMaker in {plan.region}", redact):
        for kind, name in plan.resources:
            d = run.describe(kind, name)
            if d is not None:
                if not run.knee_made(kind, d):
                    raise BadInput(f"a {kind.replace('_', ' ')} named {name} exists and was not made by knee",
                                   "delete it or pass --name to deploy under another name")
                existing[(kind, name)] = d

    try:
        for call in plan.calls:
            run.check_cancel()
            kind = call.operation.removeprefix("create_")
            name = call.params[{"model": "ModelName", "endpoint_config": "EndpointConfigName", "endpoint": "EndpointName",
                                "inference_component": "InferenceComponentName"}[kind]]
            label = kind.replace("_", " ")
            if (kind, name) in existing:
                reused.append((kind, name))
                run.emit(call.operation, "reused", f"{label} {name} exists (made by knee): reusing it", name)
            else:
                params = call.params
                if kind == "model" and token is not None:
                    # The only place the token's value goes: a deep copy of this one request.
                    params = json.loads(json.dumps(params))
                    params["PrimaryContainer"]["Environment"][plan.secret.variable] = token
                run.emit(call.operation, "start", f"creating {label} {name}", name)
                getattr(clients.sagemaker, call.operation)(**params)
                created.append((kind, name))
                run.emit(call.operation, "done", f"created {label} {name}", name)
            if kind == "endpoint":
                run.wait_endpoint(name)
            elif kind == "inference_component":
                run.wait_ic(name, copies=call.params["RuntimeConfig"]["CopyCount"])
        smoke = None
        if options.smoke_test:
            run.emit("smoke_test", "start", f"streaming test invocation of {plan.endpoint_name}", plan.endpoint_name)
            smoke = smoke_test(plan, clients, redact)
            if not smoke.ok:
                raise RunFailed(f"smoke test failed: {smoke.error}")
            run.emit("smoke_test", "done", f"smoke test ok: first byte after {smoke.first_byte_s:.2f} s, "
                     f"{smoke.events} events, {smoke.bytes} bytes", plan.endpoint_name)
    except BaseException as e:  # noqa: BLE001 - Ctrl-C must roll back too
        msg = redact(str(e) or type(e).__name__)
        run.emit("apply", "failed", msg)
        if options.rollback and created:
            _rollback(run, created)
        elif created:
            run.emit("rollback", "skipped", "rollback disabled; left in place: " + ", ".join(n for _, n in created))
        if isinstance(e, KeyboardInterrupt):
            raise
        if isinstance(e, KneeError):
            raise type(e)(msg) from None
        if _client_error(e):
            raise _translate(e, "apply failed", redact) from None
        raise
    # knee bench's SageMaker client (core/load) speaks the LMI and vLLM formats; an IC
    # endpoint also needs the component's name on each invocation.
    fmt = f" --sagemaker-format {plan.container}" if plan.container in ("lmi", "vllm") else ""
    ic = f" --inference-component {plan.inference_component_name}" if plan.inference_component_name else ""
    return ApplyResult(name=plan.name, endpoint_name=plan.endpoint_name, created=created, reused=reused, smoke=smoke,
                       elapsed_s=time.monotonic() - run.t0,
                       invoke_hint=f"knee bench --sagemaker-endpoint {plan.endpoint_name}{ic}{fmt} --region {plan.region} "
                                   f"--model {plan.source.config.model}")


def _rollback(run: _Run, created: list[tuple[str, str]]) -> None:
    run.emit("rollback", "start", "rolling back: " + ", ".join(n for _, n in reversed(created)))
    # Faster polling while tearing down is not needed; the same interval applies. A cancel
    # must not stop the rollback itself.
    run.o = ApplyOptions(poll_interval_s=run.o.poll_interval_s, timeout_s=run.o.timeout_s)
    failures = []
    for kind, name in reversed(created):
        try:
            run.delete(kind, name)
        except Exception as e:  # keep going: leave as little behind as possible
            failures.append(f"{name}: {run.redact(str(e))}")
    if failures:
        run.emit("rollback", "failed", "could not remove: " + "; ".join(failures))
    else:
        run.emit("rollback", "done", "rolled back; nothing this run created is left")


# ---- discovery, delete, scale -------------------------------------------------------------
def _discover(run: _Run, name: str) -> tuple[dict | None, list[str], list[str], list[str]]:
    """The endpoint, its inference components, endpoint configs and models; plus the
    names a knee plan would have used, so leftovers of a half-finished run are found."""
    ep = run.describe("endpoint", name)
    ics: list[str] = []
    configs: list[str] = [f"{name}-config"]
    models: list[str] = [f"{name}-model"]
    if ep is not None:
        if ep.get("EndpointConfigName") and ep["EndpointConfigName"] not in configs:
            configs.insert(0, ep["EndpointConfigName"])
        token = None
        while True:
            kw: dict[str, Any] = {"EndpointNameEquals": name, "MaxResults": 100}
            if token:
                kw["NextToken"] = token
            resp = run.c.sagemaker.list_inference_components(**kw)
            ics += [s["InferenceComponentName"] for s in resp.get("InferenceComponents", [])]
            token = resp.get("NextToken")
            if not token:
                break
    if f"{name}-ic" not in ics and run.describe("inference_component", f"{name}-ic") is not None:
        ics.append(f"{name}-ic")
    for ic in ics:
        d = run.describe("inference_component", ic) or {}
        m = (d.get("Specification") or {}).get("ModelName")
        if m and m not in models:
            models.append(m)
    for cfg in configs:
        d = run.describe("endpoint_config", cfg) or {}
        for v in d.get("ProductionVariants", []):
            if v.get("ModelName") and v["ModelName"] not in models:
                models.append(v["ModelName"])
    return ep, ics, configs, models


def delete_deployment(name: str, *, confirmed: bool, region: str = "us-east-1", clients: AwsClients | None = None,
                      progress: Progress | None = None, options: ApplyOptions | None = None,
                      force: bool = False) -> DeleteResult:
    """Remove a deployment: inference components (waiting until gone), the endpoint
    (waiting), its endpoint configs, then its models. Only resources tagged as made by knee
    are removed unless ``force``."""
    if not confirmed:
        raise BadInput("delete needs explicit confirmation", "pass --yes")
    clients = clients or make_clients(region)
    run = _Run(clients, progress, options or ApplyOptions(), Redactor())
    with _aws_errors(f"cannot read SageMaker in {region}"):
        ep, ics, configs, models = _discover(run, name)
    result = DeleteResult(name=name, deleted=[], not_found=[], skipped=[])
    order = [("inference_component", n) for n in ics] + [("endpoint", name)] + \
            [("endpoint_config", n) for n in configs] + [("model", n) for n in models]
    with _aws_errors("delete stopped at a failed call"):
        for kind, n in order:
            d = ep if kind == "endpoint" else run.describe(kind, n)
            if d is None:
                result.not_found.append((kind, n))
                continue
            if not force and not run.knee_made(kind, d):
                result.skipped.append((kind, n, "not tagged as made by knee (use --force)"))
                run.emit("delete", "skipped", f"{kind.replace('_', ' ')} {n} was not made by knee: left alone", n)
                if kind == "endpoint":
                    # Its configs and models may still be in use by it.
                    break
                continue
            if run.delete(kind, n):
                result.deleted.append((kind, n))
            else:
                result.not_found.append((kind, n))
    return result


def describe_deployment(name: str, *, region: str = "us-east-1", clients: AwsClients | None = None) -> DeploymentStatus:
    """What exists under ``name`` now. Never includes container environments (they hold
    the HF token)."""
    clients = clients or make_clients(region)
    run = _Run(clients, None, ApplyOptions(), Redactor())
    with _aws_errors(f"cannot read SageMaker in {region}"):
        return _describe(run, name)


def _describe(run: _Run, name: str) -> DeploymentStatus:
    ep, ics, configs, models = _discover(run, name)
    endpoint = None
    managed = False
    if ep is not None:
        managed = run.knee_made("endpoint", ep)
        endpoint = {"name": name, "status": ep.get("EndpointStatus"), "config": ep.get("EndpointConfigName"),
                    "variants": [{"name": v.get("VariantName"), "instances": v.get("CurrentInstanceCount"),
                                  "desired_instances": v.get("DesiredInstanceCount")} for v in ep.get("ProductionVariants", [])],
                    "failure_reason": ep.get("FailureReason")}
    ic_rows = []
    for ic in ics:
        d = run.describe("inference_component", ic)
        if d is None:
            continue
        rc = d.get("RuntimeConfig", {})
        req = (d.get("Specification") or {}).get("ComputeResourceRequirements", {})
        ic_rows.append({"name": ic, "status": d.get("InferenceComponentStatus"), "copies": rc.get("CurrentCopyCount"),
                        "desired_copies": rc.get("DesiredCopyCount"), "gpus_per_copy": req.get("NumberOfAcceleratorDevicesRequired"),
                        "model": (d.get("Specification") or {}).get("ModelName")})
    return DeploymentStatus(name=name, endpoint=endpoint, inference_components=ic_rows,
                            models=[m for m in models if run.describe("model", m) is not None],
                            endpoint_configs=[c for c in configs if run.describe("endpoint_config", c) is not None],
                            managed_by_knee=managed)


def scale_deployment(name: str, *, copies: int | None = None, instances: int | None = None, region: str = "us-east-1",
                     clients: AwsClients | None = None, progress: Progress | None = None,
                     options: ApplyOptions | None = None) -> DeploymentStatus:
    """Change the copy count of the deployment's inference component, or the instance
    count of a single-model endpoint's variant, and wait until it is in effect."""
    if (copies is None) == (instances is None):
        raise BadInput("scale needs exactly one of copies or instances")
    if (copies or instances or 0) < 1:
        raise BadInput("a count must be at least 1")
    clients = clients or make_clients(region)
    run = _Run(clients, progress, options or ApplyOptions(), Redactor())
    with _aws_errors("scaling failed"):
        ep, ics, _, _ = _discover(run, name)
        if ep is None:
            raise BadInput(f"no endpoint named {name} in {region}")
        if copies is not None:
            if not ics:
                raise BadInput(f"{name} has no inference components", "scale a single-model endpoint with --instances")
            ic = ics[0]
            run.emit("scale", "start", f"setting {ic} to {copies} copies", ic)
            clients.sagemaker.update_inference_component_runtime_config(
                InferenceComponentName=ic, DesiredRuntimeConfig={"CopyCount": copies})
            run.wait_ic(ic, copies=copies)
        else:
            run.emit("scale", "start", f"setting {name} to {instances} instances", name)
            clients.sagemaker.update_endpoint_weights_and_capacities(
                EndpointName=name, DesiredWeightsAndCapacities=[{"VariantName": VARIANT, "DesiredInstanceCount": instances}])
            run.wait_endpoint(name)
    run.emit("scale", "done", "scaled")
    return describe_deployment(name, region=region, clients=clients)
