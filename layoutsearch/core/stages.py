"""How a pipeline splits the layers over its stages: evenly, or with lighter first and last stages.

pp no longer has to divide the layers. Four splits, in the order the engine tries them
(arrays in, arrays out, one entry per candidate):

1. even: pp x v divides L; every stage holds L / pp layers.
2. embedding and loss counted as layers (Megatron ``--account-for-embedding-in-pipeline-split
   --account-for-loss-in-pipeline-split``, as NVIDIA's Llama 3.1 405B runs use: 126 layers on
   pp=8 with 8 virtual stages): pp x v divides L + 2, so the first and the last virtual chunk
   hold one layer fewer (first and last stage v (L + 2)/(pp v) - 1 layers, the others one more).
3. given first and last stages (Megatron ``--decoder-first-pipeline-num-layers`` /
   ``--decoder-last-pipeline-num-layers``, torchtitan's first/last stage options): the middle
   pp - 2 stages share the rest equally; with virtual stages every stage's count divides by v
   (megatron-core TransformerConfig), or, given counts that do not, each stage's layers spread over
   its v chunks (Megatron ``--pipeline-model-parallel-layout``: ``given_chunks``), as Megatron-Bridge's
   DeepSeek-V3 recipes lighten the last stage by three layers for the MTP module and the loss.
   Without given counts the engine proposes first and last stages next to middle stages of ceil(L / pp)
   layers rounded up to v: they share the rest, the last stage ``head`` layers lighter (its output head
   and multi-token-prediction modules, ``costs.params.output_layer_equivalents``) where the rest allows.

4. chunk layout (Megatron ``--pipeline-model-parallel-layout``, as NVIDIA's DeepSeek-V3 recipes
   split 61 layers over pp=4 x 4 virtual stages): with virtual stages, when none of the above
   fits, the L layers plus the embedding and the loss (one slot each) fill the pp x v chunks in
   order (chunk i on stage i mod pp), floor((L + 2)/(pp v)) slots each and one more for the first
   (L + 2) mod (pp v) chunks; the embedding opens the first chunk, the loss closes the last.
   ``chunk_layout`` gives the chunks.

5. balanced (a search choice beside the engine's split, Megatron ``--pipeline-model-parallel-layout``): the
   contiguous split of the layers, each weighed by its forward matmul FLOPs per token with the embedding on the
   first and the output head, the loss and the MTP modules on the last (``costs.params.layer_weights``: DeepSeek-V3's
   3 dense layers, its MoE layers and its output end weigh what they compute), into pp x v chunks (chunk i on stage
   i mod pp) whose heaviest chunk is lightest: exact (``balanced_chunk_sizes``); with v = 1 a chunk is a stage, so
   the heaviest stage is lightest; with v > 1 a local search then evens the stages out (``_even_out_stages``)
   and the bubble is costed at the largest chunk (``balanced_bubble_stages``). ``balanced_split`` gives the
   stages' layers, ``balanced_chunks`` the chunks, ``chunk_sizes`` the chunks of the other splits.

``split_layers`` returns (first, middle, last) layers per stage and whether the split is valid;
with pp = 1 all three are L, with pp = 2 the middle is the heavier of the two.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from layoutsearch.core.arrays import per_key

EVEN, EMBEDDING_AND_LOSS, FIRST_LAST, CHUNK_LAYOUT, BALANCED = 0, 1, 2, 3, 4
SPLIT_NAMES = {
    EVEN: "even",
    EMBEDDING_AND_LOSS: "embedding-and-loss",
    FIRST_LAST: "first-last",
    CHUNK_LAYOUT: "chunk-layout",
    BALANCED: "balanced",
}
# a candidate's split choice (``Shapes.spl``): the engine's split above (kinds 0-3), or the balanced one
ENGINE_SPLIT, BALANCED_SPLIT = 0, 1


def split_layers(num_layers: int, pp, v, first=0, last=0, head: int = 0):
    """(first, middle, last, kind, ok) arrays; ``first``/``last`` 0 = not given (the engine's choice);
    ``head``: layers' worth of work the last stage does besides its layers, which a proposed split takes off it;
    it moves layers between the first and the last stage only, never changes ``kind`` or ``ok``.
    Computed once per distinct (pp, v, first, last): candidates share a handful of them."""
    pp, v, first, last = (
        np.atleast_1d(np.asarray(x, dtype=np.int64)) for x in (pp, v, first, last)
    )
    return per_key(
        lambda pp, v, first, last: _split_layers(num_layers, pp, v, first, last, head),
        pp,
        v,
        first,
        last,
    )


def _split_layers(num_layers: int, pp, v, first, last, head: int):
    """``split_layers`` of int64 arrays."""
    pp, v, first, last = np.broadcast_arrays(pp, v, first, last)
    L, chunks = num_layers, pp * v
    given = (first > 0) | (last > 0)
    even = ~given & (L % chunks == 0)
    per_chunk = (L + 2) // chunks
    account = ~given & ~even & ((L + 2) % chunks == 0) & (pp > 1) & (per_chunk >= 2)
    # engine-proposed first/last: middle stages of ceil(L/pp) rounded up to v, equal first and last
    mid_guess = -(-np.maximum(L, 1) // np.maximum(pp, 1))
    mid_guess = -(-mid_guess // v) * v
    rest = L - (pp - 2) * mid_guess
    propose = ~given & ~even & ~account
    # the last stage gets half of what the rest leaves after its head, in whole chunks of v, at least one chunk,
    # and no less than leaves the first stage a middle stage's count
    lighter = np.maximum(np.maximum((rest - head) // (2 * v) * v, v), rest - mid_guess)
    f_given = np.where(given, first, np.where(propose, rest - lighter, 0))
    l_given = np.where(given, last, np.where(propose, lighter, 0))
    middle_count = np.maximum(pp - 2, 1)
    m_given = np.where(
        pp > 2, (L - f_given - l_given) // middle_count, np.maximum(f_given, l_given)
    )
    # each stage a multiple of v: --decoder-first/last-pipeline-num-layers; given counts that are not are a
    # --pipeline-model-parallel-layout of chunks (Megatron-Bridge's DeepSeek-V3 recipes), which Megatron writes
    by_v = (f_given % v == 0) & (l_given % v == 0) & (m_given % v == 0)
    fl_ok = (
        (pp >= 2)
        & (f_given >= v)
        & (l_given >= v)
        & (given | by_v)
        & np.where(
            pp > 2,
            ((L - f_given - l_given) % middle_count == 0) & (m_given >= v),
            f_given + l_given == L,
        )
        & (f_given <= m_given)
        & (l_given <= m_given)
    )
    chunked = propose & ~fl_ok & (v > 1) & (pp > 1) & (L + 2 >= chunks)
    c_first, c_middle, c_last = _chunk_stage_layers(L, pp, v)
    f = np.select([even, account, chunked], [L // pp, v * per_chunk - 1, c_first], f_given)
    m = np.select([even, account, chunked], [L // pp, v * per_chunk, c_middle], m_given)
    last_ = np.select([even, account, chunked], [L // pp, v * per_chunk - 1, c_last], l_given)
    kind = np.select([even, account, chunked], [EVEN, EMBEDDING_AND_LOSS, CHUNK_LAYOUT], FIRST_LAST)
    ok = even | account | fl_ok | chunked
    single = pp == 1
    ok = np.where(single, ~given, ok)
    f, m, last_ = (np.where(single, L, x) for x in (f, m, last_))
    return f, m, last_, np.where(single, EVEN, kind), ok


def _chunk_stage_layers(num_layers: int, pp, v):
    """(first, heaviest middle, last) stage layers of ``chunk_layout`` (arrays)."""
    slots, chunks = num_layers + 2, np.maximum(pp * v, 1)
    base, extra = slots // chunks, slots % chunks

    # stage r holds chunks r, r + pp, ...: v chunks, of which those with index < extra hold one more
    def stage_slots(r):
        return v * base + np.clip(-(-(extra - r) // np.maximum(pp, 1)), 0, v)

    middle = np.where(pp > 2, stage_slots(np.minimum(1, pp - 1)), 0)
    return stage_slots(0) - 1, np.maximum(middle, 0), stage_slots(pp - 1) - 1


def chunk_layout(num_layers: int, pp: int, v: int) -> list[list[str]]:
    """The pp x v chunks of the chunk-layout split in order (chunk i on stage i mod pp, virtual
    stage i // pp), each a list of 'E' (embedding), 't' (a transformer layer), 'L' (the loss)."""
    slots, chunks = num_layers + 2, pp * v
    base, extra = divmod(slots, chunks)
    items = ["E"] + ["t"] * num_layers + ["L"]
    out, at = [], 0
    for i in range(chunks):
        n = base + (i < extra)
        out.append(items[at : at + n])
        at += n
    return out


def given_chunks(num_layers: int, pp: int, v: int, first: int, last: int) -> list[list[str]]:
    """The pp x v chunks of a given first/last split (chunk i on stage i mod pp): each stage fills its v chunks
    in order with a middle stage's chunk size, ceil(middle / v), keeping a layer for each chunk after, so a
    lighter stage's remainder goes to its last chunks (Megatron-Bridge's DeepSeek-V3 layout on pp=8 x 2:
    'Etttt|' + 'tttt|' x 14 + 'tmL'); 'E' opens the first chunk, 'L' closes the last (as ``chunk_layout``)."""
    middle = (num_layers - first - last) // (pp - 2) if pp > 2 else max(first, last)
    counts, size = [first] + [middle] * (pp - 2) + [last], -(-middle // v)
    per_stage = []
    for n in counts:
        sizes = []
        for j in range(v):
            sizes.append(min(size, n - (v - j - 1)))
            n -= sizes[-1]
        per_stage.append(sizes)
    chunks = [["t"] * per_stage[i % pp][i // pp] for i in range(pp * v)]
    chunks[0].insert(0, "E")
    chunks[-1].append("L")
    return chunks


def balanced_chunk_sizes(weights: tuple[float, ...], chunks: int) -> tuple[int, ...]:
    """Items per chunk of the contiguous split of ``weights`` into ``chunks`` non-empty chunks whose heaviest
    chunk weighs least. Exact: that weight is a contiguous sum, the smallest for which a greedy packing needs
    no more than ``chunks`` chunks (binary search over the sorted sums). Among the splits that reach it, each
    boundary goes where the running weight is nearest its even share (k / chunks of the total), inside the
    range the bound allows (between the packings from the last and from the first), so the stages that
    gather every pp-th chunk stay even; where that breaks the bound, the packing from the last, whose
    first chunks (on the stages 1F1B keeps the most microbatches in flight on) are the lightest.
    () when there are fewer weights than chunks."""
    n = len(weights)
    if chunks < 1 or n < chunks:
        return ()
    if chunks == 1:
        return (n,)
    prefix = np.concatenate([[0.0], np.cumsum(weights)])
    sums = np.unique((prefix[None, :] - prefix[:, None])[np.triu_indices(n + 1, 1)])
    low, high = 0, len(sums) - 1  # sums[high] (the total) always fits
    while low < high:
        mid = (low + high) // 2
        if len(_pack(weights, chunks, sums[mid])) <= chunks:
            high = mid
        else:
            low = mid + 1
    bound = sums[low] * (1 + 1e-9)  # the slack absorbs float sums
    from_last = _pack(weights, chunks, sums[low], exact=True)
    from_first = _pack(weights[::-1], chunks, sums[low], exact=True)[::-1]
    earliest, latest = np.cumsum(from_last)[:-1], n - np.cumsum(from_first[::-1])[:-1][::-1]
    share = prefix[-1] * np.arange(1, chunks) / chunks
    nearest = np.abs(prefix[None, 1:n] - share[:, None]).argmin(axis=1) + 1
    cuts = np.concatenate([[0], np.clip(nearest, earliest, latest), [n]])
    chunk_weights = prefix[cuts[1:]] - prefix[cuts[:-1]]
    if (np.diff(cuts) > 0).all() and (chunk_weights <= bound).all():
        return tuple(int(x) for x in np.diff(cuts))
    return from_last


def _even_out_stages(prefix: np.ndarray, sizes: tuple[int, ...], pp: int) -> tuple[int, ...]:
    """``sizes`` with boundaries moved a layer at a time while that lowers the heaviest stage (stage r sums
    chunks r, r + pp, ...), then the sum of squared stage weights, keeping every chunk non-empty and no
    heavier than the heaviest chunk: the interleaved split's stages even out (a local search, not a proof)."""
    cuts = np.concatenate([[0], np.cumsum(sizes)])
    chunk_of = np.arange(len(sizes)) % pp

    def key(c):
        stage = np.bincount(chunk_of, prefix[c[1:]] - prefix[c[:-1]], minlength=pp)
        return (round(stage.max(), 6), round(float((stage**2).sum()), 6))

    bound = (prefix[cuts[1:]] - prefix[cuts[:-1]]).max() * (1 + 1e-9)
    best, improved = key(cuts), True
    while improved:
        improved = False
        for k in range(1, len(cuts) - 1):
            for step in (-1, 1):
                trial = cuts.copy()
                trial[k] += step
                widths = prefix[trial[1:]] - prefix[trial[:-1]]
                if trial[k - 1] < trial[k] < trial[k + 1] and widths.max() <= bound:
                    if key(trial) < best:
                        cuts, best, improved = trial, key(trial), True
    return tuple(int(x) for x in np.diff(cuts))


def _pack(weights, chunks: int, bound: float, exact: bool = False) -> tuple[int, ...]:
    """Chunk sizes packing ``weights`` from the last, each chunk as full as ``bound`` allows (a relative
    1e-9 slack absorbs float sums); ``exact`` also leaves one item for each chunk still to fill."""
    sizes: list[int] = []
    total, size = 0.0, 0
    for i in range(len(weights) - 1, -1, -1):
        w = float(weights[i])
        to_fill = chunks - len(sizes) - 1  # chunks still to open before this one
        if size and (total + w > bound * (1 + 1e-9) or (exact and i < to_fill)):
            sizes.append(size)
            total, size = 0.0, 0
        total, size = total + w, size + 1
    sizes.append(size)
    return tuple(reversed(sizes))


@lru_cache(maxsize=4096)  # per (weights, pp, v): a search asks for a handful
def balanced_stage_chunks(weights: tuple[float, ...], pp: int, v: int) -> tuple[int, ...]:
    """Layers per chunk of the balanced split over pp x v chunks: ``balanced_chunk_sizes``, and with v > 1
    its stages evened out (``_even_out_stages``)."""
    sizes = balanced_chunk_sizes(weights, pp * v)
    if v == 1 or not sizes:
        return sizes
    return _even_out_stages(np.concatenate([[0.0], np.cumsum(weights)]), sizes, pp)


def balanced_split(weights: tuple[float, ...], pp: int, v: int) -> tuple[int, int, int, bool]:
    """(first, middle, last, ok) layers per stage of ``balanced_stage_chunks`` over pp x v chunks (chunk i on
    stage i mod pp): middle is the heaviest of the stages between, with pp = 2 the heavier of the two; not
    ok where there are fewer layers than chunks."""
    sizes = balanced_stage_chunks(weights, pp, v)
    if pp < 2 or not sizes:
        return len(weights), len(weights), len(weights), pp == 1
    per_stage = [sum(sizes[r::pp]) for r in range(pp)]
    middle = max(per_stage[1:-1]) if pp > 2 else max(per_stage[0], per_stage[-1])
    return per_stage[0], middle, per_stage[-1], True


def balanced_bubble_stages(weights: tuple[float, ...], pp: int, v: int) -> float:
    """The v the step formula's bubble, (p - 1)/v of the heaviest stage, takes for the balanced split: the
    heaviest stage's layers over the largest chunk's, so the bubble is (p - 1) of the largest chunk (v itself
    when the chunks are equal; DeepSeek-V3's 61 layers on pp=8 x 7 chunks of 1 and 2 layers: 8 / 2 = 4, not 7)."""
    sizes = balanced_stage_chunks(weights, pp, v)
    if pp < 2 or not sizes:
        return float(v)
    return max(sum(sizes[r::pp]) for r in range(pp)) / max(sizes)


def balanced_chunks(
    weights: tuple[float, ...], pp: int, v: int, mtp_layers: int = 0
) -> list[list[str]]:
    """The pp x v chunks of the balanced split (as ``chunk_layout``): 'E' opens the first, the MTP modules
    ('m') and 'L' close the last."""
    chunks = [["t"] * n for n in balanced_stage_chunks(weights, pp, v)]
    chunks[0].insert(0, "E")
    chunks[-1] += ["m"] * mtp_layers + ["L"]
    return chunks


def chunk_sizes(
    num_layers: int, pp: int, v: int, kind: int, first: int, last: int
) -> tuple[int, ...]:
    """Transformer layers of each of the pp x v chunks in order (chunk i on stage i mod pp) of a split of
    kind ``kind`` (EVEN, EMBEDDING_AND_LOSS, FIRST_LAST with its ``first`` and ``last`` counts, CHUNK_LAYOUT),
    the layers filling the chunks in order; a stage with v chunks of a count v divides, count / v each."""
    chunks = pp * v
    if kind == EVEN:
        return (num_layers // chunks,) * chunks
    if kind == EMBEDDING_AND_LOSS:
        per_chunk = (num_layers + 2) // chunks
        return (per_chunk - 1,) + (per_chunk,) * (chunks - 2) + (per_chunk - 1,)
    if kind == CHUNK_LAYOUT:
        return tuple(c.count("t") for c in chunk_layout(num_layers, pp, v))
    middle = (num_layers - first - last) // (pp - 2) if pp > 2 else max(first, last)
    counts = [first] + [middle] * (pp - 2) + [last]
    if all(n % v == 0 for n in counts):
        return tuple(counts[i % pp] // v for i in range(chunks))
    return tuple(c.count("t") for c in given_chunks(num_layers, pp, v, first, last))


def default_microbatches(global_batch_seqs: int, data_units: int, pp: int, v: int = 1) -> int:
    """The microbatch count a layout gets when none is given: 1 without a pipeline, else the
    smallest K >= pp (a multiple of pp when interleaved) that splits each data unit's sequences
    evenly; pp when none does (the layout check then says why)."""
    if pp <= 1:
        return 1
    per_unit = global_batch_seqs // max(data_units, 1)
    step = pp if v > 1 else 1
    for k in range(pp, per_unit + 1, step):
        if global_batch_seqs % (data_units * k) == 0:
            return k
    return pp
