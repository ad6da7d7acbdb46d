"""``python -m kai_py.kubectl``: the same as the ``kubectl-kai`` command."""

import sys

from kai_py.kubectl.main import main

sys.exit(main())
