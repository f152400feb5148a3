"""The errors a user can fix, each with a message that says how: the CLI prints them as one paragraph without a
traceback, and a chapter's cell as one line (``profiles.one_line_errors``).

This module imports nothing of the package, so that any module may raise them.
"""


class UserError(RuntimeError):
    """A problem the user can fix (a profile, a parameter, a results store, a cluster address, a command line)."""


class ProfileError(UserError):
    """An unknown profile, chapter or parameter, or a parameter value its chapter does not allow."""


class ModelTooLargeError(RuntimeError):
    """The model's weights would not fit in the memory of the requested device (raised by ``models.registry``)."""
