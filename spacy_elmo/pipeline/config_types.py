"""Types of the registered functions' settings, so that spaCy's config validation refuses a bad value as a config
error naming the setting (``spacy debug config``, ``spacy train``, ``nlp.add_pipe``), before anything is built.

confection, spaCy 3.8's config system, checks each setting against its annotation. For a class of its own kind it
runs the class's ``__get_validators__`` (pydantic v1's protocol) and, when one raises a ValueError, reports
``<setting>  at root: <value> is not <the class>``: the classes here print as what the setting accepts. pydantic
v1's constraints (``conint``, ``Field(ge=...)``) are not read by confection's checker, so they would let any
number through. The same checks run when a component or architecture is built from Python, where they raise
:class:`ElmoSettingsError`; the model checks read no file.
"""
from typing import Any, Callable, Iterator

from confection import ConfigValidationError

from ..errors import ElmoError, ElmoSettingsError
from ..model.encoder import INITIAL_STATES, check_initial_state
from ..model.fixed_mix import check_mix_spec
from ..model.precision import PRECISIONS, check_precision_name
from ..model.token_cache import check_cache_size
from ..sources.resolve import check_downloaded, check_model_source
from ..util.numbers import is_number
from ..runtime.settings import check_threads, check_token_count, check_wait_ms

DOWNLOAD_HINT = (
    "get one with python -m spacy_elmo download NAME, or from files fetched by hand with python -m spacy_elmo "
    "download NAME --from PATH; the names: python -m spacy_elmo list"
)


class SettingType(type):
    """The metaclass of the setting types: ``check`` refuses a value with an ElmoError, and the type prints as
    ``accepts``, which is what confection's config errors show."""

    accepts: str
    check: Callable[[Any], Any]

    def __repr__(cls) -> str:
        return cls.accepts

    def __get_validators__(cls) -> Iterator[Callable[[Any], Any]]:
        yield cls.validate

    def validate(cls, value: Any) -> Any:
        """``value`` if the setting takes it; else a ValueError, the validators' protocol, with the check's message."""
        try:
            cls.check(value)
        except ElmoError as err:
            raise ValueError(str(err)) from None
        return value


class ElmoConfigError(ElmoSettingsError, ConfigValidationError):
    """A setting that does not fit what it meets at ``initialize``: a listener's ``upstream`` that no ``elmo``
    component answers, a ``mix`` with another number of weights than the biLM has layers.

    A ConfigValidationError too, which spaCy's commands (``spacy train``, ``spacy init pipeline``...) print as a
    config error, with no traceback; the title is the whole message, so that they print one line.
    """

    def __str__(self) -> str:
        return self.title or super().__str__()


def config_error(message: str) -> ElmoConfigError:
    """The :class:`ElmoConfigError` whose one line is ``message``."""
    return ElmoConfigError(title=message, show_config=False)


def check_config_setting(key: str, check: Callable[..., Any], *args: Any) -> None:
    """``check(*args)``; the ElmoError it raises becomes an :class:`ElmoConfigError` naming the config's ``key``
    (``components.elmo.mix``)."""
    try:
        check(*args)
    except ElmoError as err:
        raise config_error(f"{key}: {err}") from None


def setting_type(name: str, accepts: str, check: Callable[[Any], Any]) -> type:
    """A setting type called ``name`` that takes the values ``check`` passes, described by ``accepts``."""
    return SettingType(name, (), {"accepts": accepts, "check": staticmethod(check)})


def check_cache_mb(value: Any, name: str = "train_cache_mb") -> None:
    """Refuse a store of layers (``name``) whose size is not a number of megabytes >= 0."""
    if not (is_number(value) and value >= 0):
        raise ElmoSettingsError(f"{name} must be >= 0 (0 keeps no layers), found {value!r}")


def check_dropout(value: Any) -> None:
    """Refuse a dropout rate outside [0, 1)."""
    if not (is_number(value) and 0.0 <= value < 1.0):
        raise ElmoSettingsError(f"dropout must be in [0, 1), found {value!r}")


def check_l2(value: Any) -> None:
    """Refuse a negative L2 penalty."""
    if not (is_number(value) and value >= 0):
        raise ElmoSettingsError(f"l2 must be >= 0, found {value!r}")


InitialState = setting_type("InitialState", f"one of {', '.join(INITIAL_STATES)}", check_initial_state)
Precision = setting_type("Precision", f"one of {', '.join(PRECISIONS)}", check_precision_name)
TokenCount = setting_type("TokenCount", "a number of tokens >= 1", check_token_count)
CacheSize = setting_type("CacheSize", "a number of token vectors >= 0 (0: no token cache)", check_cache_size)
CacheMegabytes = setting_type("CacheMegabytes", "a number of megabytes >= 0 (0: no layer cache)", check_cache_mb)
Threads = setting_type("Threads", "a number of threads >= 1 (null: torch's own setting)", check_threads)
WaitMilliseconds = setting_type("WaitMilliseconds", "a number of milliseconds >= 0", check_wait_ms)
Mix = setting_type("Mix", "'top', 'average' or a list of one weight per layer", check_mix_spec)
DropoutRate = setting_type("DropoutRate", "a rate in [0, 1)", check_dropout)
Penalty = setting_type("Penalty", "a number >= 0", check_l2)
ModelSource = setting_type(
    "ModelSource", f"an options.json file, or the name of a downloaded published model ({DOWNLOAD_HINT})", check_model_source
)
ModelName = setting_type("ModelName", f"the name of a downloaded published model ({DOWNLOAD_HINT})", check_downloaded)
