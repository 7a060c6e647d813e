"""RunSpec -> the Kubernetes objects of a run, as plain dicts. Pure and deterministic.

`render(spec)` returns the objects in the order they must be applied (ConfigMap, Service, then
the workload); `nccl-k8s render` prints them and `deploy` applies exactly them.

Objects of a run:
- ConfigMap `<run-id>-engine` (engine mode zipapp): the engine zipapp in binaryData, mounted
  read-only and put on PYTHONPATH, so a stock PyTorch image runs it.
- Service `<run-id>`: headless, publishing not-ready addresses, the pods' subdomain, so rank 0
  is `<run-id>-0.<run-id>` from the moment it has an IP.
- Job `<run-id>` (Indexed, one pod per node) or StatefulSet `<run-id>` (continuous mode).

Ownership: the ConfigMap and Service should be deleted with the workload, so they carry an
ownerReference to it. An ownerReference needs the owner's uid, which the API server assigns at
creation; `render` therefore prints them without one (a made-up uid would make the garbage
collector delete them at once as orphans) and the deployer calls `attach_owner` with the created
workload and applies the ConfigMap and Service again.
"""

from __future__ import annotations

import base64
import copy
import json
import shlex
from typing import Literal

import yaml

from nccl_k8s.k8s._presets import pod_env, security_profile
from nccl_k8s.k8s._types import Obj
from nccl_k8s.k8s._zipapp import ZIPAPP_NAME, engine_zipapp
from nccl_k8s.spec import (
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_KUEUE_QUEUE,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    RunSpec,
)

APP_NAME = "nccl-k8s"
CONTAINER_NAME = "bench"
ENGINE_MOUNT = "/opt/nccl-k8s"
RESULTS_MOUNT = "/workspace/results"
WORKER = "worker"


def common_labels(spec: RunSpec) -> dict[str, str]:
    """The labels every object of the run carries: user labels, then ours (ours cannot be
    overridden; the spec refuses user labels with these keys)."""
    labels = dict(spec.labels)
    labels.update(
        {
            LABEL_NAME: APP_NAME,
            LABEL_INSTANCE: spec.run_id,
            LABEL_MANAGED_BY: APP_NAME,
        }
    )
    return labels


def selector_labels(spec: RunSpec) -> dict[str, str]:
    """What selects the run's pods (Service, StatefulSet selector, anti-affinity)."""
    return {LABEL_NAME: APP_NAME, LABEL_INSTANCE: spec.run_id, LABEL_COMPONENT: WORKER}


def _metadata(spec: RunSpec, name: str, **extra_labels: str) -> Obj:
    meta: Obj = {"name": name}
    if spec.namespace is not None:
        meta["namespace"] = spec.namespace
    meta["labels"] = {**common_labels(spec), **extra_labels}
    if spec.annotations:
        meta["annotations"] = dict(spec.annotations)
    return meta


def _escape_refs(text: str) -> str:
    """Kubernetes expands `$(VAR)` in command and args; `$$(` keeps a literal `$(`."""
    return text.replace("$(", "$$(")


def configmap(spec: RunSpec) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(spec, spec.configmap_name, **{LABEL_COMPONENT: "engine"}),
        # Immutable: it never changes for a run, and kubelets then stop watching it, which
        # matters with a thousand pods mounting it.
        "immutable": True,
        "binaryData": {ZIPAPP_NAME: base64.b64encode(engine_zipapp()).decode("ascii")},
    }


def service(spec: RunSpec) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec, spec.service_name, **{LABEL_COMPONENT: "rendezvous"}),
        "spec": {
            "clusterIP": "None",
            # Rank 0 must be resolvable before it is Ready (it never reports Ready: no probe),
            # or the other ranks could not find the rendezvous.
            "publishNotReadyAddresses": True,
            "selector": selector_labels(spec),
            "ports": [
                {
                    "name": "rendezvous",
                    "port": spec.master_port,
                    "targetPort": spec.master_port,
                    "protocol": "TCP",
                }
            ],
        },
    }


def _torchrun_args(spec: RunSpec, node_rank: str) -> list[str]:
    return [
        f"--nnodes={spec.nodes}",
        f"--nproc-per-node={spec.gpus_per_node}",
        f"--node-rank={node_rank}",
        f"--master-addr={spec.master_addr}",
        f"--master-port={spec.master_port}",
        # Static rendezvous: how long the pods wait for each other (image pulls, scheduling).
        f"--rdzv-conf=timeout={spec.rendezvous_timeout_s}",
        # A rank that fails has no result worth retrying for: fail the pod, fail the run.
        "--max-restarts=0",
        "-m",
        "nccl_k8s.bench",
    ]


def _wants_results_file(spec: RunSpec) -> bool:
    return spec.pvc is not None and not any(
        a == "--json" or a.startswith("--json=") for a in spec.engine_args
    )


