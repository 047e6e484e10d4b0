"""Managing a deployment after apply: find what exists under a name, describe it, scale
it, delete it. Only resources tagged as made by knee are removed unless forced."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from core.deploy.aws import ApplyOptions, AwsClients, Progress, _aws_errors, _Run, make_clients
from core.deploy.plan import VARIANT
from core.deploy.secrets import Redactor
from core.errors import BadInput


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


def delete_deployment(
    name: str,
    *,
    confirmed: bool,
    region: str = "us-east-1",
    clients: AwsClients | None = None,
    progress: Progress | None = None,
    options: ApplyOptions | None = None,
    force: bool = False,
) -> DeleteResult:
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
    order = (
        [("inference_component", n) for n in ics] + [("endpoint", name)] + [("endpoint_config", n) for n in configs] + [("model", n) for n in models]
    )
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
        endpoint = {
            "name": name,
            "status": ep.get("EndpointStatus"),
            "config": ep.get("EndpointConfigName"),
            "variants": [
                {"name": v.get("VariantName"), "instances": v.get("CurrentInstanceCount"), "desired_instances": v.get("DesiredInstanceCount")}
                for v in ep.get("ProductionVariants", [])
            ],
            "failure_reason": ep.get("FailureReason"),
        }
    ic_rows = []
    for ic in ics:
        d = run.describe("inference_component", ic)
        if d is None:
            continue
        rc = d.get("RuntimeConfig", {})
        req = (d.get("Specification") or {}).get("ComputeResourceRequirements", {})
        ic_rows.append(
            {
                "name": ic,
                "status": d.get("InferenceComponentStatus"),
                "copies": rc.get("CurrentCopyCount"),
                "desired_copies": rc.get("DesiredCopyCount"),
                "gpus_per_copy": req.get("NumberOfAcceleratorDevicesRequired"),
                "model": (d.get("Specification") or {}).get("ModelName"),
            }
        )
    return DeploymentStatus(
        name=name,
        endpoint=endpoint,
        inference_components=ic_rows,
        models=[m for m in models if run.describe("model", m) is not None],
        endpoint_configs=[c for c in configs if run.describe("endpoint_config", c) is not None],
        managed_by_knee=managed,
    )


def scale_deployment(
    name: str,
    *,
    copies: int | None = None,
    instances: int | None = None,
    region: str = "us-east-1",
    clients: AwsClients | None = None,
    progress: Progress | None = None,
    options: ApplyOptions | None = None,
) -> DeploymentStatus:
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
            clients.sagemaker.update_inference_component_runtime_config(InferenceComponentName=ic, DesiredRuntimeConfig={"CopyCount": copies})
            run.wait_ic(ic, copies=copies)
        else:
            run.emit("scale", "start", f"setting {name} to {instances} instances", name)
            clients.sagemaker.update_endpoint_weights_and_capacities(
                EndpointName=name, DesiredWeightsAndCapacities=[{"VariantName": VARIANT, "DesiredInstanceCount": instances}]
            )
            run.wait_endpoint(name)
    run.emit("scale", "done", "scaled")
    return describe_deployment(name, region=region, clients=clients)
