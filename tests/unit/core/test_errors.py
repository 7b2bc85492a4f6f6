"""autosync's own errors share one base class, and keep the exit codes the command line documents."""

from __future__ import annotations

import pytest

from autosync.core.errors import (AutosyncError, FileProblems, Interrupted, JobFileError, RuntimeFailure,
                                  SpaceFileError, UserError)


@pytest.mark.parametrize("error, code", [(UserError("x"), 2), (JobFileError("job.yaml", ["bad"]), 2),
                                         (SpaceFileError("s.yaml", ["bad"]), 2), (RuntimeFailure("x"), 1),
                                         (Interrupted("x"), 130)])
def test_every_error_of_autosync_is_one_base_class_with_its_exit_code(error, code):
    assert isinstance(error, AutosyncError) and error.exit_code == code


def test_a_user_error_is_still_a_value_error():
    assert issubclass(UserError, ValueError) and issubclass(FileProblems, ValueError)
