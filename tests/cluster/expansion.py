"""Kubernetes' `$(VAR)` expansion of a container's command, args and env values, as the kubelet
does it (k8s.io/kubernetes third_party/forked/golang/expansion): a defined VAR is replaced, an
undefined one kept as written, `$$` is a literal `$`.

Standard library only: benchmarks/pod_entry.py imports it on machines that have nothing of the
test cluster's dependencies.
"""

from __future__ import annotations

import re

VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return VAR_REF.sub(sub, text)


__all__ = ["VAR_REF", "expand"]