def _job_container_args(spec: RunSpec) -> tuple[list[str], list[str]]:
    args = _torchrun_args(spec, "$(JOB_COMPLETION_INDEX)")
    args += [_escape_refs(a) for a in spec.engine_args]
    if _wants_results_file(spec):
        args += ["--json", f"{RESULTS_MOUNT}/{spec.run_id}.json"]
    return ["torchrun"], args


_SOAK_SCRIPT = """\
rank="${{POD_NAME##*-}}"
i=0
while :; do
  torchrun {torchrun} "$@"{results}
  echo "nccl-k8s: sweep $i exited with status $?" >&2
  i=$((i + 1))
  sleep {interval}
done
"""


def _statefulset_container_args(spec: RunSpec) -> tuple[list[str], list[str]]:
    # The engine flags travel as the shell's positional parameters ("$@"), never spliced into
    # the script, so no flag can be read as shell syntax.
    torchrun = " ".join(shlex.quote(a) for a in _torchrun_args(spec, "RANK_PLACEHOLDER"))
    torchrun = torchrun.replace("RANK_PLACEHOLDER", '"$rank"')
    results = ""
    if _wants_results_file(spec):
        results = f' --json "{RESULTS_MOUNT}/{spec.run_id}-$i.json"'
    script = _SOAK_SCRIPT.format(torchrun=torchrun, results=results, interval=spec.interval_s)
    args = [_escape_refs(script), "nccl-k8s"] + [_escape_refs(a) for a in spec.engine_args]
    return ["/bin/sh", "-c"], args


def _env(spec: RunSpec) -> list[Obj]:
    env: list[Obj] = [{"name": "NCCL_K8S_RUN_ID", "value": spec.run_id}]
    if spec.workload == "job":
        # The Job controller injects this too, but only on clusters new enough; stating it keeps
        # the pod's command valid wherever the annotation exists.
        env.append(
            {
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {
                    "fieldRef": {
                        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                    }
                },
            }
        )
    else:
        env.append({"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    if spec.engine == "zipapp":
        env.append({"name": "PYTHONPATH", "value": f"{ENGINE_MOUNT}/{ZIPAPP_NAME}"})
    env += [{"name": k, "value": v} for k, v in pod_env(spec)]
    return env


def _resources(spec: RunSpec) -> Obj:
    # Devices are requested = limited (extended resources must be); memory too, so the pod is
    # not OOM-killed for using what it was granted; CPU only requested (limits throttle NCCL's
    # proxy threads and skew small-message latency).
    limits: dict[str, str] = {spec.gpu_resource: str(spec.gpus_per_node)}
    limits.update({name: str(count) for name, count in spec.rdma_resources})
    requests = dict(limits)
    if spec.cpu is not None:
        requests["cpu"] = spec.cpu
    if spec.memory is not None:
        requests["memory"] = spec.memory
        limits["memory"] = spec.memory
    return {"requests": requests, "limits": limits}


def _affinity(spec: RunSpec) -> Obj | None:
    term = {
        "labelSelector": {"matchLabels": selector_labels(spec)},
        "topologyKey": "kubernetes.io/hostname",
    }
    if spec.spread == "required":
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    if spec.spread == "preferred":
        return {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "podAffinityTerm": term}
                ]
            }
        }
    return None


def pod_template(spec: RunSpec) -> Obj:
    """The pod every rank group runs in: one per node, G GPUs, torchrun inside."""
    profile = security_profile(spec.security)
    host_network = spec.host_network or profile.host_network
    if spec.workload == "job":
        command, args = _job_container_args(spec)
    else:
        command, args = _statefulset_container_args(spec)

    mounts: list[Obj] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    volumes: list[Obj] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size}}
    ]
    if spec.engine == "zipapp":
        mounts.append({"name": "engine", "mountPath": ENGINE_MOUNT, "readOnly": True})
        volumes.append(
            {
                "name": "engine",
                "configMap": {
                    "name": spec.configmap_name,
                    "items": [{"key": ZIPAPP_NAME, "path": ZIPAPP_NAME}],
                    "defaultMode": 0o444,
                },
            }
        )
    if spec.pvc is not None:
        mounts.append({"name": "results", "mountPath": RESULTS_MOUNT})
        volumes.append({"name": "results", "persistentVolumeClaim": {"claimName": spec.pvc}})

    container: Obj = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "args": args,
        "env": _env(spec),
        "resources": _resources(spec),
        "volumeMounts": mounts,
    }
    if profile.container_security_context:
        container["securityContext"] = copy.deepcopy(profile.container_security_context)

    pod: Obj = {
        "restartPolicy": "Never" if spec.workload == "job" else "Always",
        # The pods need no API access: no token, no RBAC objects.
        "automountServiceAccountToken": False,
        # Service links would put every Service of the namespace into the environment; a Service
        # named `master` would then shadow torchrun's MASTER_PORT.
        "enableServiceLinks": False,
    }
    if spec.workload == "job":
        pod["subdomain"] = spec.service_name  # StatefulSet pods get it from serviceName
    if host_network:
        pod["hostNetwork"] = True
        # Without it a host-network pod resolves with the node's resolver and cannot find rank 0.
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"
    if profile.host_ipc:
        pod["hostIPC"] = True
    if spec.scheduler_name is not None:
        pod["schedulerName"] = spec.scheduler_name
    if spec.priority_class is not None:
        pod["priorityClassName"] = spec.priority_class
    if spec.node_selector:
        pod["nodeSelector"] = dict(spec.node_selector)
    if spec.tolerations:
        pod["tolerations"] = [t.to_dict() for t in spec.tolerations]
    affinity = _affinity(spec)
    if affinity is not None:
        pod["affinity"] = affinity
    if profile.pod_security_context:
        pod["securityContext"] = copy.deepcopy(profile.pod_security_context)
    pod["containers"] = [container]
    pod["volumes"] = volumes

    meta: Obj = {"labels": {**common_labels(spec), **selector_labels(spec)}}
    if spec.annotations or spec.pod_annotations:
        meta["annotations"] = {**dict(spec.annotations), **dict(spec.pod_annotations)}
    return {"metadata": meta, "spec": pod}


