"""No decision in src/ depends on a message's wording (issue 34): code decides on typed fields
(RunFailed.reason, a fault record's kind, a pod's Kubernetes reason), never by matching text.

The guard is an AST check over every module of src/nccl_k8s. It follows *message text* through
each function: `str(e)`, `repr(e)`, `e.args` or an f-string of an exception variable (bound by
`except ... as e`, or a parameter annotated with an exception class); any `.message`, `.what`,
`.why`, `.noticed`, `.headline` or `.detail` attribute (the human text of an error, a fault, a
blame, a problem); a local named `what` or `message`; and whatever is computed from them
(`.lower()`, `.splitlines()[0]`, concatenation, an assignment, a parameter of a function of the same
module called with it). It flags a decision on such text: a comparison (==, !=, in, not in),
`startswith`, `endswith`, `split`, `partition`, `find`, `index`, `count`, or a regular
expression's `match`/`search`/`fullmatch`/`findall`. Showing text (printing, formatting it into
another message, its first line) is not a decision.

Text nobody of ours wrote has no type to read: torch's, gloo's and the store's errors, a
Kubernetes event's message. Its one reader is named in PARSERS, with why; a decision on our own
words has no such excuse.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import datetime
import functools
import io
import json
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import nccl_k8s.errors
from nccl_k8s.bench.report import FAULT_KINDS
from nccl_k8s.errors import FailureReason, Interrupted, RunFailed
from nccl_k8s.k8s import Explained
from nccl_k8s.k8s.nodes._badnodes import verdicts
from nccl_k8s.k8s.nodes._level import PairResult, failed_test
from nccl_k8s.k8s.run._explain import PodWhy, rows

SRC = Path(__file__).resolve().parents[1] / "src" / "nccl_k8s"

#: Attributes that hold words for people.
TEXT_ATTRS = frozenset({"message", "what", "why", "noticed", "headline", "detail"})
#: Local names that hold words for people (the parsers of NCCL's logs call a log line's text
#: `msg`: reading it is their job, and they are not listed).
TEXT_NAMES = frozenset({"what", "message"})
#: Methods of str that decide on its content.
DECIDING_METHODS = frozenset(
    {"startswith", "endswith", "split", "rsplit", "partition", "rpartition", "find", "rfind",
     "index", "rindex", "count"}
)  # fmt: skip
#: Methods of re and compiled patterns that decide on their argument.
REGEX_METHODS = frozenset({"match", "search", "fullmatch", "findall", "finditer"})
#: The readers of text that carries no type (module path under src/nccl_k8s, function): why each
#: may read words.
PARSERS = {
    ("launch/_culprit.py", "said"): "torch's, gloo's and the store's errors are plain "
    "RuntimeError text: read once where it comes in, into launch._culprit.Said",
    ("k8s/run/_verdicts.py", "failed_create"): "a FailedCreate event says why admission "
    "refused the pods (Pod Security, a quota) only in its message: it picks the hint",
    ("results/rules/errors.py", "explain"): "an NCCL WARN (or PyTorch's `Last error:`) is "
    "NCCL's words in a log: diagnosing them is reading the log, as the rest of results does",
    ("bench/config.py", "error"): "argparse says what went wrong only in text: its "
    "'argument -b/--minbytes: ' prefix is dropped where our converter already named the flag",
}

#: Decisions on our own words still open, each to become a typed field (then it leaves this
#: list: the test fails while a listed one is gone, so the list only shrinks). None: the last
#: three (import's header/footer and headerless table, read from OpIdentification.detail) are
#: its `by` ("footer") and `columns` fields now.
OPEN: set[str] = set()


def _exception_names() -> frozenset[str]:
    ours = {
        name
        for name, obj in vars(nccl_k8s.errors).items()
        if isinstance(obj, type) and issubclass(obj, BaseException)
    }
    theirs = {
        name
        for name, obj in vars(builtins).items()
        if isinstance(obj, type) and issubclass(obj, BaseException)
    }
    return frozenset(ours | theirs)


EXCEPTIONS = _exception_names()


def _annotated_exception(arg: ast.arg) -> bool:
    if arg.annotation is None:
        return False
    names = {n.id for n in ast.walk(arg.annotation) if isinstance(n, ast.Name)}
    names |= {
        n.value
        for n in ast.walk(arg.annotation)
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }
    return bool(names & EXCEPTIONS) or any(n.endswith(("Error", "Exception")) for n in names)


#: How sure a value is message text: not, by its name only, by where it came from.
NOT, NAMED, SURE = 0, 1, 2


class _Function:
    """One function's exception variables and the names holding message text."""

    def __init__(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.node = node
        params = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        self.params = [a.arg for a in params]
        self.exceptions = {a.arg for a in params if _annotated_exception(a)}
        self.nodes = list(ast.walk(node))
        for sub in self.nodes:
            if isinstance(sub, ast.ExceptHandler) and sub.name:
                self.exceptions.add(sub.name)
        self.assigns = [_assigned(sub) for sub in self.nodes]
        self.calls = [
            sub
            for sub in self.nodes
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name)
        ]
        self.text: dict[str, int] = dict.fromkeys(TEXT_NAMES, NAMED)

    def level(self, e: ast.expr) -> int:
        """Whether `e` is message text (or computed from it): NOT, NAMED (a local called
        `message` or `what`: a tag may be called so too) or SURE."""
        if isinstance(e, ast.Name):
            return self.text.get(e.id, NOT)
        if isinstance(e, ast.Attribute):
            if e.attr in TEXT_ATTRS or (e.attr == "args" and self._exc(e.value)):
                return SURE
            return self.level(e.value)
        if isinstance(e, ast.Call):
            f = e.func
            if isinstance(f, ast.Name) and f.id in ("str", "repr", "format") and e.args:
                return SURE if self._exc(e.args[0]) else self.level(e.args[0])
            if isinstance(f, ast.Attribute):
                return self.level(f.value)  # x.lower(), x.splitlines(), x.strip() ...
            return NOT
        if isinstance(e, ast.JoinedStr):
            return max(
                (
                    SURE if self._exc(v.value) else self.level(v.value)
                    for v in e.values
                    if isinstance(v, ast.FormattedValue)
                ),
                default=NOT,
            )
        if isinstance(e, ast.Subscript):
            return self.level(e.value)
        if isinstance(e, ast.BinOp):
            return max(self.level(e.left), self.level(e.right))
        if isinstance(e, ast.BoolOp):
            return max(self.level(v) for v in e.values)
        if isinstance(e, ast.IfExp):
            return max(self.level(e.body), self.level(e.orelse))
        return NOT

    def _exc(self, e: ast.expr) -> bool:
        return isinstance(e, ast.Name) and e.id in self.exceptions

    def mark(self, name: str, level: int) -> bool:
        """`name` holds text at least this sure; whether that is news."""
        if level <= self.text.get(name, NOT):
            return False
        self.text[name] = level
        return True

    def spread(self) -> bool:
        """Mark the locals assigned from text; whether any was new."""
        grew = False
        for targets, value in self.assigns:
            if value is None:
                continue
            level = self.level(value)
            for t in targets:
                if isinstance(t, ast.Name) and level:
                    grew |= self.mark(t.id, level)
        return grew

    def decisions(self) -> Iterator[ast.AST]:
        """The nodes that decide on message text: a search in it (a substring, a prefix, a
        pattern, a split) wherever it may be text; an equality, or membership in literals,
        where it surely is. `text in seen` (a set of lines already shown) is no decision on
        wording."""
        for sub in self.nodes:
            if isinstance(sub, ast.Compare):
                if self._compares_text(sub):
                    yield sub
            elif isinstance(sub, ast.Call) and self._searches_text(sub):
                yield sub

    def _searches_text(self, call: ast.Call) -> bool:
        f = call.func
        if not isinstance(f, ast.Attribute):
            return False
        if f.attr in DECIDING_METHODS:
            return bool(self.level(f.value))
        return f.attr in REGEX_METHODS and any(self.level(a) for a in call.args)

    def _compares_text(self, c: ast.Compare) -> bool:
        left = c.left
        for op, right in zip(c.ops, c.comparators, strict=True):
            if isinstance(op, (ast.In, ast.NotIn)):
                if self.level(right):
                    return True  # a search in the text
                literal = isinstance(right, (ast.Tuple, ast.List, ast.Set, ast.Constant))
                if literal and self.level(left) == SURE:
                    return True
            elif isinstance(op, (ast.Eq, ast.NotEq)) and SURE in (
                self.level(left),
                self.level(right),
            ):
                return True
            left = right
        return False


