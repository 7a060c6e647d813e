"""Where runs live on disk: `runs/<run-id>/results.json`, and how a user names one.

Commands that read results (`compare`, `report`, the gates) accept either a path to a results file or a
run id; `resolve` turns both into a path. The runs directory is `./runs` unless NCCL_K8S_RUNS_DIR says
otherwise (tests and CI point it elsewhere).
"""

from __future__ import annotations

import os
import re
import secrets
import time
from pathlib import Path

from nccl_k8s.errors import ResultsError, UsageError
from nccl_k8s.results.schema import Run, dump

RESULTS_FILE = "results.json"
#: A run id is a Kubernetes label value and a directory name: lower-case, digits, '-', '.', '_'.
_RUN_ID = re.compile(r"^[a-z0-9]([-a-z0-9_.]{0,61}[a-z0-9])?$")


def runs_dir() -> Path:
    return Path(os.environ.get("NCCL_K8S_RUNS_DIR", "runs"))


def new_run_id(prefix: str = "nccl") -> str:
    """A fresh id like the deployer's (spec.generate_run_id): nccl-20261203-045501-3fa2, UTC."""
    return f"{prefix}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(2)}"


def check_new_run_id(run_id: str, *, base: Path | None = None) -> str:
    """A user-chosen id for a run about to be stored: well-formed, and not taken (a stored run is
    evidence; a second run under its id would silently replace it)."""
    if not _RUN_ID.match(run_id):
        raise UsageError(
            f"--run-id {run_id!r}: expected lower-case letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit, at most 63 characters",
            key="run_id",
        )
    existing = results_path(run_id, base=base)
    if existing.exists():
        raise UsageError(
            f"--run-id {run_id!r}: {existing} already exists: choose another id or remove it",
            key="run_id",
        )
    return run_id


def results_path(run_id: str, *, base: Path | None = None) -> Path:
    return (base if base is not None else runs_dir()) / run_id / RESULTS_FILE


def store_run(run: Run, *, run_id: str | None = None, base: Path | None = None) -> Path:
    """Write `run` to runs/<id>/results.json and return the path.

    The id is `run_id`, else the run's own (the engine's meta line carries NCCL_K8S_RUN_ID in pods),
    else a new one; the run's meta is updated to match, so the file names its own run.
    """
    rid = run_id or run.meta.run_id or new_run_id()
    run.meta.run_id = rid
    return dump(run, results_path(rid, base=base))


def resolve(ref: str, *, base: Path | None = None) -> Path:
    """A results file path, or a run id meaning runs/<id>/results.json."""
    p = Path(ref)
    if p.is_file():
        return p
    if p.is_dir() and (p / RESULTS_FILE).is_file():
        return p / RESULTS_FILE
    if _RUN_ID.match(ref) and not ref.endswith(".json"):
        candidate = results_path(ref, base=base)
        if candidate.is_file():
            return candidate
        where = base if base is not None else runs_dir()
        if not p.is_dir():
            raise ResultsError(
                f"{ref!r}: no such results file, and no run {ref!r} in {where}/ (expected {candidate})",
                path=ref,
            )
    if p.is_dir():
        raise ResultsError(
            f"{ref} is a directory without {RESULTS_FILE}: expected a results file, a run's "
            "directory (runs/<id>/) or a run id",
            path=ref,
        )
    raise ResultsError(f"{ref}: no such results file", path=ref)


__all__ = [
    "RESULTS_FILE",
    "check_new_run_id",
    "new_run_id",
    "resolve",
    "results_path",
    "runs_dir",
    "store_run",
]
