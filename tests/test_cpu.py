"""Tests for tetra_tf/cpu.py: which CPUs run a bfloat16 export natively, and how model
calls share the cores."""

import os

import pytest

from conftest import run_python
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


def test_the_description_names_the_model_cores_and_vector_extensions(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("model name\t: X\nflags\t\t: fpu avx2 fma avx512f amx_bf16\n",
                       encoding="utf-8")
    assert cpu.describe(str(cpuinfo)) == (
        f"X, {os.cpu_count()} CPUs; AVX2, FMA, AVX-512, AMX-BF16")
    assert cpu.describe(str(tmp_path / "missing")) == (
        f"unknown CPU, {os.cpu_count()} CPUs; no AVX2")


def test_bfloat16_instructions_and_the_warning():
    assert cpu.bfloat16_instructions({"avx2", "avx512_bf16", "amx_bf16"}) == [
        "AVX-512 BF16", "AMX"]
    assert cpu.bfloat16_instructions({"avx2", "avx512f"}) == []
    assert cpu.bfloat16_warning({"avx2", "amx_bf16"}) is None
    warning = cpu.bfloat16_warning({"avx2", "avx512f"})
    assert "neither AVX-512 BF16 nor AMX" in warning and "\n" not in warning
    assert "--encoder_dtype=float32" in warning


_POOLS = ("tf.config.threading.get_intra_op_parallelism_threads(), "
          "tf.config.threading.get_inter_op_parallelism_threads()")


@pytest.mark.slow  # fresh TensorFlow processes
def test_share_cores_gives_each_call_its_share_before_tensorflow_runs():
    out = run_python(
        "import tetra_tf, tensorflow as tf\n"
        "from tetra_tf import cpu\n"
        f"print(cpu.share_cores(2, cores=4), {_POOLS})\n"
        f"print(cpu.share_cores(1, cores=4), {_POOLS})\n"  # set already: left as it is
        f"print(cpu.share_cores(3, cores=2), {_POOLS})\n")
    assert out.splitlines() == ["True 2 4", "False 2 4", "False 2 4"]
    out = run_python(  # never below one thread a call
        "import tetra_tf, tensorflow as tf\n"
        "from tetra_tf import cpu\n"
        f"print(cpu.share_cores(3, cores=2), {_POOLS})\n")
    assert out == "True 1 2"


@pytest.mark.slow  # fresh TensorFlow processes
def test_share_cores_leaves_started_or_user_sized_pools_alone():
    out = run_python(
        "import tetra_tf, tensorflow as tf\n"
        "from tetra_tf import cpu\n"
        "tf.constant(1.0) + 1.0\n"  # the runtime has started
        f"print(cpu.share_cores(2, cores=4), {_POOLS})\n")
    assert out == "False 0 0"
    out = run_python(
        "import tetra_tf, tensorflow as tf\n"
        "from tetra_tf import cpu\n"
        "tf.config.threading.set_intra_op_parallelism_threads(3)\n"
        f"print(cpu.share_cores(2, cores=4), {_POOLS})\n")
    assert out == "False 3 0"


@pytest.mark.slow  # fresh TensorFlow processes
def test_share_cores_takes_explicit_sizes_and_zero_keeps_the_default():
    """A server's --tensorflow_*_parallelism flags size the pools through share_cores: an
    explicit size replaces the share, 0 leaves that pool at TensorFlow's default."""
    out = run_python(
        "import tetra_tf, tensorflow as tf\n"
        "from tetra_tf import cpu\n"
        f"print(cpu.share_cores(2, cores=4, intra_op=0, inter_op=0), {_POOLS})\n"
        f"print(cpu.share_cores(2, cores=4, intra_op=1, inter_op=0), {_POOLS})\n"
        "print(cpu.thread_pools_text())\n")
    assert out.splitlines() == ["False 0 0", "True 1 0", "intra-op 1, inter-op default"]
    out = run_python(
        "import tetra_tf, tensorflow as tf\n"
        "from tetra_tf import cpu\n"
        f"print(cpu.share_cores(2, cores=4, inter_op=3), {_POOLS})\n")
    assert out == "True 2 3"
