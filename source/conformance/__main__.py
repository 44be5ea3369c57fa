import sys

from nnhal.conformance.runner import main

sys.exit(main())
