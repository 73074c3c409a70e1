"""`python3 -m remote.sandbox ...`: the sandbox's own command line."""
import sys

from .cli import main

sys.exit(main())
