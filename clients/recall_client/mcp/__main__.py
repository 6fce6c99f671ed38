"""``python -m recall_client.mcp`` is ``recall-mcp``."""

from .server import main

raise SystemExit(main())
