"""The node-link fault: a node whose network link is degraded (a NIC that trained at a fraction
of its speed, a flapping port), as `nodes check` must find it; and the link-slow fault: a slow
path between two domains of a topology label (a spine link between two blocks), as `nodes check
--pairing auto` must tell from a slow node.

Every container started on such a node runs with slowlink.c preloaded (LD_PRELOAD), which holds
its processes' sends on IPv4/IPv6 sockets to the node's rate, in wall time. Unlike the node-slow
fault (a share of the CPU, tests/cluster/throttle.py), what it takes from a pair test does not
depend on what else this machine runs: a pair with the node measures at most the rate, loaded
or not, while everything else of the pod (starting, importing torch) runs at full speed.

The library is built with the machine's C compiler on first use, once per cluster, under the
kubelet's work directory.

link-slow: a container started on a node of one domain gets the other domain's nodes' addresses
(node i's pods are 127.<k>.<16+i>.0/24, its hostNetwork pods the node's own address) as slow
destinations with their rate: a pod's sends to pods of the other domain are held to that rate,
its sends inside its own domain are not, so only a run that spans the two domains is slowed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("slowlink.c")
#: The environment variable slowlink.c reads its rate from, in bytes a second.
RATE_ENV = "TEST_CLUSTER_LINK_BPS"
#: The slow destinations ("a.b.c.d/len" separated by spaces) and their rate, in bytes a second.
NETS_ENV = "TEST_CLUSTER_SLOW_NETS"
NETS_RATE_ENV = "TEST_CLUSTER_SLOW_NETS_BPS"


def build(workdir: Path) -> Path:
    """Compile slowlink.c into `workdir` (once) and return the library's path."""
    lib = workdir / "slowlink.so"
    if lib.exists():
        return lib
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise RuntimeError("the node-link fault needs a C compiler (cc or gcc) on PATH")
    workdir.mkdir(parents=True, exist_ok=True)
    tmp = lib.with_suffix(".so.tmp")
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O2", "-o", str(tmp), str(SOURCE), "-ldl", "-lpthread"],
        check=True,
        capture_output=True,
    )
    tmp.rename(lib)
    return lib


def env(
    lib: Path,
    bytes_per_s: float | None,
    current: str | None,
    *,
    slow_nets: list[str] | None = None,
    slow_bytes_per_s: float | None = None,
) -> dict[str, str]:
    """What a container of a node with a degraded link (`bytes_per_s`), or with slow
    destinations (`slow_nets` at `slow_bytes_per_s`), gets in its environment."""
    preload = f"{lib} {current}" if current else str(lib)
    out = {"LD_PRELOAD": preload}
    if bytes_per_s:
        out[RATE_ENV] = f"{bytes_per_s:g}"
    if slow_nets and slow_bytes_per_s:
        out[NETS_ENV] = " ".join(slow_nets)
        out[NETS_RATE_ENV] = f"{slow_bytes_per_s:g}"
    return out
