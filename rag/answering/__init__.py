"""Answering: from retrieved passages to the shown answer, one module per stage.

In the order a question flows through them (rag.answering.answerer runs them):
candidates -> quotes -> selection -> conclusion (with rewording of the question) -> checks
-> assembly.
"""
