"""Searching: passages embedded into an index, and the hybrid search over it.

embedding (the embedder; openai_embedding, a server as one) -> index (vectors on disk) ->
lexical and retrieval (dense and keyword search fused) -> reranking (optional cross-check by
the LLM).
"""
