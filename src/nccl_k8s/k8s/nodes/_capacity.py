"""How many pair tests `nodes check` runs at once: the round's pairs or --parallel, bounded by
the sockets this process may open and the API client's connection pool (widened to carry them)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable

from nccl_k8s.k8s.api._client import KubeClient

ProgressFn = Callable[[str], None]

#: Connections one 2-node test holds at most: its deploy follows the run with four watches (the
#: pods, Job, StatefulSet, events), plus a request (or one of collect's two log fetches, or
#: cleanup's watch of the pods) beside them.
STREAMS_PER_TEST = 6
#: Sockets a test holds beside those: collect's log fetches (api._rawlogs), one per pod.
RAW_PER_TEST = 2
#: Files the check keeps for itself beside its tests' sockets (the kubeconfig, results files,
#: the interpreter's own).
RESERVED_FILES = 64


def open_files(want: int) -> int:
    """The files this process may open, its soft limit raised towards `want` (up to the hard
    limit, which needs no privilege); unbounded where the platform has no such limit."""
    if sys.platform == "win32":
        return want
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            soft = new
    return want if soft == resource.RLIM_INFINITY else int(soft)


def capacity(kc: KubeClient, pairs: int, parallel: int | None, say: ProgressFn) -> int:
    """Tests at once: the largest round (`pairs`, pass 1's), or `parallel`, with the client's
    pool widened to carry them; fewer only where the open-file limit bounds the sockets (then
    said, with the waves pass 1 takes)."""
    want = max(1, min(parallel or pairs, pairs))
    per_test = STREAMS_PER_TEST + RAW_PER_TEST
    files = open_files(RESERVED_FILES + want * per_test)
    by_files = max(1, (files - RESERVED_FILES) // per_test)
    held = kc.widen_pool(min(want, by_files) * STREAMS_PER_TEST)
    at_once = max(1, min(want, by_files, held // STREAMS_PER_TEST))
    if at_once < pairs:
        if at_once == want:
            why = "as asked"
        elif by_files < want:
            why = f"this process may open {files} files, {per_test} sockets a test"
        else:
            why = f"the API client's pool holds {held} connections, {STREAMS_PER_TEST} a test"
        asked = f"--parallel {parallel}" if parallel else "the default (every pair at once)"
        say(
            f"{asked}: {at_once} tests at once ({why}); pass 1's {pairs} pairs run in "
            f"{-(-pairs // at_once)} waves"
        )
    return at_once


__all__ = [
    "RAW_PER_TEST",
    "RESERVED_FILES",
    "STREAMS_PER_TEST",
    "ProgressFn",
    "capacity",
    "open_files",
]
