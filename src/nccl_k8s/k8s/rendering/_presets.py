"""NCCL environment per fabric and pod privilege per security profile.

Two small tables, kept apart from the manifests so that what a `--network` or `--security` choice
does can be read (and reviewed) in one place:

- `network_env`: only the variables that select a fabric. Everything else (algorithms, protocols,
  buffer sizes) is left to NCCL's defaults: a benchmark that tunes NCCL measures the tuning.
- `security_profile`: the least privilege each profile needs, nothing more.

`pod_env` merges the presets with the user's `--env`; the user's values always win.
Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from nccl_k8s.k8s.rendering._computedomain import compute_domain_env
from nccl_k8s.k8s.rendering._platform import platform_env, platform_of, platform_privileged
from nccl_k8s.spec import Network, RunSpec, Security

#: A Pod Security Standards level (https://kubernetes.io/docs/concepts/security/pod-security-standards/),
#: as a namespace's `pod-security.kubernetes.io/enforce` label names it.
PsaLevel = Literal["restricted", "baseline", "privileged"]

#: The unprivileged user of the socket profile. Stock PyTorch images run as root and have no
#: user of their own; any non-zero uid works, since the pod needs no file of the image to be
#: writable: HOME points at /tmp (world-writable in every Linux image), where torchrun also
#: keeps its per-run log directory.
NONROOT_UID = 1000
NONROOT_HOME = "/tmp"

#: NCCL_SOCKET_IFNAME in NCCL's documented syntax: a comma list of interface-name prefixes,
#: `^` in front excludes them, `=` matches a name exactly. In a pod's own network namespace only
#: lo and the pod's interfaces exist, so excluding loopback and docker bridges leaves the real
#: ones; users with several real NICs pin one with `--env NCCL_SOCKET_IFNAME==eth0`.
SOCKET_IFNAME_DEFAULT = "^lo,docker"

#: With host networking the pod sees the node's interfaces, including the CNI's virtual ones
#: (veth pairs, bridges, overlay tunnels), which are not routable between nodes; NCCL picking
#: one of them hangs the bootstrap. Exclude those prefixes too.
SOCKET_IFNAME_HOST_NETWORK = "^lo,docker,veth,cni,flannel,cali,tunl,vxlan,kube,virbr"

#: NCCL_IB_HCA is a prefix list too: `mlx5` matches mlx5_0, mlx5_1, ... i.e. every ConnectX HCA
#: on the node, where the seed's `mlx5_0` limited an 8-HCA node to one rail.
IB_HCA_DEFAULT = "mlx5"

_IFNAME = "{socket_ifname}"  # filled per pod network by network_env

_NETWORK_ENV: dict[str, tuple[tuple[str, str], ...]] = {
    # NCCL picks the best transport it finds; setting nothing is the honest default.
    "auto": (),
    # NCCL_NET=IB makes a missing or broken IB stack an error at init instead of a silent
    # fallback to TCP sockets that would report socket bandwidth as "IB".
    "ib": (
        ("NCCL_NET", "IB"),
        ("NCCL_IB_HCA", IB_HCA_DEFAULT),
        ("NCCL_SOCKET_IFNAME", _IFNAME),
    ),
    # RoCE uses NCCL's IB verbs transport over Ethernet HCAs. The GID index is left to NCCL
    # (it selects a RoCEv2 GID itself since 2.21); older NCCL needs --env NCCL_IB_GID_INDEX=3.
    "roce": (
        ("NCCL_NET", "IB"),
        ("NCCL_IB_HCA", IB_HCA_DEFAULT),
        ("NCCL_SOCKET_IFNAME", _IFNAME),
    ),
    # TCP only: no RDMA even where HCAs are visible.
    "socket": (
        ("NCCL_IB_DISABLE", "1"),
        ("NCCL_NET", "Socket"),
        ("NCCL_SOCKET_IFNAME", _IFNAME),
    ),
}

#: Set for every run, before the fabric preset; each can be overridden with --env.
_BASE_ENV: tuple[tuple[str, str], ...] = (
    # INFO logs the chosen transport, HCAs and rings, which the results parser reads to say why
    # numbers are low; without it a slow run cannot be explained after the fact.
    ("NCCL_DEBUG", "INFO"),
    # Of INFO, the subsystems that say which fabric each rank used (network, plugin, devices,
    # each connection's transport): enough to prove the fabric, without the per-call noise.
    ("NCCL_DEBUG_SUBSYS", "INIT,NET"),
    # A collective that times out aborts its communicator and ends the process, so the pod fails
    # and the run is named as failed, instead of every rank hanging until the Job's deadline.
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
)


def network_env(network: Network, *, host_network: bool = False) -> dict[str, str]:
    """The NCCL variables that select `network`'s fabric (empty for auto)."""
    ifname = SOCKET_IFNAME_HOST_NETWORK if host_network else SOCKET_IFNAME_DEFAULT
    return {k: ifname if v == _IFNAME else v for k, v in _NETWORK_ENV[network]}


def pod_env(spec: RunSpec) -> list[tuple[str, str]]:
    """Base + fabric + platform + compute-domain (MNNVL) + profile presets, then the user's
    --env; a user value replaces a preset in place."""
    merged: dict[str, str] = dict(_BASE_ENV)
    profile = security_profile(spec.security)
    merged.update(network_env(spec.network, host_network=uses_host_network(spec)))
    merged.update(platform_env(spec))
    merged.update(compute_domain_env(spec))
    merged.update(profile.env)
    merged.update(spec.env)
    return list(merged.items())


