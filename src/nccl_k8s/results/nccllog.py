"""Read NCCL_DEBUG=INFO logs: what each NCCL process-device pair printed about itself.

This module extracts facts and judges nothing (it emits no finding codes): the diagnosis rules
(`nccl_k8s.results.rules`) turn what it reads into findings. Besides the per-process facts it keeps
every line that mentions NCCL as it was read, placed on its process or not, so that a rule can read
what no field here holds. Lines may carry any launcher prefix (`[1,0]<stdout>:`,
`[155] `, a timestamp, `(RayWorkerWrapper pid=..)`): the NCCL prefix is searched anywhere.

Parsing follows the strings NCCL itself prints (quoted from NCCL's source, 2.4 to 2.28):

- line prefix (debug.cc): `%s:%d:%d [%d] NCCL INFO ` = host:pid:tid [cudaDev]; warnings add the
  source location: `%s:%d:%d [%d] %s:%d NCCL WARN `, and from 2.29 the function after it,
  `%s:%d (%s) NCCL WARN ` (a plugin's WARN, through the exported ncclDebugLog, still has none).
- `NCCL version %s` (init.cc; the string is `2.28.9+cuda13.0`).
- `comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d` (init.cc, 2.12+);
  `ncclCommInitRank comm %p rank %d nranks %d cudaDev %d ...` (older and newer init lines).
- `Using network %s` (init.cc): the network plugin NCCL chose (IB, Socket, or an external plugin).
- `NET/IB : Using%s %s; OOB %s:%s` with ` [%d]%s:%d/%s` per device (IB or RoCE link layer);
  `NET/IB : No device found.`; `Failed to open libibverbs.so[.1]` (ibvwrap);
  `NET/Socket : Using%s` with ` [%d]%s:%s` per interface;
  `NET/Plugin : No plugin found (libnccl-net.so)...` / `NET/Plugin: Could not find: libnccl-net.so`.
- `NET/%s : GPU Direct RDMA %s for HCA %d '%s'` (graph/topo.cc), older
  `NET/IB : GPU Direct RDMA Disabled for HCA %d '%s' (no module)` (net_ib.cc).
- connections, one per channel and peer (transport/*.cc):
  `Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s` (`/GDRDMA`, `(PCI)`, `/Shared`),
  `... [receive] via NET/%s/%d...`, with PXN `via NET/%s/%d(%d)...`;
  `Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/%s%s%s` (IPC, CUMEM, MNNVL, direct pointer; `/read`,
  `/CE`), `... via SHM/%s/%s`; older ones without `/%d` and with bus ids `%d[%lx]`; before 2.7
  `Ring %02d : %d[%lx] -> %d[%lx] via P2P/IPC` and `Ring %02d : %d -> %d [receive] via NET/%s/%d`
  (no device), `via direct shared memory` for SHM;
  `CollNet %02d/%1d : %d [send] via COLLNET/%s/%d%s%s` (older `Coll %02d : ...`).
- `NVLS multicast support is %savailable on dev %d`, `NVLS comm %p headRank %d nHeads %d ...`,
  `%d coll channels, %d collnet channels, %d nvls channels, %d p2p channels, %d p2p channels per peer`.
- `Pattern %d, crossNic %d, nChannels %d, bw %f/%f, type %s/%s, sameChannels %d` (graph search):
  the intra/inter path types (NVL = NVLink, PIX/PXB/PHB/SYS = PCIe or host, LOC = one GPU).

- nccl-tests' own failure report, `host: Test NCCL failure common.cu:%d '%s'`, kept per log.
- NCCL 2.3: no `NCCL` tag, `NET/IB: [%d] %s:%d/%s`, `Using internal Network %s`, `rank %d nranks %d`.
- aws-ofi-nccl: `NET/OFI Selected Provider is %s (found %d nics)`.
- `GPU Direct RDMA Disabled for GPU ... / HCA %d (distance %d >= %d)` (net.cc / topo.cc).
- the error trace NCCLCHECK prints as a failure travels up, `file:line -> code` (2.30:
  `file:line (function) -> code`), which marks the WARN before it in the same process as fatal,
  unless NCCL then says it gave up on an optional plugin and carried on (`Failed to initialize
  any GIN plugin`, 2.29): a failure it handled;
  PyTorch's watchdog timeouts and DistBackendError.
- an empty host (`:168:1228 [2] NCCL INFO`); a stripped host keeping a WARN's location; nccl-tests'
  device list above the log (`ParsedLog.listed`: one process may drive several GPUs, `-g N`).

A log excerpt rarely holds every line; every field is Optional.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from nccl_k8s.results._ncclfast import (
    CONNECTION,
    PLAIN,
    TIMESTAMP_CLUE,
    LineInterest,
    connection_pattern,
)
from nccl_k8s.results._ncclinfo import (
    LIBIBVERBS,
    add_once,
    implied_network,
    read_identity,
    read_network,
    read_topology,
    read_via,
    set_version,
)
from nccl_k8s.results._torchlines import TorchEvent, TorchLines, WatchdogTimeout
from nccl_k8s.results.pastes import OMPI_TAG, TIMESTAMP, ListedRank, failure_in, listed_rank

# host:pid:tid [dev] (file:line )?NCCL LEVEL message. Anything may precede it (timestamps, pod names).
# The source location of a WARN may be a C++ signature with spaces (aws-ofi-nccl prints
# `int nccl_net_ofi_create_plugin(nccl_net_ofi_plugin_t**):334`). NCCL 2.3 printed no `NCCL` tag
# (`host:pid:tid [0] INFO Using internal Network Socket`). NCCL 2.29 prints the function after the
# location (`gin_host_gdaki.cc:431 (gdakiConnectQp) NCCL WARN ...`).
_PREFIX = re.compile(
    r"(?P<host>[^\s:\[\]]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\]"
    r"(?: [^\[\]]*?:\d+(?: \([^()]*\))?)? (?:NCCL )?(?P<level>INFO|WARN|ABORT|TRACE)\s?(?P<msg>.*)$"
)
# Lines printed without the host prefix (some launchers strip it): "NCCL INFO ..." at the start,
# after at most one token (a timestamp); `[dev] NCCL INFO` when only host:pid:tid was stripped; a
# WARN keeps its source location (`[5] misc/ibvwrap.cc:173 NCCL WARN ...`, 2.29).
_BARE = re.compile(
    r"^\s*(?:\[(?P<dev>\d+)\]\s+|\S+\s+)?(?:[\w./+-]+:\d+(?: \([^()]*\))?\s+)?"
    r"NCCL (?P<level>INFO|WARN)\s(?P<msg>.*)$"
)
# NCCL's IB completion error (net_ib.cc, HPC-X ib_plugin.c) as users paste it alone, without
# the prefix or the `NCCL WARN` tag: `NET/IBP:Got completion from peer 7.6.13.83<36315> with status=12`.
_BARE_COMPLETION = re.compile(r"NET/\w+\s*:\s*Got completion (?:from peer \S+ )?with .*$")
# NCCL gave up on an optional plugin and carries on (2.29): the WARN and trace before were handled.
_FELL_BACK = re.compile(r"^Failed to initialize (?!any NET plugin)(?:any \S+|\S+ plugin)")
# A paste that repeats the line after ` | ` (CloudWatch's message column): cut the repeat.
_REPEAT = re.compile(r"\s\|\s+(?=\S+:\d+:\d+ \[\d+\])")
# `NCCL version 2.7.8+cuda10.2` printed alone (NCCL's VERSION level has no prefix).
_BARE_VERSION = re.compile(
    r"(?:^|[\s:|])NCCL version (?P<v>\d+\.\d+\.\d+)\S*?(?:\+cuda(?P<cuda>\d+\.\d+))?"
)
_CHAN = re.compile(
    r"^(?:Channel|Ring) (?P<ch>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)(?:\[[0-9a-fx]+\])? -> "
    r"(?P<dst>\d+)(?:\[[0-9a-fx]+\])? (?:\[(?P<dir>send|receive)\] )?via (?P<via>.+?)\s*$"
)
_COLLNET = re.compile(
    r"^Coll(?:Net)? (?P<ch>\d+)(?:/\d+)? : (?P<rank>\d+) \[(?P<dir>send|receive)\] via COLLNET/"
)
_RING_LIST = re.compile(r"^Channel (?P<ch>\d+)/(?P<n>\d+) :(?: \d+)+\s*$")
_TRACE = re.compile(r"^\S+:\d+(?: \([^()]*\))? -> (?P<code>\d+)")


@dataclass(frozen=True)
class NcclLine:
    """A line that mentions NCCL, as read (timestamps removed), and where the reader placed it."""

    text: str
    #: The process-device it was read as (`RankReport.key`); None when no NCCL prefix was found.
    key: str | None
    #: NCCL's level (INFO, WARN, ABORT, TRACE) when the prefix was read.
    level: str | None = None


@dataclass
class RankReport:
    """What one NCCL process-device pair printed. Key: host:pid [cudaDev]."""

    key: str
    host: str | None = None
    pid: int | None = None
    cuda_dev: int | None = None
    rank: int | None = None
    nranks: int | None = None
    nnodes: int | None = None
    mnnvl: bool | None = None
    nccl_version: str | None = None
    cuda_version: str | None = None
    #: The network NCCL chose ("IB", "Socket", a plugin's name), from `Using network`.
    network: str | None = None
    ib_devices: list[str] = field(default_factory=list)
    ib_no_device: bool = False
    socket_ifaces: list[str] = field(default_factory=list)
    #: HCA name -> GPUDirect RDMA possible (from the topology's per-HCA line).
    gdr_hca: dict[str, bool] = field(default_factory=dict)
    gdr_no_module: bool = False
    #: Transports seen in this rank's connection lines: "NET/IB", "NET/Socket", "P2P/IPC", "SHM", ...
    transports: list[str] = field(default_factory=list)
    #: NET device indices used by connections, and whether those connections use GDR.
    net_devs: list[int] = field(default_factory=list)
    net_gdr: bool | None = None
    peers: list[int] = field(default_factory=list)
    coll_channels: int | None = None
    nvls_channels: int | None = None
    p2p_channels: int | None = None
    #: Distinct channel ids in connection lines (an excerpt may show fewer than exist).
    channels_seen: int = 0
    nvls_available: bool | None = None
    nvls_used: bool = False
    collnet_used: bool = False
    intra_path: str | None = None
    libibverbs_missing: bool = False
    no_net_plugin: bool = False
    net_init_failed: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: WARNs after which an error travelled up NCCL's calls (`file:line -> code`): fatal.
    fatal_warnings: list[str] = field(default_factory=list)
    #: Those error traces (`file:line -> code`, codes 1-6), in the order printed.
    error_traces: list[str] = field(default_factory=list)
    #: WARNs whose error trace ended in NCCL giving up on an optional plugin and carrying on
    #: (`Failed to initialize any GIN plugin`): a failure NCCL handled, not fatal.
    handled_warnings: list[str] = field(default_factory=list)
    #: The launcher's rank for the process (Open MPI `[1,R]<stdout>:`), which need not be
    #: NCCL's rank in a communicator.
    launcher_rank: int | None = None
    #: Provider aws-ofi-nccl chose (`NET/OFI Selected Provider is cxi`): efa, cxi, tcp, ...
    ofi_provider: str | None = None
    #: Why GPUDirect RDMA is off for a GPU and HCA (`distance 3 >= 2`): the PCIe distance.
    gdr_distance: str | None = None

    @property
    def label(self) -> str:
        if self.rank is not None:
            return f"rank {self.rank}"
        if self.launcher_rank is not None:
            return f"{self.key} (MPI rank {self.launcher_rank})"
        return self.key

    def net_summary(self) -> str:
        """One phrase: what carried (or would carry) this rank's inter-node traffic."""
        nets = [t for t in self.transports if t.startswith("NET/")]
        if nets:
            parts = [", ".join(nets)]
            if self.net_devs:
                parts.append("dev " + ",".join(str(d) for d in self.net_devs))
            if self.net_gdr is not None:
                parts.append("GDR on" if self.net_gdr else "GDR off")
            return " ".join(parts)
        if self.network:
            where = ""
            if self.network == "Socket" and self.socket_ifaces:
                where = " on " + ",".join(i.split(":")[0] for i in self.socket_ifaces)
            elif self.network == "IB" and self.ib_devices:
                where = " on " + ",".join(self.ib_devices)
            return f"{self.network} selected{where}, no NET connection seen"
        return "-"


