"""A run's pods as `status` and `list` show them, read as small as the API server can send them.

Most pods of a large run are fine: Running, or Succeeded, with nothing to say. For those the
summary needs their name, rank, node, phase, age and restart count, which a server-side table
row (api._lists) holds, at a tenth of the bytes of the whole pod. Which rows are fine is decided
exactly, not guessed from the printer's words:

- the phase comes from the list's field selector (`status.phase=Running`), not from the
  Status cell;
- a row is fine when its Status cell is what kube-apiserver's pod printer shows for that phase
  when no container is waiting or has terminated (`Running`; `Completed` for Succeeded; a
  waiting reason, an exit code, `Terminating` or `Init:` are anything else) and its Restarts
  cell (init containers included, so never less than `pod_info`'s count) is 0;
- the scheduler is the one the field selector named (`spec.schedulerName`), the workload's
  template's; pods that ask for another come whole from a list of their own.

Every other pod (Pending, Failed, a row that is not fine, a server that sends no table) is read
whole and goes through `pod_info`, so its reason is the one `deploy --wait` would give.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import re
from collections.abc import Awaitable, Callable

from nccl_k8s.k8s.api._client import KubeClient
from nccl_k8s.k8s.api._lists import Row, Table, list_table
from nccl_k8s.k8s.api._translate import selector
from nccl_k8s.k8s.api._types import Obj
from nccl_k8s.k8s.run._plumbing import bounded
from nccl_k8s.k8s.run._pods import PodInfo, pod_info, pod_rank
from nccl_k8s.spec import LABEL_INSTANCE

#: The Status cell of a pod of that phase with nothing wrong (kube-apiserver's printPod).
FINE_CELL = {"Running": "Running", "Succeeded": "Completed"}
#: Rows that are not fine are read by name up to this many, else their phase's list whole.
FETCH_EACH = 32
_LEADING_INT = re.compile(r"\s*(\d+)")


@dataclasses.dataclass(frozen=True)
class RunPods:
    """Every pod's PodInfo, the whole objects of the ones read whole, and each pod's run (its
    instance label) by pod name."""

    infos: list[PodInfo]
    whole: list[Obj]
    runs: dict[str, str]


def template_scheduler(workload: Obj | None) -> str:
    """The scheduler the workload's pods ask for (its pod template's schedulerName)."""
    spec = ((workload or {}).get("spec") or {}).get("template", {}).get("spec") or {}
    return str(spec.get("schedulerName") or "default-scheduler")


def row_info(row: Row, phase: str, scheduler: str) -> PodInfo | None:
    """The PodInfo of a fine row, as `pod_info` would make it from the whole pod; None when
    the row is not fine (the pod must be read whole)."""
    meta = row.metadata
    cells = row.cells
    if cells.get("Status") != FINE_CELL[phase] or meta.get("deletionTimestamp"):
        return None
    m = _LEADING_INT.match(str(cells.get("Restarts", "")))  # "0", or "2 (5m ago)" upstream
    if m is None or int(m.group(1)) != 0 or not meta.get("name"):
        return None
    node = cells.get("Node")
    return PodInfo(
        name=str(meta["name"]),
        rank=pod_rank({"metadata": meta}),
        node=None if node in (None, "", "<none>") else str(node),
        phase=phase,
        restarts=0,
        created=meta.get("creationTimestamp"),
        reason=None,
        message=None,
        scheduler=scheduler,
    )


async def read_pods(
    kc: KubeClient, namespace: str, labels: dict[str, str], *, scheduler: str | None
) -> RunPods:
    """The pods matching `labels`: fine ones from table rows, the rest whole (module doc).

    `scheduler`: the schedulerName the fine pods are expected to ask for; None when no one
    asks for it (`list`), and then the fine pods' PodInfo.scheduler is empty."""
    sel = selector(labels)
    sched = f",spec.schedulerName={scheduler}" if scheduler else ""

    def table_fields(phase: str) -> str:
        return f"status.phase={phase}{sched}"

    async def table(phase: str) -> Table:
        return await list_table(kc, "Pod", namespace=namespace, label_selector=sel,
                                field_selector=table_fields(phase))  # fmt: skip

    async def whole(fields: str | None) -> list[Obj]:
        if fields is None:
            return []
        items, _ = await kc.list("Pod", namespace=namespace, label_selector=sel,
                                 field_selector=fields)  # fmt: skip
        return items

    others = f"spec.schedulerName!={scheduler}" if scheduler else None
    running, succeeded, rest, elsewhere = await asyncio.gather(
        table("Running"),
        table("Succeeded"),
        whole("status.phase!=Running,status.phase!=Succeeded"),
        whole(others),
    )
    fine: dict[str, PodInfo] = {}
    objs: dict[str, Obj] = {}
    runs: dict[str, str] = {}
    for phase, got in (("Running", running), ("Succeeded", succeeded)):
        unfine: list[str] = []
        for row in got.rows:
            info = row_info(row, phase, scheduler or "")
            if info is None:
                unfine.append(str(row.metadata.get("name")))
            else:
                fine[info.name] = info
                runs[info.name] = _run_of(row.metadata)
        for obj in (*got.objects, *await _whole_of(unfine, table_fields(phase), whole)):
            objs[str(obj["metadata"].get("name"))] = obj
    for obj in (*rest, *elsewhere):
        objs[str(obj["metadata"].get("name"))] = obj
    # A pod that changed phase between the lists may be in two: its whole object wins.
    infos = [i for n, i in fine.items() if n not in objs]
    infos.extend(pod_info(o) for o in objs.values())
    runs.update((n, _run_of(o["metadata"])) for n, o in objs.items())
    return RunPods(infos, list(objs.values()), runs)


def _run_of(meta: Obj) -> str:
    return str((meta.get("labels") or {}).get(LABEL_INSTANCE) or "")


async def _whole_of(
    names: list[str], fields: str, list_whole: Callable[[str], Awaitable[list[Obj]]]
) -> list[Obj]:
    """The pods of these names (of the list `fields` selects), whole: each by a list of its
    name when few, else that whole list (a pod deleted meanwhile is left out). Lists, not gets:
    the Role `nccl-k8s rbac` prints grants pods list and watch, not get."""
    if not names:
        return []
    if len(names) > FETCH_EACH:
        wanted = set(names)
        return [o for o in await list_whole(fields) if o["metadata"].get("name") in wanted]
    got = await bounded(
        16, [functools.partial(list_whole, f"{fields},metadata.name={n}") for n in names]
    )
    return [o for items in got for o in items]
