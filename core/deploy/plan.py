"""A SageMaker deployment plan: sizing, cost, container environment and the exact boto3
requests, built offline from a :class:`DeploySource` and a :class:`DeployTarget`.

A plan holds no secret values (only references, see :mod:`core.deploy.secrets`), so it can
be shown, saved and shared as it is. :func:`core.deploy.apply.apply_plan` executes it.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Literal, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from core.deploy.containers import (
    CUDA13_AMI,
    FLAVOURS,
    Image,
    KnobMapping,
    check_knobs,
    container_env,
    resolve_image,
)
from core.deploy.secrets import SecretRef
from core.deploy.sizing import Sizing, Style, _fit_check, _hardware_warnings, _size
from core.deploy.source import DeploySource
from core.errors import BadInput
from core.spec.hardware import Instance

VARIANT = "AllTraffic"
MANAGED_TAG = "knee:managed-by"
ROLE_PLACEHOLDER = "arn:aws:iam::<ACCOUNT_ID>:role/<SageMakerExecutionRole>"
_ROLE_RE = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,55}$")  # 56 + the longest suffix "-config" = 63
_MIB = 1024**2


class DeployTarget(BaseModel):
    """Where and how to deploy. Everything the user chooses besides the trial itself."""

    model_config = ConfigDict(frozen=True)

    instance: str
    container: Literal["lmi", "vllm", "tgi"] = "lmi"
    region: str = "us-east-1"
    style: Literal["auto", "inference-components", "single-model"] = "auto"
    target_rps: float | None = Field(default=None, gt=0)  # size the instance count for this load
    instance_count: int | None = Field(default=None, ge=1)  # or fix it
    max_instance_count: int | None = Field(default=None, ge=1)  # managed instance scaling ceiling (IC)
    role_arn: str | None = None
    name: str | None = None  # base name; default derived from the model and a config hash
    image_version: str | None = None
    image_uri: str | None = None  # bypass the SDK lookup (a private or pinned image)
    hf_token: SecretRef | None = None
    startup_timeout_s: int = Field(default=1800, ge=60, le=3600)
    download_timeout_s: int = Field(default=1200, ge=60, le=3600)


class ApiCall(BaseModel):
    """One boto3 request: ``boto3.client(service).<operation>(**params)``."""

    model_config = ConfigDict(frozen=True)

    service: str
    operation: str
    params: dict[str, Any]
    purpose: str = ""


class DeployPlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    version: int = 1
    name: str
    endpoint_name: str
    endpoint_config_name: str
    model_name: str
    inference_component_name: str | None
    region: str
    container: str
    container_title: str
    image: str
    image_version: str | None
    image_source: str
    inference_ami_version: str | None
    style: Style
    instance: Instance
    role_arn: str | None
    environment: dict[str, str]  # secrets appear as placeholders
    secret: SecretRef | None
    knobs: list[KnobMapping]
    sizing: Sizing
    warnings: list[str]
    tags: list[dict[str, str]]
    calls: list[ApiCall]  # creation order
    smoke_body: dict[str, Any]
    source: DeploySource

    @property
    def resources(self) -> list[tuple[str, str]]:
        """(kind, name) in creation order."""
        return [(c.operation.removeprefix("create_"), c.params[_NAME_KEY[c.operation]]) for c in self.calls]


_NAME_KEY = {
    "create_model": "ModelName",
    "create_endpoint_config": "EndpointConfigName",
    "create_endpoint": "EndpointName",
    "create_inference_component": "InferenceComponentName",
}


class _Names(TypedDict):
    """The SageMaker resources one deployment creates; ``ic`` only in the inference-components style."""

    endpoint: str
    config: str
    model: str
    ic: str | None


def valid_role(arn: str) -> bool:
    return bool(_ROLE_RE.match(arn))


def _slug(model: str) -> str:
    tail = model.rstrip("/").split("/")[-1]
    s = re.sub(r"[^a-zA-Z0-9]+", "-", tail).strip("-").lower()
    return s[:36].strip("-") or "model"


def _smoke_body(container: str) -> dict[str, Any]:
    # LMI and the vLLM DLC take the OpenAI chat schema on /invocations; TGI's /invocations
    # takes its generate schema. Both stream with "stream": true.
    if container == "tgi":
        return {"inputs": "Say hello in one short sentence.", "parameters": {"max_new_tokens": 16}, "stream": True}
    return {"messages": [{"role": "user", "content": "Say hello in one short sentence."}], "max_tokens": 16, "stream": True}


def _endpoint_calls(
    names: _Names, variant: dict[str, Any], tags: list[dict[str, str]], ami: str | None, purpose: str, role: str | None = None
) -> list[ApiCall]:
    """create_endpoint_config and create_endpoint for ``variant``, the same in both styles
    but for the config's role, which only the inference-components style puts there."""
    variant = {**variant, "RoutingConfig": {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}}
    if ami:
        variant["InferenceAmiVersion"] = ami
    config: dict[str, Any] = {"EndpointConfigName": names["config"]}
    if role is not None:
        config["ExecutionRoleArn"] = role
    config |= {"ProductionVariants": [variant], "Tags": tags}
    return [
        ApiCall(service="sagemaker", operation="create_endpoint_config", purpose=purpose, params=config),
        ApiCall(
            service="sagemaker",
            operation="create_endpoint",
            purpose="the endpoint (waits for InService)",
            params={"EndpointName": names["endpoint"], "EndpointConfigName": names["config"], "Tags": tags},
        ),
    ]


