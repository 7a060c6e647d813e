"""Issue 36: `deploy` pins the pods' images by digest (run._images over api._registry): every
tag-only image is asked of its registry (the OCI Distribution API behind Docker's anonymous
token authentication, tests/_registry.py on loopback) and the workload's pod template names
NAME:TAG@sha256:<the registry's digest>. A registry that does not give it leaves the tag and one
line saying why; `--no-pin-images` (NCCL_K8S_PIN_IMAGES=0, which tests/conftest.py sets) asks
nothing. render pins nothing."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from tests._helpers import free_port
from tests._registry import TOKEN, registry
from tests.cluster.cluster import Cluster
from tests.e2e_helpers import cli

from nccl_k8s.k8s.api._registry import ImageRef, digests, parse_ref

SMALL = ["--world-size", "2", "--gpus-per-node", "1", "--no-wait", "--scheduler", "nobody"]
ENGINE = ["--", "--backend", "gloo", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0"]


@pytest.mark.parametrize(
    ("ref", "want"),
    [
        ("pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime",
         ("registry-1.docker.io", "pytorch/pytorch", "2.7.1-cuda12.6-cudnn9-runtime")),
        ("ubuntu:22.04", ("registry-1.docker.io", "library/ubuntu", "22.04")),
        ("docker.io/busybox", ("registry-1.docker.io", "library/busybox", "latest")),
        ("nvcr.io/nvidia/pytorch:25.01-py3", ("nvcr.io", "nvidia/pytorch", "25.01-py3")),
        ("localhost:5000/team/nccl", ("localhost:5000", "team/nccl", "latest")),
        ("127.0.0.1:5000/team/nccl:1", ("127.0.0.1:5000", "team/nccl", "1")),
    ],
)  # fmt: skip
def test_references_are_read_as_docker_reads_them(ref: str, want: tuple[str, str, str]) -> None:
    assert parse_ref(ref) == ImageRef(*want)
    assert parse_ref(f"{ref}@sha256:{'0' * 64}") is None  # pinned already: nothing to ask


def test_base_urls_are_https_except_loopback() -> None:
    assert ImageRef("nvcr.io", "nvidia/pytorch", "1").base_url == "https://nvcr.io"
    assert ImageRef("127.0.0.1:5000", "a", "1").base_url == "http://127.0.0.1:5000"
    assert ImageRef("[::1]:5000", "a", "1").base_url == "http://[::1]:5000"
    assert ImageRef("localhost:5000", "a", "1").base_url == "http://localhost:5000"


def test_the_digest_comes_from_the_registry_behind_its_token_challenge() -> None:
    with registry() as reg:
        digest = reg.push("team/nccl", "1", {"schemaVersion": 2, "manifests": []})
        other = reg.push("team/nccl", "2", {"schemaVersion": 2, "manifests": [{"x": 1}]})
        refs = [f"{reg.host}/team/nccl:1", f"{reg.host}/team/nccl:2", f"{reg.host}/team/nccl:9"]
        got = asyncio.run(digests(refs, timeout_s=10))
        assert got[refs[0]] == digest and got[refs[1]] == other and digest != other
        assert got[refs[2]] == "!the registry has no tag 9 of team/nccl"
        # It asked anonymously: the token came from the challenge's realm, nothing else sent.
        auths = {a for _, _, a in reg.requests}
        assert auths == {"", f"Bearer {TOKEN}"}
        assert any(p.startswith("/token?") and "scope=repository%3Ateam%2Fnccl%3Apull" in p
                   for _, p, _ in reg.requests), reg.requests  # fmt: skip
        # A HEAD without the (optional) digest header: the digest is the manifest's hash.
        reg.digest_header = False
        assert asyncio.run(digests(refs[:1], timeout_s=10)) == {refs[0]: digest}
        # Credentials asked for (not a Bearer token anyone may get): not pinned, says why.
        reg.challenge = "Basic"
        assert asyncio.run(digests(refs[:1], timeout_s=10)) == {
            refs[0]: "!the registry asks for Basic authentication"
        }
    gone = f"127.0.0.1:{free_port()}/team/nccl:1"
    assert asyncio.run(digests([gone], timeout_s=10))[gone].startswith("!ConnectError")


def _job_images(cluster: Cluster, ns: str, rid: str) -> list[str]:
    job: dict[str, Any] = cluster.store.get("jobs", ns, rid)
    pod = job["spec"]["template"]["spec"]
    return [c["image"] for c in pod.get("initContainers", []) + pod["containers"]]


@pytest.mark.slow
def test_deploy_pins_the_pods_images_and_keeps_the_tag_it_cannot_pin(
    cluster: Cluster, namespace: str
) -> None:
    with registry() as reg:
        digest = reg.push("team/nccl", "1", {"schemaVersion": 2, "manifests": []})
        image = f"{reg.host}/team/nccl:1"
        rid = f"pin-{uuid.uuid4().hex[:6]}"
        res = cli(cluster, "deploy", "-n", namespace, "--run-id", rid, "--pin-images",
                  "--image", image, *SMALL, *ENGINE)  # fmt: skip
        assert res.exit_code == 0, res.output
        assert f"image {image}: pinned to {digest}" in res.output
        assert set(_job_images(cluster, namespace, rid)) == {f"{image}@{digest}"}
        # A tag the registry lacks: deployed by tag, and the line says why.
        missing = f"{reg.host}/team/nccl:2"
        rid2 = f"pin-{uuid.uuid4().hex[:6]}"
        res = cli(cluster, "deploy", "-n", namespace, "--run-id", rid2, "--pin-images",
                  "--image", missing, *SMALL, *ENGINE)  # fmt: skip
        assert res.exit_code == 0, res.output
        assert (
            f"image {missing}: not pinned (the registry has no tag 2 of team/nccl); the pods "
            "pull it by tag"
        ) in res.output
        assert set(_job_images(cluster, namespace, rid2)) == {missing}
        # Off (the suite's NCCL_K8S_PIN_IMAGES=0, as --no-pin-images): nothing asked.
        asked = len(reg.requests)
        rid3 = f"pin-{uuid.uuid4().hex[:6]}"
        res = cli(cluster, "deploy", "-n", namespace, "--run-id", rid3, "--image", image,
                  *SMALL, *ENGINE)  # fmt: skip
        assert res.exit_code == 0, res.output
        assert len(reg.requests) == asked and "pinned" not in res.output
        assert set(_job_images(cluster, namespace, rid3)) == {image}
    assert cli(cluster, "cleanup", "-n", namespace, "--all").exit_code == 0
