"""Pretraining configs: spaCy-style ``.cfg`` files, validated before any work starts."""
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Annotated, Any, Dict, List, Literal, Optional, Tuple, Union

import torch
from confection import Config
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from ..errors import PretrainConfigError
from ..model.encoder import TRAINING_START_KEY
from ..model.options import ElmoOptions, PRESET_NAMES, preset
from ..model.cpu import native_bf16_cpu


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PathsSection(_Section):
    train: Optional[str] = None
    dev: Optional[str] = None


class NlpSection(_Section):
    lang: str = "en"


# The [model] section takes the architecture fields of ElmoOptions, with the same defaults.
ModelSection = create_model(
    "ModelSection",
    __base__=_Section,
    **{
        f.name: (f.type, ... if f.default is MISSING else f.default)
        for f in fields(ElmoOptions)
        if f.name not in ("extra", "n_characters")
    },
)


class CorpusSection(_Section):
    train: Optional[str] = None
    dev: Optional[str] = None
    max_sentence_tokens: PositiveInt = 100
    dev_max_sentences: PositiveInt = 2000
    pretokenized: bool = False  # lines are tokens joined by spaces (scripts/gpu_bundle.py): split, no spaCy needed


class VocabSection(_Section):
    size: PositiveInt = 50000
    max_lines: Optional[PositiveInt] = 1_000_000


class ObjectiveSection(_Section):
    cutoffs: List[PositiveInt] = [2000, 10000]
    div_value: PositiveFloat = 4.0


class InitializeSection(_Section):
    """Where a run's weights start (domain adaptation, paper section 3.4), instead of at random: what ``run`` and
    ``options_file`` + ``weight_file`` each continue, alone and together, is in docs/pretraining.md, "Adapting a
    biLM to your text"."""

    run: Optional[str] = None
    options_file: Optional[str] = None
    weight_file: Optional[str] = None

    @model_validator(mode="after")
    def _both_files(self) -> "InitializeSection":
        if (self.options_file is None) != (self.weight_file is None):
            raise PretrainConfigError("give both options_file and weight_file, or neither")
        return self


class TrainingSection(_Section):
    seed: int = 0
    batch_tokens: PositiveInt = 1280
    max_steps: NonNegativeInt = 100_000
    max_tokens: Optional[PositiveInt] = None  # also stop once this many training tokens are seen (all processes together)
    optimizer: str = "adagrad"
    learn_rate: PositiveFloat = 0.2
    initial_accumulator: NonNegativeFloat = 1.0
    grad_clip: NonNegativeFloat = 10.0  # 0: no clipping
    dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.1
    eval_every: PositiveInt = 1000
    checkpoint_every: PositiveInt = 500
    log_every: PositiveInt = 50
    threads: NonNegativeInt = 1  # torch threads per process; 0 keeps torch's own (one per core), which collapses on a busy machine
    bf16: Union[bool, Literal["auto"]] = "auto"  # "auto": the faster of the two, timed at the start (native bf16 only)

    @field_validator("optimizer")
    @classmethod
    def _known_optimizer(cls, value: str) -> str:
        if value not in ("adagrad", "adam", "sgd"):
            raise PretrainConfigError(f"must be one of adagrad, adam, sgd; found {value!r}")
        return value


class PretrainConfig(_Section):
    paths: PathsSection = PathsSection()
    nlp: NlpSection = NlpSection()
    model: ModelSection  # type: ignore[valid-type]
    corpus: CorpusSection
    vocab: VocabSection = VocabSection()
    objective: ObjectiveSection = ObjectiveSection()
    training: TrainingSection = TrainingSection()
    initialize: InitializeSection = InitializeSection()

    def options(self) -> ElmoOptions:
        """The biLM options the trained model will be written with."""
        data = self.model.model_dump()
        data["filters"] = tuple(tuple(f) for f in data["filters"])
        # Every training sentence starts from the zero state: "auto" picks that start at inference.
        return ElmoOptions(**data, extra={TRAINING_START_KEY: "zeros"})


