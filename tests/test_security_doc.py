"""docs/security.md's tables are the code's (issue 36): what each platform's pods need (read off
the rendered pods: privileged containers, host network, host paths and their mode, capabilities,
the Pod Security level) and the RBAC each command needs (the permissions table). Regenerate with
NCCL_K8S_UPDATE_DOCS=1 and review."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nccl_k8s.k8s import render
from nccl_k8s.k8s.api._access import ACCESS, FEATURES
from nccl_k8s.k8s.rendering._names import PSA_ANNOTATION
from nccl_k8s.spec import build_run_spec
from nccl_k8s.spec.platforms import PLATFORMS

DOC = Path(__file__).parent.parent / "docs" / "security.md"
BEGIN, END = "<!-- generated: {} -->", "<!-- end generated: {} -->"
#: What a platform needs to render at all (its machine type, or its devices).
NEEDS: dict[str, dict[str, Any]] = {
    "eks-efa": {"instance_type": "p5.48xlarge"},
    "gke-tcpx": {"instance_type": "a3-highgpu-8g"},
    "gke-tcpxo": {"instance_type": "a3-megagpu-8g"},
    "gke-rdma": {"instance_type": "a3-ultragpu-8g"},
    "aks-ib": {"instance_type": "Standard_ND96isr_H100_v5"},
    "oke-roce": {"instance_type": "BM.GPU.H100.8"},
    "together": {"rdma_resource": ["rdma/ib=1"]},
}


def _pod(platform: str) -> tuple[dict[str, Any], str]:
    spec = build_run_spec(world_size=16, gpus_per_node=8, run_id="r", platform=platform,
                          **NEEDS.get(platform, {}))  # fmt: skip
    job = render(spec)[-1]
    return job["spec"]["template"]["spec"], job["metadata"]["annotations"][PSA_ANNOTATION]


def platform_table() -> str:
    rows = [
        "| platform | privileged containers | host network | host paths (mode) | added "
        "capabilities | Pod Security level | why privileged or host network |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, platform in PLATFORMS.items():
        pod, level = _pod(name)
        containers = pod.get("initContainers", []) + pod["containers"]
        privileged = [c["name"] for c in containers
                      if (c.get("securityContext") or {}).get("privileged")]  # fmt: skip
        host_paths = {v["name"]: v["hostPath"]["path"] for v in pod.get("volumes", [])
                      if "hostPath" in v}  # fmt: skip
        modes: dict[str, set[str]] = {}
        for c in containers:
            for m in c.get("volumeMounts", []):
                if m["name"] in host_paths:
                    modes.setdefault(m["name"], set()).add("ro" if m.get("readOnly") else "rw")
        paths = ", ".join(
            f"`{path}` ({'/'.join(sorted(modes.get(v, {'unmounted'})))})"
            for v, path in sorted(host_paths.items(), key=lambda kv: kv[1])
        )
        caps = sorted({cap for c in containers for cap in
                       ((c.get("securityContext") or {}).get("capabilities") or {}).get("add", [])})  # fmt: skip
        rows.append(
            f"| `{name}` | {', '.join(privileged) or 'none'} | "
            f"{'yes' if pod.get('hostNetwork') else 'no'} | {paths or 'none'} | "
            f"{', '.join(caps) or 'none'} | `{level}` | "
            f"{platform.privilege_reason.replace('|', chr(92) + '|') or '-'} |"
        )
    return "\n".join(rows)


def rbac_table() -> str:
    rows = ["| part (`nccl-k8s rbac` flag) | scope | resource | verbs | who sends it, and why |",
            "|---|---|---|---|---|"]  # fmt: skip
    flags = {"run": "(always)", "render-apply": "`--render-apply`",
             "cluster-reads": "`--cluster-reads`", "create-namespace": "`--create-namespace`",
             "label-nodes": "`--label-nodes`", "remove-schedule": "`--remove-schedule`"}  # fmt: skip
    for feature in FEATURES:
        for a in ACCESS:
            if a.feature == feature:
                only = f" (only with {a.optional})" if a.optional else ""
                why = f"{a.why}{only}".replace("|", "\\|")
                rows.append(
                    f"| {flags[feature]} | {a.scope} | `{a.qualified}` | "
                    f"{', '.join(sorted(a.verbs))} | {why} |"
                )
    return "\n".join(rows)


def test_security_md_tables_are_the_codes() -> None:
    text = DOC.read_text()
    for name, table in (("platforms", platform_table()), ("rbac", rbac_table())):
        begin, end = BEGIN.format(name), END.format(name)
        head, _, rest = text.partition(begin + "\n")
        _, found, tail = rest.partition(end)
        assert found, f"docs/security.md lacks {begin} ... {end}"
        text = f"{head}{begin}\n{table}\n{end}{tail}"
    if os.environ.get("NCCL_K8S_UPDATE_DOCS"):
        DOC.write_text(text)
    assert DOC.read_text() == text, "docs/security.md differs: NCCL_K8S_UPDATE_DOCS=1, review"


def test_the_escalating_platforms_say_why_and_auto_never_picks_them() -> None:
    text = DOC.read_text()
    for name, platform in PLATFORMS.items():
        pod, level = _pod(name)
        escalates = bool(platform.escalation)
        assert escalates == (
            pod.get("hostNetwork", False)
            or any((c.get("securityContext") or {}).get("privileged") for c in pod["containers"])
        ), name
        if escalates:
            assert level == "privileged" and platform.privilege_reason in text
