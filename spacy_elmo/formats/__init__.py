"""File formats: the AllenNLP/bilm-tf weights hdf5 and ELMoForManyLangs models, read and written."""
