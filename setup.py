import re
from pathlib import Path

from setuptools import find_packages, setup

# The version is written once, in spacy_elmo/about.py; reading it as text avoids importing torch here.
ABOUT = Path(__file__).parent / "spacy_elmo" / "about.py"
VERSION = re.search(r'^__version__ = "([^"]+)"', ABOUT.read_text(encoding="utf-8"), re.M).group(1)

setup(
    name="spacy-elmo",
    version=VERSION,
    description="ELMo contextual word vectors for spaCy v3: a PyTorch biLM that reads AllenNLP/bilm-tf weights",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.9",
    packages=find_packages(exclude=["tests", "tests.*"]),
    # The packages' root, said explicitly: with it, `pip install -e .` (setuptools >= 64) puts the checkout on
    # sys.path by a path in a .pth file, as editable_mode=compat does, instead of an import hook, which type checkers
    # cannot follow (mypy would not find spacy_elmo; tests/test_typing.py). The wheel's files are the same.
    package_dir={"": "."},
    include_package_data=True,
    package_data={"spacy_elmo": ["py.typed", "data/*", "data/**/*", "pipeline/configs/*.cfg"]},
    install_requires=[
        "spacy>=3.8,<3.9",
        "thinc>=8.3,<8.4",
        "srsly>=2.4",
        "confection>=0.1",
        "pydantic>=2,<3",
        "typer>=0.9",
        "tqdm>=4.38",
        "numpy>=1.21",
        "h5py>=3.0",
        "torch>=2.1,<2.16",
    ],
    extras_require={
        # build: `spacy package` (the project's package step) builds the sdist with it
        # fastapi, uvicorn, httpx: the example web app (examples/serve.py) served over HTTP in a slow test
        # mypy: a user's script on the public API passes mypy --strict (tests/test_typing.py)
        "test": ["pytest>=7", "hypothesis>=6", "matplotlib>=3.5", "ruff>=0.4", "build>=1", "fastapi>=0.100",
                 "uvicorn>=0.20", "httpx>=0.24", "mypy>=1.8"],
        "plot": ["matplotlib>=3.5"],
        "serve": ["fastapi>=0.100", "uvicorn>=0.20"],
        # bench: benchmarks/versus.py, the elmo component against spacy-curated-transformers' transformer
        # (0.3.x is the line for spaCy 3.7+ with thinc 8; 2.x wants thinc 9)
        "bench": ["spacy-curated-transformers>=0.3.1,<1"],
    },
    entry_points={
        "spacy_factories": ["elmo = spacy_elmo.pipeline.component:make_elmo"],
        "spacy_architectures": [
            "spacy_elmo.ElmoListener.v1 = spacy_elmo.pipeline.listener:build_elmo_listener",
            "spacy_elmo.ElmoEmbedding.v2 = spacy_elmo.pipeline.listener:build_elmo_embedding_v2",
            "spacy_elmo.ElmoBiLm.v2 = spacy_elmo.pipeline.architectures:build_bilm_model_v2",
        ],
    },
)
