"""DeepSpeed (export target ``deepspeed``: a ds_config JSON).

Overlap: ``overlap_comm`` hides the ZeRO gradient reductions and the ZeRO-3 prefetch; the
ZeRO-1/2 gather of updated weights runs after the optimizer step, exposed; with a pipeline the
gradients are reduced after the whole schedule.

What it can express (checked against deepspeed 0.19.8): cp only as Ulysses (the all-to-all flavour,
runtime/sequence_parallel/ulysses_sp.py) and only beside dp and fsdp, no ZeRO with dp replicas, no ZeRO-2/3 with a pipeline, 1F1B only, no KV-head
replication; AutoEP experts with etp 1 beside ep, AutoTP's etp = tp without; the Hugging Face
model code, so attention sinks and sliding windows.
"""

from layoutsearch.frameworks.declaration import Capabilities, Profile

EXPORTER = "layoutsearch.export.deepspeed"

PROFILE = Profile(
    name="deepspeed",
    cp_flavours=("a2a",),
    param_gather_overlap=False,
    pipelined_grad_reduce_overlap=False,
    offload_grad_copy_hidden=True,
    # runtime/zero/stage3.py __add_grad_to_ipg_bucket and stage_1_and_2.py's ipg buffer (contiguous_gradients,
    # on by default) copy each gradient into the bucket the reduce-scatter reads
    zero_grad_copy_in=True,
    # runtime/bf16_optimizer.py update_hp_grads after each microbatch's backward adds the bf16 gradients into fp32
    # ones (the fp16 optimizers accumulate in param.grad), a kernel of their own
    grad_accumulation_fusion=False,
    # runtime/pipe/p2p.py send: dist.send or dist.broadcast, never asynchronous (its 1F1B TrainSchedule)
    pp_sends_block=True,
    # the Hugging Face model code's loss (an eager cross entropy on fp32 logits); Megatron-DeepSpeed's GPT model runs
    # Megatron's unfused vocab-parallel one (megatron/mpu/cross_entropy.py)
    cross_entropies=("eager", "unfused"),
    # runtime/zero/config.py: stage3_max_reuse_distance, 1e9 by default; partitioned_param_coordinator.py
    # release_sub_module frees a module's parameters after its forward unless __params_to_release finds them used
    # again within that many parameters of the trace (a recomputed forward runs the module's hooks again)
    zero3_reuse_distance_params=1_000_000_000,
)

CAPABILITIES = Capabilities(
    target="deepspeed",
    framework="DeepSpeed",
    # the model code's own loss: the Hugging Face models' eager one, Megatron-DeepSpeed's unfused one
    cross_entropies=("eager", "unfused"),
    tp_comm_overlap=False,
    # its optimizers add each microbatch's gradients apart (PROFILE.grad_accumulation_fusion)
    grad_accumulation_fusion=False,
    grad_accumulation_apart=True,
    sequence_parallel=False,
    zero_stages_with_replicas=(),
    zero_stages_with_pp=(0, 1),
    pipeline_schedules=("1f1b",),
    cp_flavours=("a2a",),
    cp_with_model_parallel=False,
    kv_replication=False,
    expert_tensor=("1",),
    expert_tensor_without_ep=("tp",),
    expert_parallel_with_tp_and_pp=False,
    attention_sinks=True,
    offload=("none", "optimizer", "params"),  # offload_optimizer; offload_param (ZeRO-Infinity)
    offload_zero_stages=(1, 2, 3),
    sliding_window=True,  # the Hugging Face model code trains its own attention
    # transformers' DeepseekV3 and Glm4Moe models skip the MTP layers' weights (num_nextn_predict_layers)
    refused_features={
        "multi-token prediction": "the Hugging Face model code builds no multi-token prediction "
        "module"
    },
    why={
        "deepspeed-replicas": "ZeRO shards over the whole data-parallel world (MiCS was removed)",
        "deepspeed-cp-flavour": "its sequence parallelism is Ulysses, which exchanges heads by all-to-all; "
        "it has no ring attention",
        "deepspeed-cp-alone": "Ulysses for Hugging Face models (UlyssesSPAttentionHF.register_with_transformers) "
        "builds sequence- and data-parallel groups only",
        "deepspeed-pipeline": "its PipelineEngine runs 1F1B only (no interleaving, zero-bubble or DualPipe "
        "schedule) and rejects ZeRO-2 and ZeRO-3",
        "deepspeed-kv": "AutoTP does not replicate KV heads",
        "deepspeed-capacity": "AutoEP routes dropless",
        "deepspeed-tp-overlap": "AutoTP all-reduces after its GEMMs",
        "deepspeed-sp": "AutoTP all-reduces each layer's output whole, so the norms and residuals are not "
        "sharded over tp (its sequence_parallel_size is Ulysses, the engine's cp)",
        "deepspeed-etp": "AutoEP has no expert tensor parallelism yet (etp 1), and without AutoEP, "
        "AutoTP splits the experts' linears over tp",
        "deepspeed-ep-tp-pp": "AutoEP's folding with AutoTP supports pp = 1 only",
        "deepspeed-offload-zero": "ZeRO-Offload moves the ZeRO partitions: offload_optimizer is valid "
        "with stages 1-3",
        # transformers' Llama 4 masks the chunks; its SDPA and FlashAttention-2 paths run the whole causal product
        "deepspeed-chunk": "the Hugging Face model code skips masked chunks only under flex attention, "
        "which this export does not choose",
    },
)
