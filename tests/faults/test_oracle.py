"""The fault suite's oracle catches what it must: a journal that loses, moves, tears or invents
records, or a reader that saw bytes the journal does not hold, fails `verify` (no cluster needed)."""

from __future__ import annotations

from faults.workload import ACKED, AMBIGUOUS, FAILED, Attempt, record, verify


def _attempt(seq: int, attempt: int, outcome: str, begin: int = -1, nparts: int = 2) -> Attempt:
    parts = [record("w0", seq, attempt, p, nparts, 20 + p) for p in range(nparts)]
    a = Attempt("w0", seq, attempt, parts, "e", started=float(seq), ended=float(seq) + 0.5, outcome=outcome)
    if outcome == ACKED:
        a.begin, a.end = begin, begin + len(a.content)
    return a


def _journal() -> tuple[bytes, list[Attempt]]:
    first = _attempt(0, 0, ACKED, 0)
    lost = _attempt(1, 0, AMBIGUOUS)  # landed although the writer never learned it
    retry = _attempt(1, 1, ACKED, len(first.content) + len(lost.content))
    refused = _attempt(2, 0, FAILED)
    return first.content + lost.content + retry.content, [first, lost, retry, refused]


def test_a_faithful_journal_passes() -> None:
    content, attempts = _journal()
    verdict = verify(content, attempts, content[:30])
    verdict.assert_ok()
    assert verdict.ambiguous_landed == 1 and verdict.records == 6


def test_lost_moved_torn_and_invented_records_fail() -> None:
    content, attempts = _journal()
    first, lost, retry, refused = attempts
    cases = {
        "acknowledged append missing": content[len(first.content) :],
        "acknowledged append moved": lost.content + first.content + retry.content,
        "torn copy": content[: len(first.content) + len(lost.parts[0])] + retry.content,
        "refused attempt landed": content + refused.content,
        "landed twice": content + retry.content,
        "corrupt byte": content[:5] + b"X" + content[6:],
    }
    for what, bad in cases.items():
        assert verify(bad, attempts).problems, f"verify passed a journal with a {what}"


def test_a_reader_that_saw_other_bytes_fails() -> None:
    content, attempts = _journal()
    assert verify(content, attempts, content[:10] + b"?" + content[11:40]).problems
