"""Issue 19: diagnosis rules are one registry; each rule declares the codes it emits, and
docs/diagnosis.md's table of codes is generated from the declarations."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nccl_k8s.results.diagnose import facts_of, parse_fabric
from nccl_k8s.results.fabrics import FABRICS, Fabric
from nccl_k8s.results.findings import Finding, Rule
from nccl_k8s.results.nccllog import LogParser
from nccl_k8s.results.rules import BEGIN, END, RULES, codes_table, with_codes_table

DATA = Path(__file__).parent / "data"
DOCS = Path(__file__).parent.parent / "docs" / "diagnosis.md"
CORPUS = sorted(
    p
    for d in (
        DATA / "nccl-logs",
        DATA / "nccl-logs" / "errors-only",  # pastes without NCCL's prefix (issue 35)
        DATA / "nccl-logs" / "diag",  # NCCL 2.31's DIAG reports
        DATA / "nccl-tests" / "public",
    )
    for p in d.iterdir()
    if p.suffix in (".log", ".txt", ".md") and p.name != "README.md"
)


def _h(n: int, line: str) -> str:
    return f"node-{n}:1{n}:2{n} [0] NCCL INFO {line}"


# Logs, built from NCCL's and PyTorch's format strings, for the codes no public log shows.
BUILT: dict[str, tuple[str, Fabric | str | None]] = {
    "two NCCL versions": (
        "\n".join(
            _h(n, line)
            for n, version in ((0, "2.18.1+cuda12.1"), (1, "2.19.3+cuda12.2"))
            for line in (
                f"NCCL version {version}",
                f"comm 0x1 rank {n} nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
            )
        ),
        None,
    ),
    "CollNet": (_h(0, "CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA"), None),
    "PCIe between GPUs of one node": (
        "\n".join(
            _h(0, line)
            for line in (
                "comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0",
                "Pattern 4, crossNic 0, nChannels 2, bw 10.000000/10.000000, type PHB/PIX, "
                "sameChannels 1",
            )
        ),
        "nvlink",
    ),
    "DistBackendError": (
        "[rank3]:[E ProcessGroupNCCL.cpp:1] torch.distributed.DistBackendError: NCCL error in: "
        "ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error\n"
        + _h(0, "comm 0x1 rank 3 nRanks 4 nNodes 2 localRanks 2 localRank 1 MNNVL 0"),
        None,
    ),
    "sockets on lo across nodes": (
        "\n".join(
            _h(n, line)
            for n in (0, 1)
            for line in (
                "NET/Socket : Using [0]lo:127.0.0.1<0>",
                "Using network Socket",
                f"comm 0x1 rank {n} nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
            )
        ),
        None,
    ),
    "a WARN and an error trace with a field no reader knows": (
        "\n".join(
            [
                _h(0, "comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0"),
                "node-0:10:20 [0] net.cc:12 <stream 7> NCCL WARN NET/IB : retrying a slow QP",
                "node-0:10:20 [0] proxy.cc:99 <stream 7> NCCL WARN Proxy Call to rank 1 failed",
                _h(0, "proxy.cc:99 <stream 7> -> 6"),
            ]
        ),
        None,
    ),
    "aws-ofi-nccl fails on one node": (
        _h(0, "comm 0x1 rank 0 nRanks 1 nNodes 1 localRanks 1 localRank 0 MNNVL 0")
        + "\nnode-0:10:20 [0] nccl_net_ofi_init:1 NCCL WARN NET/OFI aws-ofi-nccl "
        "initialization failed",
        None,
    ),
}


def by_rule(text: str, expect: Fabric | str | None) -> list[tuple[Rule, Finding]]:
    """Every finding with the rule that made it, the rules run in the registry's order."""
    parser = LogParser()
    parser.feed(text)
    log = parser.finish()
    facts = facts_of(log, parse_fabric(expect))
    made = []
    for rule in RULES:
        found = rule.check(facts)
        facts.found += found
        made += [(rule, f) for f in found]
    return made


def everything() -> list[tuple[str, Rule, Finding]]:
    out = []
    for path in CORPUS:
        text = path.read_text(encoding="utf-8", errors="replace")
        expect: Fabric | str | None
        for expect in (None, *FABRICS):
            out += [(f"{path.name} {expect}", r, f) for r, f in by_rule(text, expect)]
    for name, (text, expect) in BUILT.items():
        out += [(name, r, f) for r, f in by_rule(text, expect)]
    return out


@pytest.fixture(scope="module")
def made() -> list[tuple[str, Rule, Finding]]:
    return everything()


def test_docs_table_is_generated_from_the_registry() -> None:
    doc = DOCS.read_text(encoding="utf-8")
    assert doc == with_codes_table(doc), (
        "docs/diagnosis.md's table of codes is stale: run "
        "`python -m nccl_k8s.results.rules docs/diagnosis.md`"
    )
    block = doc[doc.index(BEGIN) : doc.index(END)]
    documented = re.findall(r"^\| `([^`]+)` \|", block, re.MULTILINE)
    declared = [c.code for rule in RULES for c in rule.codes]
    assert documented == declared
    assert "expect-nvlink-path" in documented  # emitted, once missing from the docs
    assert codes_table() in doc


def test_no_code_has_two_rules() -> None:
    names = [n for rule in RULES for c in rule.codes for n in c.names]
    assert len(names) == len(set(names))
    assert len({rule.name for rule in RULES}) == len(RULES)


def test_every_finding_is_declared_by_the_rule_that_made_it(
    made: list[tuple[str, Rule, Finding]],
) -> None:
    undeclared = [
        (where, rule.name, f.code, f.severity) for where, rule, f in made if not rule.declares(f)
    ]
    assert undeclared == []


def test_every_declared_code_and_severity_is_emitted(
    made: list[tuple[str, Rule, Finding]],
) -> None:
    """A documented code that no log makes is documented but emitted by no rule."""
    seen = {(rule.name, f.code, f.severity) for _, rule, f in made}
    never = [
        (rule.name, c.code, s)
        for rule in RULES
        for c in rule.codes
        for s in c.severities
        if not any((rule.name, n, s) in seen for n in c.names)
    ]
    assert never == []
    family = {f.code for _, rule, f in made if rule.name == "expect-fabric"}
    assert {f"expect-{f}" for f in FABRICS} <= family
