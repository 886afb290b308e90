"""`ctxlm explore`: a local web page that shows what runs predict, token by token (docs/explore.md)."""
