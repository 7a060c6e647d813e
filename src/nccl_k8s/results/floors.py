"""Expected floors: the bus bandwidth a healthy cluster of one platform and machine type at
least reaches, per collective, node count and message size, each from a public source.

One home for the fact: `FLOORS`, read by `nodes check` (k8s.nodes: is the whole cluster below
the floor?), by `deploy`/`render` (`--min-busbw auto` resolves here: `with_floor`) and by
docs/floors.md (`python -m nccl_k8s.results.floors docs/floors.md`, a test checks it is current).

A row holds only what its source states, and how the floor was derived from it: a published
threshold as it is, or a published healthy measurement times a stated margin. A row without a
source that was read is not added; where no row matches, the tool says so and asks for a number.

Matching is strict, because a floor that does not hold for the run at hand fails a healthy
cluster: the platform, machine type, collective, node count, GPUs per node and the NCCL
algorithm setting (NCCL_ALGO, or NCCL's own choice) must be the row's, and the run must read
its bandwidth at sizes of at least the row's (busbw grows with the message size: a run whose
compared sizes are all at least `size_bytes` reaches what the source measured there). Two nodes
on NCCL's own choice may run Tree or NVLS, whose busbw can exceed the NIC
(NVIDIA/nccl-tests#196): a row of NCCL's choice says nothing of a Ring-only run, nor the
reverse.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

from nccl_k8s.errors import UsageError
from nccl_k8s.spec import MIN_BUSBW_AUTO, RunSpec, engine_numeric, min_busbw_auto_at
from nccl_k8s.spec.platforms import PLATFORMS

G = 1 << 30

_CHS = (
    "https://github.com/GoogleCloudPlatform/cluster-health-scanner/blob/"
    "81c525d897f4e85a4f69dd1e389379de6f1e07c2/deploy/helm/health_checks/nccl_healthcheck/"
)
_CHS_TEST = (
    "the NCCL health check runs all_gather_perf (src/nccl_healthcheck/nccl_startup.py: BENCHMARK "
    "default) on NHOSTS 2 nodes x nr 8 GPUs, START_MESSAGE_SIZE 2G to END_MESSAGE_SIZE 8G, and "
    "passes a pair when nccl-tests' '# Avg bus bandwidth' is >= BANDWIDTH_THRESHOLD"
)
_CHS_DERIVED = (
    "the published threshold as is; size 8G, the top of its 2G-8G window: a run whose compared "
    "sizes are all >= 8G reads at least the window's average"
)
_NHC = "https://github.com/Azure/azurehpc-health-checks/blob/"
_NHC_TEST = (
    "customTests/azure_nccl_allreduce.nhc runs all_reduce_perf on the node's GPUs (one node, "
    "NVLink; -b = -e = the size) and fails below the threshold on the '# Avg bus bandwidth' "
    "line"
)
_NHC_DERIVED = "the published threshold as is (one node: the size is its only size)"
_AWS = (
    "https://github.com/aws-samples/awsome-distributed-training/blob/"
    "39c17d60a759d54bf4833b6c7e3490f553f26f9f/micro-benchmarks/nccl-tests/README.md"
)
AWS_MARGIN = 0.8
"""The margin under a published healthy measurement (not a threshold): run-to-run spread and
other NCCL, plugin and driver versions than the source's."""


