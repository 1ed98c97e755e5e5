"""What this CPU offers the encoder: its cores, and whether its bfloat16 matmuls run natively.

`share_cores` is the one place that sizes TensorFlow's thread pools, for every way in
(Parser, Spark, the server's --tensorflow_*_parallelism flags).

A bfloat16 export (`--encoder_dtype=bfloat16`) is faster only where oneDNN has bfloat16
instructions to run: AVX-512 BF16 or AMX. Elsewhere TensorFlow converts to float32 and
back around each matmul, and the export runs slower than a float32 one.
"""

from __future__ import annotations

import os

# /proc/cpuinfo flag → the instruction set's name.
BFLOAT16_FLAGS = {"avx512_bf16": "AVX-512 BF16", "amx_bf16": "AMX"}


def _cpuinfo_field(name: str, cpuinfo_path: str) -> str | None:
    """The first value of a field of Linux's /proc/cpuinfo; None where it cannot be read."""
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, colon, value = line.partition(":")
                if colon and key.strip() == name:
                    return value.strip()
    except OSError:
        return None
    return None


def cpu_flags(cpuinfo_path: str = "/proc/cpuinfo") -> set[str] | None:
    """The CPU's feature flags (Linux's /proc/cpuinfo), None where they cannot be read."""
    flags = _cpuinfo_field("flags", cpuinfo_path)
    return set(flags.split()) if flags is not None else None


def cpu_model(cpuinfo_path: str = "/proc/cpuinfo") -> str | None:
    """The CPU's model name (Linux's /proc/cpuinfo), None where it cannot be read."""
    return _cpuinfo_field("model name", cpuinfo_path)


def describe(cpuinfo_path: str = "/proc/cpuinfo") -> str:
    """The CPU's model name, core count and the vector extensions that matter to the
    encoder, in one line (benchmarks print it beside their figures)."""
    name = cpu_model(cpuinfo_path) or "unknown CPU"
    present = cpu_flags(cpuinfo_path) or set()
    extensions = [label for flag, label in (("avx2", "AVX2"), ("fma", "FMA"),
                                            ("avx512f", "AVX-512"),
                                            ("avx512_vnni", "AVX-512 VNNI"),
                                            ("avx512_bf16", "AVX-512 BF16"),
                                            ("amx_bf16", "AMX-BF16")) if flag in present]
    return f"{name}, {os.cpu_count()} CPUs; {', '.join(extensions) or 'no AVX2'}"


def bfloat16_instructions(flags: set[str] | None = None) -> list[str] | None:
    """The names of this CPU's bfloat16 instruction sets ([] for none; None: unknown)."""
    flags = cpu_flags() if flags is None else flags
    if flags is None:
        return None
    return [name for flag, name in BFLOAT16_FLAGS.items() if flag in flags]


def bfloat16_warning(flags: set[str] | None = None) -> str | None:
    """One line for a user about to run a bfloat16 export on a CPU without bfloat16
    instructions; None where the CPU has them (or cannot be read)."""
    if bfloat16_instructions(flags) != []:
        return None
    return ("this CPU has neither AVX-512 BF16 nor AMX: a bfloat16 export runs slower here "
            "than a float32 one (export with --encoder_dtype=float32)")


def available_cores() -> int:
    """The CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def share_cores(concurrent_calls: int, cores: int | None = None, *,
                intra_op: int | None = None, inter_op: int | None = None) -> bool:
    """Sizes TensorFlow's thread pools for `concurrent_calls` model calls at once, each on
    its share of `cores` (default: `available_cores()`), if nothing has sized them yet.

    TensorFlow's default lets every op of every call use all the cores. With two calls in
    flight on a 2-core CPU, their small matmuls and the ~2,000 small ops of a call then
    contend and hand work between threads; sized for them (one intra-op thread per call),
    `Parser` parsed 84-109 against 60 sentences a second at batch 1 and 188-230 against
    184-194 at batch 64 (docs/design-notes.md; measured on 2 cores only).

    It does nothing once TensorFlow's runtime has started (its pools are fixed then) or
    where the pools were set already (e.g. by `tf.config.threading`). This is the one
    place that sizes them, so that every way in (Parser, Spark, the server) obeys the
    same rules.

    Args:
      concurrent_calls: model calls expected to run at once.
      cores: the cores they share (default: `available_cores()`).
      intra_op: threads one op may use, instead of the calls' share of the cores (e.g. a
        server's --tensorflow_intra_op_parallelism); 0 leaves TensorFlow's default.
      inter_op: threads running independent ops, instead of `cores`; 0 leaves
        TensorFlow's default.

    Returns:
      Whether it sized the pools (False too when both sizes are 0: nothing to size).
    """
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    pools = tf.config.threading
    if pools.get_intra_op_parallelism_threads() or pools.get_inter_op_parallelism_threads():
        return False
    cores = cores or available_cores()
    if intra_op is None:
        intra_op = max(1, cores // max(1, concurrent_calls))
    if inter_op is None:
        inter_op = cores
    try:
        if intra_op:
            pools.set_intra_op_parallelism_threads(intra_op)
        if inter_op:
            pools.set_inter_op_parallelism_threads(inter_op)
    except RuntimeError:  # TensorFlow already ran in this process: its pools stay
        return False
    return bool(intra_op or inter_op)


def thread_pools_text() -> str:
    """TensorFlow's thread pools as it reports them, for a log line: e.g. "intra-op 1,
    inter-op default" (0, TensorFlow's default, shows as "default")."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    pools = tf.config.threading
    return ", ".join(f"{name} {count or 'default'}" for name, count in (
        ("intra-op", pools.get_intra_op_parallelism_threads()),
        ("inter-op", pools.get_inter_op_parallelism_threads())))
