# `make package STAGE=prod`: build/<stage>/<version>/sam.json + deployment.zip for
# CloudFormation; build/<stage>/latest names the newest. Earlier releases are kept, to
# roll back to (docs/operations.md). chalice package needs a region but no credentials;
# nothing here talks to AWS.
PACKAGE_REGION ?= us-east-1

.PHONY: package

## Package a stage (default prod) as a SAM template and deployment.zip under build/<stage>/<version>/.
package: $(BIN)/.installed
	AWS_DEFAULT_REGION=$${AWS_DEFAULT_REGION:-$(PACKAGE_REGION)} \
		$(BIN)/python -m deploy.package --stage $(STAGE)

.PHONY: rotate-link-key

## Put a new link-signing key in STACK's LinkSecret (refused within 48 h of the last; FORCE=1);
## LEAKED=1 also withdraws every other key: links signed with them stop working in a minute.
rotate-link-key: $(BIN)/.installed
	@test -n "$(STACK)" || { echo "usage: make rotate-link-key STACK=<stack name> [FORCE=1] [LEAKED=1]"; exit 2; }
	$(BIN)/python -m deploy.rotate_link_key --stack $(STACK) $(if $(FORCE),--force) $(if $(LEAKED),--leaked)

.PHONY: tenant-limit

## Give TENANT its own request limit on STACK (its usage-plan key); run once per new tenant.
tenant-limit: $(BIN)/.installed
	@test -n "$(STACK)" -a -n "$(TENANT)" || { echo "usage: make tenant-limit STACK=<stack name> TENANT=<tenant>"; exit 2; }
	$(BIN)/python -m deploy.tenant_limit --stack $(STACK) --tenant $(TENANT)
