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
- domainmap    a saved `nodes check -o json`'s domain-by-domain matrix: report's heatmap
"""

from nccl_k8s.results.compare import (
    CompareOutcome,
    Comparison,
    DataCheck,
    GateResult,
    compare,
    data_check,
    human_size,
    judge,
    min_busbw_gate,
    parse_metric,
    parse_tolerance,
    run_failures,
    select,
)
from nccl_k8s.results.diagnose import (
    Diagnosis,
    Finding,
    diagnose_files,
    diagnose_text,
    parse_fabric,
)
from nccl_k8s.results.imports import import_file, import_files, import_with_gaps
from nccl_k8s.results.lines import (
    RESULT_PREFIX,
    blocks,
    collect_results,
    last_block,
    parse_result_lines,
    parse_sweeps,
)
from nccl_k8s.results.platform_gate import platform_named
from nccl_k8s.results.report import write_report
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
    to_dict,
)
from nccl_k8s.results.store import new_run_id, resolve, results_path, runs_dir, store_run
from nccl_k8s.results.tables import heading, nccl_tests_table, what_ran

__all__ = [
    "RESULT_PREFIX",
    "SCHEMA_VERSION",
    "CompareOutcome",
    "Comparison",
    "DataCheck",
    "Device",
    "Diagnosis",
    "Finding",
    "GateResult",
    "OpIdentification",
    "Row",
    "Run",
    "RunConfig",
    "RunMeta",
    "Summary",
    "blocks",
    "collect_results",
    "compare",
    "data_check",
    "diagnose_files",
    "diagnose_text",
    "dump",
    "heading",
    "human_size",
    "import_file",
    "import_files",
    "import_with_gaps",
    "judge",
    "last_block",
    "load",
    "min_busbw_gate",
    "nccl_tests_table",
    "new_run_id",
    "parse_fabric",
    "parse_metric",
    "parse_result_lines",
    "parse_sweeps",
    "parse_tolerance",
    "platform_named",
    "resolve",
    "results_path",
    "run_failures",
    "runs_dir",
    "select",
    "store_run",
    "to_dict",
    "what_ran",
    "write_report",
]
