"""Talking to SageMaker: clients, the error policy, and the polling and deletion steps
shared by apply, the smoke test and manage (delete, describe, scale).

No UI here: every step reports through a ``progress`` callback taking a
:class:`DeployEvent`, and every text that leaves (events, errors) has gone through a
:class:`~core.deploy.secrets.Redactor` holding the HF token, because botocore error
messages may echo request values.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, TypeGuard

from core.deploy.plan import MANAGED_TAG
from core.deploy.secrets import Redactor
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
    return AwsClients(
        sagemaker=session.client("sagemaker", **kw),
        runtime=session.client("sagemaker-runtime", **kw),
        secretsmanager=session.client("secretsmanager", **kw),
    )


def check_region(region: str) -> None:
    """An unknown region is the user's typo, not a network error: botocore's bundled
    endpoint data says which regions have SageMaker, offline."""
    import boto3

    session = boto3.session.Session()
    known = {r for p in session.get_available_partitions() for r in session.get_available_regions("sagemaker", p)}
    if region not in known:
        import difflib

        close = difflib.get_close_matches(region, sorted(known), n=3)
        raise BadInput(
            f"unknown region {region!r}: SageMaker is not offered there", f"did you mean {', '.join(close)}?" if close else "e.g. us-east-1"
        )


@dataclass
class ApplyOptions:
    poll_interval_s: float = 15.0
    timeout_s: float = 3600.0  # per wait (endpoint, inference component)
    smoke_test: bool = True
    rollback: bool = True  # remove what this run created when something fails
    cancel: threading.Event | None = None  # set by a UI to stop; treated as a failure


# ---- helpers ------------------------------------------------------------------------------
def _err_code(e: Exception) -> str:
    return getattr(e, "response", {}).get("Error", {}).get("Code", "") if hasattr(e, "response") else ""


def _is_not_found(e: Exception) -> bool:
    msg = str(e).lower()
    return _err_code(e) in ("ValidationException", "ResourceNotFound", "ResourceNotFoundException") and (
        "could not find" in msg or "not found" in msg or "does not exist" in msg or "cannot find" in msg
    )


def _boto_errors() -> tuple[type[Exception], ...]:
    """botocore's error bases, for ``except _boto_errors():`` (evaluated only when something
    was raised): botocore is imported on first need, not when core.deploy is."""
    from botocore.exceptions import BotoCoreError, ClientError

    return (ClientError, BotoCoreError)


def _client_error(e: BaseException) -> TypeGuard[Exception]:
    # A TypeGuard: botocore's errors are Exceptions, so a caught BaseException that is one
    # can go to _translate.
    return isinstance(e, _boto_errors())


def _translate(e: Exception, what: str, redact: Redactor | None = None) -> KneeError:
    """A botocore failure as the error the user sees: missing credentials are theirs to
    fix (exit 2); anything else is a failed run (exit 1)."""
    from botocore.exceptions import NoCredentialsError, NoRegionError, PartialCredentialsError

    if isinstance(e, (NoCredentialsError, PartialCredentialsError)):
        return BadInput("no AWS credentials found", "set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY")
    if isinstance(e, NoRegionError):
        return BadInput("no AWS region", "pass --region")
    if _err_code(e) in ("AccessDeniedException", "AccessDenied", "UnrecognizedClientException", "ExpiredTokenException", "InvalidClientTokenId"):
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
    except _boto_errors() as e:
        raise _translate(e, what, redact) from None


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
        except _boto_errors() as e:
            if _is_not_found(e):
                return None
            raise

    def tags(self, arn: str) -> dict[str, str]:
        try:
            resp = self.c.sagemaker.list_tags(ResourceArn=arn)
        except _boto_errors():
            # Untagged as far as we can tell (no list-tags permission, say): then knee did
            # not make it, and it is left alone; the caller reports it as not knee's.
            return {}
        return {t["Key"]: t["Value"] for t in resp.get("Tags", [])}

    def knee_made(self, kind: str, desc: dict[str, Any]) -> bool:
        arn = desc.get(_DESCRIBE[kind][2])
        if not arn:
            return False
        return self.tags(arn).get(MANAGED_TAG) == "knee"

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
        except _boto_errors() as e:
            if _is_not_found(e):
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
