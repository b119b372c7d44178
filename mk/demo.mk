# `make demo`: replay the incident (an agent loop calls delete_tag 400 times) with the
# real service, the example MCP server and a fastmcp client.
.PHONY: demo

## Replay the incident: an agent loop calls delete_tag 400 times.
demo: $(BIN)/.installed
	$(BIN)/python examples/demo.py
