"""The errors cfkit raises on bad input, each carrying a message that says how to fix it."""


class CfkitError(Exception):
    """Base class: every error cfkit raises on purpose derives from it."""


class DataError(CfkitError, RuntimeError):
    """MNIST could not be found, fetched or verified."""


class CheckpointError(CfkitError, RuntimeError):
    """A checkpoint is missing, corrupt or does not fit its architecture."""


class QualityError(CfkitError, RuntimeError):
    """A freshly trained model missed its quality threshold, so it was not registered in the zoo."""


class OutputError(CfkitError, OSError):
    """An output folder that cannot be created or written to, or a full disk."""


class InputError(CfkitError, ValueError):
    """Images, labels or class ids that the kit cannot work with."""


class ParameterError(CfkitError, TypeError):
    """A notebook parameter of the wrong name, type or value."""


class MissingResultsError(CfkitError, FileNotFoundError):
    """Recorded numbers that a command needs have not been produced yet."""


class NotebookFailedError(CfkitError, RuntimeError):
    """A notebook of a reproduction or sweep raised; the message says where its output is."""


class SweepError(CfkitError, ValueError):
    """A sweep that cannot start (a bad grid or flag) or whose runs did not all succeed."""


class SchedulerError(CfkitError, ConnectionError):
    """The Dask scheduler given with ``--scheduler`` cannot be reached or has no workers."""
