"""The apply step's status polling, offline: describe answers are scripted, no AWS calls
(test_deploy_moto.py runs the whole apply against moto). Endpoints and inference components
share one poller; these pin what each reports and when each stops."""

from __future__ import annotations

import pytest

from core.deploy.apply import ApplyOptions, AwsClients, _Run
from core.deploy.secrets import Redactor
from core.errors import RunFailed


def _run(answers: list, timeout_s: float = 3600.0) -> tuple[_Run, list]:
    events: list = []
    run = _Run(AwsClients(None, None), events.append, ApplyOptions(poll_interval_s=0.0, timeout_s=timeout_s), Redactor())
    it = iter(answers)
    run.describe = lambda kind, name: next(it)
    return run, events


def _messages(events) -> list[tuple[str, str, str]]:
    return [(e.step, e.status, e.message) for e in events]


def _ic(status: str, current: int = 0, desired: int = 2, **extra) -> dict:
    return {"InferenceComponentStatus": status, "RuntimeConfig": {"CurrentCopyCount": current, "DesiredCopyCount": desired}, **extra}


def test_wait_endpoint_reports_each_new_status_until_in_service():
    run, events = _run([{"EndpointStatus": "Creating"}, {"EndpointStatus": "Creating"}, {"EndpointStatus": "InService"}])
    assert run.wait_endpoint("ep") == {"EndpointStatus": "InService"}
    assert _messages(events) == [("wait_endpoint", "wait", "endpoint ep: Creating"), ("wait_endpoint", "wait", "endpoint ep: InService")]


@pytest.mark.parametrize(
    "status, reason, message",
    [
        ("Failed", "boom", "endpoint ep is Failed: boom"),
        ("OutOfService", None, "endpoint ep is OutOfService: no reason given"),
    ],
)
def test_wait_endpoint_fails_on_a_failed_status(status, reason, message):
    failed = {"EndpointStatus": status, **({"FailureReason": reason} if reason else {})}
    run, _ = _run([{"EndpointStatus": "Creating"}, failed])
    with pytest.raises(RunFailed, match=f"^{message}$"):
        run.wait_endpoint("ep")


def test_wait_ic_waits_for_the_copies_and_shows_them():
    run, events = _run([_ic("Creating"), _ic("InService", 1), _ic("InService", 2)])
    assert run.wait_ic("ic", copies=2)["RuntimeConfig"]["CurrentCopyCount"] == 2
    assert [m for _, _, m in _messages(events)] == [
        "inference component ic: Creating, copies 0/2",
        "inference component ic: InService, copies 1/2",
        "inference component ic: InService, copies 2/2",
    ]
    run, _ = _run([_ic("Creating"), _ic("Failed", FailureReason="oom")])
    with pytest.raises(RunFailed, match="^inference component ic failed: oom$"):
        run.wait_ic("ic")


def test_waiting_for_a_deletion_ends_when_it_is_gone_and_a_timeout_fails():
    run, events = _run([{"EndpointStatus": "Deleting"}, {"EndpointStatus": "Failed"}, None])
    assert run.wait_endpoint("ep", gone=True) is None  # a failed status does not stop a deletion wait
    assert _messages(events)[-1] == ("delete", "done", "endpoint ep deleted")
    run, events = _run([_ic("Deleting"), None])
    assert run.wait_ic("ic", gone=True) is None
    assert _messages(events)[-1] == ("delete", "done", "inference component ic deleted")
    run, _ = _run([_ic("Creating"), None])
    with pytest.raises(RunFailed, match="^inference component ic disappeared while waiting for it$"):
        run.wait_ic("ic")
    run, _ = _run([{"EndpointStatus": "Creating"}], timeout_s=-1.0)
    with pytest.raises(RunFailed, match="^endpoint ep still Creating after -1 s$"):
        run.wait_endpoint("ep")


def test_aws_errors_translate_botocore_failures_and_pass_the_rest():
    from botocore.exceptions import ClientError, NoCredentialsError

    from core.deploy.apply import _aws_errors
    from core.errors import BadInput

    def throttled():
        return ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down hf_SECRET"}}, "DescribeEndpoint")

    with pytest.raises(RunFailed, match=r"^cannot read SageMaker in us-east-1: .*ThrottlingException") as e:
        with _aws_errors("cannot read SageMaker in us-east-1"):
            raise throttled()
    assert e.value.__cause__ is None and e.value.__suppress_context__
    with pytest.raises(BadInput, match="no AWS credentials found"):
        with _aws_errors("scaling failed"):
            raise NoCredentialsError()
    redact = Redactor()
    redact.add("hf_SECRET")
    with pytest.raises(RunFailed) as e:
        with _aws_errors("cannot check SageMaker in us-east-1", redact):
            raise throttled()
    assert "hf_SECRET" not in str(e.value)
    for own in (BadInput("a name is taken"), ValueError("not AWS's")):  # knee's own and other errors pass as they are
        with pytest.raises(type(own)) as e:
            with _aws_errors("delete stopped at a failed call"):
                raise own
        assert e.value is own
