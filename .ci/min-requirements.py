"""Prints pyproject's dependencies pinned to the lower bounds of their ranges, for `make test-min`.

`>=X` (with or without an upper bound) becomes `==X`; exact pins and markers stay as they are; a
dependency without a lower bound is left to pip. Extras named on the command line are added.
Usage: python .ci/min-requirements.py [EXTRA ...] > constraints.txt
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
requirements = list(project["dependencies"])
for extra in sys.argv[1:]:
    requirements += project["optional-dependencies"][extra]
for requirement in requirements:
    spec, sep, marker = requirement.partition(";")
    name = re.match(r"\s*([A-Za-z0-9_.\-\[\]]+)", spec)
    lower = re.search(r">=\s*([^,\s]+)", spec)
    if name is None:
        raise SystemExit(f"cannot read requirement {requirement!r} of pyproject.toml")
    pinned = f"{name.group(1)}=={lower.group(1)}" if lower else spec.strip()
    print(pinned + (f";{marker}" if sep else ""))
