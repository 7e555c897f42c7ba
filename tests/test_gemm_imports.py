"""The gemm package's modules import one another without a cycle, lazy imports inside functions included."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import kernelrl.gemm

PACKAGE = Path(kernelrl.gemm.__file__).parent


def _module_name(path: Path) -> str:
    parts = ("kernelrl", "gemm", *path.relative_to(PACKAGE).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def gemm_imports(path: Path) -> set[str]:
    """The kernelrl.gemm modules a source file imports, wherever the import statement is."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kernelrl.gemm"):
            if node.module == "kernelrl.gemm":  # `from kernelrl.gemm import fastpath` names a module
                found |= {f"kernelrl.gemm.{a.name}" for a in node.names}
            else:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("kernelrl.gemm.")}
    return found


def import_graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    return {name: {d for d in gemm_imports(p) if d in modules and d != name} for name, p in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a list of nodes (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_reports_a_circle_of_lazy_imports():
    graph = {"build": {"fastpath"}, "fastpath": {"native"}, "native": {"build"}, "space": set()}
    assert find_cycle(graph) == ["build", "fastpath", "native", "build"]
    assert find_cycle({"build": {"native", "fastpath"}, "fastpath": {"native"}, "native": set()}) is None


def test_gemm_modules_import_without_a_cycle():
    graph = import_graph()
    assert {"kernelrl.gemm.build", "kernelrl.gemm.native", "kernelrl.gemm.fastpath"} <= set(graph)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_native_knows_nothing_of_how_libraries_are_built():
    graph = import_graph()
    assert graph["kernelrl.gemm.native"] == set()
    assert "kernelrl.gemm.build" not in graph["kernelrl.gemm.fastpath"]


def test_every_gemm_module_imports_in_a_fresh_interpreter():
    # The Triton kernels need Triton (the `gemm` extra's GPU wheels), which a CPU machine may lack.
    names = [n for n in import_graph() if ".kernels." not in n]
    code = "import importlib, sys\nfor n in sys.argv[1:]:\n    importlib.import_module(n)\n"
    for order in (names, names[::-1]):  # a cycle between top-level imports fails in one order or the other
        proc = subprocess.run([sys.executable, "-c", code, *order], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_build_module_takes_help_and_bad_flags_as_a_command_line(tmp_path):
    """`python -m kernelrl.gemm.build --help` prints its usage and builds nothing (it once took the flag for a
    folder); an unknown flag is a one-line usage error."""
    run = lambda *a: subprocess.run([sys.executable, "-m", "kernelrl.gemm.build", *a], cwd=tmp_path,  # noqa: E731
                                    capture_output=True, text=True, timeout=120)
    shown = run("--help")
    assert shown.returncode == 0 and "build_dir" in shown.stdout and "--jobs" in shown.stdout
    assert list(tmp_path.iterdir()) == []
    bad = run("--no-such-flag")
    assert bad.returncode == 2 and "unrecognized arguments: --no-such-flag" in bad.stderr
    assert list(tmp_path.iterdir()) == []
