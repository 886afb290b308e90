"""ctxlm in lm-evaluation-harness (docs/harness.md): `model` holds the harness's model class (it needs lm-eval,
and registers the model `ctxlm` when imported); `tasks` writes a LAMBADA file as a local harness task."""
