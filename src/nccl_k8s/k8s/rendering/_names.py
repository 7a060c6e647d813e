"""The names and keys a run's objects carry: what the container is called (logs are read from
it), the app name our labels carry, the annotations written on the workload, the pods' metrics
port, mounts and component. Constants only, so a reader of one name does not import the
renderer.

The label keys themselves are the spec's (nccl_k8s.spec.LABEL_*): the spec refuses user labels
with those keys.
"""

from __future__ import annotations

#: The value of app.kubernetes.io/name and app.kubernetes.io/managed-by on every object of a run.
APP_NAME = "nccl-k8s"

#: The engine's container in every pod (the one whose log holds the results).
CONTAINER_NAME = "bench"

#: On the workload: the strictest Pod Security Admission level its pods pass, so a namespace's
#: `pod-security.kubernetes.io/enforce` label can be checked against it before pods are refused.
PSA_ANNOTATION = "nccl-k8s/pod-security"

#: On every object `render` prints and its pods: the run it was rendered for. Objects a user
#: applied from `render` (`render | kubectl apply -f -`, a GitOps repository) have no nccl-k8s
#: field manager; this mark, equal to the object's run label, is how cleanup knows that our
#: renderer made them (a user's object that merely copies our labels does not carry it).
RENDERED_ANNOTATION = "nccl-k8s/rendered-for"

#: On the pods (and the workload's pod template) of a run given `--env`: the names the user set,
#: comma-separated, so that `bundle` redacts their values (they may be secrets) and no other.
USER_ENV_ANNOTATION = "nccl-k8s/user-env"

#: On the workload of a run rendered for a fabric platform (spec.platforms): its name, so that
#: whoever reads the run later (deploy's end, `results`) checks the fabric its logs show.
PLATFORM_ANNOTATION = "nccl-k8s/platform"

#: The annotation a stopped Job carries: why nccl-k8s stopped it (its Failed condition then says
#: DeadlineExceeded, which is how it was stopped, not why).
STOPPED_ANNOTATION = "nccl-k8s/stopped-because"

#: The containerPort the engine serves Prometheus metrics on, by name, and the path.
METRICS_PORT_NAME = "metrics"
METRICS_PATH = "/metrics"

#: Where the engine zipapp (engine mode zipapp) and the results PVC (--pvc) are mounted.
ENGINE_MOUNT = "/opt/nccl-k8s"
RESULTS_MOUNT = "/workspace/results"

#: The app.kubernetes.io/component of the pods and their workload.
WORKER = "worker"

__all__ = [
    "APP_NAME",
    "CONTAINER_NAME",
    "ENGINE_MOUNT",
    "METRICS_PATH",
    "METRICS_PORT_NAME",
    "PLATFORM_ANNOTATION",
    "PSA_ANNOTATION",
    "RENDERED_ANNOTATION",
    "RESULTS_MOUNT",
    "STOPPED_ANNOTATION",
    "USER_ENV_ANNOTATION",
    "WORKER",
]
