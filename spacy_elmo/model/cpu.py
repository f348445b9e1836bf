"""What this CPU multiplies fast (native bf16, AVX512-VNNI for int8) and the precision that suits it.

Read from the flags Linux lists in /proc/cpuinfo where it lists them, so that ``python -m spacy_elmo list`` tells
the precision without importing torch (over a second); elsewhere from torch's own tests, which are private
(``torch.cpu._is_vnni_supported``...: no public equivalent in torch 2.13; a torch without them counts as "no").
"""
from pathlib import Path
from typing import FrozenSet, Optional, Tuple

CPUINFO = Path("/proc/cpuinfo")
CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


def cpu_flags() -> Optional[FrozenSet[str]]:
    """The CPU's feature flags as Linux lists them (``avx2``, ``avx512_vnni``, ``amx_tile``...); None where there is
    no such list (another system, or a CPU whose list is called otherwise, e.g. ARM's ``Features``)."""
    try:
        text = CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return None


def _torch_says(test: str) -> bool:
    import torch

    check = getattr(torch.cpu, test, None)
    return bool(check is not None and check())


def native_bf16_cpu() -> bool:
    """Whether this CPU multiplies bf16 natively (AVX512_BF16 or AMX); without it bf16 is slower than fp32."""
    flags = cpu_flags()
    if flags is not None:
        return bool(flags & {"avx512_bf16", "amx_tile"})
    return _torch_says("_is_avx512_bf16_supported") or _torch_says("_is_amx_tile_supported")


def vnni_cpu() -> bool:
    """Whether this CPU has AVX512-VNNI, where int8 products run several times faster than fp32."""
    flags = cpu_flags()
    return "avx512_vnni" in flags if flags is not None else _torch_says("_is_vnni_supported")


def amx_cpu() -> bool:
    """Whether this CPU has AMX's int8 tiles, where oneDNN's int8 products beat fbgemm's from a few rows up."""
    flags = cpu_flags()
    return "amx_int8" in flags if flags is not None else _torch_says("_is_amx_tile_supported")


def l2_cache_bytes() -> int:
    """The size of one core's L2 cache, as Linux lists it (1 MiB where it lists none)."""
    for index in sorted(CPU_CACHES.glob("index*")):
        try:
            if (index / "level").read_text().strip() == "2":
                size = (index / "size").read_text().strip()
                return int(size.rstrip("KMG")) * {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1], 1)
        except (OSError, ValueError):
            break
    return 2**20


def suggested_precision() -> Tuple[str, str]:
    """The precision that suits this CPU, and why (measured: BENCHMARKS.md, "Reduced precision")."""
    if vnni_cpu():
        closer = "; 'bf16' is closer to fp32" if native_bf16_cpu() else ""
        return "int8", (
            "this CPU has AVX512-VNNI, where int8 ran the published models 1.6-4x as fast as fp32 in batches; the "
            f"embedded models gain little (1.2x in batches, slower one sentence a call: keep fp32 for them){closer}"
        )
    return "fp32", (
        "this CPU has no AVX512-VNNI: there 'int8' was measured 1.2x fp32 for 'small' and 1.9x for 'original' at one "
        f"thread (1.0x for 'small' at two), so it pays for the large models only{'' if native_bf16_cpu() else '; bf16 needs native bf16'}"
    )
