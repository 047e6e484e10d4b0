"""The Hugging Face token: where it comes from, and keeping it out of everything knee writes.

A plan never holds the token, only a *reference* (``env:HF_TOKEN`` or
``secretsmanager:<arn-or-name>``). The value is read at apply time, placed into the one
request that needs it (``CreateModel``'s container environment, because neither LMI nor
the vLLM or TGI containers can read Secrets Manager themselves), and every message knee
prints while applying goes through :class:`Redactor`.
"""

from __future__ import annotations

import os
import re

from pydantic import BaseModel, ConfigDict

from core.errors import BadInput

PLACEHOLDER_PREFIX = "<secret "  # what previews and saved plans show instead of a value


class SecretRef(BaseModel):
    """Where the HF token lives. ``kind`` ``env``: an environment variable of the process
    that applies the plan; ``secretsmanager``: a secret id (name or ARN), plain string or a
    JSON object with an ``HF_TOKEN`` (or ``token``) key."""

    model_config = ConfigDict(frozen=True)

    kind: str  # "env" | "secretsmanager"
    name: str
    variable: str = "HF_TOKEN"  # the container variable that receives it

    @property
    def ref(self) -> str:
        return f"{self.kind}:{self.name}"

    @property
    def placeholder(self) -> str:
        return f"{PLACEHOLDER_PREFIX}{self.ref}>"


def parse_ref(text: str) -> SecretRef:
    kind, _, name = text.partition(":")
    if kind == "env" and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or ""):
        return SecretRef(kind="env", name=name)
    if kind in ("secretsmanager", "sm") and name:
        return SecretRef(kind="secretsmanager", name=name)
    raise BadInput(f"bad secret reference {text!r}", "use env:VAR or secretsmanager:<name-or-arn>")


def default_ref() -> SecretRef | None:
    """``env:HF_TOKEN`` when that variable is set (``HUGGING_FACE_HUB_TOKEN`` as a fallback)."""
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        if os.environ.get(var):
            return SecretRef(kind="env", name=var)
    return None


def resolve(ref: SecretRef, secretsmanager_client=None) -> str:
    """The token's value. Never log or return it anywhere but into the CreateModel call."""
    if ref.kind == "env":
        value = os.environ.get(ref.name, "")
        if not value:
            raise BadInput(f"the HF token reference {ref.ref} is empty", f"export {ref.name} or pass --hf-token-secret")
        return value
    if secretsmanager_client is None:
        raise BadInput("a Secrets Manager reference needs AWS access to resolve")
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        resp = secretsmanager_client.get_secret_value(SecretId=ref.name)
    except (ClientError, BotoCoreError) as e:  # only the code is shown: the message may echo the request
        code = getattr(e, "response", {}).get("Error", {}).get("Code", type(e).__name__)
        raise BadInput(f"cannot read secret {ref.name!r} from Secrets Manager ({code})") from None
    value = resp.get("SecretString") or ""
    if value.lstrip().startswith("{"):
        import json

        try:
            obj = json.loads(value)
        except json.JSONDecodeError:
            obj = {}
        value = str(obj.get("HF_TOKEN") or obj.get("token") or obj.get(ref.variable) or "")
    if not value:
        raise BadInput(f"secret {ref.name!r} holds no token", "store the token as a plain string or under the key HF_TOKEN")
    return value


def mask(value: str) -> str:
    """A recognisable but useless form: the prefix and length, never the tail."""
    prefix = value[:3] if value.startswith("hf_") else ""
    return f"{prefix}***({len(value)} chars)"


class Redactor:
    """Replaces every known secret value in text. Used on every message, error and event
    the apply path emits, including botocore error text."""

    def __init__(self, *secrets: str):
        self._secrets = [s for s in secrets if s]

    def add(self, secret: str) -> None:
        if secret:
            self._secrets.append(secret)

    def __call__(self, text: str) -> str:
        for s in self._secrets:
            if s in text:
                text = text.replace(s, mask(s))
        return text
