"""`nnhal batch` as the CLI runs it (run_cli), with an actor that lets a test stop a node in the middle of a part.

    python tests/ray/cluster_driver.py SYNC_DIR batch MODEL INPUT OUTPUT --address HOST:PORT ...

Each actor announces itself in SYNC_DIR (``actor-<node id>-<pid>``) and starts no part before actors run on
two nodes, so both nodes get parts. An actor on the node whose processes have NNHAL_TEST_ROLE=worker in
their environment (set at its `ray start`) writes its first part, then at its second one writes
SYNC_DIR/stalled and waits: the test stops that node with the part in flight, and Ray runs it again
elsewhere. The class is defined here, in __main__, so Ray pickles it by value: the nodes need not import
this file.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from nnhal.batch.cli import run_cli
from nnhal.batch.runner import PartRunner
from nnhal.cli.main import build_parser
from nnhal.ui.command import guarded

SYNC = Path(sys.argv[1])


class StallingRunner(PartRunner):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        (SYNC / f"actor-{self.node}-{os.getpid()}").touch()
        self.parts = 0

    def run_part(self, part):
        deadline = time.monotonic() + 120
        while len({p.name.split("-")[1] for p in SYNC.glob("actor-*")}) < 2:
            if time.monotonic() > deadline:
                raise RuntimeError("no actor started on a second node in 120 s")
            time.sleep(0.1)
        self.parts += 1
        if os.environ.get("NNHAL_TEST_ROLE") == "worker" and self.parts == 2:
            (SYNC / "stalled").write_text(str(part.index))
            time.sleep(600)                     # until the test stops this node
        return super().run_part(part)


if __name__ == "__main__":
    args = build_parser().parse_args(sys.argv[2:])
    sys.exit(guarded(lambda: run_cli(args, runner=StallingRunner)))