def _only_connections(text: str) -> list[tuple[str, ...]] | None:
    """CONNECTION's groups of every line of `text` when each line is a connection line (a
    match is one whole line, so as many matches as lines is every line), else None. Most pods'
    NCCL lines are only that; a text with fewer ` -> ` than lines is not searched."""
    lines = text.count("\n") + (not text.endswith("\n"))
    if not text or text.count(" -> ") < lines:
        return None
    found: list[tuple[str, ...]] = connection_pattern(text).findall(text)
    return found if len(found) == lines else None


#: A line worth keeping without an NCCL prefix: any mention of NCCL (PyTorch's and the
#: launcher's lines about it, a prefix the reader does not know) or of a CUDA error.
_MENTIONS = re.compile(r"nccl|unhandled cuda error", re.IGNORECASE)


@dataclass
class ParsedLog:
    """What the reader took from one communicator's logs: the facts the diagnosis rules read."""

    #: One per NCCL process-device pair, ordered by rank.
    reports: list[RankReport]
    hosts: set[str]
    #: The runs' own failure lines (nccl-tests' "Test NCCL failure ..."), first per log.
    failures: list[str]
    #: PyTorch's lines about NCCL, in order, first of a kind per rank and text.
    torch_events: list[TorchEvent]
    #: Every line that mentions NCCL, in order, with the process it was placed on.
    lines: list[NcclLine]
    #: nccl-tests' device list above the log, when the log holds one (first entry per rank).
    listed: list[ListedRank] = field(default_factory=list)


