"""``knee deploy plan|apply|status|scale|delete``: ship a measured configuration to SageMaker.

The configuration comes from ``--trial ID`` (the study store), ``--from-json FILE`` (a
:class:`core.deploy.DeploySource`) or explicit flags (``--model --tp ...``); explicit flags
override what the trial or file says. ``plan`` only reads (offline); ``apply`` creates
resources after showing the plan and asking (or ``--yes``); ``delete`` removes them.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from core.errors import BadInput
from tui.cli.common import confirm, positive, print_json

_KNOB_FLAGS = [
    ("--model", str, "model", "Hugging Face id or path the container loads"),
    ("--tp", int, "tp", "tensor parallel size"),
    ("--dp", int, "dp", "data parallel size inside one copy"),
    ("--max-num-seqs", int, "max_num_seqs", None),
    ("--max-num-batched-tokens", int, "max_num_batched_tokens", None),
    ("--max-model-len", int, "max_model_len", None),
    ("--gpu-memory-utilization", float, "gpu_memory_utilization", None),
    ("--quantization", str, "quantization", None),
    ("--kv-cache-dtype", str, "kv_cache_dtype", None),
]


def _source_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("what to deploy (a trial, a file, or flags; flags override)")
    g.add_argument("--trial", help="trial id in the study store")
    g.add_argument("--study", help="study holding --trial (default: the latest)")
    g.add_argument("--workspace", help="workspace holding the study store (default: .knee)")
    g.add_argument("--storage", help="study store file or SQLAlchemy URL (overrides --workspace)")
    g.add_argument("--from-json", metavar="FILE", help="a DeploySource JSON file")
    for flag, typ, _, hlp in _KNOB_FLAGS:
        g.add_argument(flag, type=typ, help=hlp)
    g.add_argument("--prefix-caching", dest="prefix_caching", action="store_true", default=None)
    g.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_false")
    g.add_argument("--measured-gpu", help="GPU the configuration was measured on (e.g. L4)")
    g.add_argument("--measured-num-gpus", type=int, help="GPUs one measured replica used")
    g.add_argument("--request-throughput", type=float, help="measured req/s per replica")
    g.add_argument("--output-throughput", type=float, help="measured output tok/s per replica")
    g.add_argument("--simulated", action="store_true", default=None, help="the throughput is simulated")


def _target_args(p: argparse.ArgumentParser, need_instance: bool = True) -> None:
    g = p.add_argument_group("where to deploy")
    g.add_argument("--instance", required=need_instance, help="SageMaker instance type, e.g. ml.g6.12xlarge")
    g.add_argument(
        "--container", choices=["lmi", "vllm", "tgi"], default="lmi", help="lmi (DJL+vLLM, default), vllm (SageMaker vLLM DLC), tgi (legacy)"
    )
    g.add_argument(
        "--style",
        choices=["auto", "ic", "single"],
        default="auto",
        help="inference components (copies per instance) or a single-model endpoint; auto: ic when >1 copy fits",
    )
    g.add_argument("--target-rps", type=float, help="size the instance count for this request rate")
    g.add_argument("--instances", type=int, help="instance count (overrides --target-rps sizing)")
    g.add_argument("--max-instances", type=int, help="managed instance scaling ceiling (inference components)")
    g.add_argument("--role", help="SageMaker execution role ARN (needed to apply)")
    g.add_argument("--name", help="deployment name (default: knee-<model>-<config hash>)")
    g.add_argument("--image-version", help="container version known to the sagemaker SDK (default: newest)")
    g.add_argument("--image-uri", help="use this image instead of the SDK's")
    g.add_argument("--hf-token-env", metavar="VAR", help="environment variable holding the HF token (default: HF_TOKEN if set)")
    g.add_argument("--hf-token-secret", metavar="ID", help="Secrets Manager secret (name or ARN) holding the HF token")
    g.add_argument("--no-hf-token", action="store_true", help="pass no HF token even if HF_TOKEN is set")


def _region_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--region", help="AWS region (default: $AWS_REGION, $AWS_DEFAULT_REGION, us-east-1)")


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.add_argument("--poll-interval", type=float, default=15.0, help="seconds between status polls (default 15)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for each resource (default 3600)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def register(sub) -> None:
    p = sub.add_parser("deploy", help="plan, apply and delete SageMaker deployments of a measured configuration")
    dsub = p.add_subparsers(dest="deploy_command", metavar="ACTION", parser_class=type(p))
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])

    pp = dsub.add_parser("plan", help="show the deployment plan (offline; creates nothing)")
    _source_args(pp)
    _target_args(pp)
    _region_arg(pp)
    pp.add_argument("--json", action="store_true", help="print the plan as JSON")
    pp.add_argument("--save", metavar="FILE", help="write the preview: .json (the plan, for apply --plan), .py (boto3 script) or text")
    pp.add_argument("--brief", action="store_true", help="summary only, without request bodies and Python")
    pp.set_defaults(func=run_plan)

    pa = dsub.add_parser("apply", help="create the planned resources (after confirmation)")
    pa.add_argument("--plan", metavar="FILE", help="a plan saved with `plan --save FILE.json`")
    _source_args(pa)
    _target_args(pa, need_instance=False)
    _region_arg(pa)
    _run_args(pa)
    pa.add_argument("--no-smoke-test", action="store_true", help="skip the streaming test invocation")
    pa.add_argument("--no-rollback", action="store_true", help="leave created resources in place on failure")
    pa.set_defaults(func=run_apply)

    pd = dsub.add_parser("delete", help="remove a deployment: inference components, endpoint, configs, models")
    pd.add_argument("--name", required=True, help="the deployment (endpoint) name")
    pd.add_argument("--force", action="store_true", help="also remove resources not tagged as made by knee")
    _region_arg(pd)
    _run_args(pd)
    pd.set_defaults(func=run_delete)

    ps = dsub.add_parser("status", help="what exists under a deployment name")
    ps.add_argument("--name", required=True)
    _region_arg(ps)
    ps.add_argument("--json", action="store_true")
    ps.set_defaults(func=run_status)

    pc = dsub.add_parser("scale", help="change copies (inference components) or instances (single-model)")
    pc.add_argument("--name", required=True)
    grp = pc.add_mutually_exclusive_group(required=True)
    grp.add_argument("--copies", type=int)
    grp.add_argument("--instances", type=int)
    _region_arg(pc)
    _run_args(pc)
    pc.set_defaults(func=run_scale)


# ---- building the plan ----------------------------------------------------------------------
def _region(args) -> str:
    return args.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def _load_trial(trial_id: str, study: str | None, workspace: str | None = None, storage: str | None = None):
    """The study store's trial as a DeploySource. The store grows ``deploy_source`` (see
    core.deploy.source.TrialStore); until it does, say how to go on."""
    from core.deploy import from_study, from_trial

    try:
        from core.results.store import StudyStore  # type: ignore[attr-defined]
    except ImportError:
        StudyStore = None  # noqa: N806
    if StudyStore is None:
        raise BadInput(
            "--trial needs the study store, which is not available in this build",
            "export the trial with --from-json FILE or give --model --tp ... and the throughput flags",
        )
    from core.results import store as store_mod

    if storage is None and workspace is not None and hasattr(store_mod, "default_storage"):
        storage = store_mod.default_storage(workspace)
    store = StudyStore(storage, create=False)
    try:
        if hasattr(store, "deploy_source"):  # the store's own mapping, when it has one
            return store.deploy_source(trial_id, study=study) if study else from_trial(store, trial_id)
        return from_study(store, trial_id, study)
    finally:
        store.close()


def _source(args):
    from core.deploy import DeploySource, from_dict, from_json_file
    from core.spec.serving import ServerConfig

    if args.trial and args.from_json:
        raise BadInput("give --trial or --from-json, not both")
    base = None
    if args.trial:
        base = _load_trial(args.trial, args.study, args.workspace, args.storage)
    elif args.from_json:
        base = from_json_file(args.from_json)
    over_cfg: dict[str, Any] = {}
    for _, _, field, _ in _KNOB_FLAGS:
        v = getattr(args, field)
        if v is not None:
            over_cfg[field] = v
    if args.prefix_caching is not None:
        over_cfg["enable_prefix_caching"] = args.prefix_caching
    for name in ("tp", "dp", "max_num_seqs", "max_num_batched_tokens", "max_model_len", "measured_num_gpus"):
        v = getattr(args, name, None)
        if v is not None and v < 1:
            raise BadInput(f"--{name.replace('_', '-')} must be at least 1, got {v}")
    positive(args.request_throughput, "--request-throughput")
    positive(args.output_throughput, "--output-throughput")
    if args.gpu_memory_utilization is not None and not 0 < args.gpu_memory_utilization <= 1:
        raise BadInput(f"--gpu-memory-utilization must be in (0, 1], got {args.gpu_memory_utilization:g}")
    over_src = {
        k: v
        for k, v in {
            "gpu": args.measured_gpu,
            "num_gpus": args.measured_num_gpus,
            "request_throughput": args.request_throughput,
            "output_throughput": args.output_throughput,
            "simulated": args.simulated,
        }.items()
        if v is not None
    }
    if base is None:
        if "model" not in over_cfg:
            raise BadInput("nothing to deploy", "pass --trial ID, --from-json FILE, or --model with the knobs")
        return from_dict({"config": over_cfg, **over_src}, where="flags")
    cfg = base.config.model_copy(update=over_cfg) if over_cfg else base.config
    data = base.model_dump()
    data.update(over_src)
    data["config"] = ServerConfig.model_validate(cfg.model_dump())  # re-validate the overrides
    return DeploySource.model_validate(data)


def _secret(args):
    from core.deploy import default_ref, parse_ref

    if args.no_hf_token:
        return None
    if args.hf_token_env and args.hf_token_secret:
        raise BadInput("give --hf-token-env or --hf-token-secret, not both")
    if args.hf_token_secret:
        return parse_ref(f"secretsmanager:{args.hf_token_secret}")
    if args.hf_token_env:
        ref = parse_ref(f"env:{args.hf_token_env}")
        if not os.environ.get(args.hf_token_env):
            raise BadInput(f"--hf-token-env {args.hf_token_env}: that variable is not set")
        return ref
    return default_ref()


def _plan(args):
    from core.deploy import DeployTarget, build_plan

    src = _source(args)
    positive(args.target_rps, "--target-rps")
    for flag in ("instances", "max_instances"):
        v = getattr(args, flag)
        if v is not None and v < 1:
            raise BadInput(f"--{flag.replace('_', '-')} must be at least 1, got {v}")
    target = DeployTarget(
        instance=args.instance,
        container=args.container,
        region=_region(args),
        style={"auto": "auto", "ic": "inference-components", "single": "single-model"}[args.style],
        target_rps=args.target_rps,
        instance_count=args.instances,
        max_instance_count=args.max_instances,
        role_arn=args.role,
        name=args.name,
        image_version=args.image_version,
        image_uri=args.image_uri,
        hf_token=_secret(args),
    )
    return build_plan(src, target)


def run_plan(args) -> int:
    from core.deploy import render_text, save_preview

    plan = _plan(args)
    if args.save:
        path = save_preview(plan, args.save)
    if args.json:
        print_json(plan)
    else:
        sys.stdout.write(render_text(plan, full=not args.brief))
    if args.save:
        print(f"saved {path}", file=sys.stderr)
    return 0


# ---- apply / delete / status / scale ------------------------------------------------------------
def _printer():
    def on_event(ev) -> None:
        # Progress goes to stderr so that --json output stays parseable.
        print(f"[{ev.elapsed_s:7.1f}s] {ev.message}", file=sys.stderr, flush=True)

    return on_event


def _options(args, **kw):
    from core.deploy import ApplyOptions

    positive(args.poll_interval, "--poll-interval")
    positive(args.timeout, "--timeout")
    return ApplyOptions(poll_interval_s=args.poll_interval, timeout_s=args.timeout, **kw)


def run_apply(args) -> int:
    from core.deploy import apply_plan, load_plan, render_text, with_role

    if args.plan:
        plan = load_plan(args.plan)
        if args.role:
            plan = with_role(plan, args.role)
    else:
        if not args.instance:
            raise BadInput("apply needs --plan FILE or --instance with what to deploy")
        plan = _plan(args)
    if not plan.role_arn:
        raise BadInput("apply needs an execution role", "pass --role arn:aws:iam::<account>:role/<name>")
    if not args.json:
        sys.stdout.write(render_text(plan, full=False))
        sys.stdout.flush()
    confirm(
        f"Create {len(plan.calls)} SageMaker resources in {plan.region} "
        f"(about {'$%.2f/h' % plan.sizing.cost_per_hour if plan.sizing.cost_per_hour else 'unknown cost'})?",
        args.yes,
    )
    result = apply_plan(
        plan, confirmed=True, progress=_printer(), options=_options(args, smoke_test=not args.no_smoke_test, rollback=not args.no_rollback)
    )
    if args.json:
        print_json(result)
    else:
        print(f"\nDeployed {result.endpoint_name} in {result.elapsed_s:.0f} s (created {len(result.created)}, reused {len(result.reused)}).")
        if result.smoke:
            print(f"Smoke test: ok, first byte {result.smoke.first_byte_s:.2f} s, said {result.smoke.text!r}")
        if plan.sizing.cost_per_hour:
            print(
                f"Cost: ${plan.sizing.cost_per_hour:.2f}/h while it runs. Remove it with: knee deploy delete --name {plan.name} --region {plan.region}"
            )
        print(f"Benchmark it: {result.invoke_hint}")
    return 0


def run_delete(args) -> int:
    from core.deploy import delete_deployment

    confirm(f"Delete deployment {args.name} in {_region(args)}?", args.yes)
    result = delete_deployment(args.name, confirmed=True, region=_region(args), progress=_printer(), options=_options(args), force=args.force)
    if args.json:
        print_json(result)
    else:
        if result.deleted:
            print("Deleted: " + ", ".join(f"{k.replace('_', ' ')} {n}" for k, n in result.deleted))
        else:
            print(f"Nothing to delete under {args.name}.")
        for kind, n, why in result.skipped:
            print(f"Left alone: {kind.replace('_', ' ')} {n} ({why})")
    return 0


def run_status(args) -> int:
    from core.deploy import describe_deployment

    st = describe_deployment(args.name, region=_region(args))
    if args.json:
        print_json(st)
        return 0
    if st.endpoint is None and not st.models and not st.endpoint_configs:
        print(f"No deployment named {args.name} in {_region(args)}.")
        return 0
    if st.endpoint:
        v = ", ".join(f"{x['name']}: {x['instances']} instance(s)" for x in st.endpoint["variants"])
        print(f"Endpoint {args.name}: {st.endpoint['status']} ({v}){'' if st.managed_by_knee else ' [not made by knee]'}")
    for ic in st.inference_components:
        print(f"  inference component {ic['name']}: {ic['status']}, {ic['copies']}/{ic['desired_copies']} copies x {ic['gpus_per_copy']:g} GPU")
    print(f"  endpoint configs: {', '.join(st.endpoint_configs) or '-'}; models: {', '.join(st.models) or '-'}")
    return 0


def run_scale(args) -> int:
    from core.deploy import scale_deployment

    st = scale_deployment(args.name, copies=args.copies, instances=args.instances, region=_region(args), progress=_printer(), options=_options(args))
    if args.json:
        print_json(st)
    else:
        for ic in st.inference_components:
            print(f"{ic['name']}: {ic['status']}, {ic['copies']} copies")
        if st.endpoint and not st.inference_components:
            print(f"{args.name}: {st.endpoint['status']}, {st.endpoint['variants'][0]['instances']} instance(s)")
    return 0
