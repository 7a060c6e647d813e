"""`deploy --pin-images` (the default): every image of the run's pods that names a tag is
pinned to the digest its registry gives for that tag now (`NAME:TAG@sha256:...`), so that every
pod of the run, whenever and wherever it starts, runs one content, and the run's objects say
which (issue 36: a tag can be moved, by its owner or by whoever takes the registry account).

The images are the pods' own (the engine's image, chosen or by default, and the platforms'
sidecars such as GKE's tcpgpudmarxd), in every container and init container of the workload's
pod template. Each distinct tag is asked of its registry once (k8s.api._registry, anonymous:
what anyone may pull). An image whose registry does not give the digest (a private registry
that asks for credentials, one this machine cannot reach, a tag that is not there) keeps its
tag, and the deploy says so in one line each: the cluster may still pull it. `render` reads
nothing and pins nothing; give `--image NAME@sha256:...` to pin a rendered run."""

from __future__ import annotations

import copy
from collections.abc import Iterator

from nccl_k8s.k8s.api._registry import digests
from nccl_k8s.k8s.api._types import Obj

#: The environment variable that turns pinning off where no registry can be reached from the
#: deploying machine (air-gapped sites, CI): the flag's own envvar.
PIN_ENV = "NCCL_K8S_PIN_IMAGES"


def _containers(objs: list[Obj]) -> Iterator[Obj]:
    for obj in objs:
        pod = (((obj.get("spec") or {}).get("template") or {}).get("spec")) or {}
        for key in ("initContainers", "containers"):
            yield from pod.get(key) or []


async def pin_images(objs: list[Obj], *, timeout_s: float = 10.0) -> tuple[list[Obj], str]:
    """Copies of `objs` with each tag-only image pinned to its digest, and one line per image
    on what was done (empty when every image already names a digest)."""
    tagged = sorted(
        {c["image"] for c in _containers(objs) if c.get("image") and "@" not in c["image"]}
    )
    if not tagged:
        return objs, ""
    found = await digests(tagged, timeout_s=timeout_s)
    out = copy.deepcopy(objs)
    for c in _containers(out):
        got = found.get(c.get("image", ""), "!")
        if not got.startswith("!"):
            c["image"] = f"{c['image']}@{got}"
    lines = [
        f"image {ref}: pinned to {got}" if not got.startswith("!")
        else f"image {ref}: not pinned ({got[1:]}); the pods pull it by tag "
             f"(--no-pin-images or {PIN_ENV}=0: do not ask)"
        for ref, got in found.items()
    ]  # fmt: skip
    return out, "\n".join(lines)


__all__ = ["PIN_ENV", "pin_images"]