@dataclass
class _Log:
    """What reading one log keeps between its lines."""

    failure: str | None = None
    #: Per process (host, pid): its last WARN, until an error trace shows it was fatal.
    last_warn: dict[tuple[str | None, int | None], tuple[RankReport, str]] = field(
        default_factory=dict
    )
    prev: RankReport | None = None
    bare_versions: list[tuple[str, str | None]] = field(default_factory=list)
    #: Bare versions before any process line.
    pending: list[tuple[str, str | None]] = field(default_factory=list)
    #: The processes this log placed lines on, by key (a dict: a list's membership test
    #: compared ~37-field dataclasses, once per line and process).
    fed: dict[str, RankReport] = field(default_factory=dict)
    #: Per process: the WARNs the error trace now printing made fatal (`_FELL_BACK` undoes it).
    chain: dict[tuple[str | None, int | None], list[Any]] = field(default_factory=dict)


class LogParser:
    """Feed it one or more logs (one per pod is fine), then `finish` for what they say. With
    `keep`, `ParsedLog.lines` holds only the lines it names (the facts are the same)."""

    def __init__(self, keep: LineInterest | None = None) -> None:
        #: Which lines `ParsedLog.lines` holds: every line that mentions NCCL when None.
        self.keep = keep
        self.reports: dict[str, RankReport] = {}
        #: (host, pid, dev) as printed -> its report: `_PLAIN`'s lines skip `report`'s key.
        self._who: dict[tuple[str, str, str], RankReport] = {}
        self.hosts: set[str] = set()
        self.channels: dict[str, set[int]] = {}
        #: (process key, via) of the connection lines read (CONNECTION's).
        self._vias: set[tuple[str, str]] = set()
        #: The runs' own failure lines (nccl-tests' "Test NCCL failure ..."), first per log.
        self.failures: list[str] = []
        self._torch = TorchLines()
        #: PyTorch's lines about NCCL, in order (`_torchlines`).
        self.torch_events: list[TorchEvent] = self._torch.events
        self.lines: list[NcclLine] = []
        self.listed: dict[int, ListedRank] = {}

    def report(self, host: str | None, pid: int | None, dev: int | None) -> RankReport:
        if host is not None:
            key = f"{host}:{pid} [{dev}]"
        elif pid is not None:  # an empty host name (`>> :168:1228 [2] NCCL INFO`)
            key = f"(no host):{pid} [{dev}]"
        else:  # a stripped prefix: `[dev] NCCL INFO` still tells processes of one host apart
            key = "(no prefix)" if dev is None else f"(no host) [{dev}]"
        rep = self.reports.get(key)
        if rep is None:
            rep = self.reports[key] = RankReport(key=key, host=host, pid=pid, cuda_dev=dev)
            self.channels[key] = set()
        if host:
            self.hosts.add(host)
        return rep

    def feed(self, text: str) -> None:
        log = _Log()
        self._torch.start()
        # A timestamp glued to the host (`...-07:00ip-10-36-29-253:79:79 [0] NCCL INFO`, a
        # CloudWatch paste) would read as host `00ip-...`: every timestamp goes (one pass over
        # the text: a timestamp never spans lines).
        if TIMESTAMP_CLUE.search(text) and TIMESTAMP.search(text):
            text = TIMESTAMP.sub(" ", text)
        keep = self.keep
        # Whether any placed line of this text may be one `keep` wants: its patterns searched
        # once in the whole text (C speed) rather than in every line.
        notable = keep is None or keep.notable(text)
        self._connections(text, log, notable)
        # A bare version line names the version of the process printing it; a log in which all
        # such lines agree gives it to the processes that printed none.
        if len(set(log.bare_versions)) == 1:
            for rep in log.fed.values():
                if rep.nccl_version is None:
                    set_version(rep, log.bare_versions[0])
        if log.failure is not None:
            self.failures.append(log.failure)

    def _lines(self, text: str, start: int, end: int, log: _Log, notable: bool) -> None:
        """The lines of text[start:end] (whole lines), read in order."""
        who = self._who
        pos = start
        # Lines in NCCL's own form (most of a log) are found by one regex over the text; the
        # lines between them go through `_place`, which reads every other form.
        for m in PLAIN.finditer(text, start, end):
            if m.start() > pos:
                for line in text[pos : m.start()].splitlines():
                    self._line(line, log, notable)
            pos = m.end()
            line, host, pid, dev, level, msg = m.groups()
            rep = who.get((host, pid, dev))
            if rep is None:
                rep = who[host, pid, dev] = self.report(host, int(pid), int(dev))
            if "|" in msg:
                msg = _REPEAT.split(msg)[0]
            self._placed(line.strip(), rep, level, msg.strip(), log, notable)
        for line in text[pos:end].splitlines():
            self._line(line, log, notable)

    def _connections(self, text: str, log: _Log, notable: bool) -> None:
        """The text's lines in order: CONNECTION's read here, what `_placed` and `_connection`
        would read from each (an INFO line of its process: it ends the process's error trace),
        with less done per line (most of a large run's log); the lines between through `_lines`."""
        keep = self.keep
        if keep is not None and not notable:
            found = _only_connections(text)
            if found is not None:
                self._read_connections(found, log)
                return
        pos = 0
        rep: RankReport | None = None
        for c in CONNECTION.finditer(text):
            if c.start() > pos:
                if rep is not None:
                    log.prev = rep  # what the lines between may read
                self._lines(text, pos, c.start(), log, notable)
            pos = c.end()
            rep = self._connect(c.groups(), log)
            if keep is None or (notable and keep.wants(c.group(0).strip())):
                self.lines.append(NcclLine(c.group(0).strip(), rep.key, "INFO"))
        if rep is not None:
            log.prev = rep
        self._lines(text, pos, len(text), log, notable)

    def _read_connections(self, found: list[tuple[str, ...]], log: _Log) -> None:
        """What `_connections` reads from a text of connection lines alone, none of them kept:
        the same steps on CONNECTION's groups, without a match object or a gap per line."""
        rep: RankReport | None = None
        for groups in found:
            rep = self._connect(groups, log)
        if rep is not None:
            log.prev = rep

    def _connect(self, groups: tuple[str | Any, ...], log: _Log) -> RankReport:
        """What one connection line (CONNECTION's groups) says of its process: its rank, channel,
        peer and transport, and that its version line, if one waits, is its."""
        host, pid, dev, ch, src, dst, direction, via = groups
        rep = self._who.get((host, pid, dev))
        if rep is None:
            rep = self._who[host, pid, dev] = self.report(host, int(pid), int(dev))
        if log.pending:
            set_version(rep, log.pending.pop())
            log.pending.clear()
        key = rep.key
        log.fed[key] = rep
        if log.chain:
            log.chain.pop((rep.host, rep.pid), None)
        self.channels[key].add(int(ch))
        me, peer = (dst, src) if direction == "receive" else (src, dst)
        if rep.rank is None:
            rep.rank = int(me)
        p = int(peer)
        if p not in rep.peers:
            rep.peers.append(p)
        if (key, via) not in self._vias:  # read_via reads a via the same each time
            self._vias.add((key, via))
            read_via(rep, via)
        return rep

    def _line(self, line: str, log: _Log, notable: bool) -> None:
        """One line in any other form: placed on its process, or kept when it mentions NCCL."""
        placed = self._place(line, log)
        if placed is None:
            if (self.keep is None or self.keep.unplaced) and _MENTIONS.search(line):
                self.lines.append(NcclLine(line.strip(), None))
            return
        rep, level, msg = placed
        self._placed(line.strip(), rep, level, msg, log, notable)

    def _placed(
        self, text: str, rep: RankReport, level: str, msg: str, log: _Log, notable: bool
    ) -> None:
        """A line placed on `rep`: kept (when wanted) and read."""
        keep = self.keep
        if keep is None or (notable and keep.wants(text)):
            self.lines.append(NcclLine(text, rep.key, level))
        if log.pending:
            set_version(rep, log.pending.pop())
            log.pending.clear()
        log.prev = rep
        log.fed[rep.key] = rep
        self._read(rep, level, msg, log)

    def _place(self, line: str, log: _Log) -> tuple[RankReport, str, str] | None:
        """The process-device of a line NCCL printed, its level and message; None for any other
        line (a run's failure line, PyTorch's, a bare version line are kept on the way)."""
        if m := _PREFIX.search(line):
            rep = self.report(m.group("host") or None, int(m.group("pid")), int(m.group("dev")))
            if t := OMPI_TAG.match(line):
                rep.launcher_rank = int(t.group("rank"))
            return rep, m.group("level"), _REPEAT.split(m.group("msg"))[0].strip()
        if log.failure is None:
            log.failure = failure_in(line)
        if "Rank" in line and (listed := listed_rank(line)) is not None:
            self.listed.setdefault(listed.rank, listed)
            return None
        if self._torch.read(line):
            return None
        if b := _BARE.search(line):
            dev = b.group("dev")
            rep = self.report(None, None, None if dev is None else int(dev))
            return rep, b.group("level"), b.group("msg").strip()
        if c := _BARE_COMPLETION.search(line):
            # An IB completion error pasted alone, without NCCL's prefix or tag: NCCL's WARN.
            return self.report(None, None, None), "WARN", c.group(0).strip()
        if v := _BARE_VERSION.search(line):
            ver = (v.group("v"), v.group("cuda"))
            log.bare_versions.append(ver)
            if log.prev is not None:
                set_version(log.prev, ver)
            else:
                log.pending.append(ver)
        return None

    def _read(self, rep: RankReport, level: str, msg: str, log: _Log) -> None:
        proc = (rep.host, rep.pid)
        if level in ("WARN", "ABORT"):
            add_once(rep.warnings, msg)
            log.last_warn[proc] = (rep, msg)
            if LIBIBVERBS.search(msg):
                rep.libibverbs_missing = True
            return
        if (t := _TRACE.match(msg)) and 1 <= int(t.group("code")) <= 6:
            # NCCLCHECK prints `file:line -> code` as an error travels up (codes 1-6: cuda,
            # system, internal, argument, usage, remote; 7 is "in progress"): the WARN before it
            # in the same process made a call fail.
            add_once(rep.error_traces, msg)
            if proc in log.last_warn:
                wrep, wmsg = log.last_warn.pop(proc)
                add_once(wrep.fatal_warnings, wmsg)
                log.chain.setdefault(proc, []).append((wrep, wmsg))
        elif _FELL_BACK.match(msg):
            for wrep, wmsg in log.chain.pop(proc, []):
                if wmsg in wrep.fatal_warnings:
                    wrep.fatal_warnings.remove(wmsg)
                add_once(wrep.handled_warnings, wmsg)
        else:
            log.chain.pop(proc, None)
        self.info(rep, msg)

    def set_rank(self, rep: RankReport, rank: int) -> None:
        if rep.rank is None:
            rep.rank = rank

    def info(self, rep: RankReport, msg: str) -> None:
        """Read an INFO message into `rep`: the first reader that knows the line takes it."""
        for read in (self._connection, read_identity, read_network, read_topology):
            if read(rep, msg):
                return

    def _connection(self, rep: RankReport, msg: str) -> bool:
        """Connection lines (`Channel`, `Ring`, `CollNet`) and the ring listing."""
        if m := _CHAN.match(msg):
            ch, _, src, dst, direction, via = m.groups()
            self.channels[rep.key].add(int(ch))
            # NET lines: the local rank is the sender of [send], the receiver of [receive];
            # P2P/SHM lines are printed by the sending side.
            me, peer = (int(dst), int(src)) if direction == "receive" else (int(src), int(dst))
            self.set_rank(rep, me)
            add_once(rep.peers, peer)
            read_via(rep, via)
        elif m := _RING_LIST.match(msg):
            if rep.coll_channels is None:
                rep.coll_channels = int(m.group("n"))
        elif m := _COLLNET.match(msg):
            rep.collnet_used = True
            add_once(rep.transports, "COLLNET")
            self.set_rank(rep, int(m.group("rank")))
        else:
            return False
        return True

    def finish(self) -> ParsedLog:
        ib_listed = any(r.ib_devices for r in self.reports.values())
        for key, rep in self.reports.items():
            rep.channels_seen = len(self.channels[key])
            if rep.nvls_used:
                add_once(rep.transports, "NVLS")
            rep.transports.sort()
            rep.net_devs.sort()
            rep.peers.sort()
            if rep.network is None:
                rep.network = implied_network(rep, ib_listed)
        reports = sorted(
            self.reports.values(),
            key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.key),
        )
        listed = [self.listed[r] for r in sorted(self.listed)]
        return ParsedLog(reports, self.hosts, self.failures, self.torch_events, self.lines, listed)


__all__ = [
    "LineInterest",
    "ListedRank",
    "LogParser",
    "NcclLine",
    "ParsedLog",
    "RankReport",
    "TorchEvent",
    "WatchdogTimeout",
]
