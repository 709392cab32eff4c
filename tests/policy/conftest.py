import sys

from tests.builders import REPO

# The pack imports its modules the way the CLI runs it: with the pack directory first on sys.path.
sys.path.insert(0, str(REPO / "policy"))
