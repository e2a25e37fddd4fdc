import sys

from relaymq.cli import main

sys.exit(main())