def build_plan(source: DeploySource, target: DeployTarget, image: Image | None = None) -> DeployPlan:
    """Everything needed to deploy ``source`` on ``target``, offline. Raises
    :class:`BadInput` for anything the user must fix: unknown instance or region, a copy
    larger than the instance, a model that does not fit, a tuned knob the container would
    drop, a malformed role ARN or name."""
    from core.catalog import get_instance

    inst = get_instance(target.instance)
    cfg = source.config
    warnings: list[str] = []
    gpus_per_copy = cfg.tp * cfg.dp
    if cfg.tp > inst.num_gpus:
        raise BadInput(f"TP={cfg.tp} is larger than {inst.name}'s {inst.num_gpus} GPU(s)", "pick an instance with more GPUs or a trial with lower TP")
    if gpus_per_copy > inst.num_gpus:
        raise BadInput(
            f"TP×DP={gpus_per_copy} GPUs is more than {inst.name}'s {inst.num_gpus}", "pick an instance with more GPUs or a trial with lower DP"
        )
    if target.role_arn is not None and not valid_role(target.role_arn):
        raise BadInput(f"malformed execution role ARN {target.role_arn!r}", "expected arn:aws:iam::<12-digit account>:role/<name>")
    if target.name is not None and not _NAME_RE.match(target.name):
        raise BadInput(f"bad deployment name {target.name!r}", "1-56 letters, digits and hyphens, starting and ending with a letter or digit")

    copies = inst.num_gpus // gpus_per_copy
    style: Style
    if target.style == "auto":
        style = "inference-components" if copies > 1 else "single-model"
    else:
        style = target.style
    if style == "single-model" and copies > 1:
        lmi = (
            (
                " (LMI documents starting one worker per TP group by itself, which would change the measured "
                "layout; whether v17+ async mode still does is uncertain)"
            )
            if target.container == "lmi"
            else ""
        )
        warnings.append(
            f"single-model endpoint: one server on {gpus_per_copy} of {inst.num_gpus} GPUs, "
            f"{inst.num_gpus - gpus_per_copy} idle; inference components would run {copies} copies{lmi}"
        )
    if style == "inference-components" and copies * gpus_per_copy < inst.num_gpus:
        warnings.append(f"{inst.num_gpus - copies * gpus_per_copy} GPU(s) per instance stay idle")

    fl = FLAVOURS[target.container]
    env, knobs = container_env(target.container, cfg)
    if fl.legacy:
        warnings.append("TGI is in maintenance mode since 2025-12-11; prefer --container lmi or vllm")
    for m in knobs:
        if m.status == "approximate":
            warnings.append(f"{m.knob}={m.value} maps only approximately to {m.variable}: {m.note}")
    if cfg.extra_args:
        warnings.append("extra arguments are passed through unchecked: " + ", ".join(sorted(cfg.extra_args)))
    if target.hf_token is not None:
        env[target.hf_token.variable] = target.hf_token.placeholder
    problems = check_knobs(cfg, env, knobs)
    if problems:
        raise BadInput(
            f"the {target.container} container would not run the trial's configuration: " + "; ".join(problems),
            "pick another --container or change the trial",
        )

    if target.image_uri:
        image = Image(uri=target.image_uri, version=target.image_version or "custom", source="given by the user")
        # Still validates the region against the SDK's table.
        resolve_image(target.container, target.region, None)
    elif image is None:
        image = resolve_image(target.container, target.region, target.image_version)
    ami = CUDA13_AMI if image.cuda13 else None

    weights_gib = _fit_check(source, inst, warnings)
    _hardware_warnings(source, inst, gpus_per_copy, warnings)
    if source.simulated:
        warnings.append("throughput is simulated, not measured: sizing and cost are estimates")
    sizing = _size(source, target.target_rps, target.instance_count, inst, style, gpus_per_copy, warnings)
    # Host resources one copy reserves. SageMaker keeps part of the host for its agents,
    # so each copy asks for 70% of its share of memory (enough for vLLM's weight loading
    # and swap space) and its share of vCPUs less one.
    per_copy_mib = inst.host_memory_gib * 1024 / sizing.copies_per_instance
    mem_mb = max(128, int(per_copy_mib * 0.7))
    cpus = float(max(1, inst.vcpus // sizing.copies_per_instance - 1))
    sizing = sizing.model_copy(
        update={
            "cpu_cores_per_copy": cpus if style == "inference-components" else None,
            "memory_mb_per_copy": mem_mb if style == "inference-components" else None,
            "weights_gib_per_gpu": weights_gib,
        }
    )

    digest = hashlib.sha256(
        json.dumps({"c": target.container, "i": image.uri, "e": env, "n": inst.name, "s": style, "r": target.region}, sort_keys=True).encode()
    ).hexdigest()[:8]
    base = target.name or f"knee-{_slug(cfg.model)}-{digest}"
    names: _Names = {
        "endpoint": base,
        "config": f"{base}-config",
        "model": f"{base}-model",
        "ic": f"{base}-ic" if style == "inference-components" else None,
    }
    tags = [{"Key": MANAGED_TAG, "Value": "knee"}, {"Key": "knee:deployment", "Value": base}]
    if source.trial_id:
        tags.append({"Key": "knee:trial", "Value": str(source.trial_id)[:256]})
    role = target.role_arn or ROLE_PLACEHOLDER
    if target.role_arn is None:
        warnings.append("no execution role: the preview shows a placeholder; apply needs --role")

    model_call = ApiCall(
        service="sagemaker",
        operation="create_model",
        purpose="the container, its image and environment",
        params={
            "ModelName": names["model"],
            "ExecutionRoleArn": role,
            "PrimaryContainer": {"Image": image.uri, "Environment": dict(env)},
            "Tags": tags,
        },
    )
    calls: list[ApiCall]
    if style == "single-model":
        variant: dict[str, Any] = {
            "VariantName": VARIANT,
            "ModelName": names["model"],
            "InstanceType": inst.name,
            "InitialInstanceCount": sizing.instance_count,
            "ContainerStartupHealthCheckTimeoutInSeconds": target.startup_timeout_s,
            "ModelDataDownloadTimeoutInSeconds": target.download_timeout_s,
        }
        calls = [model_call, *_endpoint_calls(names, variant, tags, ami, "instance type and count")]
    else:
        # Inference components: the variant holds only instances (no ModelName) and the
        # role; each copy is placed by ComputeResourceRequirements (sagemaker.md §6b).
        variant = {
            "VariantName": VARIANT,
            "InstanceType": inst.name,
            "InitialInstanceCount": sizing.instance_count,
            "ManagedInstanceScaling": {
                "Status": "ENABLED",
                "MinInstanceCount": sizing.instance_count,
                "MaxInstanceCount": max(sizing.instance_count, target.max_instance_count or 0),
            },
        }
        calls = [
            model_call,
            *_endpoint_calls(names, variant, tags, ami, "instances only; copies come from the inference component", role=role),
            ApiCall(
                service="sagemaker",
                operation="create_inference_component",
                purpose=f"{sizing.total_copies} copies of the model, {gpus_per_copy} GPU(s) each (waits for InService)",
                params={
                    "InferenceComponentName": names["ic"],
                    "EndpointName": names["endpoint"],
                    "VariantName": VARIANT,
                    "Specification": {
                        "ModelName": names["model"],
                        "ComputeResourceRequirements": {
                            "NumberOfAcceleratorDevicesRequired": float(gpus_per_copy),
                            "NumberOfCpuCoresRequired": cpus,
                            "MinMemoryRequiredInMb": mem_mb,
                        },
                        "StartupParameters": {
                            "ModelDataDownloadTimeoutInSeconds": target.download_timeout_s,
                            "ContainerStartupHealthCheckTimeoutInSeconds": target.startup_timeout_s,
                        },
                    },
                    "RuntimeConfig": {"CopyCount": sizing.total_copies},
                    "Tags": tags,
                },
            ),
        ]

    return DeployPlan(
        name=base,
        endpoint_name=names["endpoint"],
        endpoint_config_name=names["config"],
        model_name=names["model"],
        inference_component_name=names["ic"],
        region=target.region,
        container=target.container,
        container_title=fl.title,
        image=image.uri,
        image_version=image.version,
        image_source=image.source,
        inference_ami_version=ami,
        style=style,
        instance=inst,
        role_arn=target.role_arn,
        environment=env,
        secret=target.hf_token,
        knobs=knobs,
        sizing=sizing,
        warnings=warnings,
        tags=tags,
        calls=calls,
        smoke_body=_smoke_body(target.container),
        source=source,
    )


def load_plan(path: str) -> DeployPlan:
    """A plan saved with ``--save plan.json`` (or ``plan.model_dump_json()``)."""
    from pathlib import Path

    from pydantic import ValidationError

    p = Path(path).expanduser()
    try:
        return DeployPlan.model_validate_json(p.read_text())
    except FileNotFoundError:
        raise BadInput(f"{p} does not exist") from None
    except ValidationError as e:
        err = e.errors()[0]
        raise BadInput(f"{p} is not a knee deploy plan: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def with_role(plan: DeployPlan, role_arn: str) -> DeployPlan:
    """The same plan with the execution role filled in (a plan may be built without one)."""
    if not valid_role(role_arn):
        raise BadInput(f"malformed execution role ARN {role_arn!r}", "expected arn:aws:iam::<12-digit account>:role/<name>")
    calls = []
    for c in plan.calls:
        if "ExecutionRoleArn" in c.params:
            c = c.model_copy(update={"params": {**c.params, "ExecutionRoleArn": role_arn}})
        calls.append(c)
    warnings = [w for w in plan.warnings if not w.startswith("no execution role")]
    return plan.model_copy(update={"role_arn": role_arn, "calls": calls, "warnings": warnings})
