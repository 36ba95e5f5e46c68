"""The mutation report's sorting of survivors: message-only mutants (by data flow) and listed
equivalents."""

from __future__ import annotations

from tests.mutation.classify import (
    Equivalent,
    changed_lines,
    find_equivalent,
    is_message_only,
    messages_of,
    misfits,
    project_messages,
)

ERRORS = """
import logging

_log = logging.getLogger("m")


class Failure(Exception):
    def __init__(self, message):
        super().__init__(message)
        self.message = message


class InvalidInput(Failure):
    def __init__(self, field, problem):
        super().__init__(f"{field}: {problem}")
        self.field = field


class Stale(Failure):
    def __init__(self, run_id, current):
        super().__init__(f"run {run_id} is on attempt {current}")
        self.current = current


def answer(exc):
    return {"error": exc.message, "producer_attempt": exc.current}
"""
MESSAGES = messages_of([ERRORS])

RAISING = """
def check(field, value):
    if value > 3:
        raise InvalidInput(field, f"must be at most {3}")
    problem = "too small"
    if value < 0:
        raise InvalidInput(field, problem)
    return {"key": value}
"""


def message_only(original: str, old: str, new: str) -> bool:
    assert old in original
    return is_message_only(original, original.replace(old, new), MESSAGES)


def test_a_value_that_reaches_only_an_exceptions_text_is_message_only() -> None:
    """Rewording an error (in the raise, or through a variable read only there) changes no behaviour
    a caller can branch on: the class passes it only into its text."""
    assert message_only(RAISING, "must be at most", "XXmust be at mostXX")
    assert message_only(RAISING, '"too small"', '"TOO SMALL"')
    # The field is kept in an attribute no code reads: text too.
    assert message_only(RAISING, "raise InvalidInput(field, problem)", "raise InvalidInput(None, problem)")


def test_a_changed_key_condition_or_exception_is_not_message_only() -> None:
    """A string that is data (a dict key), a condition, which exception is raised, and whether."""
    assert not message_only(RAISING, '"key"', '"XXkeyXX"')
    assert not message_only(RAISING, "value > 3", "value >= 3")
    assert not message_only(RAISING, "raise InvalidInput(field, problem)", "pass")
    assert not message_only(RAISING, "InvalidInput(field, problem)", "ValueError(field, problem)")
    assert not is_message_only(RAISING, RAISING, MESSAGES)


FOLD = """
def fold(self, events):
    for event in events:
        problem = junk_reason(event)
        if problem is not None:
            _log.warning("junk line: %s", problem)
            continue
        self.apply(event)
"""


def test_a_variable_named_like_a_message_that_decides_something_is_behaviour() -> None:
    """`problem = junk_reason(event)` decides whether a line is folded: its name says nothing."""
    assert not message_only(FOLD, "problem = junk_reason(event)", "problem = None")
    # What the warning says about it is text.
    assert message_only(FOLD, '"junk line: %s"', '"XXjunk line: %sXX"')
    assert message_only(FOLD, '"junk line: %s", problem)', '"junk line: %s", None)')


STALE = """
def check_attempt(run_id, uploaded, current):
    if uploaded < current:
        raise StaleAttempt(run_id, uploaded, current)
"""


def test_an_exception_argument_kept_for_an_answer_is_behaviour() -> None:
    """The service answers a stale attempt with 409 and the run's current attempt
    (`producer_attempt`, read from the exception): that argument is behaviour, not text."""
    project = project_messages()
    stale = project.exception("StaleAttempt")
    assert stale is not None and "current" not in stale.message and "message" in stale.message
    mutant = STALE.replace("StaleAttempt(run_id, uploaded, current)", "StaleAttempt(run_id, uploaded, None)")
    assert not is_message_only(STALE, mutant, project)
    # The same shape where the class only words it into its text.
    worded = STALE.replace("StaleAttempt(run_id, uploaded, current)", "InvalidInput(run_id, current)")
    assert message_only(worded, "InvalidInput(run_id, current)", "InvalidInput(run_id, None)")
    kept = STALE.replace("StaleAttempt(run_id, uploaded, current)", "Stale(run_id, current)")
    assert not message_only(kept, "Stale(run_id, current)", "Stale(run_id, None)")


