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
from typing import Any

from nccl_k8s.spec import Network, RunSpec, Security

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
    # A collective that times out aborts its communicator and ends the process, so the pod fails
    # and the run is named as failed, instead of every rank hanging until the Job's deadline.
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
)


def network_env(network: Network, *, host_network: bool = False) -> dict[str, str]:
    """The NCCL variables that select `network`'s fabric (empty for auto)."""
    ifname = SOCKET_IFNAME_HOST_NETWORK if host_network else SOCKET_IFNAME_DEFAULT
    return {k: ifname if v == _IFNAME else v for k, v in _NETWORK_ENV[network]}


def pod_env(spec: RunSpec) -> list[tuple[str, str]]:
    """Base + fabric presets, then the user's --env; a user value replaces a preset in place."""
    merged: dict[str, str] = dict(_BASE_ENV)
    host_network = spec.host_network or security_profile(spec.security).host_network
    merged.update(network_env(spec.network, host_network=host_network))
    merged.update(spec.env)
    return list(merged.items())


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


_RUNTIME_DEFAULT_SECCOMP = {"seccompProfile": {"type": "RuntimeDefault"}}


def security_profile(security: Security) -> SecurityProfile:
    """Least privilege per profile.

    socket: no privilege at all: every capability dropped, no escalation, the runtime's seccomp
        profile. TCP sockets and CUDA through the device plugin need nothing more.
    rdma: the same plus only IPC_LOCK, which RDMA needs to pin (register) memory; the HCAs
        themselves come from the RDMA device plugin's resource (--rdma-resource).
    host: rdma's container plus the node's network and IPC namespaces, as the seed ran.
    privileged: a privileged container, only when asked for by name.
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
            pod_security_context=dict(_RUNTIME_DEFAULT_SECCOMP), container_security_context=locked
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
    "SOCKET_IFNAME_DEFAULT",
    "SOCKET_IFNAME_HOST_NETWORK",
    "SecurityProfile",
    "network_env",
    "pod_env",
    "security_profile",
]
