import sys

from normlab.lab.cli import main

sys.exit(main())
