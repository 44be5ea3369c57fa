"""The import graph of nnhal follows DESIGN.md's "Who may import whom", read from the source with ast
(nothing is imported).

* No module outside source/device/<folder>/ imports a device folder (nnhal.device.cpu, .vnpu, ...): the
  core knows no device by name; only the generated registry (nnhal.registry, not in the tree) lists them.
* No device folder imports another device folder.
* An arrow only points down the layers of LAYERS; a device folder imports only the contract and the
  layers below it (graph, operator prototypes, host kernels, passes, scheduler).
* No cycle between packages (e.g. optimizer <-> device.cpu, optimizer <-> operator).

Imports under ``if TYPE_CHECKING:`` are annotations only: they count for the device-folder rules, not
for layers and cycles. Every failure lists the offending imports as ``module:line -> imported``.
"""
from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "source"
DEVICE_DIR = SOURCE / "device"
DEVICE_FOLDERS = sorted(p.name for p in DEVICE_DIR.iterdir() if p.is_dir() and (p / "__init__.py").exists())
GENERATED = {"nnhal.registry"}

# bottom first; a module may import its own layer and the layers below. Top-level names of nnhal;
# "device" is the contract (device.py, manager.py, discovery.py), never a device folder.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "graph", "operator", "hostkernels", "zoo", "data"),
    ("device",),
    ("scheduler", "optimizer", "serializer"),
    ("options", "pipeline"),                                  # the prepare stages (DESIGN.md, "The flow")
    ("profiling", "session", "api", ""),                     # "" = nnhal/__init__.py
    ("cli", "benchmark", "accuracy", "conformance", "testing", "models", "batch", "ray", "ui"),
)
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}
DEVICE_RANK = 2.5           # above the passes and the scheduler, below the public surface
# what a device folder may import (besides its own folder)
# (serializer: a vendor-runtime device exports its subgraphs as ONNX with nnhal.serializer.onnx_export)
DEVICE_MAY_IMPORT = frozenset({"errors", "graph", "operator", "hostkernels", "device", "scheduler", "optimizer",
                               "serializer"})

# NOTE: arrows that break the rules today, each with its reason; a new one fails the test. Remove an
# entry once it is fixed (the test then fails if the entry is stale, so the list cannot rot).
KNOWN_UPWARD: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    module: str         # the importing module, e.g. nnhal.optimizer.infer
    line: int
    target: str         # the imported module, e.g. nnhal.hostkernels.evaluate
    typing_only: bool   # under ``if TYPE_CHECKING:``

    def __str__(self) -> str:
        return f"{self.module}:{self.line} -> {self.target}"


