import sys

from anisotropy.book.cli import main

sys.exit(main())
