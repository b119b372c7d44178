# The browser tests (tests/browser) drive Debian's chromium through Playwright for Python;
# `make test` installs chromium when it is missing. Playwright's own browser downloads are
# never used.
.PHONY: chromium

## Install Debian's chromium for the browser tests, if it is missing.
chromium:
	@command -v chromium >/dev/null || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
