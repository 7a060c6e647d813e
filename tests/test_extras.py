"""Every install hint the CLI prints names an extra that installs what the message asks for
(issue 24, acceptance 1): the hints are found in the sources, each is tied to the module it is
about, and pyproject.toml's extra must bring that module's distribution. And each hint names an
install that works (issue 36): nccl-k8s is not on PyPI, so `pip install 'nccl-k8s[EXTRA]'`
finds nothing; the hint names the clone (errors.install_hint)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import tomllib
import typer

from nccl_k8s import errors
from nccl_k8s.cli import _common

ROOT = Path(__file__).resolve().parents[1]
HINT = re.compile(r"install_hint\(['\"](\w+)['\"]\)|nccl-k8s's (\w+) extra")
# What pip cannot install: the package is on no index (README, Install).
# (A direct reference, `'nccl-k8s[k8s] @ git+URL'`, does work.)
UNREGISTERED = re.compile(r"pip install '?nccl-k8s\[\w+\]'?(?! @)")
# Which distribution provides each module the hints are about (lightkube brings its client).
PROVIDER = {
    "lightkube": "lightkube", "httpx2": "lightkube", "msgspec": "lightkube", "torch": "torch",
    "numpy": "numpy", "matplotlib": "matplotlib", "prometheus_client": "prometheus_client",
    "opentelemetry": "opentelemetry-sdk",
}  # fmt: skip
# Each hint in src/, by file and extra, and the module its message asks for.
HINTS = {
    ("k8s/rendering/_manifests.py", "k8s"): "prometheus_client",
    ("k8s/run/_tracing.py", "tracing"): "opentelemetry",
    ("results/plots.py", "report"): "matplotlib",
    ("launch/local.py", "engine"): "torch",
    ("bench/metrics.py", "metrics"): "prometheus_client",
}


def _extras() -> dict[str, set[str]]:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = doc["project"]["optional-dependencies"]
    return {
        name: {re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].lower() for req in reqs}
        for name, reqs in extras.items()
    }


def test_every_hint_in_the_sources_is_known_and_its_extra_provides_it() -> None:
    found = set()
    for path in (ROOT / "src" / "nccl_k8s").rglob("*.py"):
        for called, named in HINT.findall(path.read_text()):
            found.add((path.relative_to(ROOT / "src" / "nccl_k8s").as_posix(), called or named))
    assert found == set(HINTS)  # a new hint: say here what it asks for
    extras = _extras()
    for (where, extra), module in HINTS.items():
        assert PROVIDER[module] in extras[extra], (where, extra, module)


def test_a_missing_module_names_the_extra_that_installs_it() -> None:
    extras = _extras()
    for module, extra in _common.EXTRAS.items():
        assert PROVIDER[module] in extras[extra], (module, extra)


def test_render_and_deploy_need_only_the_k8s_extra() -> None:
    # lightkube for the API, prometheus_client for the engine zipapp's metrics (default 8080).
    assert {"lightkube", "prometheus_client"} <= _extras()["k8s"]


def test_the_cli_says_which_extra_when_a_module_is_missing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    @_common.handle_errors
    def command() -> None:
        raise ModuleNotFoundError("No module named 'lightkube'", name="lightkube")

    with pytest.raises((SystemExit, typer.Exit)) as info:
        command()
    code = getattr(info.value, "code", None) or getattr(info.value, "exit_code", None)
    assert code == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: lightkube is not installed: pip install '{ROOT}[k8s]'"


def test_no_hint_names_a_package_no_index_has() -> None:
    texts = [
        *(ROOT / "src" / "nccl_k8s").rglob("*.py"),
        ROOT / "README.md",
        *ROOT.glob("docs/*.md"),
    ]
    bad = [p.name for p in texts if UNREGISTERED.search(p.read_text())]
    assert bad == []


def test_the_hint_names_this_clone_and_an_extra_it_has() -> None:
    argv = shlex.split(errors.install_hint("report"))
    assert argv[:2] == ["pip", "install"]
    where, extra = argv[2].removesuffix("]").split("[")
    doc = tomllib.loads((Path(where) / "pyproject.toml").read_text())
    assert doc["project"]["name"] == "nccl-k8s"
    assert extra in doc["project"]["optional-dependencies"]
