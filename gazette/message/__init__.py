"""Exactly-once messages: UUIDs, framings, Publisher, mappings, Sequencer, read iterators."""
