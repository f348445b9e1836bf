"""``python -m spacy_elmo``: commands in spaCy's CLI style (config file + dotted overrides)."""
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import typer

from .checks import check_input_file, check_input_path, check_model_paths, check_output_path
from ..errors import ElmoError, ElmoSettingsError, PlotError, PretrainConfigError
from ..util.interrupts import sigterm_as_interrupt
from ..model.options import PRESET_NAMES

# The defaults of embed's options that set the biLM: BiLmSettings' (tests/commands/test_cli.py checks them), which
# an option left out (None) keeps. Written here, as --help shows them, so that the command line starts without torch.
BILM_DEFAULTS = {"--lang": "en", "--max-tokens": 256, "--initial-state": "auto", "--precision": "fp32"}


def bilm_help(option: str, text: str) -> str:
    """``text`` with the default of the biLM setting ``option`` sets, shown as click shows an option's default (its
    own default, None, would show nothing)."""
    return f"{text}  [default: {BILM_DEFAULTS[option]}]"

app = typer.Typer(name="spacy_elmo", help="ELMo for spaCy: pretrain a biLM, write configs, embed a corpus, plot what was learned.", no_args_is_help=True, rich_markup_mode=None)


def _show_version(value: bool) -> None:
    if value:
        from ..about import __version__

        typer.echo(f"spacy-elmo {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True, help="Print the version and exit"),
) -> None:
    pass


@contextmanager
def user_errors() -> Iterator[None]:
    """A spacy-elmo error in the block becomes its one-line message and exit status 1: no traceback for a
    user's mistake."""
    try:
        yield
    except ElmoError as err:
        typer.echo(f"✘ {err}", err=True)
        raise typer.Exit(1)


@app.command("demo")
def demo(
    options_file: str = typer.Option(None, "--options", help="options.json of another ELMo model"),
    weight_file: str = typer.Option(None, "--weights", help="weights .hdf5 of another ELMo model"),
) -> None:
    """Show contextual nearest neighbours separating the senses of "bank" and "play"."""
    with user_errors():
        check_model_paths(options_file, weight_file)
        from .demo import run

        run(options_file, weight_file)


