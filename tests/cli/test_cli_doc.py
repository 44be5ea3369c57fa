"""docs/cli.md and `nnhal --help` agree: every command `nnhal --help` lists, and every option each
command's `--help` lists, is named in docs/cli.md."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from nnhal.cli.main import main

DOC = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")


def help_of(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def commands(capsys) -> list[str]:
    text = help_of(capsys)
    block = text.split("COMMAND\n", 2)[-1].split("\noptions:")[0]
    return re.findall(r"^    (\w+)", block, re.M)


def options(text: str) -> set[str]:
    """Option strings of a --help text's option lines (``-q, --quiet``), -h/--help left out."""
    found = set()
    for line in text.splitlines():
        m = re.match(r"^  (-[\w-]+(?:[ =][A-Z_=.\[\]{},\w]+)?(?:, -[\w-]+(?:[ =]\S+)?)*)", line)
        if m:
            found.update(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", m.group(1)))
    return found - {"-h", "--help"}


def test_the_help_lists_the_commands(capsys):
    # guards the test itself
    assert {"run", "profile", "placement", "validate", "bench"} <= set(commands(capsys))


def section(name: str) -> str:
    """The text of docs/cli.md's section on ``nnhal <name>`` (up to the next section), with the
    section of options shared by the commands that run a model."""
    parts = re.split(r"^## ", DOC, flags=re.M)
    own = [p for p in parts if p.startswith(f"nnhal {name}\n")]
    shared = [p for p in parts if p.startswith("Options shared by") and name in p.splitlines()[0]]
    return "".join(own + shared)


def test_every_command_and_option_of_the_help_is_in_docs_cli_md(capsys):
    missing = [f"nnhal {o}" for o in sorted(options(help_of(capsys))) if f"`nnhal {o}`" not in DOC]
    names = commands(capsys)
    for name in names:
        text = section(name)
        if not text or f"| `nnhal {name}" not in DOC:
            missing.append(f"nnhal {name}: no section '## nnhal {name}' or no row in the table")
        for option in sorted(options(help_of(capsys, name))):
            if not re.search(rf"`{re.escape(option)}[` =]", text):
                missing.append(f"nnhal {name} {option}")
    assert len(names) >= 9
    assert not missing, "named by --help but not in docs/cli.md:\n  " + "\n  ".join(missing)
