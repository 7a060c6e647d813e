"""Whether two runs measured the same thing: the facts `compare` reads off both runs' metadata.

A busbw or time of a gloo run on two CPU processes says nothing about NCCL on one H200; a
1-rank run's busbw is 0 by nccl-tests' formula. Such a pair compared row by row gives confident,
wrong verdicts (every row "regressed", or every row "improved"). So each fact below either
refuses the comparison (`refuses`: the numbers measure another system) unless the user asks for
it anyway, or only warns (the same system, a detail that may explain a difference).

A fact unknown on either side (an imported tail without nccl-tests' preamble, a local run
that names no fabric) neither refuses nor warns: there is nothing to tell.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from nccl_k8s.results.schema import RunMeta


def device_names(meta: RunMeta, *, model: bool = True) -> list[str]:
    """The run's device model: the GPU model its meta names (with `model`), else its ranks'
    distinct device names, sorted; [] when the run does not say."""
    if model and meta.gpu_model:
        return [meta.gpu_model]
    return sorted({d.name for d in meta.devices if d.name})


def device_of(meta: RunMeta) -> str | None:
    """What ran the collectives: the GPU model, "CPU (<model>)" for gloo ranks (always CPU
    processes), the ranks' device names when they disagree; None when the run does not say."""
    if meta.backend == "gloo":
        names = device_names(meta, model=False)
        return f"CPU ({', '.join(names)})" if names else "CPU"
    return ", ".join(device_names(meta)) or None


def spans(ranks: list[int]) -> str:
    """0-3,6: sorted ranks as ranges."""
    out: list[list[int]] = []
    for r in sorted(ranks):
        if out and r == out[-1][-1] + 1:
            out[-1].append(r)
        else:
            out.append([r])
    return ",".join(f"{g[0]}-{g[-1]}" if len(g) > 1 else str(g[0]) for g in out)


def domains(meta: RunMeta) -> dict[str, tuple[list[int], list[str]]]:
    """Each topology domain the ranks ran in (a rank's `domain`: its node's label values, from
    the deploy's rank plan, `/`-joined coarse to fine) -> (its ranks, its nodes), in rank order;
    {} when no rank names one."""
    by: dict[str, tuple[list[int], list[str]]] = {}
    for d in sorted(meta.devices, key=lambda d: d.rank):
        if d.domain:
            ranks, nodes = by.setdefault("/".join(v or "-" for v in d.domain.values()), ([], []))
            ranks.append(d.rank)
            if d.node and d.node not in nodes:
                nodes.append(d.node)
    return by


def domain_layout(meta: RunMeta) -> str | None:
    """How the ranks sat in topology domains, whatever the domains are called ("2 domains:
    ranks 0-3 | 4-7"); None when the run does not say. Two runs whose rings crossed domains
    differently may differ by that alone."""
    by = domains(meta)
    if not by:
        return None
    return f"{len(by)} domain{'s' if len(by) != 1 else ''}: ranks " + " | ".join(
        spans(r) for r, _ in by.values()
    )


@dataclass(frozen=True)
class Fact:
    """One thing two compared runs should agree on."""

    #: As messages name it ("world size").
    name: str
    read: Callable[[RunMeta], object]
    #: True: a difference refuses the comparison (unless allowed); False: it is a warning.
    refuses: bool


#: Checked in this order; the messages list them so.
FACTS: tuple[Fact, ...] = (
    Fact("backend", lambda m: m.backend, refuses=True),
    Fact("device", device_of, refuses=True),
    Fact("world size", lambda m: m.world_size, refuses=True),
    Fact("fabric", lambda m: m.fabric, refuses=True),
    Fact("NCCL version", lambda m: m.nccl, refuses=False),
    Fact("node count", lambda m: m.nodes, refuses=False),
    Fact("topology domains", domain_layout, refuses=False),
)


@dataclass(frozen=True)
class Difference:
    fact: Fact
    current: object
    baseline: object

    def text(self) -> str:
        return f"{self.fact.name} differs: current {self.current}, baseline {self.baseline}"


def differences(current: RunMeta, baseline: RunMeta) -> list[Difference]:
    """Each fact both runs know and disagree on, in FACTS' order."""
    out = []
    for fact in FACTS:
        c, b = fact.read(current), fact.read(baseline)
        if c is not None and b is not None and c != b:
            out.append(Difference(fact, c, b))
    return out


def refusal(found: list[Difference]) -> str | None:
    """The one line that refuses a comparison of runs that differ in a refusing fact; None
    when none differs."""
    refusing = [d for d in found if d.fact.refuses]
    if not refusing:
        return None
    what = ", ".join(f"{d.fact.name} {d.current} vs {d.baseline}" for d in refusing)
    return (
        f"the runs are not comparable: {what} (current vs baseline); pass --allow-different "
        "to compare them anyway (each difference is then a warning, and rows where busbw is 0 "
        "on either side are decided on time)"
    )


__all__ = ["FACTS", "Difference", "Fact", "device_names", "device_of", "differences", "refusal"]
