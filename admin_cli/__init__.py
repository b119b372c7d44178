"""The `mcp-quota` operator tools: the admin CLI and table provisioning. Never in the Lambda."""
