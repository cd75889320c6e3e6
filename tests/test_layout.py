"""The package's imports run one way: no module imports, at its top or inside a
function, a module that imports it back (directly or through others)."""

import ast
import pathlib

import smoothlearn

ROOT = pathlib.Path(smoothlearn.__file__).parent


def _modules():
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(name, path, modules):
    """Every module of the package that ``name`` imports, anywhere in its code."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # ``from . import banks`` imports the submodule; ``from .x import
            # name`` the module x (a name that is no module lives in x)
            candidates = [
                f"{target}.{alias.name}"
                if f"{target}.{alias.name}" in modules
                else target
                for alias in node.names
            ]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found |= {c for c in candidates if c in modules and c != name}
    return found


def _cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _cycles(graph) == []


def test_a_submodule_imported_from_its_package_is_that_module(tmp_path):
    path = tmp_path / "c.py"
    path.write_text("from . import a\nfrom .b import name\n")
    modules = {"pkg": None, "pkg.a": None, "pkg.b": None, "pkg.c": path}
    assert _imports("pkg.c", path, modules) == {"pkg.a", "pkg.b"}


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
        ["a", "b", "c"]
    ]


def test_the_scale_and_the_geometry_need_no_torch():
    # the scale is the engine's currency, and the geometry and metrics compute
    # with it on numpy arrays: neither module imports torch
    for name in ("scale.py", "geometry.py"):
        tree = ast.parse((ROOT / name).read_text())
        imported = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        } | {
            (node.module or "").split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and not node.level
        }
        assert "torch" not in imported, name
