"""The Pod Security Standards as upstream decides them: the test cluster's PodSecurity admission
(tests/cluster/admission.py) on pods from k8s.io/pod-security-admission's own test fixtures
(tests/data/pod-security, SOURCES.md there). Upstream's `pass` pods are admitted at their level,
its `fail` pods refused with a 403 worded as kube-apiserver's.

The product's side rests on this: render declares the level each --security profile passes
(`pod_security_level`), and tests/test_deploy_gang.py checks the rendered pods pass exactly that
level by this admission, which is itself checked here against upstream.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.cluster import admission
from tests.cluster.errors import ApiError

FIXTURES = Path(__file__).parent / "data" / "pod-security"
#: level/<version>/<pass|fail>/<name>.yaml, as upstream lays them out.
PATHS = sorted(FIXTURES.glob("*/*/*/*.yaml"))


def _case(path: Path) -> tuple[str, str]:
    level, _version, outcome, _name = path.relative_to(FIXTURES).parts
    return level, outcome


class _Namespaces:
    """The one thing admission reads from the store: the namespace and its enforce label."""

    def __init__(self, level: str) -> None:
        self.level = level

    def get(self, resource: str, namespace: str | None, name: str) -> dict[str, Any]:
        assert resource == "namespaces" and namespace is None
        return {"metadata": {"name": name, "labels": {admission.ENFORCE: self.level}}}


def test_the_fixtures_cover_every_check_and_both_outcomes() -> None:
    seen = {(*_case(p), p.stem.rstrip("0123456789")) for p in PATHS}
    assert {(lv, out) for lv, out, _ in seen} == {
        (lv, out) for lv in ("baseline", "restricted") for out in ("pass", "fail")
    }
    failing = {check for _, out, check in seen if out == "fail"}
    # One refused pod at least for each control of the standards (upstream's file stems).
    assert failing >= {
        "apparmorprofile", "capabilities_baseline", "hostnamespaces", "hostpathvolumes",
        "hostports", "hostprobesandhostlifecycle", "privileged", "seccompprofile_baseline",
        "selinuxoptions", "sysctls", "windowshostprocess", "allowprivilegeescalation",
        "capabilities_restricted", "procmount", "procmount_restricted", "restrictedvolumes",
        "runasnonroot", "runasuser", "seccompprofile_restricted",
    }  # fmt: skip


@pytest.mark.parametrize(
    "path", PATHS, ids=[str(p.relative_to(FIXTURES).with_suffix("")) for p in PATHS]
)
def test_admission_decides_as_upstream(path: Path) -> None:
    level, outcome = _case(path)
    pod = yaml.safe_load(path.read_text())
    pod["metadata"]["namespace"] = "psa"
    found = admission.violations(pod["spec"], level, pod["metadata"])
    if outcome == "pass":
        assert found == [], f"upstream admits {path.name} at {level}"
        admission.pod_security(_Namespaces(level), "pods", pod)  # no 403
        if level == "restricted":  # the stricter level's pods pass the laxer one too
            assert admission.violations(pod["spec"], "baseline", pod["metadata"]) == []
        return
    assert found, f"upstream refuses {path.name} at {level}"
    with pytest.raises(ApiError) as refused:
        admission.pod_security(_Namespaces(level), "pods", pod)
    assert refused.value.code == 403
    name = pod["metadata"]["name"]
    assert refused.value.message == (
        f'pods "{name}" is forbidden: violates PodSecurity "{level}:latest": {", ".join(found)}'
    )
    if level == "baseline":  # what baseline refuses, restricted refuses
        assert admission.violations(pod["spec"], "restricted", pod["metadata"])
