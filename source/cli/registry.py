"""`nnhal registry`: re-run CMake's configure step and refresh the installed registry.

    nnhal registry --enable tpu        switch NNHAL_ENABLE_TPU on (a new folder too)
    nnhal registry --disable vnpu      switch a device off

The options of the current registry are kept; the packages a device to enable
needs are checked against this Python; the choices are saved in the source
tree's nnhal-devices.txt, which every later build reads (so a reinstall keeps
them); CMake renders the registry, which replaces the installed
nnhal/registry.py. With an editable install, a new device folder is importable
at once; a regular install cannot carry a new folder's files, and the command
says to reinstall instead (exit status 1, the choice saved).
"""
from __future__ import annotations

import importlib
import importlib.util
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
        cmd = [find_cmake(), "-S", str(source), "-B", build, f"-DPython_EXECUTABLE={sys.executable}"] \
            + [f"-D{k}={v}" for k, v in sorted(defines.items())]
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


DEVICES_FILE = "nnhal-devices.txt"
DEVICES_FILE_HEADER = """\
# nnhal device choices: <device>=ON|OFF, one per line.
# Written by `nnhal registry --enable/--disable`; read by CMake at every build
# (pip install .), so the choices survive a reinstall. A -C cmake.define.
# NNHAL_ENABLE_<DEVICE>=ON|OFF given to pip still wins for that one build.
"""


def read_choices(path: Path) -> dict[str, str]:
    """The devices file as name -> "ON"/"OFF" (an absent file is empty)."""
    choices: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            name, sep, value = line.strip().partition("=")
            if sep and not name.startswith("#") and value in ("ON", "OFF"):
                choices[name] = value
    return choices


def write_choices(path: Path, choices: dict[str, str]) -> None:
    try:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(DEVICES_FILE_HEADER + "".join(f"{n}={v}\n" for n, v in sorted(choices.items())))
        os.replace(tmp, path)
    except OSError as exc:
        raise RegistryError(f"cannot write the device choices to {path}: {exc}") from None


def _importable(module: str) -> bool:
    """Whether the installed package holds a device module (a missing parent package counts as no)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _missing_packages(entry) -> list[str]:
    return [p for p in entry.packages if not _importable(p)]


def regenerate(enable: list[str], disable: list[str], source: str | None = None, verbose: bool = False) -> int:
    """Record the choices in the source tree's devices file, reconfigure, and replace the installed registry.

    Returns 0 when the installed registry was refreshed, 1 when the choices were saved but this
    install cannot carry them without a reinstall (a regular install and a new device folder).
    """
    try:
        from nnhal import registry
        current = {e.name: e for e in registry.ALL_DEVICES}
        source_dir = Path(source or registry.SOURCE_DIR)
        target = Path(registry.__file__)
    except ImportError:
        raise RegistryError("nnhal.registry is missing; install the package first ('pip install -e .')") from None
    if not (source_dir / "CMakeLists.txt").is_file():
        raise RegistryError(f"the source tree nnhal was built from ('{source_dir}') is not there (installed from a "
                            "wheel?): get nnhal's source and pass --source DIR, or reinstall with the device "
                            "switched on: pip install DIR -C cmake.define.NNHAL_ENABLE_<DEVICE>=ON")
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
    for name in enable:
        missing = _missing_packages(rendered[name])
        if missing:
            raise RegistryError(f"device '{name}' needs the Python package(s) {', '.join(missing)}, which "
                                f"{sys.executable} cannot import: install them, then enable it again "
                                f"(NNHAL_ENABLE_{name.upper()}=OFF is kept)")
    choices_file = source_dir / DEVICES_FILE
    choices = read_choices(choices_file)
    choices.update({n: "ON" for n in enable})
    choices.update({n: "OFF" for n in disable})
    if enable or disable:
        write_choices(choices_file, choices)
    on = [e.name for e in namespace["DEVICES"]]
    off = [n for n in rendered if n not in on]
    absent = [e.name for e in namespace["DEVICES"] if not _importable(e.module)]
    if absent:
        print(f"nnhal: saved in {choices_file}: {', '.join(f'{n}={v}' for n, v in sorted(choices.items()))}")
        print(f"nnhal: this installation does not carry the folder of {', '.join(absent)} (a regular, not "
              f"editable, install copies the device folders at build time), so the installed registry was "
              f"left as it is. Reinstall to build it in:\n  pip install {source_dir}\n"
              f"or install in editable mode once (pip install -e {source_dir}), after which "
              "`nnhal registry` takes effect at once.")
        return 1
    tmp = target.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, target)
    importlib.invalidate_caches()
    saved = f"; choices saved in {choices_file}" if enable or disable else ""
    print(f"nnhal: registry refreshed at {target}{saved}")
    print(f"  enabled: {', '.join(on)}" + (f"; off: {', '.join(off)}" if off else ""))
    return 0
