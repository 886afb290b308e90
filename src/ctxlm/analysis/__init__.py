"""Looking inside the models: attention maps, predictions, per-distance attention."""
