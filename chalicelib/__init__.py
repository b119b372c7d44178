"""mcp-quota: a per-session, per-category tool-call quota for MCP servers."""

from chalicelib import precompiled

# In a Lambda package: the dataclass methods compiled when it was built (cold start).
precompiled.install()
