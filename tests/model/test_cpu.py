"""The CPU's features, read from Linux's flag list where there is one, agree with torch's own tests."""
import pytest
import torch

import spacy_elmo.model.cpu as cpu

CPUINFO = "processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fpu sse avx2 {extra}\nbugs\t\t: none\n"


@pytest.mark.parametrize("extra, vnni, bf16, amx", [("", False, False, False), ("avx512_vnni", True, False, False),
                                                    ("avx512_vnni avx512_bf16", True, True, False),
                                                    ("amx_tile", False, True, False),
                                                    ("avx512_vnni amx_tile amx_int8", True, True, True)])
def test_the_features_come_from_the_flags_linux_lists(tmp_path, monkeypatch, extra, vnni, bf16, amx):
    (tmp_path / "cpuinfo").write_text(CPUINFO.format(extra=extra))
    monkeypatch.setattr(cpu, "CPUINFO", tmp_path / "cpuinfo")
    assert {"fpu", "avx2"} <= cpu.cpu_flags() and "none" not in cpu.cpu_flags()
    assert (cpu.vnni_cpu(), cpu.native_bf16_cpu(), cpu.amx_cpu()) == (vnni, bf16, amx)


def test_without_a_flag_list_torch_tells(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu, "CPUINFO", tmp_path / "absent")
    assert cpu.cpu_flags() is None
    assert cpu.vnni_cpu() == torch.cpu._is_vnni_supported()
    assert cpu.native_bf16_cpu() == (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    assert cpu.amx_cpu() == torch.cpu._is_amx_tile_supported()


def test_this_machines_features_agree_with_torchs_tests():
    """On Linux x86 the flags and torch (CPUID) see the same CPU; elsewhere both answers are torch's."""
    assert cpu.vnni_cpu() == torch.cpu._is_vnni_supported()
    assert cpu.native_bf16_cpu() == (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    assert cpu.amx_cpu() == torch.cpu._is_amx_tile_supported()


@pytest.mark.parametrize("listed, expected", [({"1": "48K", "2": "2048K", "3": "105M"}, 2 * 2**20), ({}, 2**20)])
def test_the_l2_cache_size_comes_from_the_list_linux_keeps(tmp_path, monkeypatch, listed, expected):
    for i, (level, size) in enumerate(listed.items()):
        (tmp_path / f"index{i}").mkdir()
        (tmp_path / f"index{i}" / "level").write_text(f"{level}\n")
        (tmp_path / f"index{i}" / "size").write_text(f"{size}\n")
    monkeypatch.setattr(cpu, "CPU_CACHES", tmp_path)
    assert cpu.l2_cache_bytes() == expected
