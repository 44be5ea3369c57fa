import sys

from nnhal.cli.common import guarded
from nnhal.conformance.runner import main

sys.exit(guarded(main))
