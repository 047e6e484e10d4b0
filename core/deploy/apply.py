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
import logging
import time
from typing import Any

from pydantic import BaseModel

# The steps live in aws (clients, errors, polling), smoke (the test invocation) and manage
# (delete, describe, scale); their public names stay importable from here, where callers
# have always found them.
from core.deploy.aws import (  # noqa: F401 - re-exported
    ApplyOptions,
    AwsClients,
    DeployEvent,
    Progress,
    _aws_errors,
    _client_error,
    _Run,
    _translate,
    check_region,
    make_clients,
)
from core.deploy.manage import (  # noqa: F401 - re-exported
    DeleteResult,
    DeploymentStatus,
    delete_deployment,
    describe_deployment,
    scale_deployment,
)
from core.deploy.plan import DeployPlan, valid_role
from core.deploy.secrets import Redactor, resolve
from core.deploy.smoke import SmokeResult, smoke_test  # noqa: F401 - re-exported
from core.errors import BadInput, KneeError, RunFailed

log = logging.getLogger(__name__)


class ApplyResult(BaseModel):
    name: str
    endpoint_name: str
    created: list[tuple[str, str]]
    reused: list[tuple[str, str]]
    smoke: SmokeResult | None = None
    elapsed_s: float
    invoke_hint: str


def apply_plan(
    plan: DeployPlan, *, confirmed: bool, clients: AwsClients | None = None, progress: Progress | None = None, options: ApplyOptions | None = None
) -> ApplyResult:
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
                    raise BadInput(
                        f"a {kind.replace('_', ' ')} named {name} exists and was not made by knee",
                        "delete it or pass --name to deploy under another name",
                    )
                existing[(kind, name)] = d

    try:
        for call in plan.calls:
            run.check_cancel()
            kind = call.operation.removeprefix("create_")
            name = call.params[
                {
                    "model": "ModelName",
                    "endpoint_config": "EndpointConfigName",
                    "endpoint": "EndpointName",
                    "inference_component": "InferenceComponentName",
                }[kind]
            ]
            label = kind.replace("_", " ")
            if (kind, name) in existing:
                reused.append((kind, name))
                run.emit(call.operation, "reused", f"{label} {name} exists (made by knee): reusing it", name)
            else:
                params = call.params
                if kind == "model" and token is not None and plan.secret is not None:  # token comes from the secret
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
        # A cancel that came while the last wait ended must not start a smoke test (it
        # invokes a billed endpoint the user asked to give up on); the rollback below runs.
        run.check_cancel()
        if options.smoke_test:
            run.emit("smoke_test", "start", f"streaming test invocation of {plan.endpoint_name}", plan.endpoint_name)
            smoke = smoke_test(plan, clients, redact)
            if not smoke.ok:
                raise RunFailed(f"smoke test failed: {smoke.error}")
            run.emit(
                "smoke_test",
                "done",
                f"smoke test ok: first byte after {smoke.first_byte_s:.2f} s, {smoke.events} events, {smoke.bytes} bytes",
                plan.endpoint_name,
            )
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
    return ApplyResult(
        name=plan.name,
        endpoint_name=plan.endpoint_name,
        created=created,
        reused=reused,
        smoke=smoke,
        elapsed_s=time.monotonic() - run.t0,
        invoke_hint=f"knee bench --sagemaker-endpoint {plan.endpoint_name}{ic}{fmt} --region {plan.region} --model {plan.source.config.model}",
    )


def _rollback(run: _Run, created: list[tuple[str, str]]) -> None:
    run.emit("rollback", "start", "rolling back: " + ", ".join(n for _, n in reversed(created)))
    # Faster polling while tearing down is not needed; the same interval applies. A cancel
    # must not stop the rollback itself.
    run.o = ApplyOptions(poll_interval_s=run.o.poll_interval_s, timeout_s=run.o.timeout_s)
    failures = []
    for kind, name in reversed(created):
        try:
            run.delete(kind, name)
        except Exception as e:  # noqa: BLE001 - keep going: leave as little behind as possible
            # Not swallowed: every failure is logged and reported in the rollback's event.
            failures.append(f"{name}: {run.redact(str(e))}")
            log.warning("rollback could not remove %s %s: %s", kind, name, run.redact(f"{type(e).__name__}: {e}"))
    if failures:
        run.emit("rollback", "failed", "could not remove: " + "; ".join(failures))
    else:
        run.emit("rollback", "done", "rolled back; nothing this run created is left")
