"""Issue 34, acceptance 4: modules are cut by concern. No import cycle among the modules of src/
(a cycle means two modules share one concern, or one reaches into the other), and no module uses
another module's private names: a private module of another layer, a `_name` imported from
another module, `mod._name` or `Class._name` on something imported, or `p._name` where `p` is
annotated with a class imported from another module (a function taking another class's `self`).

The checks read the sources (ast), not the running interpreter, so they see imports inside
functions too. Imports under `if TYPE_CHECKING:` are not edges of the import graph (they never
run), but the names they bind still count for the private-name rule. String-based lazy loading
(`importlib.import_module` over a table, as the k8s facade does) is not an import. `import a.b.c`
and `from a.b import c` (c a module) are edges to a.b.c alone, not to the packages Python
initialises on the way (as import-linter counts them): otherwise every module importing a
sibling by its full name would "cycle" through its package's `__init__`.

Layers (the private-module rule) are those of docs/architecture.md: nccl_k8s.bench, spec,
results, launch, local, k8s, cli, and each top-level module. A layer's own private modules
are its business; a private NAME (not a dunder) is private to its module, whatever the layer.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"


# -- reading the sources ---------------------------------------------------------------------


def sources_of(src: Path) -> dict[str, str]:
    """Dotted module name -> source text of every module under src (a package's `__init__` is
    the package's own module)."""
    out: dict[str, str] = {}
    for path in sorted(src.rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path.read_text()
    return out


def _is_package(module: str, sources: Mapping[str, str]) -> bool:
    prefix = module + "."
    return any(m.startswith(prefix) for m in sources)


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


@dataclass(frozen=True)
class Import:
    """One name an import statement binds, resolved against the modules of src."""

    line: int
    target: str  # the module imported (`from m import name` where name is a module: m.name)
    name: str | None  # the attribute imported from `target`, None when a module is imported
    bound: str | None  # the local name it binds (`import a.b` binds `a` to module a)
    edge: bool  # an edge of the import graph: runs (not under TYPE_CHECKING) and is depended on


def _base(module: str, node: ast.ImportFrom, sources: Mapping[str, str]) -> str:
    if not node.level:
        return node.module or ""
    package = module if _is_package(module, sources) else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def _walk_imports(
    tree: ast.AST, *, runtime: bool = True
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, runtime
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield from _walk_imports(ast.Module(body=[stmt], type_ignores=[]), runtime=False)
            for stmt in child.orelse:
                yield from _walk_imports(ast.Module(body=[stmt], type_ignores=[]), runtime=runtime)
        else:
            yield from _walk_imports(child, runtime=runtime)


def imports_of(module: str, tree: ast.AST, sources: Mapping[str, str]) -> list[Import]:
    """Every import of a module of src in `tree`, at any depth."""
    out: list[Import] = []
    for node, runtime in _walk_imports(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in sources:
                    continue
                if alias.asname:
                    out.append(Import(node.lineno, alias.name, None, alias.asname, runtime))
                    continue
                # `import a.b.c` depends on a.b.c but binds `a`, the top package
                top = alias.name.partition(".")[0]
                out.append(Import(node.lineno, alias.name, None, None, runtime))
                out.append(Import(node.lineno, top, None, top, edge=False))
            continue
        base = _base(module, node, sources)
        if base not in sources:
            continue
        for alias in node.names:
            bound = alias.asname or alias.name
            if f"{base}.{alias.name}" in sources:
                out.append(Import(node.lineno, f"{base}.{alias.name}", None, bound, runtime))
            else:
                out.append(Import(node.lineno, base, alias.name, bound, runtime))
    return out


# -- (a) import cycles -----------------------------------------------------------------------


def import_graph(sources: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """module -> {module it imports at run time: the first line that does}."""
    graph: dict[str, dict[str, int]] = {}
    for module, text in sources.items():
        edges = graph.setdefault(module, {})
        for imp in imports_of(module, ast.parse(text), sources):
            if imp.edge and imp.target != module:
                edges.setdefault(imp.target, imp.line)
    return graph


def _components(graph: Mapping[str, Mapping[str, int]]) -> list[list[str]]:
    """Strongly connected components (Tarjan, iterative) of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for succ in edges:
                if succ not in graph:
                    continue
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        members.append(top)
                        if top == node:
                            break
                    if len(members) > 1:
                        found.append(sorted(members))
    return found


def _cycle_through(
    start: str, members: set[str], graph: Mapping[str, Mapping[str, int]]
) -> list[str]:
    """The shortest path start -> ... -> start inside one component (breadth first)."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph[node]):
                if succ == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if succ in members and succ not in previous:
                    previous[succ] = node
                    following.append(succ)
        frontier = following
    raise AssertionError(f"{start} is in no cycle")  # pragma: no cover - a component has one


def import_cycles(sources: Mapping[str, str]) -> list[str]:
    """One line per cycle: `a (line 3) -> b (line 9) -> a`, each arrow at the importing line."""
    graph = import_graph(sources)
    out = []
    for members in _components(graph):
        path = _cycle_through(members[0], set(members), graph)
        hops = [f"{a} (line {graph[a][b]})" for a, b in itertools.pairwise(path)]
        out.append(" -> ".join([*hops, path[-1]]) + f"  [component: {', '.join(members)}]")
    return out


# -- (b) private names -----------------------------------------------------------------------


def layer_of(module: str) -> str:
    """The layer package of docs/architecture.md a module belongs to: nccl_k8s.bench, .spec,
    .results, .launch, .local, .k8s, .cli, or a top-level module itself."""
    return ".".join(module.split(".")[:2])


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _dotted(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _annotation_names(node: ast.expr | None) -> Iterator[str]:
    """The names a parameter annotation mentions: `Engine`, `"Engine"`, `Engine | None`,
    `Optional[Engine]`, `mod.Engine` (as `mod.Engine`)."""
    if node is None:
        return
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            yield from _annotation_names(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return
    elif isinstance(node, ast.BinOp):
        yield from _annotation_names(node.left)
        yield from _annotation_names(node.right)
    elif isinstance(node, ast.Subscript):
        yield from _annotation_names(node.slice)
    elif isinstance(node, ast.Tuple):
        for elt in node.elts:
            yield from _annotation_names(elt)
    else:
        dotted = _dotted(node)
        if dotted:
            yield ".".join(dotted)


@dataclass
class _Scope:
    module: str
    sources: Mapping[str, str]
    bindings: dict[str, Import] = field(default_factory=dict)
    found: list[str] = field(default_factory=list)

    def report(self, line: int, what: str) -> None:
        self.found.append(f"{self.module.replace('.', '/')}.py:{line}: {what}")

    def resolve(self, dotted: list[str]) -> tuple[str, list[str]] | None:
        """(the object's origin: a module, or `module.Name`; the rest of the chain) for a chain
        rooted at a name bound by importing one of our modules; None otherwise."""
        imp = self.bindings.get(dotted[0])
        if imp is None:
            return None
        origin = imp.target if imp.name is None else f"{imp.target}.{imp.name}"
        rest = dotted[1:]
        # `import a.b` binds `a`: walk down while the chain names submodules
        while rest and imp.name is None and f"{origin}.{rest[0]}" in self.sources:
            origin = f"{origin}.{rest[0]}"
            rest = rest[1:]
        return origin, rest


def _check_imports(scope: _Scope, imports: list[Import]) -> None:
    layer = layer_of(scope.module)
    for imp in imports:
        if layer_of(imp.target) != layer:
            parts = imp.target.split(".")
            if any(_private(p) for p in parts):
                scope.report(
                    imp.line, f"imports {imp.target}, a private module of {layer_of(imp.target)}"
                )
        if imp.name is not None and _private(imp.name):
            scope.report(imp.line, f"imports {imp.name}, a private name of {imp.target}")


def _check_attributes(scope: _Scope, tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _private(node.attr)):
            continue
        dotted = _dotted(node)
        if dotted is None or dotted[0] in ("self", "cls"):
            continue
        resolved = scope.resolve(dotted)
        if resolved is None:
            continue
        origin, rest = resolved
        if rest:
            scope.report(node.lineno, f"uses {'.'.join(dotted)}, a private name of {origin}")
        elif layer_of(origin) != layer_of(scope.module):  # the chain ends in a private module
            scope.report(node.lineno, f"uses {origin}, a private module of {layer_of(origin)}")


def _imported_class(scope: _Scope, annotation: ast.expr | None) -> str | None:
    """The class of another module of ours an annotation names (`Engine`, `Engine | None`)."""
    for name in _annotation_names(annotation):
        resolved = scope.resolve(name.split("."))
        if resolved is not None and not resolved[1] and resolved[0] not in scope.sources:
            return resolved[0]
    return None


def _pairs(target: ast.expr, value: ast.expr) -> Iterator[tuple[ast.expr, ast.expr]]:
    """`a, b = x, y` pairs a with x and b with y; anything else pairs target with value."""
    if (
        isinstance(target, ast.Tuple)
        and isinstance(value, ast.Tuple)
        and len(target.elts) == len(value.elts)
    ):
        for t, v in zip(target.elts, value.elts, strict=True):
            yield from _pairs(t, v)
        return
    yield target, value


def _self_attr(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.attr if node.value.id == "self" else None
    return None


def _typed_names(
    scope: _Scope, fn: ast.FunctionDef | ast.AsyncFunctionDef, attrs: Mapping[str, str]
) -> dict[str, str]:
    """Names in `fn` that hold an instance of another module's class: parameters annotated with
    it, and plain aliases of those or of such an attribute of self (`engine = self.engine`)."""
    typed: dict[str, str] = {}
    for arg in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]:
        cls = _imported_class(scope, arg.annotation)
        if cls is not None:
            typed[arg.arg] = cls
    for node in ast.walk(fn):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            cls = _imported_class(scope, node.annotation)
            if cls is not None:
                typed[node.target.id] = cls
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            for t, v in _pairs(target, node.value):
                if not isinstance(t, ast.Name):
                    continue
                if isinstance(v, ast.Name) and v.id in typed:
                    typed[t.id] = typed[v.id]
                elif (attr := _self_attr(v)) is not None and attr in attrs:
                    typed[t.id] = attrs[attr]
    return typed


def _class_attrs(scope: _Scope, cls: ast.ClassDef) -> dict[str, str]:
    """Attributes of a class that hold another module's class: annotated fields, and
    `self.x = p` where p is such a parameter."""
    attrs: dict[str, str] = {}
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            origin = _imported_class(scope, stmt.annotation)
            if origin is not None:
                attrs[stmt.target.id] = origin
    for fn in cls.body:
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        typed = _typed_names(scope, fn, {})
        for node in ast.walk(fn):
            if isinstance(node, ast.AnnAssign):
                attr, origin = _self_attr(node.target), _imported_class(scope, node.annotation)
                if attr is not None and origin is not None:
                    attrs[attr] = origin
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    for t, v in _pairs(target, node.value):
                        attr = _self_attr(t)
                        if attr is not None and isinstance(v, ast.Name) and v.id in typed:
                            attrs[attr] = typed[v.id]
    return attrs


def _check_instances(scope: _Scope, tree: ast.Module) -> None:
    """`p._name` where p holds an instance of another module's class, and module-level
    functions that take another module's class as `self`."""
    for top in tree.body:
        if isinstance(top, ast.FunctionDef | ast.AsyncFunctionDef):
            for arg in [*top.args.posonlyargs, *top.args.args]:
                taken = _imported_class(scope, arg.annotation)
                if arg.arg == "self" and taken is not None:
                    scope.report(
                        top.lineno, f"{top.name}() takes self: {taken}, another module's class"
                    )
    functions: dict[ast.FunctionDef | ast.AsyncFunctionDef, dict[str, str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            functions.setdefault(node, {})
        elif isinstance(node, ast.ClassDef):
            attrs = _class_attrs(scope, node)
            for method in ast.walk(node):
                if isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef):
                    functions[method] = attrs
    for fn, attrs in functions.items():
        typed = _typed_names(scope, fn, attrs)
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            holder = node.value
            if isinstance(holder, ast.Name) and holder.id in typed:
                what, cls_name = holder.id, typed[holder.id]
            elif (attr := _self_attr(holder)) is not None and attr in attrs:
                what, cls_name = f"self.{attr}", attrs[attr]
            else:
                continue
            scope.report(node.lineno, f"uses {what}.{node.attr}, a private name of {cls_name}")


def private_uses(sources: Mapping[str, str]) -> list[str]:
    """`path:line: what` for every use of another module's private name."""
    found: list[str] = []
    for module, text in sorted(sources.items()):
        tree = ast.parse(text)
        imports = imports_of(module, tree, sources)
        scope = _Scope(module, sources)
        for imp in imports:
            if imp.bound is not None:
                scope.bindings.setdefault(imp.bound, imp)
        _check_imports(scope, imports)
        _check_attributes(scope, tree)
        _check_instances(scope, tree)
        found.extend(scope.found)
    return sorted(set(found))


# -- the tests -------------------------------------------------------------------------------


def test_no_import_cycle_among_the_modules_of_src() -> None:
    cycles = import_cycles(sources_of(SRC))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_module_uses_another_modules_private_names() -> None:
    uses = private_uses(sources_of(SRC))
    assert not uses, "private names used across modules:\n" + "\n".join(uses)


# -- each check catches what it guards (synthetic sources) ----------------------------------

PKG = {
    "nccl_k8s": "",
    "nccl_k8s.bench": "",
    "nccl_k8s.spec": "from nccl_k8s.spec._values import size\n",
    "nccl_k8s.spec._values": "def size(): ...\ndef _parse(): ...\n",
    "nccl_k8s.k8s": "",
}


def _with(**modules: str) -> dict[str, str]:
    return {**PKG, **{f"nccl_k8s.{k.replace('__', '.')}": v for k, v in modules.items()}}


CYCLES = {
    "module level": _with(
        bench__a="from nccl_k8s.bench.b import f\n", bench__b="from nccl_k8s.bench.a import g\n"
    ),
    "inside a function": _with(
        bench__a="def f():\n    from nccl_k8s.bench import b\n",
        bench__b="import nccl_k8s.bench.a\n",
    ),
    "relative, through a package's __init__": _with(
        bench="from .a import f\n", bench__a="from . import b\n", bench__b="from . import g\n"
    ),
    "three modules": _with(
        bench__a="from .b import x\n", bench__b="from .c import y\n", bench__c="from .a import z\n"
    ),
}


@pytest.mark.parametrize("form", sorted(CYCLES))
def test_a_planted_import_cycle_is_named(form: str) -> None:
    cycles = import_cycles(CYCLES[form])
    assert len(cycles) == 1, cycles
    assert "nccl_k8s.bench.a (line" in cycles[0] and "nccl_k8s.bench.b" in cycles[0]


def test_what_is_not_an_import_cycle() -> None:
    sources = _with(
        # under TYPE_CHECKING: never runs
        bench__a="from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n",
        bench__b="from .a import f\n",
        # a facade that loads its children by name (the k8s package's _WHERE table)
        k8s="import importlib\n_WHERE = {'f': 'run'}\n"
        "def __getattr__(n):\n    return importlib.import_module('nccl_k8s.k8s.' + _WHERE[n])\n",
        k8s__run="from nccl_k8s.k8s import x\n",
    )
    assert import_cycles(sources) == []


E_PRIVATE = "class E:\n    def _m(self): ...\n"
SOAK_LIKE = (
    "from .e import E\nclass S:\n    def __init__(self, e: E):\n        self.e = e\n"
    "    def run(self):\n        e, x = self.e, 1\n        e._m()\n        self.e._m()\n"
)

PRIVATE = {
    "another layer's private module": (
        _with(k8s__r="from nccl_k8s.spec._values import size\n"),
        "nccl_k8s/k8s/r.py:1: imports nccl_k8s.spec._values, a private module of nccl_k8s.spec",
    ),
    "another layer's private module, as a module": (
        _with(k8s__r="from nccl_k8s.spec import _values\n"),
        "nccl_k8s/k8s/r.py:1: imports nccl_k8s.spec._values, a private module of nccl_k8s.spec",
    ),
    "a private name": (
        _with(spec__b="from ._values import _parse\n"),
        "nccl_k8s/spec/b.py:1: imports _parse, a private name of nccl_k8s.spec._values",
    ),
    "a private name through the module": (
        _with(spec__b="from nccl_k8s.spec import _values\n\n_values._parse()\n"),
        "nccl_k8s/spec/b.py:3: uses _values._parse, a private name of nccl_k8s.spec._values",
    ),
    "a private attribute of an imported class": (
        _with(bench__e="class E:\n    _n = 1\n", bench__s="from .e import E\nE._n\n"),
        "nccl_k8s/bench/s.py:2: uses E._n, a private name of nccl_k8s.bench.e.E",
    ),
    "a private method through a parameter (KubeClient's in _lists)": (
        _with(
            bench__e="class E:\n    def _m(self): ...\n",
            bench__s="from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from .e import E\ndef f(e: 'E | None'):\n    e._m()\n",
        ),
        "nccl_k8s/bench/s.py:5: uses e._m, a private name of nccl_k8s.bench.e.E",
    ),
    "a private method through an alias of an attribute (the soak's engine)": (
        _with(bench__e=E_PRIVATE, bench__s=SOAK_LIKE),
        "nccl_k8s/bench/s.py:7: uses e._m, a private name of nccl_k8s.bench.e.E",
    ),
    "a private method through an attribute": (
        _with(bench__e=E_PRIVATE, bench__s=SOAK_LIKE),
        "nccl_k8s/bench/s.py:8: uses self.e._m, a private name of nccl_k8s.bench.e.E",
    ),
    "a function that takes another module's class as self": (
        _with(bench__e="class E: ...\n", bench__o="from .e import E\ndef meta(self: E): ...\n"),
        "nccl_k8s/bench/o.py:2: meta() takes self: nccl_k8s.bench.e.E, another module's class",
    ),
}


@pytest.mark.parametrize("form", sorted(PRIVATE))
def test_a_planted_private_use_is_reported_with_file_and_line(form: str) -> None:
    sources, expected = PRIVATE[form]
    assert expected in private_uses(sources)


def test_what_is_not_a_private_use() -> None:
    sources = _with(
        # own attributes, dunders, private modules of one's own layer, public names
        spec__b="from nccl_k8s.spec import _values\nfrom ._values import size\n"
        "import nccl_k8s\nclass C:\n    def __init__(self):\n        self._x = 1\n"
        "    @classmethod\n    def k(cls):\n        return cls._y\n"
        "    def m(self):\n        return self._x, _values.size, nccl_k8s.__version__\n",
        k8s__r="from nccl_k8s.spec import size\n",
    )
    assert private_uses(sources) == []


def test_an_import_planted_in_the_real_sources_breaks_both_checks() -> None:
    """The engine imports the sizes module (bench.counts); counts importing the engine back,
    inside a function, is a cycle, and reaching the spec's private module from k8s is a
    private use."""
    sources = sources_of(SRC)
    sources["nccl_k8s.bench.counts"] += "\n\ndef _late():\n    from nccl_k8s.bench import engine\n"
    sources["nccl_k8s.k8s.rendering._gangs"] += "\nfrom nccl_k8s.spec._values import quote\n"
    assert any(
        re.search(r"nccl_k8s\.bench\.counts \(line \d+\) -> nccl_k8s\.bench\.engine ", c)
        for c in import_cycles(sources)
    ), import_cycles(sources)
    assert any(
        u.startswith("nccl_k8s/k8s/rendering/_gangs.py:")
        and u.endswith("imports nccl_k8s.spec._values, a private module of nccl_k8s.spec")
        for u in private_uses(sources)
    )
