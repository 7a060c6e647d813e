"""The NCCL log reader as `results` and `diagnose` run it, on real logs: microseconds of CPU per
NCCL line, in one process (no CLI start-up, no HTTP).

`results` feeds each pod's NCCL lines (`_collect._nccl_lines`) to one `diagnose.log_reader()`,
which keeps only the lines the diagnosis rules read; this does the same for each log given (by
default every log under tests/data/nccl-logs, and the real pod log
training-on-eks_p4d_1pod_4proc_deepspeed_efa.log alone), a new reader per log, `--repeat` times,
and prints one JSON object: the commit, the lines, and the CPU per line of each pass. To compare
two commits, run it from each checkout (PYTHONPATH=<checkout>/src) in turn, several rounds.

    python benchmarks/reader_speed.py --repeat 5
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import commit

LOGS = Path(__file__).resolve().parent.parent / "tests" / "data" / "nccl-logs"
POD = LOGS / "training-on-eks_p4d_1pod_4proc_deepspeed_efa.log"


def per_line(texts: list[str], repeat: int) -> list[float]:
    """CPU microseconds per NCCL line of reading `texts`, one reader each, per pass."""
    from nccl_k8s.results.diagnose import log_reader

    lines = sum(t.count("\n") + 1 for t in texts)
    out = []
    for _ in range(repeat):
        t0 = time.process_time()
        for text in texts:
            reader = log_reader()
            reader.feed(text)
            reader.finish()
        out.append(round((time.process_time() - t0) / lines * 1e6, 3))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    import nccl_k8s
    from nccl_k8s.k8s.run._collect import _nccl_lines

    def nccl(path: Path) -> str:
        return "\n".join(_nccl_lines(path.read_text(encoding="utf-8", errors="replace")))

    corpus = [t for t in (nccl(p) for p in sorted(LOGS.rglob("*.log"))) if t]
    pod = [nccl(POD)]
    print(
        json.dumps(
            {
                "code": str(Path(nccl_k8s.__file__).parent),
                "code_commit": subprocess.run(
                    [
                        "git",
                        "-C",
                        str(Path(nccl_k8s.__file__).parent),
                        "rev-parse",
                        "--short",
                        "HEAD",
                    ],
                    capture_output=True,
                    text=True,
                ).stdout.strip(),
                "commit": commit(),
                "corpus_logs": len(corpus),
                "corpus_lines": sum(t.count("\n") + 1 for t in corpus),
                "corpus_us_per_line": per_line(corpus, args.repeat),
                "pod_lines": pod[0].count("\n") + 1,
                "pod_us_per_line": per_line(pod * 10, args.repeat),
            }
        )
    )


if __name__ == "__main__":
    main()
