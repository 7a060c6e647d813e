"""Pod Security Admission, as kube-apiserver's built-in PodSecurity plugin enforces it.

A namespace labelled `pod-security.kubernetes.io/enforce: baseline|restricted` (optionally
`pod-security.kubernetes.io/enforce-version`, default latest) refuses pods that break that level
of the Pod Security Standards; the refusal is a 403 worded as upstream's:

    pods "x-0-abcde" is forbidden: violates PodSecurity "baseline:latest": host namespaces
    (hostNetwork=true), non-default capabilities (container "bench" must not include "IPC_LOCK"
    in securityContext.capabilities.add)

Every pod create goes through it (the API's and the Job/StatefulSet controllers', which then
record `FailedCreate` events with `Error creating: <that message>`), as in a real cluster where
controllers create pods through the API.

The checks are the controls of the Pod Security Standards, "latest" version
(https://kubernetes.io/docs/concepts/security/pod-security-standards/): Baseline - HostProcess,
host namespaces, privileged containers, capabilities beyond a fixed list, hostPath volumes, host
ports, host in probes and lifecycle handlers, AppArmor (fields and the deprecated annotations),
SELinux, /proc mount type, seccomp, sysctls; Restricted - all of Baseline plus volume types,
privilege escalation, running as non-root, non-root user, seccomp required, and capabilities
(drop ALL, add only NET_BIND_SERVICE), the last three not asked of Windows pods (`os.name:
windows`), as upstream. Each check's message follows the wording of the
k8s.io/pod-security-admission policy package, and the violated checks are listed in the order
of their check ids, as upstream sorts them. Restricted's capabilities and seccomp checks replace
Baseline's (upstream's "overrides"). Not modelled: exemptions, `audit`/`warn` modes, versions
other than latest (a pinned version is echoed in the message but evaluated as latest), the
user-namespace relaxations behind a feature gate that is off by default.

The oracle for these checks is upstream's: tests/test_pod_security_fixtures.py runs them on
pods from k8s.io/pod-security-admission's own test fixtures (tests/data/pod-security), each of
which upstream's implementation admits or refuses at a level.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from tests.cluster.errors import ApiError

Obj = dict[str, Any]
#: A check reads the pod's spec and metadata (only AppArmor's annotations need the latter).
Check = Callable[[Obj, Obj], str | None]

ENFORCE = "pod-security.kubernetes.io/enforce"
ENFORCE_VERSION = "pod-security.kubernetes.io/enforce-version"
LEVELS = ("privileged", "baseline", "restricted")

#: Baseline: "Adding additional capabilities beyond those listed below must be disallowed."
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
#: Restricted: "Only the following volume types are permitted."
RESTRICTED_VOLUMES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
#: Baseline sysctls: the "safe" set.
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
        "net.ipv4.tcp_slow_start_after_idle",
        "net.ipv4.tcp_notsent_lowat",
    }
)
_SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
#: Every volume source a pod can name (only the key matters here).
_VOLUME_SOURCES = frozenset(
    {
        *("hostPath", "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral"),
        *("persistentVolumeClaim", "projected", "secret", "awsElasticBlockStore", "azureDisk"),
        *("azureFile", "cephfs", "cinder", "fc", "flexVolume", "flocker", "gcePersistentDisk"),
        *("gitRepo", "glusterfs", "image", "iscsi", "nfs", "photonPersistentDisk"),
        *("portworxVolume", "quobyte", "rbd", "scaleIO", "storageos", "vsphereVolume"),
    }
)


def _containers(spec: Obj) -> Iterator[Obj]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _sc(c: Obj) -> Obj:
    return c.get("securityContext") or {}


def _who(names: list[str]) -> str:
    quoted = ", ".join(f'"{n}"' for n in names)
    return f"container {quoted}" if len(names) == 1 else f"containers {quoted}"


def _quoted(values: list[str]) -> str:
    return ", ".join(f'"{v}"' for v in values)


def _windows(spec: Obj) -> bool:
    """A Windows pod: the Linux-only restricted controls do not apply (its API forbids them)."""
    return (spec.get("os") or {}).get("name") == "windows"


def _hosts(handler: Obj | None) -> list[str]:
    """The hosts a probe or lifecycle handler names (httpGet/tcpSocket `host`)."""
    handler = handler or {}
    return [h for key in ("httpGet", "tcpSocket") if (h := (handler.get(key) or {}).get("host"))]


# ---- checks, by upstream check id (the order of the message) ---------------------------------


def allow_privilege_escalation(spec: Obj, meta: Obj) -> str | None:
    if _windows(spec):
        return None
    bad = [
        c["name"] for c in _containers(spec) if _sc(c).get("allowPrivilegeEscalation") is not False
    ]
    if not bad:
        return None
    return f"allowPrivilegeEscalation != false ({_who(bad)} must set securityContext.allowPrivilegeEscalation=false)"


def app_armor_profile(spec: Obj, meta: Obj) -> str | None:
    allowed = ("RuntimeDefault", "Localhost")
    setters, values = [], set()
    pod = ((spec.get("securityContext") or {}).get("appArmorProfile") or {}).get("type")
    if pod is not None and pod not in allowed:
        setters.append("pod")
        values.add(pod)
    names = []
    for c in _containers(spec):
        kind = (_sc(c).get("appArmorProfile") or {}).get("type")
        if kind is not None and kind not in allowed:
            names.append(c["name"])
            values.add(kind)
    if names:
        setters.append(_who(names))
    # The deprecated annotations: "", runtime/default and localhost/<name> are allowed.
    prefix = "container.apparmor.security.beta.kubernetes.io/"
    annotations = sorted(
        f'{k}="{v}"'
        for k, v in (meta.get("annotations") or {}).items()
        if k.startswith(prefix)
        and v not in ("", "runtime/default")
        and not v.startswith("localhost/")
    )
    found = sorted(values) + annotations
    if annotations:
        setters.append("annotation" if len(annotations) == 1 else "annotations")
    if not setters:
        return None
    reason = "forbidden AppArmor profile" + ("s" if len(found) > 1 else "")
    return (
        f"{reason} ({' and '.join(setters)} must not set AppArmor profile type to {_quoted(found)})"
    )


def capabilities_baseline(spec: Obj, meta: Obj) -> str | None:
    parts = []
    for c in _containers(spec):
        extra = [
            a
            for a in (_sc(c).get("capabilities") or {}).get("add") or []
            if a not in BASELINE_CAPABILITIES
        ]
        if extra:
            parts.append(
                f'container "{c["name"]}" must not include {_quoted(extra)} in securityContext.capabilities.add'
            )
    return f"non-default capabilities ({'; '.join(parts)})" if parts else None


def capabilities_restricted(spec: Obj, meta: Obj) -> str | None:
    if _windows(spec):
        return None
    no_drop, parts = [], []
    for c in _containers(spec):
        caps = _sc(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            no_drop.append(c["name"])
    if no_drop:
        parts.append(f'{_who(no_drop)} must set securityContext.capabilities.drop=["ALL"]')
    for c in _containers(spec):
        extra = [
            a
            for a in (_sc(c).get("capabilities") or {}).get("add") or []
            if a != "NET_BIND_SERVICE"
        ]
        if extra:
            parts.append(
                f'container "{c["name"]}" must not include {_quoted(extra)} in securityContext.capabilities.add'
            )
    return f"unrestricted capabilities ({'; '.join(parts)})" if parts else None


def host_namespaces(spec: Obj, meta: Obj) -> str | None:
    used = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    return f"host namespaces ({', '.join(used)})" if used else None


def host_path_volumes(spec: Obj, meta: Obj) -> str | None:
    names = [v["name"] for v in spec.get("volumes") or [] if "hostPath" in v]
    if not names:
        return None
    return f"hostPath volumes ({'volume' if len(names) == 1 else 'volumes'} {_quoted(names)})"


def host_ports(spec: Obj, meta: Obj) -> str | None:
    parts = []
    for c in _containers(spec):
        ports = [str(p["hostPort"]) for p in c.get("ports") or [] if p.get("hostPort")]
        if ports:
            word = "hostPort" if len(ports) == 1 else "hostPorts"
            parts.append(f'container "{c["name"]}" uses {word} {", ".join(ports)}')
    return f"hostPort ({'; '.join(parts)})" if parts else None


def host_probes_and_host_lifecycle(spec: Obj, meta: Obj) -> str | None:
    names, hosts = set(), set()
    for c in _containers(spec):
        found = [
            h for p in ("livenessProbe", "readinessProbe", "startupProbe") for h in _hosts(c.get(p))
        ]
        lifecycle = c.get("lifecycle") or {}
        found += [h for when in ("postStart", "preStop") for h in _hosts(lifecycle.get(when))]
        if found:
            names.add(c["name"])
            hosts.update(found)
    if not names:
        return None
    uses = "uses" if len(names) == 1 else "use"
    what = "probe or lifecycle host" + ("" if len(hosts) == 1 else "s")
    return f"probe or lifecycle host ({_who(sorted(names))} {uses} {what} {_quoted(sorted(hosts))})"


def host_process(spec: Obj, meta: Obj) -> str | None:
    pod = ((spec.get("securityContext") or {}).get("windowsOptions") or {}).get("hostProcess")
    names = [
        c["name"]
        for c in _containers(spec)
        if (_sc(c).get("windowsOptions") or {}).get("hostProcess")
    ]
    if not pod and not names:
        return None
    return "hostProcess (pod or containers must not set securityContext.windowsOptions.hostProcess=true)"


def privileged(spec: Obj, meta: Obj) -> str | None:
    names = [c["name"] for c in _containers(spec) if _sc(c).get("privileged")]
    return (
        f"privileged ({_who(names)} must not set securityContext.privileged=true)"
        if names
        else None
    )


def proc_mount(spec: Obj, meta: Obj) -> str | None:
    names = [
        c["name"] for c in _containers(spec) if _sc(c).get("procMount") not in (None, "Default")
    ]
    return (
        f'procMount ({_who(names)} must not set securityContext.procMount to "Unmasked")'
        if names
        else None
    )


def restricted_volumes(spec: Obj, meta: Obj) -> str | None:
    parts = []
    for v in spec.get("volumes") or []:
        source = next((k for k in v if k in _VOLUME_SOURCES), None)
        if source is not None and source not in RESTRICTED_VOLUMES:
            parts.append(f'volume "{v["name"]}" uses restricted volume type "{source}"')
    return f"restricted volume types ({'; '.join(parts)})" if parts else None


def run_as_non_root(spec: Obj, meta: Obj) -> str | None:
    pod = (spec.get("securityContext") or {}).get("runAsNonRoot")
    bad_explicit = [c["name"] for c in _containers(spec) if _sc(c).get("runAsNonRoot") is False]
    unset = [c["name"] for c in _containers(spec) if _sc(c).get("runAsNonRoot") is None]
    if pod is False:
        return "runAsNonRoot != true (pod must not set securityContext.runAsNonRoot=false)"
    if bad_explicit:
        return f"runAsNonRoot != true ({_who(bad_explicit)} must not set securityContext.runAsNonRoot=false)"
    if pod is not True and unset:
        return f"runAsNonRoot != true (pod or {_who(unset)} must set securityContext.runAsNonRoot=true)"
    return None


def run_as_user(spec: Obj, meta: Obj) -> str | None:
    parts = []
    if (spec.get("securityContext") or {}).get("runAsUser") == 0:
        parts.append("pod must not set runAsUser=0")
    names = [c["name"] for c in _containers(spec) if _sc(c).get("runAsUser") == 0]
    if names:
        parts.append(f"{_who(names)} must not set runAsUser=0")
    return f"runAsUser=0 ({'; '.join(parts)})" if parts else None


def se_linux_options(spec: Obj, meta: Obj) -> str | None:
    options = [(spec.get("securityContext") or {}).get("seLinuxOptions") or {}]
    options += [_sc(c).get("seLinuxOptions") or {} for c in _containers(spec)]
    for o in options:
        if o.get("type", "") not in _SELINUX_TYPES or o.get("user") or o.get("role"):
            return "seLinuxOptions (pod or containers must not set forbidden securityContext.seLinuxOptions)"
    return None


def _seccomp(c_or_pod: Obj) -> str | None:
    return ((c_or_pod.get("securityContext") or {}).get("seccompProfile") or {}).get("type")


def seccomp_profile_baseline(spec: Obj, meta: Obj) -> str | None:
    parts = []
    if _seccomp(spec) == "Unconfined":
        parts.append('pod must not set securityContext.seccompProfile.type to "Unconfined"')
    names = [c["name"] for c in _containers(spec) if _seccomp(c) == "Unconfined"]
    if names:
        parts.append(
            f'{_who(names)} must not set securityContext.seccompProfile.type to "Unconfined"'
        )
    return f"seccompProfile ({'; '.join(parts)})" if parts else None


def seccomp_profile_restricted(spec: Obj, meta: Obj) -> str | None:
    if _windows(spec):
        return None
    allowed = ("RuntimeDefault", "Localhost")
    pod = _seccomp(spec)
    parts = []
    if pod is not None and pod not in allowed:
        parts.append(f'pod must not set securityContext.seccompProfile.type to "{pod}"')
    bad = [
        c["name"]
        for c in _containers(spec)
        if _seccomp(c) is not None and _seccomp(c) not in allowed
    ]
    if bad:
        parts.append(
            f'{_who(bad)} must not set securityContext.seccompProfile.type to "Unconfined"'
        )
    unset = [c["name"] for c in _containers(spec) if _seccomp(c) is None]
    if pod not in allowed and unset:
        parts.append(
            f'pod or {_who(unset)} must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"'
        )
    return f"seccompProfile ({'; '.join(parts)})" if parts else None


def sysctls(spec: Obj, meta: Obj) -> str | None:
    names = [
        s["name"]
        for s in (spec.get("securityContext") or {}).get("sysctls") or []
        if s["name"] not in SAFE_SYSCTLS
    ]
    return f"forbidden sysctls ({', '.join(names)})" if names else None


#: check id -> (level it belongs to, the check); a restricted check with an id of the form
#: `x_restricted` overrides `x_baseline`.
CHECKS: dict[str, tuple[str, Check]] = {
    "allowPrivilegeEscalation": ("restricted", allow_privilege_escalation),
    "appArmorProfile": ("baseline", app_armor_profile),
    "capabilities_baseline": ("baseline", capabilities_baseline),
    "capabilities_restricted": ("restricted", capabilities_restricted),
    "hostNamespaces": ("baseline", host_namespaces),
    "hostPathVolumes": ("baseline", host_path_volumes),
    "hostPorts": ("baseline", host_ports),
    "hostProbesAndHostLifecycle": ("baseline", host_probes_and_host_lifecycle),
    "hostProcess": ("baseline", host_process),
    "privileged": ("baseline", privileged),
    "procMount": ("baseline", proc_mount),
    "restrictedVolumes": ("restricted", restricted_volumes),
    "runAsNonRoot": ("restricted", run_as_non_root),
    "runAsUser": ("restricted", run_as_user),
    "seLinuxOptions": ("baseline", se_linux_options),
    "seccompProfile_baseline": ("baseline", seccomp_profile_baseline),
    "seccompProfile_restricted": ("restricted", seccomp_profile_restricted),
    "sysctls": ("baseline", sysctls),
}


def violations(pod_spec: Obj, level: str, metadata: Obj | None = None) -> list[str]:
    """The forbidden reasons of `pod_spec` (with its pod's `metadata`, for annotations) at
    `level`, in check-id order (empty: it passes)."""
    if level == "privileged":
        return []
    wanted = {
        cid: check
        for cid, (lv, check) in CHECKS.items()
        if lv == "baseline" or level == "restricted"
    }
    if level == "restricted":
        for cid in [c for c in wanted if c.endswith("_restricted")]:
            wanted.pop(cid.replace("_restricted", "_baseline"), None)
    found = []
    for cid in sorted(wanted):
        reason = wanted[cid](pod_spec, metadata or {})
        if reason is not None:
            found.append(reason)
    return found


def pod_security(store: Any, resource: str, obj: Obj) -> None:
    """The admission plugin: a 403 for a pod its namespace's enforce level forbids."""
    if resource != "pods":
        return
    meta = obj.get("metadata") or {}
    try:
        ns = store.get("namespaces", None, meta.get("namespace", "default"))
    except ApiError:
        return
    labels = (ns.get("metadata") or {}).get("labels") or {}
    level = labels.get(ENFORCE)
    if level not in LEVELS or level == "privileged":
        return
    version = labels.get(ENFORCE_VERSION) or "latest"
    found = violations(obj.get("spec") or {}, level, meta)
    if found:
        raise ApiError(
            403,
            "Forbidden",
            f'pods "{meta.get("name", "")}" is forbidden: violates PodSecurity '
            f'"{level}:{version}": {", ".join(found)}',
        )


__all__ = ["CHECKS", "ENFORCE", "LEVELS", "pod_security", "violations"]
