"""Every transformers architecture from a tiny config, audited and checked against it."""
