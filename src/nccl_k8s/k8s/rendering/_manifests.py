"""RunSpec -> the Kubernetes objects of a run, as plain dicts. Pure and deterministic.

`render(spec)` returns the objects in the order they must be applied (ConfigMap, Service, then
the workload); `nccl-k8s render` prints them and `deploy` applies exactly them.

Objects of a run:
- ConfigMap `<run-id>-engine` (engine mode zipapp): the engine zipapp in binaryData, mounted
  read-only and put on PYTHONPATH, so a stock PyTorch image runs it.
- Service `<run-id>`: headless, publishing not-ready addresses, the pods' subdomain, so rank 0
  is `<run-id>-0.<run-id>` from the moment it has an IP.
- PodGroup `<run-id>` (`--gang`): the PodGroup of the scheduler's entry in the gang table
  (nccl_k8s.spec.GANGS; rendered by rendering._gangs), minMember = pods, so the run's pods are
  placed all together or not at all.
- ComputeDomain `<run-id>` (`--compute-domain`): NVIDIA's DRA driver forms an IMEX domain
  around the pods, which claim its channel (rendering._computedomain).
- PodMonitor `<run-id>` (`--pod-monitor`): Prometheus Operator's, scraping the pods' `metrics`
  port (every pod serves it unless --metrics-port 0, annotated prometheus.io/scrape for plain
  Prometheus too).
- NetworkPolicy `<run-id>` (unless `--network-policy off`): into the run's pods only the run's
  own pods (every port: the rendezvous store and NCCL's ephemeral ports) and, on the metrics
  port, the peers of `--metrics-from` (every namespace when none). Not rendered with host
  networking, where policies do not apply (`--network-policy on` refuses it).
- Job `<run-id>` (Indexed, one pod per node) or StatefulSet `<run-id>` (continuous mode).

Every container runs under a small wrapper (POD_WRAPPER, Python's standard library only) that
streams the command's output and, when it ends, prints rank 0's result lines again as one
bracketed block, and a bounded digest of NCCL's lines as another: kubelets rotate container logs
(containerLogMaxSize, 10Mi by default) and the log API serves only the newest file, so at scale
the first result lines of a noisy run are gone from it while the blocks, printed last, are not.
`results` reads the last complete block (k8s.run._collect).

Ownership: the other objects should be deleted with the workload, so they get an
ownerReference to it. An ownerReference needs the owner's uid, which the API server assigns at
creation, so no rendered object carries one (a made-up uid would make the garbage collector
delete them at once as orphans). The deployer patches them on once the workload exists
(`attach_owner`, k8s.run._deploy); a run rendered with `adopt` (`nccl-k8s render --adopt`)
carries a ServiceAccount, Role and RoleBinding with which an init container of its pod of index 0
patches them itself (rendering._adopt). No other container of any pod holds an API token.

The facts the objects are made of live elsewhere, so that a module wanting one does not import
the renderer: names and ports in rendering._names, the pods' requests and limits in
rendering._resources, the gang schedulers in the spec's gang table, the fabric and privilege
presets in rendering._presets.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import re
import shlex

from nccl_k8s.bench.config import METRICS_ADDR_ENV, NODE_NAME_ENV
from nccl_k8s.errors import UsageError, install_hint
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.rendering._adopt import with_adoption
from nccl_k8s.k8s.rendering._computedomain import (
    apply_compute_domain,
    compute_domain_name,
    compute_domain_spec,
)
from nccl_k8s.k8s.rendering._gangs import gang_binding, pod_group_spec, scheduler_name
from nccl_k8s.k8s.rendering._health import apply_healthy_only
from nccl_k8s.k8s.rendering._launcher import launcher_args
from nccl_k8s.k8s.rendering._meta import common_labels, object_metadata, selector_labels
from nccl_k8s.k8s.rendering._names import (
    CONTAINER_NAME,
    ENGINE_MOUNT,
    METRICS_PATH,
    METRICS_PORT_NAME,
    PLATFORM_ANNOTATION,
    PSA_ANNOTATION,
    RENDERED_ANNOTATION,
    RESULTS_MOUNT,
    USER_ENV_ANNOTATION,
    WORKER,
)
from nccl_k8s.k8s.rendering._netpolicy import network_policy, renders_network_policy
from nccl_k8s.k8s.rendering._platform import apply_platform, check_platform, platform_of
from nccl_k8s.k8s.rendering._presets import (
    MESH_OPT_OUT_ANNOTATIONS,
    MESH_OPT_OUT_LABELS,
    SecurityProfile,
    pod_env,
    pod_security_level,
    security_profile,
    uses_host_network,
)
from nccl_k8s.k8s.rendering._resources import pod_resources
from nccl_k8s.k8s.rendering._topology import apply_topology
from nccl_k8s.k8s.rendering._wrapper import ENGINE_DIGEST_ENV, POD_WRAPPER, WRAPPER_ENV
from nccl_k8s.k8s.rendering._zipapp import ZIPAPP_NAME, carries_prometheus_client, engine_zipapp
from nccl_k8s.spec import (
    COMPUTE_DOMAIN,
    GANGS,
    LABEL_COMPONENT,
    LABEL_KUEUE_QUEUE,
    NETWORKS_ANNOTATION,
    POD_MONITOR,
    RunSpec,
)

_DOLLAR = re.compile(r"\$(?=[$(])")


def _escape_refs(text: str) -> str:
    """Kubernetes expands `$(VAR)` in command, args and env values and reads `$$` as `$`: a `$`
    before `(` or `$` is doubled, so the container sees exactly `text`."""
    return _DOLLAR.sub("$$", text)


def configmap(spec: RunSpec) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_metadata(spec, spec.configmap_name, **{LABEL_COMPONENT: "engine"}),
        # Immutable: it never changes for a run, and kubelets then stop watching it, which
        # matters with a thousand pods mounting it.
        "immutable": True,
        "binaryData": {ZIPAPP_NAME: base64.b64encode(engine_zipapp()).decode("ascii")},
    }


def service(spec: RunSpec) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(spec, spec.service_name, **{LABEL_COMPONENT: "rendezvous"}),
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


def _wants_results_file(spec: RunSpec) -> bool:
    return spec.pvc is not None and not any(
        a == "--json" or a.startswith("--json=") for a in spec.engine_args
    )


def _engine_flags(spec: RunSpec) -> list[str]:
    """The engine flags the deployer sets (the user's may not: spec refuses them): the GPUs each
    pod asks for (a rank that sees none then fails at start, instead of `--backend auto`
    measuring the CPU), continuous sweeps for a StatefulSet, the metrics port every pod serves."""
    flags: list[str] = []
    if spec.workload == "statefulset":
        flags += ["--sweeps", "0", "--sweep-interval", str(spec.interval_s or 0)]
    if spec.metrics_port:
        flags += ["--metrics-port", str(spec.metrics_port)]
    return [*flags, "--gpus-requested", str(spec.gpus_per_node)]


def _job_container_args(spec: RunSpec) -> tuple[list[str], list[str]]:
    args = [*launcher_args(spec, "$(JOB_COMPLETION_INDEX)"), *_engine_flags(spec)]
    args += [_escape_refs(a) for a in spec.engine_args]
    if _wants_results_file(spec):
        args += ["--json", f"{RESULTS_MOUNT}/{spec.run_id}.json"]
    return ["python3", "-c", POD_WRAPPER], args


#: The StatefulSet's container: its node rank is its ordinal (the end of its pod's name); the
#: engine itself sweeps until stopped (--sweeps 0), so its metrics server and counters live
#: across sweeps and a failed sweep shows in them, in its result lines and in `status`, while a
#: rank that dies ends the container (the kubelet restarts it: restarts, CrashLoopBackOff).
_SOAK_SCRIPT = """\
rank="${{POD_NAME##*-}}"
exec python3 -c "$NCCL_K8S_WRAPPER" {launcher} "$@"{results}
"""


def _statefulset_container_args(spec: RunSpec) -> tuple[list[str], list[str]]:
    # The engine flags travel as the shell's positional parameters ("$@"), never spliced into
    # the script, so no flag can be read as shell syntax.
    launcher = " ".join(shlex.quote(a) for a in launcher_args(spec, "RANK_PLACEHOLDER"))
    launcher = launcher.replace("RANK_PLACEHOLDER", '"$rank"')
    results = ""
    if _wants_results_file(spec):  # rewritten after every sweep: the latest
        results = f' --json "{RESULTS_MOUNT}/{spec.run_id}.json"'
    script = _SOAK_SCRIPT.format(launcher=launcher, results=results)
    engine = [*_engine_flags(spec), *(_escape_refs(a) for a in spec.engine_args)]
    return ["/bin/sh", "-c"], [_escape_refs(script), "nccl-k8s", *engine]


def _env(spec: RunSpec) -> list[Obj]:
    env: list[Obj] = [
        {"name": "NCCL_K8S_RUN_ID", "value": spec.run_id},
        # The Kubernetes node of this pod (the downward API): results, the metrics' `node` label
        # and the culprit lines name each rank's node, not only its pod's host name.
        {"name": NODE_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
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
        env.append({"name": WRAPPER_ENV, "value": POD_WRAPPER})
    if spec.metrics_port:
        # The metrics server listens on the pod's own address, which Prometheus scrapes; not on
        # every address, where pods that share a network stack (hostNetwork without a hostPort
        # check, or a test cluster) would fight over the port. `--env
        # NCCL_K8S_METRICS_ADDR=0.0.0.0` listens everywhere (kubectl port-forward dials loopback).
        env.append({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
        if not any(k == METRICS_ADDR_ENV for k, _ in spec.env):
            env.append({"name": METRICS_ADDR_ENV, "value": "$(POD_IP)"})
    if spec.engine == "zipapp":
        engine = f"{ENGINE_MOUNT}/{ZIPAPP_NAME}"
        digest = hashlib.sha256(engine_zipapp()).hexdigest()
        env.append({"name": "PYTHONPATH", "value": engine})
        env.append({"name": ENGINE_DIGEST_ENV, "value": f"{digest}  {engine}"})
    user = dict(spec.env)  # the user's values are data, never references; presets may be
    env += [{"name": k, "value": _escape_refs(v) if k in user else v} for k, v in pod_env(spec)]
    return env


def _affinity(spec: RunSpec) -> Obj | None:
    out: Obj = {}
    if spec.node_names:
        # By the node's name (a field every node has), not the hostname label, which a node
        # may lack or carry with another value.
        fields = [{"key": "metadata.name", "operator": "In", "values": list(spec.node_names)}]
        out["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": fields}]
            }
        }
    term = {
        "labelSelector": {"matchLabels": selector_labels(spec)},
        "topologyKey": "kubernetes.io/hostname",
    }
    if spec.spread == "required":
        out["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    elif spec.spread == "preferred":
        out["podAntiAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": term}
            ]
        }
    return out or None


def _volumes(spec: RunSpec) -> tuple[list[Obj], list[Obj]]:
    """(the container's volumeMounts, the pod's volumes): /dev/shm, the engine, the results."""
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
    return mounts, volumes


def _ports(spec: RunSpec, host_network: bool) -> list[Obj]:
    ports: list[Obj] = []
    if host_network:
        # In the node's network namespace the rendezvous port is the node's: declared as a
        # hostPort, the scheduler keeps two runs that would both bind it off one node.
        ports.append(
            {
                "name": "rendezvous",
                "containerPort": spec.master_port,
                "hostPort": spec.master_port,
                "protocol": "TCP",
            }
        )
    if spec.metrics_port:
        # Named, so a PodMonitor (and a user's scrape config) can select it by name; a hostPort
        # under hostNetwork for the same reason as the rendezvous port.
        metrics: Obj = {"name": METRICS_PORT_NAME, "containerPort": spec.metrics_port}
        if host_network:
            metrics["hostPort"] = spec.metrics_port
        metrics["protocol"] = "TCP"
        ports.append(metrics)
    return ports


def _container(
    spec: RunSpec, profile: SecurityProfile, host_network: bool, mounts: list[Obj]
) -> Obj:
    if spec.workload == "job":
        command, args = _job_container_args(spec)
    else:
        command, args = _statefulset_container_args(spec)
    resources = pod_resources(spec)
    container: Obj = {
        "name": CONTAINER_NAME,
        "image": spec.image,
        "imagePullPolicy": "IfNotPresent",
        "command": command,
        "args": args,
        "env": _env(spec),
        "resources": {"requests": resources.requests, "limits": resources.limits},
        "volumeMounts": mounts,
    }
    ports = _ports(spec, host_network)
    if ports:
        container["ports"] = ports
    if profile.container_security_context:
        container["securityContext"] = copy.deepcopy(profile.container_security_context)
    return container


def _pod_spec(spec: RunSpec) -> Obj:
    profile = security_profile(spec.security)
    host_network = uses_host_network(spec)
    pod: Obj = {
        "restartPolicy": "Never" if spec.workload == "job" else "Always",
        # The benchmark needs no API access: no token (with adoption, rendering._adopt, only
        # its init container mounts one).
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
    optional: list[tuple[str, object]] = [
        ("schedulerName", scheduler_name(spec)),
        ("priorityClassName", spec.priority_class),
        ("runtimeClassName", spec.runtime_class),
        ("nodeSelector", dict(spec.node_selector) or None),
        ("tolerations", [t.to_dict() for t in spec.tolerations] or None),
        ("affinity", _affinity(spec)),
        ("securityContext", copy.deepcopy(profile.pod_security_context) or None),
    ]
    pod.update((key, value) for key, value in optional if value is not None)
    mounts, volumes = _volumes(spec)
    pod["containers"] = [_container(spec, profile, host_network, mounts)]
    pod["volumes"] = volumes
    return pod


def _podobject_metadata(spec: RunSpec) -> Obj:
    gang_labels, gang_annotations = gang_binding(spec)
    labels = {**dict(MESH_OPT_OUT_LABELS), **common_labels(spec), **selector_labels(spec)}
    labels.update(gang_labels)
    annotations = {
        **dict(MESH_OPT_OUT_ANNOTATIONS),
        **gang_annotations,
        RENDERED_ANNOTATION: spec.run_id,
    }
    if spec.env:  # which values `bundle` redacts (the user's may be secrets)
        annotations[USER_ENV_ANNOTATION] = ",".join(k for k, _ in spec.env)
    if spec.network_attachments:
        annotations[NETWORKS_ANNOTATION] = ",".join(spec.network_attachments)
    if spec.metrics_port:
        # The prometheus.io annotation convention (Prometheus' kubernetes_sd example relabelling
        # and many Helm charts' scrape configs read it), as the seed annotated its pods.
        annotations.update(
            {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(spec.metrics_port),
                "prometheus.io/path": METRICS_PATH,
            }
        )
    # The user's annotations last: an explicit choice (say, Istio injection after all) wins.
    annotations.update(spec.annotations)
    annotations.update(spec.pod_annotations)
    return {"labels": labels, "annotations": annotations}


def pod_template(spec: RunSpec) -> Obj:
    """The pod every rank group runs in: one per node, G GPUs, their launcher inside, with the
    pieces of its platform (spec.platforms) for NCCL to reach the fabric."""
    template = {"metadata": _podobject_metadata(spec), "spec": _pod_spec(spec)}
    apply_platform(spec, template)
    apply_compute_domain(spec, template)
    apply_topology(spec, template, selector_labels(spec))
    apply_healthy_only(spec, template)  # last: into every node selector term there is
    return template


def _workloadobject_metadata(spec: RunSpec) -> Obj:
    meta = object_metadata(spec, spec.workload_name, **{LABEL_COMPONENT: WORKER})
    if spec.queue is not None:
        meta["labels"][LABEL_KUEUE_QUEUE] = spec.queue
    meta.setdefault("annotations", {})[PSA_ANNOTATION] = pod_security_level(spec)
    platform = platform_of(spec)
    if platform.fabric:  # what the run's logs must show it used (run._fabric checks)
        meta["annotations"][PLATFORM_ANNOTATION] = platform.name
    return meta


def job(spec: RunSpec) -> Obj:
    meta = _workloadobject_metadata(spec)
    job_spec: Obj = {
        "completionMode": "Indexed",
        "completions": spec.nodes,
        "parallelism": spec.nodes,
        # The run is a gang: torchrun's rendezvous is static, so a replacement pod could never
        # rejoin the ranks that are still up. Any rank lost fails the whole run, at once.
        "backoffLimit": 0,
        "podFailurePolicy": {
            "rules": [
                # Eviction, preemption, node drain: not the benchmark's fault, but the rank is
                # gone and the others would wait out their NCCL timeouts for it.
                {
                    "action": "FailJob",
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
    meta = _workloadobject_metadata(spec)
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


def pod_group(spec: RunSpec) -> Obj:
    """The gang's PodGroup, of the kind the --gang scheduler reads (rendering._gangs)."""
    if spec.gang is None:
        raise ValueError("pod_group needs a RunSpec with a gang")
    gang = GANGS[spec.gang]
    return {
        "apiVersion": gang.api_version,
        "kind": gang.kind,
        "metadata": object_metadata(spec, spec.run_id, **{LABEL_COMPONENT: "gang"}),
        "spec": pod_group_spec(spec),
    }


def compute_domain(spec: RunSpec) -> Obj:
    """The run's ComputeDomain (--compute-domain; rendering._computedomain)."""
    return {
        "apiVersion": COMPUTE_DOMAIN.api_version,
        "kind": COMPUTE_DOMAIN.kind,
        "metadata": object_metadata(
            spec, compute_domain_name(spec), **{LABEL_COMPONENT: "compute-domain"}
        ),
        "spec": compute_domain_spec(spec),
    }


def pod_monitor(spec: RunSpec) -> Obj:
    """A Prometheus Operator PodMonitor: the run's pods, their `metrics` port. In the run's
    namespace (the PodMonitor's default); a Prometheus selects it by its labels (--label)."""
    return {
        "apiVersion": POD_MONITOR.api_version,
        "kind": POD_MONITOR.kind,
        "metadata": object_metadata(spec, spec.run_id, **{LABEL_COMPONENT: "metrics"}),
        "spec": {
            "selector": {"matchLabels": selector_labels(spec)},
            "podMetricsEndpoints": [{"port": METRICS_PORT_NAME, "path": METRICS_PATH}],
        },
    }


def render(spec: RunSpec, *, adopt: bool = False) -> list[Obj]:
    """The run's objects in apply order; the same spec always gives the same objects. With
    `adopt`, the objects with which the run's pods make the others dependents of the workload
    come first (rendering._adopt): `nccl-k8s render` prints them, `deploy` adopts itself.
    `--min-busbw auto` becomes the floor of the spec's platform and machine (results.floors)."""
    from nccl_k8s.results.floors import with_floor  # the results package: only when rendering

    spec = with_floor(spec)[0]
    check_platform(spec)
    objs: list[Obj] = []
    if spec.engine == "zipapp":
        if spec.metrics_port and not carries_prometheus_client(engine_zipapp()):
            raise UsageError(
                f"--metrics-port {spec.metrics_port}: the engine zipapp carries prometheus_client "
                f"from this installation, which has none: {install_hint('k8s')} (it brings "
                "prometheus_client), or --metrics-port 0 for no metrics",
                key="--metrics-port",
            )
        objs.append(configmap(spec))
    if renders_network_policy(spec):
        objs.append(network_policy(spec))  # before the pods it protects
    objs.append(service(spec))
    if spec.pod_monitor:
        objs.append(pod_monitor(spec))
    if spec.gang is not None:
        objs.append(pod_group(spec))  # before the pods that name it
    if spec.compute_domain:
        objs.append(compute_domain(spec))  # its controller makes the template the pods claim
    objs.append(job(spec) if spec.workload == "job" else statefulset(spec))
    if adopt:
        return with_adoption(
            objs, lambda name: object_metadata(spec, name, **{LABEL_COMPONENT: "adoption"})
        )
    return objs


__all__ = [
    "common_labels",
    "compute_domain",
    "configmap",
    "job",
    "network_policy",
    "pod_group",
    "pod_monitor",
    "pod_template",
    "render",
    "selector_labels",
    "service",
    "statefulset",
]
