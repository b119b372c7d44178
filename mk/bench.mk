# `make bench`: ours against a naive counter and zae-limiter behind a latency proxy (issue 13),
# then the figures of issue 6 (cost, latency, over-admission, MCP overhead, cold
# start) in one run; prints the tables and the total time, writes bench/RESULTS.md and
# bench/results/latest.json. At most 6 minutes on 2 cores.
ZAE_VENV := bench/.venv-zae
# The Lambda runtime's Python with boto3, for bench/cold_start.py: the zip's bytecode is
# compiled for it. Without that Python here, the cold start is measured on the venv's.
RUNTIME_VENV := bench/.venv-runtime

.PHONY: bench

# The MCP client and example server, on top of requirements-dev.txt.
$(BIN)/.bench-installed: $(BIN)/.installed bench/requirements.txt client/requirements-test.txt
	$(BIN)/pip install --quiet -r bench/requirements.txt
	touch $@

# zae-limiter pins an older botocore (through aiobotocore): it gets a venv of its own.
$(ZAE_VENV)/.installed: bench/requirements-zae.txt
	$(PYTHON) -m venv $(ZAE_VENV)
	$(ZAE_VENV)/bin/pip install --quiet --upgrade pip
	$(ZAE_VENV)/bin/pip install --quiet -r bench/requirements-zae.txt
	touch $@

$(RUNTIME_VENV)/.installed: requirements-dev.txt .chalice/config.json
	$(BIN)/python -c "from bench.cold_start import setup_runtime; setup_runtime()" \
		&& touch $@ || echo "warning: cold start measured on the venv's Python"

## Benchmark ours beside a naive counter and zae-limiter; print the table.
bench: install package $(BIN)/.bench-installed $(ZAE_VENV)/.installed $(RUNTIME_VENV)/.installed
	$(BIN)/python -m bench.run $(BENCH_ARGS)
