"""Kept so tests written against it keep working: new tests import `wait_for` from gazette.testing,
the one bounded wait (its bound is `timeout`, formerly `deadline_s`)."""

from gazette.testing import wait_for

__all__ = ["wait_for"]
