"""``python -m letagents_trio.mcp_server``: serve the MCP tools on stdio."""

from __future__ import annotations

from ._main import main

raise SystemExit(main())
