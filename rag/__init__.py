"""Rulekeeper core: the retrieval-augmented rules-answering pipeline."""
