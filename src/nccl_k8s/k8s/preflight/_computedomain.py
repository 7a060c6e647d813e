"""doctor `--compute-domain`: what a multi-node NVLink run needs that the API shows. Pure: the
reads in (preflight._doctor makes them), `Check`s out.

- compute-domain-crd: the cluster serves ComputeDomain (resource.nvidia.com/v1beta1), i.e.
  NVIDIA's DRA driver is installed; without it the deploy's first object is refused.
- compute-domain-driver: the driver's kubelet plugin publishes devices (ResourceSlices of
  compute-domain.nvidia.com) on MNNVL nodes; without them no pod's channel claim can be
  allocated and every pod stays Pending ("cannot allocate all claims").
- compute-domain-clique: some NVLink partition (nodes sharing one `nvidia.com/gpu.clique`
  value, which GPU Feature Discovery sets on MNNVL nodes) has as many nodes as the run has pods;
  the pods' required clique affinity puts them all in one.

The install hint follows the driver's docs (k8s-dra-driver-gpu v0.4.0, docs/install.md and
demo/specs/imex/README.sh: the Helm chart `nvidia/nvidia-dra-driver-gpu`).
"""

from __future__ import annotations

from collections import Counter

from nccl_k8s.k8s.preflight._preflight import Check, Read
from nccl_k8s.k8s.rendering._computedomain import CLIQUE_LABEL, DRIVER
from nccl_k8s.spec import COMPUTE_DOMAIN, RunSpec

INSTALL_HINT = (
    "install NVIDIA's DRA driver with ComputeDomains enabled (helm install nvidia-dra-driver-gpu "
    "nvidia/nvidia-dra-driver-gpu --namespace nvidia-dra-driver-gpu --create-namespace; "
    "docs/platforms.md, --compute-domain)"
)


def check_crd(domains: Read) -> Check:
    if domains.forbidden:
        return Check(
            "compute-domain-crd", "warn", "may not list ComputeDomains (RBAC): not checked"
        )
    if domains.absent:
        return Check(
            "compute-domain-crd",
            "fail",
            f"the cluster does not serve ComputeDomain {COMPUTE_DOMAIN.api_version}: NVIDIA's "
            f"DRA driver is not installed (no {COMPUTE_DOMAIN.crd_name} CRD)",
            INSTALL_HINT,
            certain=True,
        )
    return Check(
        "compute-domain-crd",
        "pass",
        f"ComputeDomain {COMPUTE_DOMAIN.api_version} is served ({COMPUTE_DOMAIN.crd_name})",
    )


def _slice_nodes(slices: list[dict[str, object]]) -> set[str]:
    out: set[str] = set()
    for s in slices:
        spec = s.get("spec")
        if isinstance(spec, dict) and spec.get("driver") == DRIVER:
            out.add(str(spec.get("nodeName") or "(all nodes)"))
    return out


def check_driver(slices: Read) -> Check:
    name = "compute-domain-driver"
    if slices.forbidden:
        return Check(name, "warn", "may not list ResourceSlices (RBAC): not checked")
    if slices.absent or slices.items is None:
        return Check(
            name,
            "fail",
            "the cluster does not serve resource.k8s.io/v1 ResourceSlices: Dynamic Resource "
            "Allocation is not available (Kubernetes 1.34 serves it by default)",
            "use Kubernetes 1.34 or newer (or enable the DynamicResourceAllocation feature and "
            "the resource.k8s.io API on 1.32/1.33)",
        )
    nodes = _slice_nodes(slices.items)
    if not nodes:
        return Check(
            name,
            "fail",
            f"no ResourceSlice of the DRA driver {DRIVER}: its kubelet plugin publishes no "
            "IMEX channel on any node, so no pod's channel claim can be allocated",
            INSTALL_HINT + "; check its kubelet-plugin pods and resources.computeDomains.enabled",
        )
    shown = ", ".join(sorted(nodes)[:4]) + (", ..." if len(nodes) > 4 else "")
    return Check(name, "pass", f"{len(nodes)} node(s) publish {DRIVER} devices ({shown})")


def check_clique(spec: RunSpec, nodes: Read) -> Check:
    name = "compute-domain-clique"
    if not nodes.ok:
        return Check(name, "warn", "may not list nodes: NVLink cliques not checked")
    cliques = Counter(
        (n.get("metadata", {}).get("labels") or {}).get(CLIQUE_LABEL) for n in nodes.items or []
    )
    cliques.pop(None, None)
    if not cliques:
        return Check(
            name,
            "fail",
            f"no node has the {CLIQUE_LABEL} label: no node is known to be on a multi-node "
            "NVLink fabric (GB200/GB300 NVL72)",
            "GPU Feature Discovery (the GPU Operator) labels MNNVL nodes; without NVL72 nodes, "
            "deploy without --compute-domain",
        )
    clique, size = max(cliques.items(), key=lambda kv: (kv[1], str(kv[0])))
    if size < spec.nodes:
        return Check(
            name,
            "fail",
            f"the run's {spec.nodes} pods must share one NVLink clique, but the largest has "
            f"{size} node(s) ({CLIQUE_LABEL}={clique})",
            f"use at most {size} nodes (--world-size {size * spec.gpus_per_node}) or add nodes to "
            "that clique",
        )
    return Check(
        name,
        "pass",
        f"{len(cliques)} NVLink clique(s); the largest has {size} node(s) for the run's "
        f"{spec.nodes} pods ({CLIQUE_LABEL}={clique})",
    )


def check_compute_domain(spec: RunSpec, domains: Read, slices: Read, nodes: Read) -> list[Check]:
    """Every --compute-domain check, or none without it."""
    if not spec.compute_domain:
        return []
    return [check_crd(domains), check_driver(slices), check_clique(spec, nodes)]


__all__ = ["check_clique", "check_compute_domain", "check_crd", "check_driver"]