def _assigned(sub: ast.AST) -> tuple[list[ast.expr], ast.expr | None]:
    """The names an assignment (or a comprehension's loop) binds, and the value."""
    if isinstance(sub, ast.Assign):
        return sub.targets, sub.value
    if isinstance(sub, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
        return [sub.target], sub.value
    if isinstance(sub, ast.comprehension):
        return [sub.target], sub.iter
    return [], None


def _functions(tree: ast.Module) -> list[_Function]:
    return [
        _Function(n)
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


def violations(source: str, module: str) -> list[str]:
    """`module:line: code` for every decision on message text in `source` (outside PARSERS)."""
    tree = ast.parse(source)
    funcs = _functions(tree)
    by_name = {f.node.name: f for f in funcs}
    # Text flows through locals, and into the parameters of the module's own functions.
    grew = True
    while grew:
        grew = False
        for f in funcs:
            grew |= f.spread()
            for call in f.calls:
                assert isinstance(call.func, ast.Name)
                callee = by_name.get(call.func.id)
                if callee is None:
                    continue
                for param, arg in zip(callee.params, call.args, strict=False):
                    grew |= callee.mark(param, f.level(arg))
    found: list[str] = []
    for f in funcs:
        if (module, f.node.name) in PARSERS:
            continue
        for node in f.decisions():
            line = getattr(node, "lineno", 0)
            found.append(f"{module}:{line}: {ast.unparse(node)}")
    return found


@functools.cache
def scan(root: Path) -> list[str]:
    out: list[str] = []
    for path in sorted(root.rglob("*.py")):
        module = path.relative_to(root).as_posix()
        out += violations(path.read_text(encoding="utf-8"), module)
    return out


def _unnumbered(found: list[str]) -> set[str]:
    return {f"{f.split(':', 1)[0]}: {f.split(': ', 1)[1]}" for f in found}


def test_no_decision_in_src_depends_on_a_messages_wording() -> None:
    found = [f for f in scan(SRC) if _unnumbered([f]) - OPEN]
    assert not found, "decisions on message text (decide on a typed field):\n" + "\n".join(found)


def test_the_open_decisions_are_still_there() -> None:
    """A decision fixed leaves OPEN, so that nobody may add it back unseen."""
    assert not OPEN - _unnumbered(scan(SRC))


def test_every_parser_exemption_names_a_function_that_exists() -> None:
    for module, name in PARSERS:
        tree = ast.parse((SRC / module).read_text(encoding="utf-8"))
        names = {
            n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        assert name in names, (module, name)


PLANTED = {
    "str(e) searched": (
        "def f(run):\n"
        "    try:\n"
        "        run()\n"
        "    except RuntimeError as e:\n"
        "        first = str(e).splitlines()[0]\n"
        "        return 'cannot be scheduled' in first\n",
        "'cannot be scheduled' in first",
    ),
    "str(exc) split": (
        "def f(exc: Interrupted) -> str:\n    return str(exc).split(': ', 1)[1]\n",
        "str(exc).split(': ', 1)",
    ),
    "args compared": (
        "def f(run):\n"
        "    try:\n"
        "        run()\n"
        "    except OSError as err:\n"
        "        return err.args[0] == 'gone'\n",
        "err.args[0] == 'gone'",
    ),
    "a fault's message through a helper": (
        "def _echo(message):\n"
        "    low = message.lower()\n"
        "    return any(e in low for e in ('peer',))\n"
        "def g(facts):\n"
        "    return [f for f in facts if _echo(f.message)]\n",
        "e in low",
    ),
    "what startswith": (
        "def f(found):\n    culprit, what = found\n    return what.startswith('did not progress')\n",
        "what.startswith('did not progress')",
    ),
    "why matched by a pattern": (
        "import re\ndef ok(rows):\n    return all(re.match('waiting', r.why) for r in rows)\n",
        "re.match('waiting', r.why)",
    ),
}


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_the_checker_fires_on_a_planted_violation(case: str) -> None:
    source, decision = PLANTED[case]
    found = violations(source, "planted.py")
    assert [f.split(": ", 1)[1] for f in found] == [decision], found


def test_the_checker_passes_showing_text_and_deciding_on_fields() -> None:
    source = (
        "def f(run, log):\n"
        "    try:\n"
        "        run()\n"
        "    except RunFailed as e:\n"
        "        log(f'failed: {e}; {str(e).splitlines()[0]}')\n"
        "        return e.reason is FailureReason.UNSCHEDULABLE or e.node in ('a', 'b')\n"
    )
    assert violations(source, "planted.py") == []


def test_the_checker_lists_the_decisions_on_text_the_code_took_before_issue_34() -> None:
    """Run on the sources of the commit before the typed reasons: it names each decision on
    message text that commit took (nodes check's inconclusive, the local culprit's, the partial
    run's, doctor --run's ok), so it is the checker, not luck, that passes today."""
    before = "0c641de"
    root = Path(__file__).resolve().parents[1]
    archived = subprocess.run(
        ["git", "-C", str(root), "archive", "--format=tar", before, "src/nccl_k8s"],
        capture_output=True,
        check=False,
    )
    if archived.returncode != 0:
        pytest.skip(f"commit {before} is not in this checkout")
    found: list[str] = []
    with tarfile.open(fileobj=io.BytesIO(archived.stdout)) as tar:
        for member in tar.getmembers():
            if not member.name.endswith(".py"):
                continue
            data = tar.extractfile(member)
            assert data is not None
            text = data.read().decode("utf-8")
            found += violations(text, member.name.removeprefix("src/nccl_k8s/"))
    modules = {f.split(":", 1)[0] for f in found}
    assert {
        "k8s/nodes/_nodecheck.py",
        "launch/_culprit.py",
        "local/_run.py",
        "k8s/run/_explain.py",
    } <= modules, "\n".join(found)
    text = "\n".join(found)
    for decision in (
        "'cannot be scheduled' in first",
        "'no scheduler has picked up' in first",
        "what.startswith('did not progress')",
        "': ' in str(exc)",
        "r.why.startswith('waiting')",
        "e in low",
    ):
        assert decision in text, (decision, text)


# -- the readers decide on the reason ----------------------------------------------------------


def _pair_test_failed(reason: FailureReason, node: str | None, headline: str) -> str:
    """What `nodes check` says of node c after its test with the good node a failed."""
    failure = RunFailed(headline, reason=reason, node=node)
    # As deploy's monitor ends a failed run: it adds what it did to the message.
    failure.args = (f"{headline} (deleted what this deploy created: Job/t; its pods are gone)",)
    fine = [PairResult("a", "b", 100.0), PairResult("e", "f", 100.0)]
    result = failed_test("c", "a", failure, pass_no=1)
    assert result.error == headline
    found = verdicts(["a", "b", "c", "e", "f"], [*fine, result], 0.8)
    (c,) = (v for v in found.nodes if v.node == "c")
    return f"{c.verdict}: {c.why}"


def test_nodes_check_calls_a_test_no_scheduler_placed_inconclusive_by_its_reason() -> None:
    # The words are not what decides: a headline without "cannot be scheduled" ...
    said = _pair_test_failed(FailureReason.NO_SCHEDULER, None, "run t-1: nobody came")
    assert said == "unknown: its test with a could not run: run t-1: nobody came"
    said = _pair_test_failed(FailureReason.UNSCHEDULABLE, None, "run t-1: no room")
    assert said.startswith("unknown: its test with a could not run")
    # ... and a run that crashed on node c is held against c, whatever its words say.
    for reason in (FailureReason.CRASHED, FailureReason.NO_PROGRESS, FailureReason.KILLED):
        said = _pair_test_failed(reason, "c", "run t-1 cannot be scheduled (say the words)")
        assert said == (
            "bad: its test with good node a failed: run t-1 cannot be scheduled (say the words)"
        ), reason
    assert {r for r in FailureReason if r.unplaced} == {
        FailureReason.UNSCHEDULABLE,
        FailureReason.NO_SCHEDULER,
    }


def test_doctor_run_is_ok_while_pods_wait_as_its_rows_say_not_their_words() -> None:
    def row(why: str, *, waiting: bool, phase: str = "Pending") -> PodWhy:
        return PodWhy(0, "r-0-x", None, phase, why, waiting=waiting)

    def explained(*rows: PodWhy) -> Explained:
        return Explained("r", "ns", "Job", "Pending", None, list(rows))

    assert explained(row("not scheduled yet", waiting=True)).ok
    assert not explained(row("waiting: for its words only", waiting=False)).ok
    assert explained(row("waiting: x", waiting=False, phase="Running")).ok
    # -o json carries the verdict's reason as its value.
    killed = dataclasses.replace(explained(), verdict="rank 1 ...", reason=FailureReason.KILLED)
    assert json.loads(json.dumps(killed.to_dict()))["reason"] == "killed"
    assert explained().to_dict()["reason"] is None
    # rows() marks a Pending pod that nothing is wrong with as waiting, a failed one not.
    pending: dict[str, Any] = {
        "metadata": {
            "name": "r-0-abcde",
            "creationTimestamp": "2026-12-03T12:00:00Z",
            "annotations": {"batch.kubernetes.io/job-completion-index": "0"},
        },
        "spec": {"schedulerName": "default-scheduler"},
        "status": {"phase": "Pending"},
    }
    failed = {
        **pending,
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"name": "bench", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}
            ],
        },
    }
    job = {"kind": "Job", "metadata": {"name": "r", "uid": "u"}, "spec": {"completions": 1}}
    soon = datetime.datetime(2026, 12, 3, 12, 0, 10, tzinfo=datetime.timezone.utc)
    (waits,) = rows("r", "ns", job, [pending], [], {}, {}, now=soon)
    (fails,) = rows("r", "ns", job, [failed], [], {}, {}, now=soon)
    assert waits.waiting and not fails.waiting
    assert waits.why.startswith("waiting: ") and fails.why == "exit code 1"


def test_the_engines_fault_kinds_are_failure_reasons() -> None:
    """The engine cannot import nccl_k8s.errors: its fault line's "kind" words are held to the
    enum here, so that a kind the engine names is one the culprit logic reads."""
    assert FAULT_KINDS
    for kind in FAULT_KINDS:
        assert FailureReason(kind).value == kind


def test_an_interrupted_run_says_what_it_stopped_as_a_field() -> None:
    exc = Interrupted(2, detail="stopped 2 ranks")
    assert exc.detail == "stopped 2 ranks" and str(exc) == "interrupted by SIGINT: stopped 2 ranks"
    assert Interrupted(15).detail == ""


if __name__ == "__main__":
    print("\n".join(scan(Path(sys.argv[1]) if len(sys.argv) > 1 else SRC)))
