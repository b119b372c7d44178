"""Bearer tokens and the authorizer."""
