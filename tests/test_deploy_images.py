"""`knee deploy plan` names the same ECR images with the SDK's core distribution
(sagemaker-core) as it did with the whole sagemaker meta-package (issue 15): the newest
version of each serving container, in three regions, offline.

The expected URIs were printed by ``knee deploy plan --json`` with sagemaker==3.27.0 installed,
before the dependency moved to sagemaker-core==2.27.0; a change of pin that moves any of them
must change this table on purpose."""

import json

import pytest

from tui.cli import main

ECR = "763104351884.dkr.ecr.{region}.amazonaws.com/"
BEFORE = {
    "lmi": "djl-inference:0.38.0-lmi29.0.0-cu130",
    "vllm": "vllm:0.30.0-gpu-py312-cu130-ubuntu24.04-sagemaker",
    "tgi": "huggingface-pytorch-tgi-inference:2.7.0-tgi3.3.6-gpu-py311-cu124-ubuntu22.04",
}
REGIONS = ["us-east-1", "us-west-2", "eu-west-1"]


@pytest.mark.parametrize("region", REGIONS)
@pytest.mark.parametrize("container", sorted(BEFORE))
def test_deploy_plan_image_uri_unchanged(container, region, capsys, monkeypatch):
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(var, raising=False)
    rc = main(
        [
            "deploy",
            "plan",
            "--model",
            "Qwen/Qwen3-4B",
            "--tp",
            "4",
            "--instance",
            "ml.g6.12xlarge",
            "--container",
            container,
            "--region",
            region,
            "--json",
        ]
    )
    assert rc in (0, None)
    plan = json.loads(capsys.readouterr().out)
    assert plan["image"] == ECR.format(region=region) + BEFORE[container]
    assert plan["image_source"].startswith("sagemaker-core 2.27.0 image_uris.retrieve(")


def test_only_the_sdk_core_is_needed():
    """knee imports nothing from the SDK beyond sagemaker.core, so the meta-package's training,
    serving and MLOps distributions (and mlflow, pyarrow) need not be installed."""
    import importlib.metadata as md

    reqs = [r.split(";")[0].strip() for r in md.requires("knee") or [] if "extra ==" not in r]
    assert "sagemaker-core==2.27.0" in reqs
    assert not any(r.startswith("sagemaker==") for r in reqs)
