"""N-best rescoring (`ctxlm rescore`, docs/rescoring.md): `nbest` reads the plain formats and counts word errors;
`rerank` scores hypotheses with a run or a mixture of two and chooses the LM weight and word-insertion penalty."""
