"""Showing the rulebook: a quoted sentence where it stands, so a player can check it.

finding (a quote's place in a page's glyphs or a section's text) -> pages (a PDF page as
an image, the sentence highlighted) and sections (a section as a small HTML page, the
sentence marked) -> views (what a front end asks for, kept in a bounded cache under HOME).
"""
