"""Bundles redact the values of the user's --env (issue 36: they carried them verbatim, and
users paste bundles into tickets): the rendered pods name the user's variables
(USER_ENV_ANNOTATION), and `bundle` replaces exactly those values unless --show-env."""

from __future__ import annotations

import json
from typing import Any

from nccl_k8s.k8s import render
from nccl_k8s.k8s.rendering._names import USER_ENV_ANNOTATION
from nccl_k8s.k8s.run._bundle import REDACTED_ENV, redact_env
from nccl_k8s.spec import build_run_spec

SECRET = "s3cr3t-$(not-a-ref)"


def workload(**kw: Any) -> dict[str, Any]:
    spec = build_run_spec(world_size=2, gpus_per_node=1, run_id="r", **kw)
    return next(o for o in render(spec) if o["kind"] in ("Job", "StatefulSet"))


def env(obj: dict[str, Any]) -> dict[str, Any]:
    pod = obj if obj["kind"] == "Pod" else obj["spec"]["template"]
    return {e["name"]: e.get("value") for c in pod["spec"]["containers"] for e in c["env"]}


def test_the_users_env_values_are_redacted_and_nothing_else() -> None:
    job = workload(env=[f"HF_TOKEN={SECRET}", "NCCL_DEBUG=TRACE"])
    assert job["spec"]["template"]["metadata"]["annotations"][USER_ENV_ANNOTATION] == (
        "HF_TOKEN,NCCL_DEBUG"
    )
    before = env(job)
    after = env(redact_env(job))
    assert after["HF_TOKEN"] == after["NCCL_DEBUG"] == REDACTED_ENV  # the user's, even NCCL_*
    assert "s3cr3t" not in json.dumps(redact_env(job)) and "s3cr3t" in json.dumps(job)
    kept = {k: v for k, v in before.items() if k not in ("HF_TOKEN", "NCCL_DEBUG")}
    assert kept and {k: after[k] for k in kept} == kept  # presets and the renderer's as they were
    assert env(job) == before  # the object read is not changed

    # A pod as the API returns it, with kubectl's last-applied copy of the whole object.
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {**job["spec"]["template"]["metadata"], "name": "r-0-x", "annotations": {
               **job["spec"]["template"]["metadata"]["annotations"],
               "kubectl.kubernetes.io/last-applied-configuration": json.dumps(job)}},
           "spec": job["spec"]["template"]["spec"]}  # fmt: skip
    redacted = redact_env(pod)
    assert env(redacted)["HF_TOKEN"] == REDACTED_ENV
    assert "s3cr3t" not in json.dumps(redacted)


def test_a_run_without_env_is_bundled_as_it_is() -> None:
    job = workload()
    assert USER_ENV_ANNOTATION not in job["spec"]["template"]["metadata"]["annotations"]
    assert redact_env(job) == job
