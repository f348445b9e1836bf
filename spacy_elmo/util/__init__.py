"""Small helpers without ELMo knowledge: atomic files, signals, torch threads, text reading and tokenizing, what counts as a number."""
