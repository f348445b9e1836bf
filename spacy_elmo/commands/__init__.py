"""The command line (`python -m spacy_elmo ...`): embed, demo, plots and the CLI that wires them; nothing imports it."""
