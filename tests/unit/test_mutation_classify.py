"""The mutation report's sorting of survivors: message-only mutants and listed equivalents."""

from __future__ import annotations

from tests.mutation.classify import Equivalent, changed_lines, find_equivalent, is_message_only

RAISING = """
def check(field, value):
    if value > 3:
        raise InvalidInput(field, f"must be at most {3}")
    problem = "too small"
    if value < 0:
        raise InvalidInput(field, problem)
    return {"key": value}
"""


def test_a_changed_string_inside_a_raise_or_a_message_variable_is_message_only() -> None:
    """Rewording the text of an error (in the raise, or the variable it raises) changes no behaviour
    a caller can branch on."""
    assert is_message_only(RAISING, RAISING.replace("must be at most", "XXmust be at mostXX"))
    assert is_message_only(RAISING, RAISING.replace('"too small"', '"TOO SMALL"'))


def test_a_changed_key_or_condition_is_not_message_only() -> None:
    """A string that is data (a dict key) or any change besides a string is behaviour."""
    assert not is_message_only(RAISING, RAISING.replace('"key"', '"XXkeyXX"'))
    assert not is_message_only(RAISING, RAISING.replace("value > 3", "value >= 3"))
    assert not is_message_only(RAISING, RAISING.replace("raise InvalidInput(field, problem)", "pass"))
    assert not is_message_only(RAISING, RAISING)


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
    log.warning("run %s: stops: %s", self.run_id, exc)
    raise StaleAttemptError(f"run {self.run_id!r} was stopped")
"""


def test_any_argument_of_a_log_line_or_an_exception_being_built_is_message_only() -> None:
    """What a log line or an error says (its text or the values it shows) is not behaviour; which
    exception is raised, or whether a line is logged, is."""
    assert is_message_only(LOGGING, LOGGING.replace("self.run_id, exc", "None, exc"))
    assert is_message_only(LOGGING, LOGGING.replace('f"run {self.run_id!r} was stopped"', "None"))
    assert not is_message_only(LOGGING, LOGGING.replace("StaleAttemptError(", "ValueError("))
    assert not is_message_only(LOGGING, LOGGING.replace("log.warning", "log.debug"))
    private = LOGGING.replace("log.warning", "_log.warning")
    assert is_message_only(private, private.replace("self.run_id, exc", "None, exc"))
    assert not is_message_only(private, private.replace("_log.warning", "_log.debug"))
