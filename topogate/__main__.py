import sys

from topogate.cli import main

sys.exit(main())
