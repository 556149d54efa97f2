"""The errors of this template evaluator: where a template fails and why.

A TemplateError carries the character offset in the template that it is about, so the caller can
report it in its own terms; a CallError is raised inside a method or function (what Go reports as an
error result or a panic) and the executor turns it into a TemplateError at the call.
"""

# The phrase of every refusal of something Go's text/template has but this evaluator leaves out.
SUBSET = "outside the subset of Go templates this broker supports"


class TemplateError(Exception):
    """A problem at a character offset of the template."""

    def __init__(self, pos: int, rule: str) -> None:
        super().__init__(rule)
        self.pos = pos
        self.rule = rule


class CallError(Exception):
    """A failure inside a method or function (Go: an error result or a panic)."""
