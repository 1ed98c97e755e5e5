"""Tests for tetra_tf/cpu.py: which CPUs run a bfloat16 export natively."""

from tetra_tf import cpu


def test_flags_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 avx512f "
                       "avx512_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n", encoding="utf-8")
    assert cpu.cpu_flags(str(cpuinfo)) == {"fpu", "avx2", "avx512f", "avx512_bf16"}
    assert cpu.cpu_model(str(cpuinfo)) == "X"
    assert cpu.cpu_model(str(tmp_path / "missing")) is None
    assert cpu.cpu_flags(str(tmp_path / "missing")) is None
    (tmp_path / "noflags").write_text("processor\t: 0\n", encoding="utf-8")
    assert cpu.cpu_flags(str(tmp_path / "noflags")) is None


def test_bfloat16_instructions_and_the_warning():
    assert cpu.bfloat16_instructions({"avx2", "avx512_bf16", "amx_bf16"}) == [
        "AVX-512 BF16", "AMX"]
    assert cpu.bfloat16_instructions({"avx2", "avx512f"}) == []
    assert cpu.bfloat16_warning({"avx2", "amx_bf16"}) is None
    warning = cpu.bfloat16_warning({"avx2", "avx512f"})
    assert "neither AVX-512 BF16 nor AMX" in warning and "\n" not in warning
    assert "--encoder_dtype=float32" in warning
