"""A platform entry's pieces, put into a run's pod: the renderer's one use of spec.platforms.

What each piece is and why it is there is the entry's (spec.platforms, cited per vendor); this
module only places them: annotations on the pod, volumes and init containers and sidecars in its
spec, mounts, capabilities and the vendor script in the benchmark container, host networking and
placement. Resources and environment are merged where every other reader finds them
(rendering._resources.pod_resources, rendering._presets.pod_env).
"""

from __future__ import annotations

import copy
import shlex

from nccl_k8s.errors import UsageError
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.spec import RunSpec, missing_devices
from nccl_k8s.spec.platforms import GENERIC, PLATFORMS, Platform


def platform_of(spec: RunSpec) -> Platform:
    """The spec's platform entry; `auto` not resolved (render reads no nodes) is generic."""
    return PLATFORMS.get(spec.platform, GENERIC)


def platform_env(spec: RunSpec) -> dict[str, str]:
    """The platform's NCCL environment, with its machine type's own (`Instance.env`) on top
    when the spec names a type the platform knows (--instance-type, or the nodes' type)."""
    platform = platform_of(spec)
    env = dict(platform.env)
    instance = platform.instance(spec.instance_type) if spec.instance_type else None
    if instance is not None:
        env.update(instance.env)
    return env


def check_platform(spec: RunSpec) -> None:
    """Refuse to render pods whose fabric device count is unknown (UsageError, exit 2): they
    would carry no devices and NCCL would measure TCP."""
    missing = missing_devices(spec)
    if missing is not None:
        raise UsageError(missing, key="--instance-type")


def _merge_named(into: list[Obj], extra: tuple[Obj, ...], what: str) -> None:
    """Append the platform's named items (volumes, mounts by path), refusing a clash."""
    key = "mountPath" if what == "mount" else "name"
    have = {item[key] for item in into}
    for item in extra:
        if item[key] in have:
            raise UsageError(
                f"--platform: the platform's {what} {item[key]!r} clashes with one the run "
                "already has; expected options that do not set it too",
                key="--platform",
            )
        into.append(copy.deepcopy(item))


def _source(container: Obj, script: str, keep: list[tuple[str, str]]) -> None:
    """Run the container's command after sourcing the vendor's script in the same shell, then
    export `keep` again: a vendor script exports its own choices (the NCCL configs of GKE's
    TCPXO profile include NCCL_DEBUG=WARN), and the run's settings must win over them."""
    command = [*container["command"], *container.get("args", [])]
    again = " ".join(f"{k}={shlex.quote(v)}" for k, v in keep)
    restore = f" && export {again}" if again else ""
    container["command"] = ["/bin/sh", "-c", f'. {shlex.quote(script)}{restore} && exec "$@"']
    container["args"] = ["nccl-k8s", *command]


def _kept(spec: RunSpec, platform: Platform, container: Obj) -> list[tuple[str, str]]:
    """The container's literal environment a sourced script must not change: all of it but
    the platform's own variables (the script refines those), and the user's --env always."""
    mine = dict(spec.env)
    return [
        (e["name"], e["value"])
        for e in container.get("env", [])
        if "value" in e
        and "$(" not in e["value"]  # kubelet expands those: the shell copy is already right
        and (e["name"] not in platform.env or e["name"] in mine)
    ]


def _container(spec: RunSpec, platform: Platform, container: Obj) -> None:
    _merge_named(container.setdefault("volumeMounts", []), platform.mounts, "mount")
    context = container.setdefault("securityContext", {})
    if platform.privileged:
        context.clear()
        context["privileged"] = True
    elif platform.capabilities:
        caps = context.setdefault("capabilities", {})
        added = caps.setdefault("add", [])
        added.extend(c for c in platform.capabilities if c not in added)
    if not context:
        del container["securityContext"]
    if platform.source is not None:
        _source(container, platform.source, _kept(spec, platform, container))


def apply_platform(spec: RunSpec, template: Obj) -> None:
    """Put the spec's platform pieces into the pod template (in place)."""
    platform = platform_of(spec)
    if platform is GENERIC:
        return
    metadata, pod = template["metadata"], template["spec"]
    annotations = metadata.setdefault("annotations", {})
    for key, value in platform.pod_annotations(spec.instance_type).items():
        annotations.setdefault(key, value)  # the user's --pod-annotation wins
    _merge_named(pod.setdefault("volumes", []), platform.volumes, "volume")
    if platform.init_containers:
        pod.setdefault("initContainers", []).extend(copy.deepcopy(platform.init_containers))
    pod["containers"].extend(copy.deepcopy(platform.sidecars))
    _container(spec, platform, pod["containers"][0])
    if platform.host_network:
        pod["hostNetwork"] = True
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"
    node_selector = platform.pod_node_selector(spec.instance_type)
    if node_selector:
        selector = pod.setdefault("nodeSelector", {})
        for key, value in node_selector.items():
            selector.setdefault(key, value)
    if platform.tolerations:
        pod.setdefault("tolerations", []).extend(copy.deepcopy(platform.tolerations))


def platform_privileged(spec: RunSpec) -> bool:
    """Whether the platform's pieces need the `privileged` Pod Security level: host paths, host
    networking, a privileged container or one that adds a capability baseline forbids."""
    platform = platform_of(spec)
    containers = [*platform.init_containers, *platform.sidecars]
    return (
        platform.privileged
        or platform.host_network
        or bool(platform.capabilities)
        or any("hostPath" in v for v in platform.volumes)
        or any(c.get("securityContext", {}).get("privileged") for c in containers)
    )


__all__ = [
    "apply_platform",
    "check_platform",
    "platform_env",
    "platform_of",
    "platform_privileged",
]
