"""The reference implementation's kind of decoder: a per-sentence NumPy beam search.

Shared by the benchmarks (bench/decoder.py, bench/reference_pipeline.py) as the baseline our
batched decoders are compared with. Imports only NumPy, so that a process without TensorFlow
(the PyTorch reference pipeline) can use it.
"""

from __future__ import annotations

import numpy as np


def reference_beam_search(leaf_scores: np.ndarray, internal_scores: np.ndarray,
                          leaf_directions: np.ndarray, internal_directions: np.ndarray,
                          max_stack_depth: int) -> tuple[float, list[int], list[int]]:
    """Decodes one sentence the way the reference implementation does (for comparison).

    One combined vocabulary (internal tags, then leaf tags), a −1e9 mask for the other
    kind at each action, and per action an argsort over [depth, beam entry × tag] keeping
    one entry per depth.

    Args:
      leaf_scores: [n, NL] leaf tag log-probabilities of the n words.
      internal_scores: [≥ n−1, NI] internal tag log-probabilities; row i is fencepost i.
      leaf_directions: [NL], 0 for l tags and 1 for r tags.
      internal_directions: [NI], 0 for L tags and 1 for R tags.
      max_stack_depth: the largest stack depth a derivation may reach.

    Returns:
      (score, leaf tag ids, internal tag ids) of the best sequence.
    """
    n, num_leaf = leaf_scores.shape
    num_internal = internal_scores.shape[1]
    depth_change = np.concatenate([
        np.where(internal_directions == 0, 0, -1), np.where(leaf_directions == 0, 1, 0)])
    is_leaf = np.concatenate([np.zeros(num_internal), np.ones(num_leaf)])
    internal_only = -1e9 * is_leaf
    leaf_only = -1e9 * (1 - is_leaf)
    valid_depths = np.arange(1, max_stack_depth + 1)

    scores = np.zeros(1, dtype=np.float32)
    depths = np.zeros(1, dtype=np.int64)
    history = []  # (backpointers, tag ids) per action
    for t in range(n):
        steps = [(np.concatenate([np.zeros(num_internal), leaf_scores[t]]), leaf_only)]
        if t:
            steps.insert(0, (np.concatenate([internal_scores[t - 1], np.zeros(num_leaf)]),
                             internal_only))
        for logits, mask in steps:
            new_scores = scores[:, None] + (logits + mask)[None, :]
            new_depths = depths[:, None] + depth_change[None, :]
            masked = new_scores[None] + np.where(
                new_depths[None] == valid_depths[:, None, None], 0.0, -np.inf)
            masked = masked.reshape(len(valid_depths), -1)
            flat = np.argsort(-masked)[:, :1].flatten()
            backpointers, tag_ids = np.unravel_index(flat, new_scores.shape)
            keep = new_depths[backpointers, tag_ids] == valid_depths
            backpointers, tag_ids = backpointers[keep], tag_ids[keep]
            scores = new_scores[backpointers, tag_ids]
            depths = new_depths[backpointers, tag_ids]
            history.append((backpointers, tag_ids))

    index = int(np.flatnonzero(depths == 1)[0])
    score = float(scores[index])
    path = []
    for backpointers, tag_ids in reversed(history):
        path.append(int(tag_ids[index]))
        index = int(backpointers[index])
    path.reverse()
    leaf_ids = [tag_id - num_internal for tag_id in path[0::2]]
    return score, leaf_ids, path[1::2]
