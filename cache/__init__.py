"""Cache of verified bindings and the local HTTP cache service (filled in by their issues)."""
