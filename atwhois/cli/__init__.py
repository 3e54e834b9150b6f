"""atwhois command line."""
