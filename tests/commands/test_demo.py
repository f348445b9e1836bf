import numpy as np

from spacy_elmo.commands.demo import best_view, nearest_neighbours, run, sense_scores


def test_nearest_neighbours_and_sense_scores_on_hand_made_vectors():
    vectors = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    best, cosine = nearest_neighbours(vectors)
    assert best.tolist() == [1, 0, 3, 2]
    assert np.isclose(cosine[0], 0.9 / np.hypot(0.9, 0.1))
    accuracy, separation = sense_scores(vectors, ["a", "a", "b", "b"])
    assert accuracy == 1.0 and separation > 0.8
    assert sense_scores(vectors, ["a", "b", "a", "b"])[0] == 0.0


def test_demo_runs_and_reports_layer_zero_as_context_free(allennlp_files, capsys):
    run(*map(str, allennlp_files))
    out = capsys.readouterr().out
    assert out.count("(every occurrence has the same vector)") == 2  # layer 0, for "bank" and for "play"
    assert out.count("default mix ('top')") >= 2 and out.count("layer 2 (biLSTM 2)") >= 2
    assert out.count("nearest neighbour of each occurrence with ") == 2


def test_the_neighbours_use_the_best_representation_and_the_default_on_a_tie():
    scores = {"default mix ('top')": (0.75, 0.01), "layer 1 (biLSTM 1)": (0.75, 0.01), "layer 2 (biLSTM 2)": (0.5, 0.3)}
    assert best_view(scores) == "default mix ('top')"
    scores["layer 1 (biLSTM 1)"] = (0.75, 0.02)  # same accuracy, larger separation
    assert best_view(scores) == "layer 1 (biLSTM 1)"
