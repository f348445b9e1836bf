"""Exceptions with messages meant for the user: what is wrong, where, and what to do."""


class ElmoError(Exception):
    """Base class of spacy-elmo's errors."""


class ElmoOptionsError(ElmoError, ValueError):
    """An ``options.json`` file or dict is missing, malformed or describes an unsupported model."""


class ElmoWeightsError(ElmoError, ValueError):
    """A weights ``.hdf5`` file is missing, damaged, or does not match its options."""


class TokenTruncationWarning(UserWarning):
    """A token is longer, in UTF-8 bytes, than the model's character CNN reads; its tail is ignored.

    Shown once per model. Silence it with
    ``warnings.simplefilter("ignore", spacy_elmo.TokenTruncationWarning)``.
    """
