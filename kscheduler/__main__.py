import sys

from kscheduler.cli import main

sys.exit(main())
