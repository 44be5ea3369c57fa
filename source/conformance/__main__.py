import sys

from nnhal.ui.command import guarded
from nnhal.conformance.runner import main

sys.exit(guarded(main))
