"""AllenNLP 0.9's ``allennlp.commands`` package, as far as programs import from it: see :mod:`.elmo`."""
