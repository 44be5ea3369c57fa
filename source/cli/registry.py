"""`nnhal registry`: re-run CMake's configure step and refresh the installed registry.

    nnhal registry --enable tpu        switch NNHAL_ENABLE_TPU on (a new folder too)
    nnhal registry --disable vnpu      switch a device off

The options of the current registry are kept; CMake checks the packages each
enabled device needs (against this Python) and renders the registry, which
replaces the installed nnhal/registry.py. With an editable install, a new
device folder is importable at once; a regular install needs a reinstall to
carry a new folder's files.
"""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from nnhal.errors import RegistryError


def find_cmake() -> str:
    """The cmake executable: on PATH, else the one from the 'cmake' PyPI package."""
    found = shutil.which("cmake")
    if found:
        return found
    try:
        import cmake  # type: ignore[import-not-found]

        return os.path.join(cmake.CMAKE_BIN_DIR, "cmake")
    except ImportError:
        raise RegistryError("cmake is not installed: install it ('pip install cmake' or your system package)") from None


def configure(source: Path, defines: dict[str, str], verbose: bool = False) -> str:
    """Run the configure step into a temporary build dir; return the rendered registry text."""
    with tempfile.TemporaryDirectory(prefix="nnhal-registry-") as build:
        cmd = [find_cmake(), "-S", str(source), "-B", build, f"-DPython_EXECUTABLE={sys.executable}",
               f"-DNNHAL_TARGET_PYTHON={sys.executable}"] + [f"-D{k}={v}" for k, v in sorted(defines.items())]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if verbose or proc.returncode:
            sys.stderr.write(proc.stdout + proc.stderr)
        if proc.returncode:
            raise RegistryError("CMake configure failed: " + (_cmake_errors(proc.stdout + proc.stderr)
                                                              or f"exit {proc.returncode}"))
        return (Path(build) / "registry.py").read_text()


def _cmake_errors(output: str) -> str:
    """The text of CMake's error messages, joined onto one line each."""
    messages, current = [], None
    for line in output.splitlines():
        if line.startswith("CMake Error"):
            current = []
            messages.append(current)
        elif current is not None:
            if line.startswith("Call Stack") or line.startswith("--"):
                current = None
            elif line.strip():
                current.append(line.strip())
    return " | ".join(" ".join(m) for m in messages if m)


def regenerate(enable: list[str], disable: list[str], source: str | None = None, verbose: bool = False) -> int:
    """Reconfigure with the requested options and replace the installed registry module."""
    try:
        from nnhal import registry
        current = {e.name: e for e in registry.ALL_DEVICES}
        source_dir = Path(source or registry.SOURCE_DIR)
        target = Path(registry.__file__)
    except ImportError:
        raise RegistryError("nnhal.registry is missing; install the package first ('pip install -e .')") from None
    if not (source_dir / "CMakeLists.txt").is_file():
        raise RegistryError(f"source tree '{source_dir}' (where nnhal was built from) has no CMakeLists.txt; "
                            "pass --source DIR")
    for name in enable + disable:
        if not name.isalnum() or name.lower() != name:
            raise RegistryError(f"device name '{name}' is not [a-z0-9]+")
    clash = set(enable) & set(disable)
    if clash:
        raise RegistryError(f"device(s) {sorted(clash)} are both enabled and disabled")
    if "cpu" in disable:
        raise RegistryError("the cpu device cannot be disabled: it is every context's fallback")
    defines = {e.option: "ON" if e.enabled else "OFF" for e in current.values()}
    for name in enable:
        defines[f"NNHAL_ENABLE_{name.upper()}"] = "ON"
    for name in disable:
        defines[f"NNHAL_ENABLE_{name.upper()}"] = "OFF"
    text = configure(source_dir, defines, verbose)
    namespace: dict = {}
    exec(compile(text, "registry.py", "exec"), namespace)
    rendered = {e.name: e for e in namespace["ALL_DEVICES"]}
    unknown = [n for n in enable + disable if n not in rendered]
    if unknown:
        raise RegistryError(f"no device folder declares {unknown} under {source_dir / 'source' / 'device'}; "
                            f"known devices: {sorted(rendered)}")
    for entry in namespace["DEVICES"]:
        if importlib.util.find_spec(entry.module) is None:
            raise RegistryError(f"device '{entry.name}' is enabled but its module {entry.module} is not in the "
                                "installed package; reinstall nnhal ('pip install .') to carry the new folder")
    tmp = target.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, target)
    importlib.invalidate_caches()
    on = [e.name for e in namespace["DEVICES"]]
    off = [n for n in rendered if n not in on]
    print(f"nnhal: registry refreshed at {target}")
    print(f"  enabled: {', '.join(on)}" + (f"; off: {', '.join(off)}" if off else ""))
    return 0
