"""Import nccl-tests output files (text or `-J` JSON, decided by content) into one Run, refusing
files that cannot be one run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from nccl_k8s.errors import ResultsError
from nccl_k8s.results.cutoff import CutOff
from nccl_k8s.results.nccltests import read_text, row_key
from nccl_k8s.results.nccltests_json import parse_json
from nccl_k8s.results.schema import CLUSTER_FIELDS, OpIdentification, Run, meta_differences

#: What nccl-tests prints above its table and nothing in the rows can give back, by RunMeta field.
_PREAMBLE_FIELDS = (
    ("world_size", "world size"),
    ("nodes", "node count"),
    ("gpu_model", "GPU model"),
    ("nccl", "NCCL version"),
    ("nccl_tests", "nccl-tests version"),
)
_FROM = {
    "command": "the command line",
    "file-name": "the file name",
    "table": "the rows",
    "text": "the text around the table",
}


def import_file(path: str | Path) -> Run:
    """Read one nccl-tests output file, text or `-J` JSON (decided by content, not extension)."""
    return _read(path)[0]


def _read(path: str | Path) -> tuple[Run, CutOff | None]:
    """import_file, and where its last table was cut off (the run is then marked partial)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise ResultsError(f"{p}: no such file", path=str(p)) from None
    except IsADirectoryError:
        raise ResultsError(f"{p} is a directory, not an nccl-tests output", path=str(p)) from None
    except OSError as e:
        raise ResultsError(f"{p}: cannot read: {e.strerror}", path=str(p)) from None
    if text.lstrip().startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise ResultsError(
                f"{p}: nccl-tests JSON is not valid ({e.msg} at line {e.lineno}): truncated?",
                path=str(p),
            ) from None
        if isinstance(obj, dict) and "schema_version" in obj:
            raise ResultsError(
                f"{p} is already an nccl-k8s results file: use it directly", path=str(p)
            )
        return parse_json(obj, origin=str(p)), None
    return read_text(text, origin=str(p))


def _op_source(ident: OpIdentification) -> str:
    if ident.by == "unknown":
        return "collective unknown (stored as op 'unknown')"
    if ident.by in ("header", "footer"):
        return f"{ident.op} from the {ident.by} '{ident.detail}'"
    return f"{ident.op} from {_FROM.get(ident.by, ident.by)}"


def preamble_gaps(run: Run) -> str | None:
    """For one imported file without nccl-tests' preamble (no `# nThread` line, no `# Rank` lines:
    a tail, or a table pasted alone), one line: what import took from elsewhere and which fields
    it could not know (left empty in the results). None when the preamble is there."""
    meta = run.meta
    if meta.devices or meta.config.iters is not None or meta.config.minbytes is not None:
        return None
    cut = any(i.columns for i in meta.op_identified)
    took = [_op_source(i) for i in meta.op_identified]
    if meta.world_size is not None:
        took.append(f"world size {meta.world_size} from the counts")
    unknown = [name for attr, name in _PREAMBLE_FIELDS if getattr(meta, attr) is None]
    unknown.append("iterations and warmup")
    what = "no nccl-tests preamble ('# nThread', '# Rank' lines" + (
        ", column header)" if cut else ")"
    )
    origin = meta.inputs[0] if meta.inputs else "input"
    line = (
        f"{origin}: {what}: took {', '.join(took)}; cannot know {', '.join(unknown)} (left empty)"
    )
    smallest = min((r.size_bytes for r in run.rows), default=0)
    if cut and smallest > 0:
        line += f"; sizes below {smallest} B, if the run had any, were above the cut"
    return line


def _same_run(runs: list[Run]) -> None:
    """Refuse files that cannot be one run: from different clusters (world size, GPU model or NCCL
    version differ where both say), or measuring the same thing twice (the same file twice, two
    runs of one test)."""
    first = runs[0]
    for other in runs[1:]:
        a, b = first.meta.inputs[0], other.meta.inputs[0]
        # World size, GPU model and NCCL version; node counts only `compare` weighs (a warning).
        if differ := meta_differences(first.meta, other.meta, CLUSTER_FIELDS[:3]):
            what, x, y = differ[0]
            raise ResultsError(
                f"{a} and {b} are not one run: {what} {x} vs {y}; import each file on its own "
                "and compare the results",
                path=b,
            )
    seen: dict[tuple[str, str | None, str | None, int | None, int, str], int] = {}
    for i, run in enumerate(runs):
        origin = run.meta.inputs[0]
        for r in run.rows:
            key = (r.op, *row_key(r))
            if (j := seen.setdefault(key, i)) != i:
                raise ResultsError(
                    f"{runs[j].meta.inputs[0]} and {origin} both measure {r.op} at "
                    f"{r.size_bytes} B: two runs (or one file given twice); import each file on "
                    "its own",
                    path=origin,
                )


def import_files(paths: Iterable[str | Path]) -> Run:
    """Import several files into one Run: rows and summaries concatenated, meta from the first
    file, completed by the others where the first left a field empty. The files must be parts of
    one run (other collectives, sizes or dtypes of the same cluster); ResultsError otherwise."""
    return import_with_gaps(paths)[0]


def import_with_gaps(paths: Iterable[str | Path]) -> tuple[Run, list[str]]:
    """import_files, with a warning line for each file that lacks nccl-tests' preamble
    (preamble_gaps) and for each whose output is cut off (where it stops against what its
    header announced; the run is marked partial)."""
    read = [_read(p) for p in paths]
    runs = [run for run, _ in read]
    gaps = [g for run in runs if (g := preamble_gaps(run)) is not None]
    gaps += [cut.text(run.meta.inputs[0]) for run, cut in read if cut is not None]
    if not runs:
        raise ResultsError("no files to import")
    _same_run(runs)
    merged = runs[0]
    for other in runs[1:]:
        merged.rows.extend(other.rows)
        merged.summaries.extend(other.summaries)
        merged.meta.inputs.extend(other.meta.inputs)
        merged.meta.op_identified.extend(other.meta.op_identified)
        for k, v in other.meta.env.items():
            merged.meta.env.setdefault(k, v)
        for name in ("nccl", "cuda", "nccl_tests", "gpu_model", "world_size", "nodes", "time"):
            if getattr(merged.meta, name) is None:
                setattr(merged.meta, name, getattr(other.meta, name))
        if not merged.meta.devices:
            merged.meta.devices = other.meta.devices
            merged.meta.gpus_per_node = other.meta.gpus_per_node
        if merged.meta.failure is None:
            merged.meta.failure = other.meta.failure
        merged.meta.partial = merged.meta.partial or other.meta.partial
    merged.meta.config.ops = merged.ops()
    return merged, gaps


__all__ = ["import_file", "import_files", "import_with_gaps", "preamble_gaps"]
