"""Ingest the JSON document nccl-tests writes with `-J FILE` (format version 3 and compatible).

Our engine's `--json` writes the same layout with a `generator` field, an `op` per result and an
`ops` list, and is read by the same function.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from nccl_k8s.bench.options import OPTIONS
from nccl_k8s.errors import ResultsError
from nccl_k8s.results.collectives import identify_op, op_in_command, op_in_file_name
from nccl_k8s.results.schema import (
    Device,
    IdentifiedBy,
    OpIdentification,
    Placement,
    Row,
    Run,
    RunConfig,
    RunMeta,
    Summary,
    as_backend,
)


def nccl_version_from_code(code: int) -> str:
    """nccl-tests prints NCCL_VERSION_CODE: major*10000+minor*100+patch since 2.9, *1000 before."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def fill_world(meta: RunMeta, devices: list[Device]) -> None:
    """World size, node count, GPUs per node and GPU model from the device list."""
    devices.sort(key=lambda d: d.rank)
    meta.devices = devices
    if not devices:
        return
    meta.world_size = len(devices)
    hosts = {d.host for d in devices}
    meta.nodes = len(hosts)
    if meta.world_size % meta.nodes == 0:
        meta.gpus_per_node = meta.world_size // meta.nodes
    names = {d.name for d in devices if d.name}
    if len(names) == 1:
        meta.gpu_model = names.pop()


def _f(x: object, what: str, origin: str) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise ResultsError(f"{origin}: {what} is {x!r}, expected a number", path=origin)
    return float(x)


