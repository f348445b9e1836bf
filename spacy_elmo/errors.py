"""Exceptions with messages meant for the user: what is wrong, where, and what to do."""


class ElmoError(Exception):
    """Base class of spacy-elmo's errors."""


class ElmoOptionsError(ElmoError, ValueError):
    """An ``options.json`` file or dict is missing, malformed or describes an unsupported model."""


class ElmoWeightsError(ElmoError, ValueError):
    """A weights ``.hdf5`` file is missing, damaged, or does not match its options."""


class ElmoSettingsError(ElmoError, ValueError):
    """A setting has a value no biLM or component can use; the message names the setting and what it takes."""


class ElmoPipelineError(ElmoError, ValueError):
    """A pipeline or Doc is not set up for the call: a listener without its ``elmo`` component, a Doc without
    ``Doc._.elmo``; the message says what to add."""


class TokenTruncationWarning(UserWarning):
    """A token is longer, in UTF-8 bytes, than the model's character CNN reads; its tail is ignored.

    Said once per model, in one line (by ``spacy train`` before its table). Silence it with
    ``warnings.simplefilter("ignore", spacy_elmo.TokenTruncationWarning)``.
    """


class ElmoThreadsWarning(UserWarning):
    """A biLM runs under another torch thread count than its ``threads`` setting, or its setting replaced a count set
    outside spacy-elmo: torch has one count per process (docs/limits.md, "Threads")."""


class ElmoListenerWarning(UserWarning):
    """An ELMo listener got Docs that no ``elmo`` component ran on, and read zeros for them."""


class EmbedError(ElmoError, ValueError):
    """Bad input, settings or output file for bulk embedding; the message says what to change."""


class PlotError(ElmoError, ValueError):
    """Nothing to plot, a bad log, or no matplotlib; the message says what to do."""


class ManyLangsError(ElmoError):
    """An ELMoForManyLangs folder is incomplete or not of a kind this converter reads."""


class VocabularyError(ElmoError, ValueError):
    """A pretraining vocabulary does not start with the special tokens, as pretraining writes it."""


class PretrainConfigError(ElmoError, ValueError):
    """A pretraining config has an unknown key, a missing value or a value of the wrong kind."""


class StreamStateError(ElmoError, ValueError):
    """A checkpoint's data position does not belong to this stream."""


class CorpusError(ElmoError, ValueError):
    """The training text cannot feed a run: no text, or fewer lines than processes."""


class ResumeError(ElmoError, ValueError):
    """A run would resume from a checkpoint made with other settings."""


class PeerLostError(ElmoError):
    """A process of a distributed pretraining run stopped answering: killed, or its machine lost."""


class InitializeError(ElmoError, ValueError):
    """The biLM a run should start from is missing or has another architecture."""


class UnknownModelError(ElmoError):
    """A model name that is not in the catalogue."""


class NotDownloadedError(ElmoError):
    """A model name was used before ``python -m spacy_elmo download NAME``."""


class DownloadError(ElmoError):
    """A model could not be fetched or verified; the message says what to do."""
