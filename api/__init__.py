"""The HTTP API: a thin FastAPI front end over `rag.pipeline.Pipeline` (see `api.app`)."""
