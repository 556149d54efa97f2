"""Fragments: content-addressed spans of journals, codecs, spools, the index and stores.

Imports gazette.protocol only.
"""
