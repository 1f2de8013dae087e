"""ungater."""