def _size(n: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Floor:
    """One expected floor: what a healthy cluster at least reaches, and where that is said."""

    platform: str
    """The --platform name (spec.platforms.PLATFORMS)."""
    machine: str
    """The machine type (node.kubernetes.io/instance-type), one of the platform's instances."""
    gpu: str
    """The GPU of that machine, as the vendor names it (for people; the machine decides)."""
    op: str
    """The collective the source measured (the engine's name: all_reduce, all_gather)."""
    nodes: int
    gpus_per_node: int
    size_bytes: int
    """The message size from which the floor holds: the compared sizes must all reach it."""
    algo: str | None
    """The NCCL_ALGO the source ran with; None: NCCL's own choice."""
    floor_gbps: float
    """The bus bandwidth (GB/s) a healthy run at least reaches."""
    source: str
    """The URL (with its commit) of what was read."""
    says: str
    """What the source says, in short: its figure and how it measured it."""
    derived: str
    """How `floor_gbps` was derived from what the source says."""

    def __post_init__(self) -> None:
        # A row for a platform or machine the tool does not know could never match: fail at import.
        platform = PLATFORMS.get(self.platform)
        if platform is None or (platform.instances and platform.instance(self.machine) is None):
            raise ValueError(f"floor row: unknown platform/machine {self.platform}/{self.machine}")

    @property
    def condition(self) -> str:
        """The run it applies to, in one phrase."""
        algo = f"NCCL_ALGO={self.algo}" if self.algo else "NCCL's algorithm"
        return (
            f"{self.platform} {self.machine}, {self.op}, {self.nodes} node"
            f"{'s' if self.nodes != 1 else ''} x {self.gpus_per_node} GPUs, sizes >= "
            f"{_size(self.size_bytes)}, {algo}"
        )

    def to_dict(self) -> dict[str, object]:
        return {**dataclasses.asdict(self), "condition": self.condition}


def _chs(platform: str, machine: str, gpu: str, threshold: float, yaml: str) -> Floor:
    return Floor(
        platform=platform, machine=machine, gpu=gpu, op="all_gather", nodes=2, gpus_per_node=8,
        size_bytes=8 * G, algo=None, floor_gbps=threshold, source=_CHS + yaml,
        says=f"INSTANCE_TYPE {machine}: BANDWIDTH_THRESHOLD \"{threshold:g}\"; {_CHS_TEST}",
        derived=_CHS_DERIVED,
    )  # fmt: skip


def _nhc(machine: str, gpu: str, threshold: float, size: int, conf: str) -> Floor:
    return Floor(
        platform="aks-ib", machine=machine, gpu=gpu, op="all_reduce", nodes=1, gpus_per_node=8,
        size_bytes=size, algo=None, floor_gbps=threshold, source=_NHC + conf,
        says=f"check_nccl_allreduce {threshold:.1f} ... {_size(size)}; {_NHC_TEST}",
        derived=_NHC_DERIVED,
    )  # fmt: skip


def _aws(machine: str, gpu: str, measured: float, size: int, run: str) -> Floor:
    return Floor(
        platform="eks-efa", machine=machine, gpu=gpu, op="all_reduce", nodes=2, gpus_per_node=8,
        size_bytes=size, algo=None, floor_gbps=round(measured * AWS_MARGIN, 1), source=_AWS,
        says=f"the all_reduce_perf run on 2x {machine} the README shows as the expected output "
        f"({run}): out-of-place busbw {measured:g} GB/s at {_size(size)} (float, sum)",
        derived=f"the published healthy measurement x {AWS_MARGIN:g}",
    )  # fmt: skip


#: Every expected floor. A row is one entry; its source must have been read.
FLOORS: tuple[Floor, ...] = (
    _chs("gke-tcpx", "a3-highgpu-8g", "H100 80GB", 60, "a3.yaml"),
    _chs("gke-tcpxo", "a3-megagpu-8g", "H100 80GB", 150, "a3plus.yaml"),
    _chs("gke-rdma", "a3-ultragpu-8g", "H200 141GB", 250, "a3ultra.yaml"),
    _chs("gke-rdma", "a4-highgpu-8g", "B200", 250, "a4.yaml"),
    _nhc("Standard_ND96asr_v4", "A100 40GB", 228.0, 8 * G,
         "120095246e74e58a4414650c77e6d851520a838f/conf/nd96asr_v4.conf"),
    _nhc("Standard_ND96isr_H100_v5", "H100 80GB", 460.0, 16 * G,
         "06114325109659ce3c260b56d46aeab436fcfc15/conf/nd96isr_h100_v5.conf"),
    _nhc("Standard_ND96isr_H200_v5", "H200 141GB", 431.0, 16 * G,
         "13fa400b10f5cb8d900cf02ea0cdda958a2082b9/conf/nd96isr_h200_v5.conf"),
    _aws("p4de.24xlarge", "A100 80GB", 76.79, 1 * G, "8 B to 2 GB"),
    _aws("p5.48xlarge", "H100 80GB", 436.95, 1 * G, "8 B to 16 GB"),
)  # fmt: skip


@dataclasses.dataclass(frozen=True, kw_only=True)
class FloorQuery:
    """What a run is, as far as a floor depends on it."""

    platform: str
    machine: str | None
    op: str
    nodes: int
    gpus_per_node: int
    size_bytes: int
    """The smallest message size whose busbw the comparison reads."""
    algo: str | None
    """NCCL_ALGO as the run sets it; None: NCCL's own choice."""

    def __str__(self) -> str:
        algo = f"NCCL_ALGO={self.algo}" if self.algo else "NCCL's algorithm"
        return (
            f"{self.platform} {self.machine or '(machine type unknown)'}, {self.op}, "
            f"{self.nodes} node{'s' if self.nodes != 1 else ''} x {self.gpus_per_node} GPUs, "
            f"sizes >= {_size(self.size_bytes)}, {algo}"
        )


def floor_for(q: FloorQuery, floors: Sequence[Floor] = FLOORS) -> Floor | None:
    """The row that applies to `q` (the highest of those reached at the largest size), or None."""
    rows = [
        f
        for f in floors
        if (f.platform, f.machine, f.op, f.nodes, f.gpus_per_node, f.algo)
        == (q.platform, q.machine, q.op, q.nodes, q.gpus_per_node, q.algo)
        and f.size_bytes <= q.size_bytes
    ]
    return max(rows, key=lambda f: (f.size_bytes, f.floor_gbps), default=None)


def known_for(platform: str) -> list[Floor]:
    return [f for f in FLOORS if f.platform == platform]


def no_floor(q: FloorQuery, *, give: str) -> str:
    """Why no floor applies to `q`, and how to give a number (`give`: the flag)."""
    rows = known_for(q.platform)
    known = "; ".join(f.condition for f in rows) if rows else f"none for {q.platform}"
    return f"no expected floor is known for {q} (known: {known}); give a number: {give}"


def query(spec: RunSpec, *, nodes: int, smallest: bool) -> FloorQuery | None:
    """The floor query of a run of `spec` on `nodes` nodes: its first collective, its -b
    (`smallest`: the engine's --min-busbw gate reads the average over every size) or its -e
    (the highest busbw, at the largest sizes); None for an engine that does not run NCCL."""
    from nccl_k8s.bench.config import parse_args

    config = parse_args(engine_numeric(spec.engine_args))
    if config.backend == "gloo":
        return None
    return FloorQuery(
        platform=spec.platform,
        machine=spec.instance_type,
        op=config.ops[0],
        nodes=nodes,
        gpus_per_node=spec.gpus_per_node,
        size_bytes=config.minbytes if smallest else config.maxbytes,
        algo=dict(spec.env).get("NCCL_ALGO"),
    )


_FLAG = "--min-busbw"


def with_floor(spec: RunSpec) -> tuple[RunSpec, str]:
    """`spec` with `--min-busbw auto` replaced by the floor of its platform, machine type, first
    collective, nodes and sizes, and one line saying which (with its source); the spec itself
    and "" when it asks no `auto`. No floor known: UsageError (exit 2) saying for what, and how
    to give a number."""
    args = list(spec.engine_args)
    at = min_busbw_auto_at(args)
    if at is None:
        return spec, ""
    q = query(spec, nodes=spec.nodes, smallest=True)
    give = f"{_FLAG} GBPS after --"
    if spec.platform not in PLATFORMS:  # `auto` where no node was read (render)
        raise UsageError(f"{_FLAG} auto: the platform is not known here (--platform "
                         f"{spec.platform}); name it (--platform, --instance-type) or give {give}",
                         key="engine_args")  # fmt: skip
    if q is None:
        raise UsageError(f"{_FLAG} auto: the gloo backend has no expected floor; give {give}",
                         key="engine_args")  # fmt: skip
    from nccl_k8s.bench.config import parse_args

    if len(parse_args(engine_numeric(args)).ops) > 1:
        raise UsageError(f"{_FLAG} auto: a floor is per collective; run one --ops, or give {give}",
                         key="engine_args")  # fmt: skip
    row = floor_for(q)
    if row is None:
        raise UsageError(f"{_FLAG} auto: {no_floor(q, give=give)}", key="engine_args")
    value = f"{row.floor_gbps:g}"
    args[at] = value if args[at] == MIN_BUSBW_AUTO else f"{_FLAG}={value}"
    note = f"{_FLAG} auto: {value} GB/s, the expected floor for {row.condition} ({row.source})"
    return dataclasses.replace(spec, engine_args=tuple(args)), note


BEGIN = "<!-- floors: generated from nccl_k8s.results.floors.FLOORS; do not edit by hand -->"
END = "<!-- end of floors -->"


def floors_table() -> str:
    """docs/floors.md's table: one row per floor, with its source and derivation."""
    rows = [
        "| platform | machine (GPU) | collective | nodes x GPUs | sizes from | algorithm "
        "| floor (GB/s) | source: what it says | derived |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for f in FLOORS:
        algo = f"NCCL_ALGO={f.algo}" if f.algo else "NCCL's choice"
        rows.append(
            f"| {f.platform} | {f.machine} ({f.gpu}) | {f.op} | {f.nodes} x {f.gpus_per_node} "
            f"| {_size(f.size_bytes)} | {algo} | {f.floor_gbps:g} | [source]({f.source}): "
            f"{f.says} | {f.derived} |"
        )
    return "\n".join(rows)


def with_floors_table(doc: str) -> str:
    """`doc` with the block between BEGIN and END replaced by `floors_table()`."""
    head, sep, rest = doc.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"no {BEGIN} ... {END} block")
    return f"{head}{BEGIN}\n{floors_table()}\n{END}{tail}"


if __name__ == "__main__":  # python -m nccl_k8s.results.floors docs/floors.md
    for name in sys.argv[1:]:
        path = Path(name)
        path.write_text(with_floors_table(path.read_text(encoding="utf-8")), encoding="utf-8")


__all__ = [
    "BEGIN",
    "END",
    "FLOORS",
    "Floor",
    "FloorQuery",
    "floor_for",
    "floors_table",
    "known_for",
    "no_floor",
    "query",
    "with_floor",
    "with_floors_table",
]
