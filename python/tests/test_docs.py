"""The examples in the package's docstrings run as written."""

import doctest

import pytest

import tailguard
from tailguard import _clock, _emitter, _native


@pytest.mark.parametrize(
    "obj",
    [_native.Breaker, _native.Registry, _clock.ManualClock, _emitter.Emitter],
    ids=lambda o: o.__name__,
)
def test_docstring_examples(obj):
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = finder.find(obj, obj.__name__, globs={"tailguard": tailguard})
    examples = sum(len(t.examples) for t in tests)
    assert examples > 0, f"{obj.__name__} has no example"
    for t in tests:
        runner.run(t)
    assert runner.failures == 0


def test_every_public_name_has_a_docstring():
    for name in tailguard.__all__:
        obj = getattr(tailguard, name)
        assert (obj.__doc__ or "").strip(), f"tailguard.{name} has no docstring"
