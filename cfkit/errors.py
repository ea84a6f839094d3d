"""The errors cfkit raises on bad input, each carrying a message that says how to fix it."""


class CfkitError(Exception):
    """Base class: every error cfkit raises on purpose derives from it."""


class DataError(CfkitError, RuntimeError):
    """MNIST could not be found, fetched or verified."""


class CheckpointError(CfkitError, RuntimeError):
    """A checkpoint is missing, corrupt or does not fit its architecture."""


class QualityError(CfkitError, RuntimeError):
    """A freshly trained model missed its quality threshold, so it was not registered in the zoo."""


class InputError(CfkitError, ValueError):
    """Images, labels or class ids that the kit cannot work with."""


class ParameterError(CfkitError, TypeError):
    """A notebook parameter of the wrong name or type."""


class MissingResultsError(CfkitError, FileNotFoundError):
    """Recorded numbers that a command needs have not been produced yet."""