def test_an_equivalent_is_found_by_its_function_and_changed_lines_not_its_number() -> None:
    """A listed equivalent matches the same change in the same function wherever the function moved."""
    mutant = RAISING.replace("value < 0", "value < 1")
    before, after = changed_lines(RAISING, mutant)
    assert (before, after) == ("if value < 0:", "if value < 1:")
    entry = Equivalent("m.py", "check", before, after, "reason")
    assert find_equivalent([entry], "m.py", "check", "\n\n" + RAISING, "\n\n" + mutant) is entry
    assert find_equivalent([entry], "m.py", "other", RAISING, mutant) is None
    assert (
        find_equivalent([entry], "m.py", "check", RAISING, RAISING.replace("value > 3", "value > 4")) is None
    )


LOGGING = """
def stop(self, exc):
    _log.warning("run %s: stops: %s", self.run_id, exc)
    raise Failure(f"run {self.run_id!r} was stopped")
"""


def test_any_argument_of_a_log_line_is_message_only_but_not_whether_or_how_it_is_logged() -> None:
    """What a log line or an error says (its text or the values it shows) is not behaviour; which
    exception is raised, or at which level a line is logged, is."""
    assert message_only(LOGGING, "self.run_id, exc", "None, exc")
    assert message_only(LOGGING, "self.run_id, exc)", ")")  # an argument dropped: logging copes
    assert message_only(LOGGING, 'f"run {self.run_id!r} was stopped"', "None")
    assert not message_only(LOGGING, "Failure(", "ValueError(")
    assert not message_only(LOGGING, "_log.warning", "_log.debug")
    # Only a name bound to a logger is one: `log` is not, in this module.
    other = LOGGING.replace("_log.warning", "log.warning")
    assert not message_only(other, "self.run_id, exc", "None, exc")


def test_an_entry_matching_nothing_or_more_than_it_names_is_a_misfit() -> None:
    """An entry fits only when it matches as many survivors as it says (one by default): one that
    matches nothing is stale, one that matches more covers lines it does not name."""
    one = Equivalent("m.py", "check", "a", "b", "reason")
    two = Equivalent("m.py", "check", "c", "d", "the same change on two identical lines", matches=2)
    other = Equivalent("n.py", "f", "a", "b", "not in this run")
    entries = [one, two, other]
    assert misfits(entries, {0: 1, 1: 2}, ["m.py"]) == []
    assert len(misfits(entries, {0: 2, 1: 2}, ["m.py"])) == 1
    assert len(misfits(entries, {1: 2}, ["m.py"])) == 1
    assert len(misfits(entries, {0: 1, 1: 1}, ["m.py"])) == 1
    assert len(misfits(entries, {0: 1, 1: 2}, ["m.py", "n.py"])) == 1


def test_a_function_that_only_builds_an_exception_passes_its_message_through() -> None:
    """`bad_request(message)` returns `BadRequest(message)`: its argument is the error's text, as if
    the exception were built in place; a factory that keeps an argument elsewhere does not."""
    factories = messages_of(
        [
            ERRORS
            + '''
def bad_request(message):
    """A 400."""
    return Failure(message)


def stale(run_id, current):
    return Stale(run_id, current)
'''
        ]
    )
    source = 'def f(x):\n    if x:\n        raise bad_request("body: too deep")\n    raise stale("r", x)\n'
    assert is_message_only(source, source.replace('"body: too deep"', '"XX"'), factories)
    assert not is_message_only(source, source.replace('stale("r", x)', 'stale("r", None)'), factories)
