"""Devices named by the user are checked against what this machine has, with one-line errors."""
import pytest
import torch

from spacy_elmo.errors import ElmoSettingsError
from spacy_elmo.model.devices import check_device


def test_the_cpu_is_always_there():
    assert check_device("cpu") == torch.device("cpu")


def test_a_name_that_is_no_torch_device_is_refused_with_the_names_that_are():
    with pytest.raises(ElmoSettingsError, match=r"'cdua' is not a torch device; give cpu, cuda or cuda:N"):
        check_device("cdua")


def test_the_meta_device_holds_no_data():
    with pytest.raises(ElmoSettingsError, match="holds no data"):
        check_device("meta")


def test_cuda_without_a_gpu_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ElmoSettingsError, match=r"device 'cuda' is not available here: .*; use cpu"):
        check_device("cuda")


@pytest.mark.parametrize("count", [1, 2])
def test_a_gpu_beyond_the_machines_is_refused_naming_those_there_are(monkeypatch, count):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    with pytest.raises(ElmoSettingsError, match=rf"has {count} CUDA device\(s\), cuda:0 to cuda:{count - 1}"):
        check_device(f"cuda:{count}")
    assert check_device(f"cuda:{count - 1}") == torch.device("cuda", count - 1)
