"""Rule: all ranks must run one NCCL version."""

from __future__ import annotations

from nccl_k8s.results.findings import Code, Facts, Finding, Rule


def _versions(facts: Facts) -> list[Finding]:
    versions = sorted({r.nccl_version for r in facts.reports if r.nccl_version})
    if len(versions) < 2:
        return []
    return [
        Finding(
            "warning",
            "nccl-version-mismatch",
            f"ranks run different NCCL versions: {', '.join(versions)}",
            "use one image for all pods; mixed NCCL versions can hang or corrupt collectives.",
        )
    ]


VERSIONS = Rule(
    "nccl-version",
    (Code("nccl-version-mismatch", ("warning",), "ranks report different NCCL versions"),),
    _versions,
)

__all__ = ["VERSIONS"]
