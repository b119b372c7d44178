# `make docs`: the MkDocs Material site (mkdocs.yml, pages in docs/) built into site/ with
# --strict, so a broken link, an unknown anchor or a page left out of the nav fails
# `make test`. The API reference is rendered from openapi.yaml at build time by
# docs/hooks/openapi_page.py: no network, no JavaScript from a CDN.
DOCS_PORT ?= 8003
# Material 9.x prints a notice about its end of life (May 2027) on every build; the notice
# says nothing about this site, so it stays out of `make test`'s output.
export NO_MKDOCS_2_WARNING := 1

.PHONY: docs docs-serve

## Build the docs site into site/ (mkdocs build --strict).
docs: $(BIN)/.installed
	$(BIN)/mkdocs build --strict --quiet --site-dir site

## Serve the docs site on http://127.0.0.1:$(DOCS_PORT), rebuilt on every save.
docs-serve: $(BIN)/.installed
	$(BIN)/mkdocs serve --strict --dev-addr 127.0.0.1:$(DOCS_PORT)
