"""What several test modules share: the cache model, the explanation catalogue, the fuzz
targets, reading `/metrics`, the mutation report and a webhook receiver."""
