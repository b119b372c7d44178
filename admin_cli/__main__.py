"""`python -m admin_cli` runs the `mcp-quota` command line."""

from __future__ import annotations

import sys

from admin_cli.main import main

sys.exit(main())
