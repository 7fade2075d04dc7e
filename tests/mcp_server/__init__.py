"""The MCP server's tests (named mcp_server, not mcp: a package ``mcp`` would shadow the SDK)."""
