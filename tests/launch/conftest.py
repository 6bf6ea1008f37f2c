"""Fixtures of the run observer's tests: the scripted backend and the virtual clock of the profiling tests."""

from tests.profile.conftest import backend, vclock  # noqa: F401 - re-used as fixtures here