@app.command("download")
def download(
    name: str = typer.Argument(..., help="Model name, e.g. small, original, manylangs-de (see: list)"),
    local: Optional[List[Path]] = typer.Option(
        None, "--from", help="Files fetched by hand, instead of downloading: a folder holding the options .json and "
        "weights .hdf5, or each of the two (--from twice); for manylangs-*, the .zip or the folder it unpacks to",
    ),
    force: bool = typer.Option(False, "--force", help="Download again even if the model is already there"),
    timeout: float = typer.Option(30.0, "--timeout", help="Seconds to wait for the server before giving up"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar"),
) -> None:
    """Download a published ELMo model into the cache ($SPACY_ELMO_CACHE or ~/.cache/spacy-elmo) and verify it.

    With --from, files fetched by hand elsewhere are verified (and converted) in the same way, without network.
    """
    from ..sources.download import download as fetch_model

    with user_errors():
        options, weights = fetch_model(
            name, timeout=timeout, progress=not quiet, force=force, log=typer.echo, local=local or ()
        )
    typer.echo(f"✔ {name}: {options} and {weights}")


@app.command("list")
def list_models(
    match: Optional[str] = typer.Argument(None, help="Only models whose name contains this, or of this language (e.g. de)"),
    only_downloaded: bool = typer.Option(False, "--downloaded", help="Only the published models already downloaded"),
) -> None:
    """List the cache folder, the embedded models, and the published models download knows (* marks those
    downloaded), each with its size, training data, URL, licence and citation."""
    from ..sources.catalog import CATALOG
    from ..sources.resolve import EMBEDDED_MODELS, embedded_model_size
    from ..sources.download import cache_dir, downloaded
    from ..model.cpu import suggested_precision

    def wanted(name: str, language: str) -> bool:
        return match is None or match.lower() in name.lower() or match.lower() == language.lower()

    present = downloaded()
    embedded: Dict[str, str] = {
        name: lang for lang, name in EMBEDDED_MODELS.items() if wanted(name, lang) and not only_downloaded
    }
    published = [
        e for e in CATALOG.values() if wanted(e.name, e.language) and (e.name in present or not only_downloaded)
    ]
    if not embedded and not published and not only_downloaded:
        typer.echo(f"✘ No model matches {match!r}. See: python -m spacy_elmo list", err=True)
        raise typer.Exit(1)
    typer.echo(f"Cache: {cache_dir()}")
    precision, why = suggested_precision()
    typer.echo(f"Precision for this machine: {precision!r} ({why})")
    if embedded:
        typer.echo("Embedded in the package (no download; used for their language when no model is given):")
    for name, lang in embedded.items():
        folder, size = embedded_model_size(name)
        typer.echo(f"  {name:18} {lang}  {size}, in {folder}")
    if published:
        typer.echo("Published (python -m spacy_elmo download NAME):")
    elif only_downloaded:
        which = "" if match is None else f" matching {match!r}"
        typer.echo(f"No published model{which} is downloaded yet (python -m spacy_elmo download NAME).")
    citations = list(dict.fromkeys(entry.citation for entry in published))
    for entry in published:
        mark = "*" if entry.name in present else " "
        typer.echo(
            f"{mark} {entry.name:16} {entry.description}\n    size: {entry.size}\n    data: {entry.training_data}\n"
            f"    url: {'  '.join(entry.urls.values())}\n    licence: {entry.license}\n"
            f"    cite: [{citations.index(entry.citation) + 1}]"
        )
    if citations:
        typer.echo("Citations:")
    for number, citation in enumerate(citations, start=1):
        typer.echo(f"[{number}] {citation}")


@app.command("init-config")
def init_config(
    output_file: Path = typer.Argument(..., help="Where to write the config (.cfg); '-' for stdout"),
    preset: str = typer.Option("tiny", "--preset", "-p", help=f"Architecture: one of {', '.join(PRESET_NAMES)}"),
) -> None:
    """Write a complete pretraining config for a preset architecture, with bf16 on where this machine has native bf16."""
    to_stdout = str(output_file) == "-"
    if not to_stdout:
        with user_errors():
            check_output_path(output_file, "Config file", PretrainConfigError)
    from ..pretrain.config import init_config_text

    try:
        text = init_config_text(preset)
    except ElmoError as err:
        raise typer.BadParameter(str(err)) from None
    if to_stdout:
        typer.echo(text)
    else:
        output_file.parent.mkdir(parents=True, exist_ok=True)
        output_file.write_text(text, encoding="utf-8")
        typer.echo(f"Wrote {output_file} (preset {preset!r}). Train with: python -m spacy_elmo pretrain {output_file} OUTPUT_DIR --paths.train TEXT")


@app.command(
    "pretrain", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def pretrain(
    ctx: typer.Context,
    config_path: Path = typer.Argument(..., help="Pretraining config (see init-config)"),
    output_dir: Path = typer.Argument(..., help="Output directory; an existing run there is resumed"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar"),
) -> None:
    """Pretrain a biLM on raw text (one sentence per line). Extra ``--section.key value`` options override the config.

    Under ``torchrun --nproc_per_node N`` the same command trains with DistributedDataParallel.
    """
    with user_errors():
        check_input_file(config_path, "Pretraining config", PretrainConfigError, "write one with: python -m spacy_elmo init-config pretrain.cfg")
        check_output_path(output_dir, "Output directory", PretrainConfigError, folder=True)
    # Private (spacy.cli._util): spaCy 3.8 has no public parser of its `--section.key value` overrides, and
    # pretrain takes them as spaCy's commands do. If it moves or changes, parsing fails:
    # tests/test_spacy_private_apis.py pins what pretrain relies on.
    from spacy.cli._util import parse_config_overrides

    from ..pretrain.config import load_config
    from ..pretrain.trainer import Trainer

    overrides = parse_config_overrides(ctx.args, env_var=None)  # spaCy's SPACY_CONFIG_OVERRIDES are for its training configs
    with user_errors():
        config, raw = load_config(config_path, overrides)
    rank, world = 0, 1
    try:
        with user_errors(), Trainer(config, raw, output_dir) as trainer:  # torchrun: leaving it ends the process group
            rank, world = trainer.rank, trainer.world
            if rank == 0:
                typer.echo(f"Training in {trainer.precision} on {trainer.device} ({trainer.precision_reason})")
            result = trainer.run(progress=not quiet)
    except KeyboardInterrupt:
        saved = "checkpoint saved" if rank == 0 else "rank 0 saved the checkpoint (on its machine)"
        again = "the same command on every machine" if world > 1 else "the same command"
        typer.echo(f"Interrupted: {saved} in {output_dir}; run {again} to resume.", err=True)
        raise typer.Exit(130)
    if rank > 0:  # rank 0 evaluates and writes the files, on its own disk
        typer.echo(f"Rank {rank} of {world} done: {result['step']} steps; rank 0 reports the run and writes its files")
        return
    typer.echo(f"Done: {result['step']} steps, {result['tokens_seen']:,} tokens; {_held_out(result['eval'])}")
    typer.echo(f"ELMo files: {output_dir / 'options.json'} and {output_dir / 'weights.hdf5'}")


def _held_out(scores: Optional[Dict[str, float]]) -> str:
    """``{"forward_ppl": 516.51, ...}`` → ``held-out perplexity: forward 516.5, backward 520.1 (average 518.3)``."""
    if scores is None:
        return "no held-out perplexity (give held-out text with --paths.dev)"
    return (
        f"held-out perplexity: forward {scores['forward_ppl']:.1f}, backward {scores['backward_ppl']:.1f} "
        f"(average {scores['average_ppl']:.1f})"
    )


@app.command("embed")
def embed(
    input_file: Path = typer.Argument(..., help="Text (one sentence or document per line) or JSONL (--jsonl)"),
    output_file: str = typer.Argument(..., help="HDF5 file to write; {shard} in it becomes the shard index"),
    jsonl: bool = typer.Option(False, "--jsonl", help='Input lines are JSON objects with "text" or "tokens"'),
    lang: Optional[str] = typer.Option(None, "--lang", help=bilm_help("--lang", "spaCy language whose tokenizer splits the text; without --options/--weights, also picks the embedded model (en, zh)")),
    whitespace: bool = typer.Option(False, "--whitespace", help="Split text on whitespace instead of spaCy's tokenizer"),
    layers: str = typer.Option("all", "--layers", help="all | top | average | mix"),
    mix_weights: Optional[str] = typer.Option(None, "--mix-weights", help="For --layers mix: one weight per layer, e.g. 0.2,0.5,0.3"),
    gamma: float = typer.Option(1.0, "--gamma", help="For --layers mix: scale of the mixed vectors"),
    options_file: str = typer.Option(None, "--options", help="options.json of another ELMo model"),
    weight_file: str = typer.Option(None, "--weights", help="weights .hdf5 of another ELMo model"),
    model: Optional[str] = typer.Option(None, "--model", help="Name of a downloaded model instead of --options/--weights (see: list)"),
    batch_size: int = typer.Option(32, "--batch-size", help="Lines per biLM call"),
    max_sentence_tokens: Optional[int] = typer.Option(None, "--max-tokens", help=bilm_help("--max-tokens", "Lines longer than this are cut into windows of at most this many tokens, each embedded on its own")),
    initial_state: Optional[str] = typer.Option(None, "--initial-state", help=bilm_help("--initial-state", "auto | zeros | warm: where each window's LSTMs start")),
    device: str = typer.Option("cpu", "--device", help="torch device; 'cuda' under torchrun means cuda:$LOCAL_RANK"),
    precision: Optional[str] = typer.Option(None, "--precision", help=bilm_help("--precision", "fp32 (exact) | int8 | bf16 (CPUs with bf16) | fp16 (GPUs): the biLM's products")),
    shard: str = typer.Option("0/1", "--shard", help="i/n: embed lines k with k % n == i; auto: RANK/WORLD_SIZE"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar"),
) -> None:
    """Embed every line of a corpus into an HDF5 file (dataset "<k>" and "tokens/<k>" for line k). Rerun to resume."""
    from .embed_job import Shard, check_input, check_output, resolve_device, shard_output
    from ..sources.download import resolve_model

    output: Optional[Path] = None
    try:
        with user_errors():
            chosen = Shard.parse(shard)
            output = shard_output(output_file, chosen, auto=shard == "auto")
            if model is not None:
                if options_file is not None or weight_file is not None:
                    raise typer.BadParameter("Give --model or --options/--weights, not both")
                options_file, weight_file = map(str, resolve_model(model))
            # the files before the model's imports (seconds): a mistyped path is reported at once
            check_input(input_file)
            check_output(output)
            check_model_paths(options_file, weight_file)

            from .embed import EmbedSettings, settings_from_options, embed_file
            from ..model.devices import check_device

            try:
                check_device(resolve_device(device))
            except ElmoSettingsError as err:  # it names no option
                raise ElmoSettingsError(f"--device: {err}") from None
            bilm = settings_from_options(
                {
                    "--options": options_file,
                    "--weights": weight_file,
                    "--lang": lang,
                    "--initial-state": initial_state,
                    "--max-tokens": max_sentence_tokens,
                    "--precision": precision,
                }
            )
            settings = EmbedSettings(
                bilm, layers=layers, mix_weights=_parse_weights(mix_weights), gamma=gamma, jsonl=jsonl,
                whitespace=whitespace, shard=chosen,
            )
            with sigterm_as_interrupt():  # close the file cleanly on SIGTERM as on Ctrl-C
                result = embed_file(input_file, output, settings, batch_size=batch_size, device=device, progress=not quiet)
    except KeyboardInterrupt:
        written = output is not None and output.exists()
        kept = f"finished batches are kept in {output}; run the same command to continue" if written else "nothing was written"
        typer.echo(f"Interrupted: {kept}.", err=True)
        raise typer.Exit(130)
    if result.already_complete:
        typer.echo(f"{output} is already complete; nothing to do.")
    elif result.lines_written == result.lines_total:
        typer.echo(f"Done: {result.lines_total:,} lines, {result.tokens_written:,} tokens → {output}")
    else:  # resumed: the others were written by an earlier run
        this_run = f"{result.lines_written:,} lines and {result.tokens_written:,} tokens in this run"
        typer.echo(f"Done: {result.lines_total:,} lines ({this_run}) → {output}")


def _parse_weights(text: Optional[str]) -> Optional[Tuple[float, ...]]:
    """``"0.2,0.5,0.3"`` → ``(0.2, 0.5, 0.3)``."""
    if text is None:
        return None
    try:
        return tuple(float(w) for w in text.split(","))
    except ValueError:
        raise typer.BadParameter(f"--mix-weights must be numbers separated by commas, found {text!r}") from None


@app.command("plot-mix")
def plot_mix(
    pipeline_dir: Path = typer.Argument(..., help="A trained pipeline (loaded with spacy.load)"),
    output: Path = typer.Argument(..., help="PNG file to write"),
) -> None:
    """Plot each ELMo listener's learned layer weights (softmax) and gamma, one bar group per component."""
    with user_errors():
        check_input_path(pipeline_dir, "Pipeline", PlotError, "give the folder of a trained pipeline (spacy train's model-best)")
        check_output_path(output, "Output", PlotError)
        import spacy

        from .plots import learned_mixes, plot_mixes

        mixes = learned_mixes(spacy.load(pipeline_dir))
        for mix in mixes:
            weights = ",".join(f"{w:.4f}" for w in mix.weights)
            typer.echo(f"{mix.component}: layer weights {weights}  gamma {mix.gamma:.4f}")
        plot_mixes(mixes, output)
    typer.echo(f"Wrote {output}")


@app.command("plot-pretrain")
def plot_pretrain(
    run: Path = typer.Argument(..., help="Output directory of 'pretrain', or its log.jsonl"),
    output: Path = typer.Argument(..., help="PNG file to write"),
) -> None:
    """Plot a pretraining run's training loss and perplexity, and held-out perplexities, against tokens seen."""
    with user_errors():
        check_output_path(output, "Output", PlotError)
        from .plots import plot_pretrain as draw, pretrain_curves

        draw(pretrain_curves(run), output)
    typer.echo(f"Wrote {output}")
