"""mcp-quota: a per-session, per-category tool-call quota for MCP servers."""
