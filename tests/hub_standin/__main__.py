"""``python tests/hub_standin {serve,run,build,venv}`` (or ``python -m tests.hub_standin`` from the checkout)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hub_standin.run import main  # noqa: E402

sys.exit(main())
