"""`--compute-domain`: multi-node NVLink (GB200/GB300 NVL72) through NVIDIA's DRA driver.

On an NVL72 rack the GPUs of different nodes talk over NVLink only when the pods share an IMEX
domain. NVIDIA's DRA driver (NVIDIA/k8s-dra-driver-gpu, v0.4.0) makes one on demand: a
`ComputeDomain` (resource.nvidia.com/v1beta1) names a ResourceClaimTemplate that the driver's
controller creates; each pod that claims a channel from it (pod `spec.resourceClaims` plus the
container's `resources.claims`, resource.k8s.io/v1 as in Kubernetes 1.34) joins the domain, and
the driver injects /dev/nvidia-caps-imex-channels into its container. What a run adds:

- the ComputeDomain `<run-id>` (rendered by rendering._manifests.compute_domain, owned by the
  workload like the run's other objects, so cleanup and the Job's TTL delete it): `numNodes` =
  the run's pods (see `compute_domain_spec`), channel template `<run-id>-channel`
  (demo/specs/imex/nvbandwidth-test-job.yaml names theirs `<domain>-channel`);
- in each pod the claim `compute-domain-channel` of that template, consumed by the benchmark
  container (the claim name of the driver's demos);
- required pod affinity of the run's pods to each other with topologyKey (rendered with the
  other topology placement, rendering._topology)
  `nvidia.com/gpu.clique`, the label GPU Feature Discovery puts on MNNVL nodes (value
  `<cluster UUID>.<clique id>`, docs/install.md): every pod lands in one NVLink partition, and
  nodes without the label are not eligible (kube-scheduler's InterPodAffinity needs the
  topology key on the node). AWS's GB200 nccl-tests job (awslabs/awsome-distributed-ai,
  micro-benchmarks/nccl-tests/kubernetes/nccl-tests-gb200.yaml) and Oracle's GB200 guide
  (oracle-quickstart/oci-hpc-oke, branch gb200, README.md) write the same term; CoreWeave's IMEX DRA
  guide: a ComputeDomain "follows the workload", so "workloads should always include affinity
  rules to constrain Pods to Nodes within the same rack";
- NCCL's MNNVL settings (`MNNVL_ENV`), before the user's --env, which wins.

Facts only: the driver's names (DRIVER, CHANNEL_DEVICE_CLASS) are also what doctor looks for.
"""

from __future__ import annotations

from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.spec import RunSpec

# The ComputeDomain's API (group, version, its CRD) is the optional-kinds table's:
# spec.COMPUTE_DOMAIN.

#: The DRA driver that publishes the channel and daemon devices (ResourceSlices) of every MNNVL
#: node, and the DeviceClass the controller's channel template requests
#: (templates/compute-domain-workload-claim-template.tmpl.yaml, deviceclass-compute-domain-
#: default-channel.yaml).
DRIVER = "compute-domain.nvidia.com"
CHANNEL_DEVICE_CLASS = "compute-domain-default-channel.nvidia.com"

#: The node label of a node's NVLink partition (GPU Feature Discovery): the pods' topology key.
CLIQUE_LABEL = "nvidia.com/gpu.clique"

#: The pod's name for its claim of a channel.
CHANNEL_CLAIM = "compute-domain-channel"

#: NCCL's multi-node NVLink settings (NCCL's env.rst, v2.30.7-1): NCCL_MNNVL_ENABLE=1 makes
#: initialization fail when MNNVL cannot be enabled, rather than silently carrying inter-node
#: traffic over the network (2, the default, falls back); MNNVL "also requires NCCL CUMEM
#: support (NCCL_CUMEM_ENABLE) to be enabled", which is otherwise auto-detected. AWS's and
#: Oracle's GB200 nccl-tests jobs pass NCCL_MNNVL_ENABLE=1, CoreWeave's both.
MNNVL_ENV: tuple[tuple[str, str], ...] = (("NCCL_MNNVL_ENABLE", "1"), ("NCCL_CUMEM_ENABLE", "1"))


def compute_domain_name(spec: RunSpec) -> str:
    return spec.run_id


def channel_template_name(spec: RunSpec) -> str:
    """The ResourceClaimTemplate the driver's controller creates for the run's domain."""
    return f"{spec.run_id}-channel"


def compute_domain_spec(spec: RunSpec) -> Obj:
    """The ComputeDomain's spec. numNodes = the run's pods (one per node): with the driver's
    default (IMEXDaemonsWithDNSNames, v25.8+) it only makes the domain's status Ready once
    every node's IMEX daemon is, which `kubectl get computedomain` then shows; with that gate
    off (and in v25.3) the driver holds the pods until that many nodes joined, so a smaller
    value would start a partial domain (the CRD's description of numNodes)."""
    return {
        "numNodes": spec.nodes,
        "channel": {"resourceClaimTemplate": {"name": channel_template_name(spec)}},
    }


def compute_domain_env(spec: RunSpec) -> dict[str, str]:
    return dict(MNNVL_ENV) if spec.compute_domain else {}


def apply_compute_domain(spec: RunSpec, template: Obj) -> None:
    """Put the channel claim into the pod template (in place)."""
    if not spec.compute_domain:
        return
    pod = template["spec"]
    pod.setdefault("resourceClaims", []).append(
        {"name": CHANNEL_CLAIM, "resourceClaimTemplateName": channel_template_name(spec)}
    )
    resources = pod["containers"][0].setdefault("resources", {})
    resources.setdefault("claims", []).append({"name": CHANNEL_CLAIM})
    # The one-clique affinity is a topology rule: rendering._topology (fabric_levels) adds it.


__all__ = [
    "CHANNEL_CLAIM",
    "CHANNEL_DEVICE_CLASS",
    "CLIQUE_LABEL",
    "DRIVER",
    "MNNVL_ENV",
    "apply_compute_domain",
    "channel_template_name",
    "compute_domain_env",
    "compute_domain_name",
    "compute_domain_spec",
]
