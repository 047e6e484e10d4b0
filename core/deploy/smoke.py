"""The streaming smoke test run after a deploy: one ``InvokeEndpointWithResponseStream``
call whose payload parts are read by the load client's stream parser
(:func:`core.load.sagemaker.stream_parser`), so bench and deploy read SageMaker streams
the same way."""

from __future__ import annotations

import json
import time
from typing import Any

from pydantic import BaseModel

from core.deploy.aws import AwsClients, _boto_errors
from core.deploy.plan import DeployPlan
from core.deploy.secrets import Redactor
from core.load.sagemaker import stream_parser
from core.spec.records import RequestRecord


class SmokeResult(BaseModel):
    ok: bool
    first_byte_s: float | None = None
    total_s: float | None = None
    events: int = 0
    bytes: int = 0
    text: str = ""  # what the model said, best effort
    error: str | None = None


def smoke_test(plan: DeployPlan, clients: AwsClients, redact: Redactor | None = None) -> SmokeResult:
    """One streaming invocation through ``InvokeEndpointWithResponseStream``. ``ok`` means
    the stream carried bytes; the text is what the parser made of them, best effort."""
    redact = redact or Redactor()
    kw: dict[str, Any] = {"EndpointName": plan.endpoint_name, "ContentType": "application/json", "Body": json.dumps(plan.smoke_body).encode()}
    if plan.inference_component_name:
        kw["InferenceComponentName"] = plan.inference_component_name
    t0 = time.monotonic()
    # TGI's generate stream is token events; LMI and the vLLM DLC answer the chat body
    # with OpenAI chat chunks (see plan._smoke_body).
    parser = stream_parser("lmi" if plan.container == "tgi" else "vllm", RequestRecord(index=-1, send_time=0.0), t0, chat=True)
    parsing = True
    first = None
    n = size = 0
    try:
        resp = clients.runtime.invoke_endpoint_with_response_stream(**kw)
        for event in resp["Body"]:
            if "PayloadPart" in event:
                chunk = event["PayloadPart"].get("Bytes", b"")
                if first is None and chunk:
                    first = time.monotonic() - t0
                n += 1
                size += len(chunk)
                # Count every byte, but stop parsing once the parser saw the end or an error.
                if parsing and chunk:
                    parsing = not parser.feed(time.monotonic(), chunk)
            elif "ModelStreamError" in event or "InternalStreamFailure" in event:
                err = event.get("ModelStreamError") or event.get("InternalStreamFailure") or {}
                return SmokeResult(ok=False, events=n, bytes=size, error=redact(str(err.get("Message", err))))
    except _boto_errors() as e:  # a failed invocation is the test's verdict, not a crash
        return SmokeResult(ok=False, events=n, bytes=size, error=redact(str(e)))
    text = parser.text()
    ok = size > 0
    return SmokeResult(
        ok=ok,
        first_byte_s=first,
        total_s=time.monotonic() - t0,
        events=n,
        bytes=size,
        text=redact(text[:200]),
        error=None if ok else "the stream carried no bytes",
    )