def job(spec: RunSpec) -> Obj:
    meta = _metadata(spec, spec.workload_name, **{LABEL_COMPONENT: WORKER})
    if spec.queue is not None:
        meta["labels"][LABEL_KUEUE_QUEUE] = spec.queue
    job_spec: Obj = {
        "completionMode": "Indexed",
        "completions": spec.nodes,
        "parallelism": spec.nodes,
        "backoffLimit": spec.backoff_limit,
        "podFailurePolicy": {
            "rules": [
                # Eviction, preemption, node drain: not the benchmark's fault, not counted.
                {
                    "action": "Ignore",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                },
                # A rank exited non-zero: the run has failed; end it now rather than let the
                # other ranks wait out their NCCL timeouts.
                {
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": CONTAINER_NAME,
                        "operator": "NotIn",
                        "values": [0],
                    },
                },
            ]
        },
    }
    if spec.active_deadline_s is not None:
        job_spec["activeDeadlineSeconds"] = spec.active_deadline_s
    if spec.ttl_s is not None:
        job_spec["ttlSecondsAfterFinished"] = spec.ttl_s
    job_spec["template"] = pod_template(spec)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": job_spec}


def statefulset(spec: RunSpec) -> Obj:
    meta = _metadata(spec, spec.workload_name, **{LABEL_COMPONENT: WORKER})
    if spec.queue is not None:
        meta["labels"][LABEL_KUEUE_QUEUE] = spec.queue
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta,
        "spec": {
            "serviceName": spec.service_name,
            "replicas": spec.nodes,
            # Every rank must be up for the rendezvous; ordered start would deadlock on rank 0.
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector_labels(spec)},
            "template": pod_template(spec),
        },
    }


def render(spec: RunSpec) -> list[Obj]:
    """The run's objects in apply order; the same spec always gives the same objects."""
    objs: list[Obj] = []
    if spec.engine == "zipapp":
        objs.append(configmap(spec))
    objs.append(service(spec))
    objs.append(job(spec) if spec.workload == "job" else statefulset(spec))
    return objs


def attach_owner(objs: list[Obj], owner: Obj) -> list[Obj]:
    """Copies of `objs` in which every object except `owner` itself is owned by `owner`.

    Call with the workload as the API server returned it (it has metadata.uid); apply the result
    so that deleting the workload cascades to the ConfigMap and Service.
    """
    meta = owner.get("metadata", {})
    uid = meta.get("uid")
    if not uid:
        raise ValueError(
            f"{owner.get('kind')} {meta.get('name')!r} has no metadata.uid: pass the created object"
        )
    ref = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": uid,
    }
    out: list[Obj] = []
    for obj in objs:
        obj = copy.deepcopy(obj)
        same = obj.get("kind") == owner["kind"] and obj["metadata"].get("name") == meta["name"]
        if not same:
            refs = [r for r in obj["metadata"].get("ownerReferences", []) if r.get("uid") != uid]
            obj["metadata"]["ownerReferences"] = [*refs, ref]
        out.append(obj)
    return out


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the soak script) as literal blocks, so the YAML reads like the script."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_representer)


def dump(objs: list[Obj], fmt: Literal["yaml", "json"] = "yaml") -> str:
    """Objects as a multi-document YAML stream, or as a JSON `List` (kubectl's -o json shape)."""
    if fmt == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}, indent=2) + "\n"
    return yaml.dump_all(objs, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)


__all__ = [
    "APP_NAME",
    "CONTAINER_NAME",
    "RESULTS_MOUNT",
    "attach_owner",
    "common_labels",
    "configmap",
    "dump",
    "job",
    "pod_template",
    "render",
    "selector_labels",
    "service",
    "statefulset",
]
