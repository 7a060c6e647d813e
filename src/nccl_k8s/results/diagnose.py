"""Diagnose NCCL_DEBUG=INFO logs: what each rank actually used, and what is wrong with it.

The most common real problem with multi-node NCCL is silent: libibverbs is missing from the image, or
the RDMA device is not in the pod, and NCCL falls back to TCP sockets; the job runs, at a fraction of
the bandwidth. The evidence is in the INFO log, which nobody reads. `nccllog` reads it (facts
only); this module adds what the facts imply and runs the rules of the registry
(`nccl_k8s.results.rules`) over them:

- which fabric carried each rank's inter-node traffic (`fabrics`), per rank, so that one rank on
  Socket among ranks on IB is seen and named with its host;
- how many nodes the ranks span: nNodes when NCCL prints it, the hosts of nccl-tests' complete
  device list (one process driving several GPUs is one host), the number of hosts, or one node
  when one host's GPUs hold every rank the log mentions and no connection leaves it;
- whether GPUDirect RDMA is on for RDMA connections (never asked of TCP);
- then each rule's findings: socket fallback, GPUDirect RDMA, SHM instead of P2P, NVLS, CollNet,
  fatal errors naming the culprit peer and the rank that saw it, PyTorch's watchdog timeouts,
  NCCL warnings, the run's own failure line, and `--expect-fabric` (ib, roce, efa, socket,
  nvlink, mnnvl, or GKE's tcpx, tcpxo and gib: any rank on another fabric fails it, and so does a
  log that cannot confirm it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nccl_k8s.errors import ResultsError, UsageError
from nccl_k8s.fabrics import parse
from nccl_k8s.results.fabrics import FABRICS, Fabric, link_layers, rank_fabric
from nccl_k8s.results.findings import SEVERITIES, Facts, Finding
from nccl_k8s.results.nccllog import ListedRank, LogParser, ParsedLog, RankReport
from nccl_k8s.results.rules import LINES_READ, RULES
from nccl_k8s.results.rules.gates import EXPECT

if TYPE_CHECKING:
    from nccl_k8s.results.platform_gate import FabricCheck
    from nccl_k8s.spec.platforms import Platform


@dataclass
class Diagnosis:
    ranks: list[RankReport]
    findings: list[Finding]
    #: Nodes the communicator spans, when the log says (nNodes, several hosts, or one host).
    nodes: int | None
    #: Whether any byte had to cross a network: False for one node, None when the log cannot tell.
    network_needed: bool | None
    #: "ib", "roce", "efa", "socket", "tcpx", "tcpxo", another plugin's name, "mixed" (ranks
    #: disagree), or None:
    #: what inter-node traffic used.
    inter_node: str | None
    #: GPUDirect RDMA on RDMA connections: True, False, or None when no such connection was seen.
    gdr: bool | None
    expect_fabric: Fabric | None = None
    sources: list[str] = field(default_factory=list)
    #: How `nodes` was known: "nNodes", "N hosts", "one host, one process, ...", or "".
    nodes_evidence: str = ""
    #: The runs' own failure lines ("Test NCCL failure common.cu:392 ...").
    failures: list[str] = field(default_factory=list)
    #: With `--platform P`: the fabric gate a deploy for P applies, on this log.
    platform: FabricCheck | None = None

    @property
    def failed(self) -> bool:
        if self.platform is not None and not self.platform.ok:
            return True
        return any(f.severity == "error" for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        check, self.platform = self.platform, None
        try:
            d = asdict(self)
        finally:
            self.platform = check
        d["platform"] = None if check is None else check.to_dict()
        d["failed"] = self.failed
        for f in d["findings"]:
            del f["evidence"]  # what the fail-safe reads, not a conclusion
        for r, rep in zip(d["ranks"], self.ranks, strict=True):
            r["net"] = rep.net_summary()
        return d


def _nodes(
    reports: list[RankReport], hosts: set[str], listed: list[ListedRank]
) -> tuple[int | None, str]:
    if len(hosts) > 1 and any(r.mnnvl for r in reports):
        # nNodes counts the nodes of NCCL's topology graph (init.cc, by each rank's ring head),
        # and with MNNVL that graph spans the clique's hosts (nNodes 1): the hosts are the nodes.
        return len(hosts), f"{len(hosts)} hosts (MNNVL: nNodes counts NVLink domains)"
    nnodes = [r.nnodes for r in reports if r.nnodes is not None]
    if nnodes:
        return max(nnodes), "nNodes"
    if listed and [d.rank for d in listed] == list(range(len(listed))):
        # nccl-tests' complete device list: every rank with its host (one process may drive
        # several GPUs: -g N lists them with one pid).
        on = {d.host for d in listed}
        nproc = len({(d.host, d.pid) for d in listed})
        return len(on), (
            f"nccl-tests' device list: {len(listed)} ranks in {nproc} "
            f"process{'es' if nproc > 1 else ''} on {len(on)} host{'s' if len(on) > 1 else ''}"
        )
    if len(hosts) > 1:
        return len(hosts), f"{len(hosts)} hosts"
    if len(hosts) != 1 or any(t.startswith("NET/") for r in reports for t in r.transports):
        return None, ""
    # One host and no network connection: one node, if its GPUs hold every rank the log names
    # (an excerpt of one pod of a bigger job names ranks beyond them).
    seen = {r.rank for r in reports if r.rank is not None} | {p for r in reports for p in r.peers}
    nranks = {r.nranks for r in reports if r.nranks is not None}
    local = len(reports)
    if (seen and max(seen) < local and all(n <= local for n in nranks)) or nranks == {local}:
        pids = {r.pid for r in reports}
        procs = "one process" if len(pids) == 1 else f"{len(pids)} processes"
        return 1, f"one host ({next(iter(hosts))}), {procs}, every rank on its {local} GPUs"
    return None, ""


def facts_of(log: ParsedLog, expect_fabric: Fabric | None = None) -> Facts:
    """What the parsed log implies: nodes, whether a network was needed, each rank's fabric,
    GPUDirect RDMA on RDMA connections: what every rule reads besides the log."""
    reports = log.reports
    net_ranks = [r for r in reports if any(t.startswith("NET/") for t in r.transports)]
    nodes, evidence = _nodes(reports, log.hosts, log.listed)
    network_needed = None if nodes is None else nodes > 1
    if net_ranks:
        network_needed = True
    links = {x for r in reports for x in link_layers(r)}
    providers = {r.ofi_provider for r in reports if r.ofi_provider}
    provider = next(iter(providers)) if len(providers) == 1 else None
    gdr_values = [r.net_gdr for r in net_ranks if r.net_gdr is not None]
    return Facts(
        log=log,
        nodes=nodes,
        nodes_evidence=evidence,
        network_needed=network_needed,
        fabrics={r.key: rank_fabric(r, links, provider) for r in reports},
        net_ranks=net_ranks,
        gdr=all(gdr_values) if gdr_values else None,
        mnnvl=any(r.mnnvl for r in reports),
        expect_fabric=expect_fabric,
    )


def analyse(
    log: ParsedLog, *, expect_fabric: Fabric | str | None = None, platform: Platform | None = None
) -> Diagnosis:
    """Run every rule of the registry over the log's facts, in order; errors first. With a
    platform, its fabric is the expected one and its gate (the deploy's) is judged too."""
    want = platform.fabric if platform is not None else parse_fabric(expect_fabric)
    facts = facts_of(log, want)
    read = False  # whether a rule found something in the log itself (not the expectation's)
    for rule in RULES:
        found = rule.check(facts)
        facts.found += found
        read = read or (rule is not EXPECT and bool(found))
    if not log.reports and not read:
        # No NCCL process printed a line, and nothing else in it is NCCL's (a paste of PyTorch's
        # error, a watchdog timeout, NCCL's DIAG report, the run's failure line would be).
        raise ResultsError(
            "no NCCL log lines found: run with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,NET "
            "or unset) and pass the pods' logs"
        )
    distinct = sorted({f for f in facts.fabrics.values() if f})
    inter_node: str | None = None
    if facts.network_needed is not False and distinct:
        inter_node = distinct[0] if len(distinct) == 1 else "mixed"
    return Diagnosis(
        ranks=log.reports,
        findings=sorted(facts.found, key=lambda f: SEVERITIES.index(f.severity)),
        nodes=facts.nodes,
        network_needed=facts.network_needed,
        inter_node=inter_node,
        gdr=facts.gdr,
        expect_fabric=want,
        nodes_evidence=facts.nodes_evidence,
        failures=list(log.failures),
        platform=None if platform is None else _platform_check(platform, facts),
    )


def _platform_check(platform: Platform, facts: Facts) -> FabricCheck:
    from nccl_k8s.results.platform_gate import judge

    return judge(platform, facts)


def diagnose_text(
    texts: Iterable[str] | str,
    *,
    expect_fabric: Fabric | str | None = None,
    platform: Platform | None = None,
) -> Diagnosis:
    """Diagnose one or more logs (e.g. one per pod) as one communicator's evidence."""
    p = log_reader()
    for t in [texts] if isinstance(texts, str) else texts:
        p.feed(t)
    return analyse(p.finish(), expect_fabric=expect_fabric, platform=platform)


def log_reader() -> LogParser:
    """A reader to feed logs one at a time as they arrive (each pod's, say), then
    `analyse(reader.finish())`: it keeps of each only the facts and the lines the rules read."""
    return LogParser(keep=LINES_READ)


def diagnose_files(
    paths: Iterable[str | Path],
    *,
    expect_fabric: Fabric | str | None = None,
    platform: Platform | None = None,
) -> Diagnosis:
    texts = []
    names = []
    for path in paths:
        pth = Path(path)
        try:
            texts.append(pth.read_text(encoding="utf-8", errors="replace"))
        except FileNotFoundError:
            raise ResultsError(f"{pth}: no such log file", path=str(pth)) from None
        except IsADirectoryError:
            raise ResultsError(f"{pth} is a directory, not a log file", path=str(pth)) from None
        except OSError as e:
            raise ResultsError(f"{pth}: cannot read: {e.strerror}", path=str(pth)) from None
        names.append(str(pth))
    try:
        d = diagnose_text(texts, expect_fabric=expect_fabric, platform=platform)
    except ResultsError as e:
        raise ResultsError(f"{', '.join(names)}: {e}") from None
    d.sources = names
    return d


def parse_fabric(value: Fabric | str | None) -> Fabric | None:
    """`--expect-fabric`'s value as the fabric table's member; a usage error naming the table's
    fabrics for anything else."""
    if value is None or isinstance(value, Fabric):
        return value
    fabric = parse(value)
    if fabric is not None:
        return fabric
    raise UsageError(
        f"--expect-fabric {value!r}: expected one of {', '.join(FABRICS)}", key="expect_fabric"
    )


__all__ = [
    "FABRICS",
    "Diagnosis",
    "Fabric",
    "Finding",
    "RankReport",
    "diagnose_files",
    "diagnose_text",
    "log_reader",
    "parse_fabric",
]
