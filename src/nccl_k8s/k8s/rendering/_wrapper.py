"""What runs first in every pod: a standard-library wrapper around torchrun that replays the
run's result lines and a digest of its NCCL lines as blocks at the end of the log, so that
kubelet log rotation cannot take them (k8s.run._collect reads the last complete block)."""

from __future__ import annotations

#: Markers of the blocks the wrapper prints last: `NCCL_K8S_BEGIN <name> <n>`, n lines,
#: `NCCL_K8S_END <name> <n>`; names "results" (rank 0's result lines) and "nccl" (the digest).
#: The engine frames each of several sweeps the same way (bench.report); the wrapper keeps no
#: copy of lines the engine framed, so a StatefulSet's endless sweeps cost it no memory.
from nccl_k8s.bench.report import BLOCK_BEGIN, BLOCK_END

WRAPPER_ENV = "NCCL_K8S_WRAPPER"

#: The container's wrapper: `python3 -c POD_WRAPPER COMMAND...`. It must run on any image with
#: Python >= 3.8, so it uses the standard library only. Blocks are printed only when the command
#: succeeded: a failed pod's last log lines (what `deploy` shows) stay its own error. The NCCL digest keeps every WARN and the
#: first 400 INFO lines of each process and device (initialization prints what diagnose reads:
#: version, network, HCAs, transports), 8,000 lines at most: bounded however long the run.
POD_WRAPPER = """\
# nccl-k8s: run the command and stream its output; then print the result lines (rank 0 prints
# them) and a digest of the NCCL lines again, as blocks, last: log rotation keeps the newest.
import re, signal, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
for s in (signal.SIGTERM, signal.SIGINT):
    signal.signal(s, lambda n, _: child.send_signal(n))
out, results, nccl, count, last, framed = sys.stdout.buffer, [], [], {}, b"\\n", False
who = re.compile(rb"(\\S+:\\d+):\\d+ (\\[\\d+\\])")
for line in iter(child.stdout.readline, b""):
    out.write(line)
    out.flush()
    last = line
    if b"NCCL_K8S_BEGIN results " in line:
        framed = True  # the engine frames each of several sweeps itself: nothing to keep
    elif b"NCCL_K8S_END results " in line:
        framed = False
    elif b"NCCL_K8S_RESULT " in line and not framed:
        results.append(line)
    elif b"NCCL INFO" in line or b"NCCL WARN" in line:
        m = who.search(line)
        k = m.group(1) + m.group(2) if m else b""
        count[k] = count.get(k, 0) + 1
        if len(nccl) < 8000 and (b"NCCL WARN" in line or count[k] <= 400):
            nccl.append(line)
code = child.wait()
if not last.endswith(b"\\n"):
    out.write(b"\\n")
for name, lines in ((b"nccl", nccl), (b"results", results)):
    if lines and code == 0:  # a failed rank must end its log with its own error
        out.write(b"NCCL_K8S_BEGIN %s %d\\n" % (name, len(lines)))
        out.writelines(x if x.endswith(b"\\n") else x + b"\\n" for x in lines)
        out.write(b"NCCL_K8S_END %s %d\\n" % (name, len(lines)))
out.flush()
sys.exit(code if code >= 0 else 128 - code)
"""

__all__ = ["BLOCK_BEGIN", "BLOCK_END", "POD_WRAPPER", "WRAPPER_ENV"]
