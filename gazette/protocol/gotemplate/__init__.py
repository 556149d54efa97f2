"""A subset of Go's text/template, evaluated as Go evaluates it: parse a template, then execute it on
data described with gotemplate.values (Go's types, fields and methods).

The syntax: literal text and actions `{{ pipeline }}`, with `{{-` / `-}}` trimming the white space
before / after an action, and comments `{{/* ... */}}`. A pipeline is commands joined by `|` (the
value of each is passed as the last argument of the next); a command is a field chain (`.A.B`, `$.A`,
`(pipeline).A`, whose last element may be a method taking the command's arguments), a constant
("string", `raw string`, an integer, true/false) or a call of one of the functions printf, print,
println, len, index, and, or, not. Values print as Go's fmt prints them: integers in decimal, names
of enums (time.Month, time.Weekday, ...), a time as Go's Time.String(); printing a struct or a slice
of structs is refused (Go would print braces, which no path can hold). printf supports the verbs %v
%d %s %x %X %o %b %t %% with the flags - + # 0 and space, widths and precisions (not %#v, `*`
widths, %[n] indexes, or zero padding of strings). Outside the subset, and refused: control actions
(if, range, with, define, template, block, else, end), variables other than `$`, the other Go
functions (eq, lt, slice, html, js, urlquery, call, ...), character and floating-point constants.
Like Go, a pipeline may end in a dangling "|", and of several syntax errors the first in the text is
reported.

Everything Go's text/template would reject on the data (bad syntax, an unclosed action, an unknown
field or function, a method given the wrong arguments) and everything outside the subset raises a
TemplateError carrying the character offset it is about. The modules: errors, timefmt (time.Format's
layouts), values, fmt, lex, parse, execute.
"""

from gazette.protocol.gotemplate.errors import CallError, TemplateError
from gazette.protocol.gotemplate.execute import execute
from gazette.protocol.gotemplate.lex import TextCheck
from gazette.protocol.gotemplate.parse import Template, parse

__all__ = ["CallError", "Template", "TemplateError", "TextCheck", "execute", "parse"]
