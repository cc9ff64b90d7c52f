"""Reading rulebooks: from a file a player brings to sectioned passages.

corpus (which books there are) -> files (a file flattened to a Document; PDFs through
rag.reading.pdf) -> chunking (sections and passages).
"""