def parse_json(obj: object, *, origin: str = "<nccl-tests.json>") -> Run:
    """Parse the document nccl-tests writes with `-J FILE` (format version 3 and compatible)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("results"), list):
        raise ResultsError(f"{origin} is not nccl-tests -J output (no 'results' list)", path=origin)
    d = cast(dict[str, Any], obj)
    meta = _meta(d, origin)
    generator = d.get("generator")
    args = [a for a in d.get("args") or [] if isinstance(a, str)]
    named = op_in_command(args[0]) if args else None
    by: IdentifiedBy = "command"
    if named is None:
        named, by = op_in_file_name(Path(origin).name), "file-name"
    op: str = named or "unknown"
    raw_cfg = d.get("config")
    cfg_in: dict[str, Any] = cast(dict[str, Any], raw_cfg) if isinstance(raw_cfg, dict) else {}
    cfg = meta.config = _config(cfg_in, op)
    fill_world(meta, _devices(cfg_in))
    run = Run(meta=meta, rows=_rows(d["results"], op, origin))
    if not run.rows:
        raise ResultsError(f"{origin}: nccl-tests JSON holds no results", path=origin)
    if named is not None and generator is None:
        detail = f"args[0] {args[0]}" if by == "command" else f"file name {Path(origin).name}"
        meta.op_identified.append(OpIdentification(op, by, detail))
    elif named is None and generator is None:
        found = identify_op(run.rows, has_redop=True, has_root=True, world_size=meta.world_size)
        op = found.op or "unknown"
        for row in run.rows:
            row.op = op
        cfg.ops = [op]
        meta.op_identified.append(
            OpIdentification(op, "table" if found.op else "unknown", found.detail)
        )
    per_op = d.get("ops")
    if isinstance(per_op, list) and per_op:
        for entry in per_op:
            if isinstance(entry, dict) and isinstance(entry.get("op"), str):
                run.summaries.append(_json_summary(entry["op"], entry))
        run.meta.config.ops = run.ops()
        return run
    run.summaries.append(_json_summary(op, d))
    first = run.rows[0]
    cfg.dtype, cfg.redop, cfg.root = first.dtype, first.redop, first.root
    return run


def _meta(d: dict[str, Any], origin: str) -> RunMeta:
    """What the document says of the run: generator, start time, NCCL version and library, the
    NCCL_* environment."""
    meta = RunMeta(source="nccl-tests", backend="nccl", inputs=[origin])
    # Our engine's --json uses the same layout, with a generator field, `op` per row and `ops`.
    generator = d.get("generator")
    if isinstance(generator, str) and generator.startswith("nccl-k8s"):
        meta.source = "nccl-k8s"
        meta.nccl_k8s = generator.split()[-1]
        meta.backend = as_backend(_opt_str(d.get("config", {}).get("backend"))) or meta.backend
    meta.time = str(d["start_time"]) if d.get("start_time") else None
    code = d.get("nccl_version")
    if isinstance(code, int) and code > 0:  # our engine writes 0 for gloo runs
        meta.nccl = nccl_version_from_code(code)
    library = d.get("nccl_library")
    if meta.source == "nccl-k8s" and isinstance(library, str):
        meta.nccl_library = library
    for kv in d.get("env") or []:
        if isinstance(kv, str) and "=" in kv:
            k, v = kv.split("=", 1)
            if k.startswith("NCCL_"):
                meta.env[k] = v
    return meta


def _config(cfg_in: dict[str, Any], op: str) -> RunConfig:
    """Each engine option the -J `config` holds under its nccl-tests key (bench.options), or
    under our own where nccl-tests' form cannot say it (-z's mode)."""
    cfg = RunConfig(ops=[op])
    for o in OPTIONS:
        if o.json_key is None or o.meta is None or o.read is None:
            continue
        raw = cfg_in.get(o.meta) if o.json_own and o.meta in cfg_in else cfg_in.get(o.json_key)
        setattr(cfg, o.meta, _option_value(raw, o.read, o.modes or {}))
    return cfg


def _option_value(raw: object, read: str, modes: Mapping[int, str]) -> object:
    if read == "str":
        return _opt_str(raw)
    if read != "mode":
        return opt_int(raw)
    if isinstance(raw, int) and not isinstance(raw, bool) and raw in modes:
        return raw
    flag = _opt_bool(raw)  # nccl-tests' bool: any blocking mode, read as -z 1 (its 0/1 days)
    return None if flag is None else int(flag)


def _devices(cfg_in: dict[str, Any]) -> list[Device]:
    return [
        Device(
            rank=dev["rank"],
            host=_opt_str(dev.get("hostname")),
            pid=opt_int(dev.get("pid")),
            device=opt_int(dev.get("device")),
            name=_opt_str(dev.get("device_info")),
        )
        for dev in cfg_in.get("devices") or []
        if isinstance(dev, dict) and isinstance(dev.get("rank"), int)
    ]


def _rows(results: list[Any], op: str, origin: str) -> list[Row]:
    """A row per result and placement (out of place, in place) the document holds."""
    rows = []
    for i, res in enumerate(results):
        where = f"{origin}: results[{i}]"
        if not isinstance(res, dict) or not isinstance(res.get("size"), int):
            raise ResultsError(f"{where} has no integer 'size'", path=origin)
        root_raw = res.get("root")
        root = opt_int(str(root_raw).strip()) if root_raw is not None else None
        for key, placement in (("out_of_place", "out"), ("in_place", "in")):
            cell = res.get(key)
            if not isinstance(cell, dict):
                continue
            nwrong = cell.get("nwrong")
            wrong = int(nwrong) if isinstance(nwrong, int | float) and nwrong >= 0 else None
            rows.append(
                Row(
                    op=_opt_str(res.get("op")) or op,
                    size_bytes=res["size"],
                    placement=cast(Placement, placement),
                    time_us=_f(cell.get("time"), f"results[{i}].{key}.time", origin),
                    algbw=_f(cell.get("alg_bw"), f"results[{i}].{key}.alg_bw", origin),
                    busbw=_f(cell.get("bus_bw"), f"results[{i}].{key}.bus_bw", origin),
                    dtype=_opt_str(res.get("type")),
                    redop=_opt_str(res.get("redop")),
                    root=root,
                    count=opt_int(res.get("count")),
                    wrong=wrong,
                    time_us_min=_opt_float(cell.get("time_min")),
                    time_us_max=_opt_float(cell.get("time_max")),
                )
            )
    return rows


def _json_summary(op: str, d: dict[str, Any]) -> Summary:
    summary = Summary(op=op)
    oob = d.get("out_of_bounds")
    if isinstance(oob, dict):
        summary.out_of_bounds = opt_int(oob.get("count"))
        summary.ok = _opt_bool(oob.get("okay"))
    avg = d.get("average_bus_bandwidth")
    if isinstance(avg, dict):
        summary.avg_busbw = _opt_float(avg.get("bandwidth"))
    return summary


def _opt_float(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x)


def opt_int(x: object) -> int | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, float) and x == int(x):
        return int(x)
    if isinstance(x, str) and x.strip().lstrip("-").isdigit():
        return int(x.strip())
    return None


def _opt_str(x: object) -> str | None:
    return x if isinstance(x, str) else None


def _opt_bool(x: object) -> bool | None:
    if isinstance(x, bool):
        return x
    if isinstance(x, str) and x.lower() in ("true", "false"):
        return x.lower() == "true"
    if isinstance(x, int):
        return bool(x)
    return None


__all__ = ["fill_world", "nccl_version_from_code", "opt_int", "parse_json"]
