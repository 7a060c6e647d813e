"""Results: the schema every run is stored in, and everything that reads it.

Imports the standard library, nccl_k8s.errors and the engine's printing constants (never torch):
`results` must work on a laptop without torch and without a cluster; matplotlib only for plots.

- schema       the versioned results file (`load`, `dump`, `Run`, `Row`, `RunMeta`)
- lines        the engine's `NCCL_K8S_RESULT` lines in stdout or pod logs -> Run
- nccltests    NVIDIA nccl-tests text output of any version, behind any launcher -> Run
- nccltests_json  nccl-tests' `-J` JSON (and our engine's `--json`) -> Run
- collectives  what each collective prints; which collective an unnamed table is
- diagnose     NCCL_DEBUG=INFO logs -> transports per rank, findings with hints (nccllog reads
               the facts, the registry in `rules` turns them into findings)
- compare      run vs baseline per op x dtype x redop x root x size x placement; min-busbw gate
- store        runs/<id>/results.json and run ids
- plots, report  the HTML/PNG report (matplotlib, the `report` extra)
"""

from nccl_k8s.results.compare import Comparison, compare, min_busbw_gate, parse_tolerance, select
from nccl_k8s.results.diagnose import Diagnosis, Finding, diagnose_files, diagnose_text
from nccl_k8s.results.imports import import_file, import_files
from nccl_k8s.results.lines import (
    RESULT_PREFIX,
    blocks,
    collect_results,
    last_block,
    parse_result_lines,
    parse_sweeps,
)
from nccl_k8s.results.schema import (
    SCHEMA_VERSION,
    Device,
    OpIdentification,
    Row,
    Run,
    RunConfig,
    RunMeta,
    Summary,
    dump,
    load,
)
from nccl_k8s.results.store import new_run_id, resolve, results_path, store_run

__all__ = [
    "RESULT_PREFIX",
    "SCHEMA_VERSION",
    "Comparison",
    "Device",
    "Diagnosis",
    "Finding",
    "OpIdentification",
    "Row",
    "Run",
    "RunConfig",
    "RunMeta",
    "Summary",
    "blocks",
    "collect_results",
    "compare",
    "diagnose_files",
    "diagnose_text",
    "dump",
    "import_file",
    "import_files",
    "last_block",
    "load",
    "min_busbw_gate",
    "new_run_id",
    "parse_result_lines",
    "parse_sweeps",
    "parse_tolerance",
    "resolve",
    "results_path",
    "select",
    "store_run",
]