def uses_host_network(spec: RunSpec) -> bool:
    """Whether the pods share the node's network namespace (--host-network, the profile or
    the platform)."""
    return (
        spec.host_network
        or security_profile(spec.security).host_network
        or platform_of(spec).host_network
    )


#: The (deprecated, still honoured) AppArmor pod annotation, one per container. Pod Security's
#: baseline allows only "", runtime/default and localhost/<profile> in it: any other value
#: (unconfined) needs `privileged`. Source: the Pod Security Standards, Baseline, AppArmor
#: (https://kubernetes.io/docs/concepts/security/pod-security-standards/, kubernetes/website
#: main, content/en/docs/concepts/security/pod-security-standards.md).
APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"


def forbidden_annotations(spec: RunSpec) -> list[str]:
    """The user's annotations (--annotation, --pod-annotation: both reach the pods) that
    baseline forbids, as `key=value`."""
    return [
        f"{key}={value}"
        for key, value in (*spec.annotations, *spec.pod_annotations)
        if key.startswith(APPARMOR_ANNOTATION_PREFIX)
        and value not in ("", "runtime/default")
        and not value.startswith("localhost/")
    ]


def pod_security_level(spec: RunSpec) -> PsaLevel:
    """The strictest Pod Security Admission level the run's pods pass: the profile's, unless
    host networking (forbidden from baseline on, as is the hostPort that comes with it), a
    platform whose pieces need it (host paths, privileged sidecars) or a user annotation that
    baseline forbids (an AppArmor profile other than the runtime's or a node's own)."""
    if uses_host_network(spec) or platform_privileged(spec) or forbidden_annotations(spec):
        return "privileged"
    return security_profile(spec.security).pod_security


#: Pod annotations (and the Istio label) that keep service-mesh sidecars out: an injected proxy
#: keeps a Job's pod alive after the benchmark ends and intercepts the rendezvous and NCCL's TCP.
#: Istio reads the label (its annotation form is deprecated) and Linkerd the annotation.
MESH_OPT_OUT_LABELS: tuple[tuple[str, str], ...] = (("sidecar.istio.io/inject", "false"),)
MESH_OPT_OUT_ANNOTATIONS: tuple[tuple[str, str], ...] = (
    ("sidecar.istio.io/inject", "false"),
    ("linkerd.io/inject", "disabled"),
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SecurityProfile:
    """What a --security choice puts into the pod."""

    host_network: bool = False
    """Share the node's network namespace."""
    host_ipc: bool = False
    """Share the node's IPC namespace (the seed's layout: CUDA IPC and shm across pods)."""
    pod_security_context: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Pod-level securityContext."""
    container_security_context: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The benchmark container's securityContext."""
    pod_security: PsaLevel = "privileged"
    """The strictest Pod Security Admission level the profile's pods pass (without
    --host-network): a namespace enforcing a stricter one refuses them."""
    env: tuple[tuple[str, str], ...] = ()
    """Environment the profile needs (a writable HOME for a non-root user)."""


_RUNTIME_DEFAULT_SECCOMP = {"seccompProfile": {"type": "RuntimeDefault"}}


def security_profile(security: Security) -> SecurityProfile:
    """Least privilege per profile, and the Pod Security Standards level each passes.

    socket: no privilege at all: a non-root user, every capability dropped, no escalation, the
        runtime's seccomp profile. TCP sockets and CUDA through the device plugin need nothing
        more. Passes `restricted`.
    rdma: root, the same plus only IPC_LOCK, which RDMA needs to pin (register) memory; the HCAs
        themselves come from the RDMA device plugin's resource (--rdma-resource). `baseline`
        allows adding only AUDIT_WRITE, CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD,
        NET_BIND_SERVICE, SETFCAP, SETGID, SETPCAP, SETUID and SYS_CHROOT, so it needs
        `privileged`. (Added capabilities reach only root's processes: Kubernetes sets no
        ambient capabilities, so IPC_LOCK with a non-root user would pin nothing.)
    host: rdma's container plus the node's network and IPC namespaces, as the seed ran:
        `privileged` (baseline forbids host namespaces and hostPorts).
    privileged: a privileged container, only when asked for by name: `privileged`.
    """
    locked = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }
    ipc_lock = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"add": ["IPC_LOCK"], "drop": ["ALL"]},
    }
    if security == "socket":
        return SecurityProfile(
            pod_security_context={
                "runAsNonRoot": True,
                "runAsUser": NONROOT_UID,
                "runAsGroup": NONROOT_UID,
                # Volumes that support ownership management (a --pvc claim) become writable
                # for the group.
                "fsGroup": NONROOT_UID,
                **_RUNTIME_DEFAULT_SECCOMP,
            },
            container_security_context=locked,
            pod_security="restricted",
            env=(("HOME", NONROOT_HOME),),
        )
    if security == "rdma":
        return SecurityProfile(
            pod_security_context=dict(_RUNTIME_DEFAULT_SECCOMP), container_security_context=ipc_lock
        )
    if security == "host":
        return SecurityProfile(
            host_network=True,
            host_ipc=True,
            pod_security_context=dict(_RUNTIME_DEFAULT_SECCOMP),
            container_security_context=ipc_lock,
        )
    return SecurityProfile(container_security_context={"privileged": True})


__all__ = [
    "IB_HCA_DEFAULT",
    "MESH_OPT_OUT_ANNOTATIONS",
    "MESH_OPT_OUT_LABELS",
    "NONROOT_UID",
    "SOCKET_IFNAME_DEFAULT",
    "SOCKET_IFNAME_HOST_NETWORK",
    "PsaLevel",
    "SecurityProfile",
    "forbidden_annotations",
    "network_env",
    "pod_env",
    "pod_security_level",
    "security_profile",
    "uses_host_network",
]
