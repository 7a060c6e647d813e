"""RunSpec: the one validated description of a run on Kubernetes.

`build_run_spec` is the edge: it takes what the user typed (strings, lists of `K=V`, flags) and
either returns a RunSpec whose every field is already checked and converted, or raises
`UsageError` with one line naming the value and the form that was expected. Nothing below this
module (manifests, presets, the deployer) parses a user string again, so a bad value can never
reach the API server half-way through a deploy.

Pure: no I/O, no API calls. The only impure inputs are the clock and the random source used for a
generated run id, both overridable for tests.
"""

from __future__ import annotations

from nccl_k8s.spec import _kinds
from nccl_k8s.spec._build import (
    MIN_BUSBW_AUTO,
    build_run_spec,
    engine_numeric,
    min_busbw_auto_at,
    missing_devices,
    with_platform,
)
from nccl_k8s.spec._gangs import GANGS, Gang, GangScheduler
from nccl_k8s.spec._kinds import *  # noqa: F403  # the optional-kinds table: every name of its __all__
from nccl_k8s.spec._model import (
    CPU_PER_GPU,
    DEFAULT_IMAGE,
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_KUEUE_QUEUE,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    MASTER_PORT_MIN,
    MASTER_PORT_SPAN,
    MEMORY_PER_GPU,
    NETWORKS_ANNOTATION,
    NO_IBVERBS_REPOSITORIES,
    OPTION_BY_NAME,
    OPTIONS,
    RDMA_IMAGE,
    RESERVED_LABELS,
    RUN_ID_MAX_LEN,
    EngineMode,
    Launcher,
    Network,
    Qos,
    RunSpec,
    Security,
    Spread,
    Workload,
    generate_run_id,
    master_port_for,
    run_id_arg,
)
from nccl_k8s.spec._options import (
    LIFETIME,
    METADATA,
    MONITORING,
    NETWORK,
    PODS,
    SHAPE,
    Option,
    OptionKind,
)
from nccl_k8s.spec._selector import label_selector
from nccl_k8s.spec._values import (
    RESERVED_ENV,
    TaintEffect,
    Toleration,
    bytes_quantity,
    cpu_quantity,
    is_dns_subdomain,
    parse_duration,
    parse_toleration,
    quantity_value,
    timeout,
)

__all__ = [
    "CPU_PER_GPU",
    "DEFAULT_IMAGE",
    "GANGS",
    "LABEL_COMPONENT",
    "LABEL_INSTANCE",
    "LABEL_KUEUE_QUEUE",
    "LABEL_MANAGED_BY",
    "LABEL_NAME",
    "LIFETIME",
    "MASTER_PORT_MIN",
    "MASTER_PORT_SPAN",
    "MEMORY_PER_GPU",
    "METADATA",
    "MIN_BUSBW_AUTO",
    "MONITORING",
    "NETWORK",
    "NETWORKS_ANNOTATION",
    "NO_IBVERBS_REPOSITORIES",
    "OPTIONS",
    "OPTION_BY_NAME",
    "PODS",
    "RDMA_IMAGE",
    "RESERVED_ENV",
    "RESERVED_LABELS",
    "RUN_ID_MAX_LEN",
    "SHAPE",
    "EngineMode",
    "Gang",
    "GangScheduler",
    "Launcher",
    "Network",
    "Option",
    "OptionKind",
    "Qos",
    "RunSpec",
    "Security",
    "Spread",
    "TaintEffect",
    "Toleration",
    "Workload",
    "build_run_spec",
    "bytes_quantity",
    "cpu_quantity",
    "engine_numeric",
    "generate_run_id",
    "is_dns_subdomain",
    "label_selector",
    "master_port_for",
    "min_busbw_auto_at",
    "missing_devices",
    "parse_duration",
    "parse_toleration",
    "quantity_value",
    "run_id_arg",
    "timeout",
    "with_platform",
]
__all__ += _kinds.__all__
