import sys

from nnhal.conformance.runner import main
from nnhal.ui.command import guarded

sys.exit(guarded(main))
