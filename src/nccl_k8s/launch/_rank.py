"""A local rank's entry point: `python -m nccl_k8s.launch._rank [engine flags]`.

It ties the rank's life to the launcher's, then runs `python -m nccl_k8s.bench` unchanged (the
entry point pods run). The kernel sends SIGKILL to the rank the moment the launcher ends, however
it ends (PR_SET_PDEATHSIG): a launcher killed with SIGKILL, which can run no clean-up of its own,
leaves no rank behind. torch starts each rank in a session of its own, so a terminal's Ctrl-C
reaches only the launcher, which then stops the ranks itself.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import signal
import sys

#: <linux/prctl.h>: deliver a signal to this process when its parent thread ends.
PR_SET_PDEATHSIG = 1
#: The launcher's pid, so a rank whose launcher died before the prctl call ends at once.
LAUNCHER_PID_ENV = "NCCL_K8S_LAUNCHER_PID"


def die_with_parent() -> bool:
    """Ask the kernel to SIGKILL this process when its parent ends; False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return int(libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)) == 0


def main() -> None:
    die_with_parent()
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    # The launcher may have ended between our fork and the prctl: then nobody is left to wait
    # for this rank, and the kernel will not tell us again.
    if launcher and launcher.isdigit() and os.getppid() != int(launcher):
        os._exit(1)
    sys.argv[0] = "nccl_k8s.bench"
    runpy.run_module("nccl_k8s.bench", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
