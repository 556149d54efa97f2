"""gazette-py benchmarks: figures of the broker and their ratio to limits measured in the same run.

`python -m bench` (or `make bench`) runs the full set, `python -m bench --quick` a shorter one;
see bench/README.md for what each figure means.
"""

# First, before anything loads grpc: gazette sets grpc's environment (no fork handlers, quiet logs).
import gazette  # noqa: F401