def default_config(preset_name: str = "tiny") -> Config:
    """A complete config for one of the presets (``tiny``, ``small``, ``medium``, ``original``)."""
    if preset_name not in PRESET_NAMES:
        raise PretrainConfigError(f"Unknown preset {preset_name!r}; choose one of {PRESET_NAMES}")
    options = preset(preset_name)
    model = {name: getattr(options, name) for name in ModelSection.model_fields}
    model["filters"] = [list(f) for f in options.filters]
    defaults = TrainingSection().model_dump()
    if preset_name == "tiny":
        # Trained for well under one epoch of a large corpus: no overfitting to fight, so no dropout.
        defaults["dropout"] = 0.0
    return Config(
        {
            "paths": {"train": None, "dev": None},
            "nlp": NlpSection().model_dump(),
            "model": model,
            "corpus": {**CorpusSection().model_dump(), "train": "${paths.train}", "dev": "${paths.dev}"},
            "vocab": VocabSection().model_dump(),
            "objective": ObjectiveSection().model_dump(),
            "training": defaults,
            "initialize": InitializeSection().model_dump(),
        }
    )


def bf16_support(device: torch.device) -> Tuple[bool, str]:
    """Whether ``device`` multiplies bf16 natively, and why: ``[training] bf16`` (autocast) speeds training up
    there, and slows it down where bf16 is emulated."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        if torch.cuda.get_device_capability(device) >= (8, 0):
            return True, f"this GPU ({name}) has native bf16"
        return False, f"this GPU ({name}) has no native bf16 (it needs compute capability 8.0 or later)"
    capability = torch.backends.cpu.get_cpu_capability()
    if native_bf16_cpu():
        return True, f"this CPU ({capability}) has native bf16 (AVX512_BF16 or AMX)"
    return False, (
        f"this CPU ({capability}) has no native bf16: emulated bf16 is far slower than fp32 (about 100x for the biLM's "
        "inference, BENCHMARKS.md)"
    )


def init_config_text(preset_name: str) -> str:
    """:func:`default_config` as text, with ``[training] bf16`` chosen for the device training would run on here
    (as the trainer picks it: the GPU if there is one), and a comment line above it saying why: ``"auto"`` (the
    trainer times both precisions) where bf16 is native, ``false`` where it would be emulated."""
    config = default_config(preset_name)
    native, why = bf16_support(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    config["training"]["bf16"] = "auto" if native else False
    lines = config.to_str().split("\n")
    # A comment must have a line of its own: confection reads text after a value as part of the value.
    value = 'bf16 = "auto"' if native else "bf16 = false"
    at = lines.index(value, lines.index("[training]"))
    then = "; the run times fp32 and bf16 steps at its start and trains in the faster" if native else ""
    lines.insert(at, f"# init-config set {value}: {why}{then}")
    return "\n".join(lines)


def load_config(
    source: Union[str, Path, Config], overrides: Optional[Dict[str, Any]] = None
) -> Tuple[PretrainConfig, Config]:
    """Read, interpolate and validate a config; returns the typed config and the filled ``Config``."""
    if isinstance(source, Config):
        raw = Config(source).interpolate() if not overrides else Config().from_str(source.to_str(), overrides=overrides)
    else:
        path = Path(source)
        if not path.exists():
            raise PretrainConfigError(f"Config file not found: {path}")
        try:
            raw = Config().from_disk(path, overrides=overrides or {})
        except Exception as err:  # confection raises several kinds for bad syntax or overrides
            raise PretrainConfigError(f"Cannot read config {path}: {err}") from None
    raw = raw.interpolate()
    try:
        typed = PretrainConfig(**raw)
    except ValidationError as err:
        problems = "; ".join(f"[{'.'.join(str(p) for p in e['loc'])}] {e['msg']}" for e in err.errors())
        raise PretrainConfigError(f"Invalid pretraining config: {problems}") from None
    if not typed.corpus.train:
        raise PretrainConfigError("No training data: set [paths] train in the config or pass --paths.train PATH")
    try:
        typed.options()
    except Exception as err:
        raise PretrainConfigError(f"Invalid [model] section: {err}") from None
    return typed, raw
