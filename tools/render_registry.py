"""Render the device registry module from CMake's device manifest.

Called by CMake (cmake/NnhalDevice.cmake) after every device folder has
declared itself. The manifest has one line per device:
name|module|option|enabled|default|packages(comma)|description
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import jinja2

TEMPLATE = Path(__file__).with_name("registry.py.j2")
TRUE = {"ON", "TRUE", "1", "YES", "Y"}


def parse_manifest(text: str) -> list[dict]:
    devices = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, module, option, enabled, default, packages, description = line.split("|", 6)
        devices.append({
            "name": name, "module": module, "option": option,
            "enabled": enabled.upper() in TRUE, "default": default.upper() in TRUE,
            "packages": [p for p in packages.split(",") if p], "description": description,
        })
    return devices


def render(devices: list[dict], source_dir: str) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(TEMPLATE.read_text()).render(devices=devices, source_dir=source_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    devices = parse_manifest(Path(args.manifest).read_text())
    text = render(devices, os.path.abspath(args.source_dir))
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, out)
    print(f"nnhal: registry with {sum(d['enabled'] for d in devices)} enabled device(s) "
          f"of {len(devices)}: {', '.join(d['name'] + ('' if d['enabled'] else ' (off)') for d in devices)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
