"""Read the engine's result lines out of any text that holds them: rank 0's stdout, pod logs.

The engine prints, on rank 0's stdout, one line per record:

    NCCL_K8S_RESULT {"v": 1, "kind": "meta" | "row" | "summary" | "soak", ...}

i.e. the engine's fixed marker `RESULT_PREFIX`, one space and one JSON object. The prefix is looked
for anywhere on a line, because collectors prepend things (`kubectl logs --timestamps`, `[pod/x-0]`)
and other output shares the stream. Everything that is not a result line is ignored; a result line that
is not valid is an error, since a silently dropped row is a wrong result.

`parse_result_lines` is the single reader; `collect_results` is what `run` and `results` call: text(s)
in, a validated Run out, optionally written to the run's directory.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, cast, get_args

from nccl_k8s.bench.report import BLOCK_BEGIN, BLOCK_END, RESULT_PREFIX, RESULTS_BLOCK
from nccl_k8s.errors import ResultsError
from nccl_k8s.results.schema import (
    Device,
    Reader,
    Run,
    RunMeta,
    Summary,
    backend_from,
    config_from,
    device_from,
    dump,
    row_from,
)

# What precedes the JSON object on a result line: the engine's marker (its own constant, re-exported
# here: results may import the engine, never the reverse) and exactly one space.
_LINE_START = RESULT_PREFIX + " "
#: The version of the line format ("v" in every object) this reader understands.
LINE_VERSION = 1
Kind = Literal["meta", "row", "summary", "soak", "sweep"]
KINDS: tuple[Kind, ...] = get_args(Kind)


def _meta_from_line(r: Reader) -> RunMeta:
    local = r.int_("local_world_size")
    devices: list[Device] = [
        device_from(Reader(d, f"{r.where}.devices[{i}]", r.origin))
        for i, d in enumerate(r.list_("devices"))
    ]
    meta = RunMeta(
        source="nccl-k8s",
        run_id=r.str_("run_id"),
        time=r.str_("time"),
        nccl_k8s=r.str_("nccl_k8s"),
        torch=r.str_("torch"),
        nccl=r.str_("nccl"),
        nccl_library=r.str_("nccl_library"),
        cuda=r.str_("cuda"),
        backend=backend_from(r),
        world_size=r.int_("world_size"),
        nodes=r.int_("nodes"),
        gpus_per_node=local,
        gpu_model=r.str_("gpu_model"),
        devices=devices,
        env=r.str_map("env"),
        config=config_from(r.obj("config")),
        sweep=r.int_("sweep"),
    )
    if meta.gpu_model is None and meta.backend != "gloo":  # gloo ranks' "device" is the CPU
        names = {d.name for d in devices if d.name}
        if len(names) == 1:
            meta.gpu_model = names.pop()
    return meta


def parse_result_lines(text: str, *, origin: str = "<output>") -> Run:
    """Build a Run from every result line in `text`.

    Raises ResultsError when there is no result line at all, when a result line is not a JSON
    object (cut off, garbled), has an unknown "v" or "kind", or lacks a field the schema needs,
    and when rows arrive without the meta line that must precede them.
    """
    run = Run()
    have_meta = False
    found = 0
    for lineno, line in enumerate(text.splitlines(), start=1):
        at = line.find(_LINE_START)
        if at < 0:
            continue
        found += 1
        where = f"{origin}: line {lineno}"
        payload = line[at + len(_LINE_START) :].strip()
        try:
            obj = json.loads(payload)
        except json.JSONDecodeError:
            raise ResultsError(
                f"{where}: result line is not one JSON object (cut off?): "
                f"{payload[:60]}{'...' if len(payload) > 60 else ''}",
                path=origin,
            ) from None
        if not isinstance(obj, dict):
            raise ResultsError(f"{where}: result line is not a JSON object", path=origin)
        rec = cast(dict[str, Any], obj)
        v = rec.get("v")
        if v != LINE_VERSION:
            raise ResultsError(
                f"{where}: result line version {v!r}; this nccl-k8s reads version "
                f"{LINE_VERSION}: the engine in the pod is newer or older than this CLI",
                path=origin,
            )
        kind = rec.get("kind")
        r = Reader(rec, f"line {lineno}", origin)
        if kind == "meta":
            if have_meta:
                # One run per text; a second meta means two runs (or sweeps) were concatenated.
                raise ResultsError(
                    f"{where}: a second meta line: the text holds more than one run (several "
                    "sweeps are read one by one: parse_sweeps)",
                    path=origin,
                )
            run.meta = _meta_from_line(r)
            have_meta = True
        elif kind == "row":
            if not have_meta:
                raise ResultsError(f"{where}: row before the meta line", path=origin)
            run.rows.append(row_from(r, size_key="size"))
        elif kind == "summary":
            run.summaries.append(
                Summary(
                    op=str(r.str_("op", required=True)),
                    out_of_bounds=r.int_("out_of_bounds"),
                    avg_busbw=r.float_("avg_busbw"),
                    ok=r.bool_("ok"),
                )
            )
        elif kind == "soak":
            run.soak.append({k: x for k, x in rec.items() if k not in ("v", "kind")})
        elif kind == "sweep":
            # The sweep's end (with several sweeps): its verdict is the summaries'; the line
            # matters to `status`, which reads it from the log.
            if not have_meta:
                raise ResultsError(f"{where}: sweep line before the meta line", path=origin)
        else:
            raise ResultsError(
                f"{where}: unknown result kind {kind!r} (expected {', '.join(KINDS)})",
                path=origin,
            )
    if not found:
        raise ResultsError(
            f"{origin}: no result lines (lines starting {RESULT_PREFIX!r}) found",
            path=origin,
        )
    if not have_meta:
        raise ResultsError(f"{origin}: result lines but no meta line", path=origin)
    return run


_BLOCK_END = re.compile(rf"^.*{BLOCK_END} (\S+) (\d+)$", re.MULTILINE)


def blocks(text: str, name: str) -> list[list[str]]:
    """The lines of every complete `name` block in `text` (BEGIN, exactly n lines, END n), in
    order. A block cut by log rotation has no BEGIN in the text, or the wrong number of lines
    after it, and is left out."""
    if BLOCK_END not in text:
        return []
    out: list[list[str]] = []
    for end in _BLOCK_END.finditer(text):
        if end.group(1) != name:
            continue
        n = int(end.group(2))
        before = text[: end.start()].rstrip("\n").rsplit("\n", n + 1)
        if n == 0 or len(before) <= n:
            continue
        if before[-n - 1].endswith(f"{BLOCK_BEGIN} {name} {n}"):
            out.append(before[-n:])
    return out


def last_block(text: str, name: str) -> list[str] | None:
    """The lines of the last complete `name` block, or None when there is none."""
    found = blocks(text, name)
    return found[-1] if found else None


def parse_sweeps(text: str, *, origin: str = "<output>") -> list[Run]:
    """Every sweep in `text`, oldest first: each complete results block (RESULTS_BLOCK: the engine
    frames each of several sweeps, the pod wrapper the one sweep of a Job) is one Run; without
    any block, the result lines wherever they are make one Run. ResultsError as
    parse_result_lines when there is none."""
    found = blocks(text, RESULTS_BLOCK)
    if not found:
        return [parse_result_lines(text, origin=origin)]
    return [
        parse_result_lines("\n".join(lines), origin=f"{origin} (block {i + 1})")
        for i, lines in enumerate(found)
    ]


def collect_results(
    texts: str | Iterable[str],
    *,
    run_id: str | None = None,
    out: str | os.PathLike[str] | None = None,
    origin: str = "<output>",
) -> tuple[Run, Path | None]:
    """What `run` and `results` call: parse the output and, if `out` is given, write it there.

    `texts` is rank 0's output, or several pods' logs (only one of them carries result lines,
    rank 0's; the others are searched too so the caller need not know which). `run_id`, when
    given, overrides the id in the meta line (the deployer knows the id; a local run may not).
    Returns the Run and the path written (None when `out` is None).
    """
    text = texts if isinstance(texts, str) else "\n".join(texts)
    run = parse_result_lines(text, origin=origin)
    if run_id is not None:
        run.meta.run_id = run_id
    path = None
    if out is not None:
        path = dump(run, out)
    return run, path


__all__ = [
    "LINE_VERSION",
    "RESULT_PREFIX",
    "blocks",
    "collect_results",
    "last_block",
    "parse_result_lines",
    "parse_sweeps",
]
