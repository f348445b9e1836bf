"""``python -m spacy_elmo``: commands in spaCy's CLI style (config file + dotted overrides)."""
from pathlib import Path

import typer
from spacy.cli._util import parse_config_overrides

from .errors import ElmoError
from .options import PRESET_NAMES

app = typer.Typer(name="spacy_elmo", help="ELMo for spaCy: pretrain a biLM, write configs.", no_args_is_help=True)


@app.command("demo")
def demo(
    options_file: str = typer.Option(None, "--options", help="options.json of another ELMo model"),
    weight_file: str = typer.Option(None, "--weights", help="weights .hdf5 of another ELMo model"),
) -> None:
    """Show contextual nearest neighbours separating the senses of "bank" and "play"."""
    from .demo import run

    run(options_file, weight_file)


@app.command("init-config")
def init_config(
    output_file: Path = typer.Argument(..., help="Where to write the config (.cfg); '-' for stdout"),
    preset: str = typer.Option("tiny", "--preset", "-p", help=f"Architecture: one of {', '.join(PRESET_NAMES)}"),
) -> None:
    """Write a complete pretraining config for a preset architecture."""
    from .pretrain.config import default_config

    try:
        config = default_config(preset)
    except ElmoError as err:
        raise typer.BadParameter(str(err)) from None
    if str(output_file) == "-":
        typer.echo(config.to_str())
    else:
        config.to_disk(output_file)
        typer.echo(f"Wrote {output_file} (preset {preset!r}). Train with: python -m spacy_elmo pretrain {output_file} OUTPUT_DIR --paths.train TEXT")


@app.command(
    "pretrain", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def pretrain(
    ctx: typer.Context,
    config_path: Path = typer.Argument(..., help="Pretraining config (see init-config)", exists=True, dir_okay=False),
    output_dir: Path = typer.Argument(..., help="Output directory; an existing run there is resumed"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar"),
) -> None:
    """Pretrain a biLM on raw text (one sentence per line). Extra ``--section.key value`` options override the config.

    Under ``torchrun --nproc_per_node N`` the same command trains with DistributedDataParallel.
    """
    from .pretrain.config import load_config
    from .pretrain.trainer import Trainer

    overrides = parse_config_overrides(ctx.args)
    try:
        config, raw = load_config(config_path, overrides)
    except ElmoError as err:
        typer.echo(f"✘ {err}", err=True)
        raise typer.Exit(1)
    try:
        result = Trainer(config, raw, output_dir).run(progress=not quiet)
    except KeyboardInterrupt:
        typer.echo(f"Interrupted: checkpoint saved in {output_dir}; run the same command to resume.", err=True)
        raise typer.Exit(130)
    typer.echo(f"Done: {result['step']} steps, {result['tokens_seen']:,} tokens; held-out {result['eval']}")
    typer.echo(f"ELMo files: {output_dir / 'options.json'} and {output_dir / 'weights.hdf5'}")
