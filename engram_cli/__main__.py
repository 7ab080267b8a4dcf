import sys

from engram_cli import main

sys.exit(main())
