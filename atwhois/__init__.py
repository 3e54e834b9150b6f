"""atwhois: ATProto identity, resolved and verified both ways, with the evidence.

The repository keeps its parts at its top level (`resolver/`, `cache/`, `cli/`, …); they are
installed, imported and type-checked as `atwhois.resolver`, `atwhois.cache`, … (this folder
holds a link to each)."""
