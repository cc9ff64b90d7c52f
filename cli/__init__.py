"""The `rules` command line: a thin front end over rag.pipeline.Pipeline."""