def module_name(path: Path) -> str:
    parts = ["nnhal", *path.relative_to(SOURCE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    rel = Path(*name.split(".")[1:])
    return (SOURCE / rel).with_suffix(".py").exists() or (SOURCE / rel / "__init__.py").exists()


def _typing_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports_of(path: Path) -> list[Import]:
    """Every nnhal import of one file (top level or inside functions), resolved to a module name."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    typing = _typing_lines(tree)
    found = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # ``from nnhal.device import cpu`` imports the module nnhal.device.cpu
            targets = [f"{base}.{a.name}" if _is_module(f"{base}.{a.name}") else base for a in node.names]
        for target in dict.fromkeys(targets):
            if target == "nnhal" or target.startswith("nnhal."):
                found.append(Import(module, node.lineno, target, node.lineno in typing))
    return found


def all_imports() -> list[Import]:
    return [imp for path in sorted(SOURCE.rglob("*.py")) for imp in imports_of(path)]


def device_folder(name: str) -> str | None:
    """The device folder a module belongs to (cpu for nnhal.device.cpu.plan), else None."""
    parts = name.split(".")
    if len(parts) >= 3 and parts[1] == "device" and parts[2] in DEVICE_FOLDERS:
        return parts[2]
    return None


def package_of(name: str) -> str:
    """The package an arrow is counted between: a device folder, else nnhal's top-level name."""
    folder = device_folder(name)
    if folder is not None:
        return f"device.{folder}"
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else ""


def _report(what: str, bad: list) -> str:
    return f"{len(bad)} {what}:\n  " + "\n  ".join(str(b) for b in bad)


IMPORTS = all_imports()


# The native extension, its pools and the fast kernels that call them live in the cpu device's folder
# (source/device/cpu/native, qnative, parallel.py, threads.py, kernels/); nothing outside it reaches them.
NATIVE = ("nnhal.device.cpu.native", "nnhal.device.cpu.qnative", "nnhal.device.cpu.parallel",
          "nnhal.device.cpu.threads")


def _is_native(target: str) -> bool:
    return any(target == n or target.startswith(n + ".") for n in NATIVE)


def test_the_scan_sees_the_tree():
    # guards the test itself: the walk finds modules, imports, and the device folders
    assert {"cpu", "vnpu"} <= set(DEVICE_FOLDERS)
    assert any(i.module == "nnhal.optimizer.infer" and i.target.startswith("nnhal.hostkernels") for i in IMPORTS)
    names = {module_name(p) for p in SOURCE.rglob("*.py")}
    top = {n.split(".")[1] for n in names if n.count(".") >= 1}
    unknown = sorted(t for t in top if t not in RANK and t != "device")
    assert not unknown, f"top-level modules missing from LAYERS (give each a layer): {unknown}"


def test_no_module_outside_a_device_folder_imports_one():
    bad = [i for i in IMPORTS if device_folder(i.target) is not None and device_folder(i.module) is None
           and i.module not in GENERATED]
    assert not bad, _report("imports of a device folder from outside source/device/<folder>/ "
                            "(the core must know no device by name)", bad)


def test_no_device_folder_imports_another():
    bad = [i for i in IMPORTS if device_folder(i.module) is not None and device_folder(i.target) is not None
           and device_folder(i.module) != device_folder(i.target)]
    assert not bad, _report("imports between device folders (share code through nnhal.hostkernels)", bad)


def test_device_folders_import_only_the_contract_and_the_layers_below():
    bad = [i for i in IMPORTS if device_folder(i.module) is not None and device_folder(i.target) is None
           and not i.typing_only and package_of(i.target) not in DEVICE_MAY_IMPORT]
    assert not bad, _report(f"imports from a device folder outside {sorted(DEVICE_MAY_IMPORT)}", bad)


def test_arrows_only_point_down_the_layers():
    bad, known = [], set()
    for i in IMPORTS:
        if i.typing_only or device_folder(i.module) is not None or device_folder(i.target) is not None:
            continue
        src, dst = RANK.get(package_of(i.module)), RANK.get(package_of(i.target))
        if src is None or dst is None or dst <= src:
            continue
        if (i.module, i.target) in KNOWN_UPWARD:
            known.add((i.module, i.target))
            continue
        bad.append(f"{i}  ({package_of(i.module) or 'nnhal'}: layer {src} imports "
                   f"{package_of(i.target)}: layer {dst})")
    assert not bad, _report("upward imports (DESIGN.md, 'Who may import whom')", bad)
    stale = sorted(set(KNOWN_UPWARD) - known)
    assert not stale, f"KNOWN_UPWARD entries that no longer occur (remove them): {stale}"


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_packages():
    edges: dict[str, set[str]] = defaultdict(set)
    arrows: dict[tuple[str, str], list[Import]] = defaultdict(list)
    for i in IMPORTS:
        a, b = package_of(i.module), package_of(i.target)
        # nnhal/__init__.py re-exports the public API; submodules importing ``nnhal`` itself are tools
        if i.typing_only or a == b or "" in (a, b):
            continue
        edges[a].add(b)
        arrows[(a, b)].append(i)
    cycles = _cycles(edges)
    detail = [f"{' <-> '.join(c)}: " + "; ".join(str(i) for a in c for b in c for i in arrows.get((a, b), ()))
              for c in cycles]
    assert cycles == [], _report("import cycles between packages", detail)


def test_no_import_cycle_between_modules():
    """Within a package and within a layer too (conformance.runner <-> conformance.report was one): a
    module that imports another, at the top or inside a function, is not imported back by it, directly
    or around a loop."""
    edges: dict[str, set[str]] = defaultdict(set)
    arrows: dict[tuple[str, str], list[Import]] = defaultdict(list)
    for i in IMPORTS:
        # ``nnhal`` itself is the public API re-exporting the rest; a package's __init__ may re-export
        if i.typing_only or i.module == i.target or "nnhal" in (i.module, i.target):
            continue
        edges[i.module].add(i.target)
        arrows[(i.module, i.target)].append(i)
    cycles = _cycles(edges)
    detail = [f"{' <-> '.join(c)}: " + "; ".join(str(i) for a in c for b in c for i in arrows.get((a, b), ()))
              for c in cycles]
    assert cycles == [], _report("import cycles between modules", detail)


@pytest.mark.parametrize("pair", [("optimizer", "device.cpu"), ("optimizer", "operator"),
                                  ("hostkernels", "optimizer"), ("operator", "hostkernels"),
                                  ("optimizer", "options")])
def test_named_cycles_are_gone(pair):
    a, b = pair
    there = [i for i in IMPORTS if not i.typing_only and package_of(i.module) == a and package_of(i.target) == b]
    back = [i for i in IMPORTS if not i.typing_only and package_of(i.module) == b and package_of(i.target) == a]
    assert not (there and back), _report(f"arrows of the cycle {a} <-> {b}", there + back)


def test_out_of_tree_examples_import_no_device_folder():
    """The example plugin devices (examples/) depend on the contract and the layers below, as authors
    who copy them will."""
    examples = Path(__file__).resolve().parents[1] / "examples"
    bad = []
    for path in sorted(examples.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) else []
            bad += [f"{path.relative_to(examples)}:{node.lineno} -> {n}" for n in names if device_folder(n)]
    assert not bad, _report("imports of a device folder from examples/", bad)


def test_no_ctypes_in_source():
    """The product is ctypes-free: native code is a CPython extension module (DESIGN.md, 'Native code')."""
    bad = []
    for path in sorted(SOURCE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            bad += [f"{path.relative_to(SOURCE)}:{node.lineno} imports {n}" for n in names
                    if n == "ctypes" or n.startswith("ctypes.")]
            if isinstance(node, ast.Attribute) and node.attr == "ctypes":    # ndarray.ctypes imports ctypes
                bad.append(f"{path.relative_to(SOURCE)}:{node.lineno} reads .ctypes")
    assert not bad, _report("imports of ctypes (or numpy's .ctypes, which imports it) under source/", bad)


def test_hostkernels_import_no_device():
    """The host kernels are the shared numpy layer: no device folder, not the device contract either."""
    bad = [i for i in IMPORTS if package_of(i.module) == "hostkernels"
           and (package_of(i.target).startswith("device") or i.target == "nnhal.registry")]
    assert not bad, _report("imports of a device from nnhal.hostkernels", bad)


def test_only_the_cpu_device_imports_the_native_kernels():
    """The extension and the pools belong to the cpu device (DESIGN.md, 'Native code'): no module outside
    source/device/cpu/ imports them, the host kernels included (they are the numpy reference layer)."""
    bad = [i for i in IMPORTS if _is_native(i.target) and device_folder(i.module) != "cpu"]
    assert not bad, _report("imports of the native kernels or their pools from outside the cpu device", bad)
