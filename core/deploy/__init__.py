"""SageMaker deployment from a measured configuration: plans (LMI, SageMaker vLLM, TGI),
sizing and cost, previews, apply with rollback, scale, status and delete.

Headless API (the CLI and the TUI's Deploy screen both sit on it)::

    src = from_json_file("trial.json")            # or from_trial(store, "12"), or DeploySource(...)
    plan = build_plan(src, DeployTarget(instance="ml.g6.12xlarge", container="lmi", role_arn=...))
    print(render_text(plan))                      # or requests_json(plan), python_snippet(plan)
    result = apply_plan(plan, confirmed=True, progress=on_event)
    delete_deployment(plan.name, confirmed=True, region=plan.region)
"""

from core.deploy.apply import (
    ApplyOptions,
    ApplyResult,
    AwsClients,
    DeleteResult,
    DeployEvent,
    DeploymentStatus,
    SmokeResult,
    apply_plan,
    delete_deployment,
    describe_deployment,
    make_clients,
    scale_deployment,
    smoke_test,
)
from core.deploy.containers import CONTAINERS, KnobMapping, check_knobs, container_env, resolve_image
from core.deploy.plan import ApiCall, DeployPlan, DeployTarget, Sizing, build_plan, load_plan, with_role
from core.deploy.preview import python_snippet, render_text, requests_json, save_preview, summary_lines
from core.deploy.secrets import Redactor, SecretRef, default_ref, parse_ref
from core.deploy.source import DeploySource, TrialStore, from_dict, from_json_file, from_study, from_trial

__all__ = [
    "ApiCall",
    "ApplyOptions",
    "ApplyResult",
    "AwsClients",
    "CONTAINERS",
    "DeleteResult",
    "DeployEvent",
    "DeployPlan",
    "DeploySource",
    "DeployTarget",
    "DeploymentStatus",
    "KnobMapping",
    "Redactor",
    "SecretRef",
    "Sizing",
    "SmokeResult",
    "TrialStore",
    "apply_plan",
    "build_plan",
    "check_knobs",
    "container_env",
    "default_ref",
    "delete_deployment",
    "describe_deployment",
    "from_dict",
    "from_json_file",
    "from_study",
    "from_trial",
    "load_plan",
    "make_clients",
    "parse_ref",
    "python_snippet",
    "render_text",
    "requests_json",
    "resolve_image",
    "save_preview",
    "scale_deployment",
    "smoke_test",
    "summary_lines",
    "with_role",
]
