"""The ds_config.json keys DeepSpeed 0.16.5 and 0.19.8 know, and those of them simdl reads
(simdl.strategies.zero_config reads a file against these lists).
"""

from __future__ import annotations

# What simdl reads (the rest of DeepSpeed's keys are accepted and listed as not modelled).
READ_TOP = (
    "zero_optimization",
    "fp16",
    "bf16",
    "bfloat16",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "gradient_clipping",
    "train_batch_size",
    "optimizer",
)
# runtime/constants.py and runtime/config.py, 0.16.5 and 0.19.8: top-level keys DeepSpeed reads.
KNOWN_TOP = frozenset(
    READ_TOP
    + (
        "scheduler",
        "zero_allow_untested_optimizer",
        "zero_force_ds_cpu_optimizer",
        "steps_per_print",
        "sparse_gradients",
        "amp",
        "graph_harvesting",
        "communication_data_type",
        "seq_parallel_communication_data_type",
        "prescale_gradients",
        "gradient_predivide_factor",
        "disable_allgather",
        "dump_state",
        "wall_clock_breakdown",
        "memory_breakdown",
        "eigenvalue",
        "progressive_layer_drop",
        "checkpoint",
        "data_types",
        "dataloader_drop_last",
        "sparse_attention",
        "activation_checkpointing",
        "flops_profiler",
        "tensorboard",
        "wandb",
        "csv_monitor",
        "comms_logger",
        "monitor_config",
        "elasticity",
        "aio",
        "autotuning",
        "compression_training",
        "data_efficiency",
        "pipeline",
        "curriculum_learning",
        "quantize_training",
        "nebula",
        "hybrid_engine",
        "compile",
        "timers",
        "weight_quantization",
        "zero_quantized_weights",
        "use_data_before_expert_parallelism",
        "torch_autocast",
        # top-level keys runtime/config.py reads in 0.19.8 and not in 0.16.5
        "disable_python_gc",
        "gradient_allreduce_op",
        "managed_gradient_accumulation",
        "log_level",
    )
)
ZERO_READ = (
    "stage",
    "reduce_bucket_size",
    "allgather_bucket_size",
    "overlap_comm",
    "contiguous_gradients",
    "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold",
    "stage3_max_live_parameters",
    "offload_optimizer",
    "offload_param",
)
# runtime/zero/config.py DeepSpeedZeroConfig fields (and aliases), 0.16.5 and 0.19.8.
ZERO_KNOWN = frozenset(
    ZERO_READ
    + (
        "reduce_scatter",
        "use_multi_rank_bucket_allreduce",
        "allgather_partitions",
        "load_from_fp32_weights",
        "elastic_checkpoint",
        "sub_group_size",
        "cpu_offload_param",
        "cpu_offload_use_pin_memory",
        "cpu_offload",
        "stage3_model_persistence_threshold",
        "stage3_max_reuse_distance",
        "stage3_gather_16bit_weights_on_model_save",
        "stage3_module_granularity_threshold",
        "stage3_use_all_reduce_for_fetch_params",
        "stage3_gather_fp16_weights_on_model_save",
        "ignore_unused_parameters",
        "legacy_stage1",
        "round_robin_gradients",
        "zero_hpz_partition_size",
        "zero_quantized_weights",
        "zero_quantized_nontrainable_weights",
        "zero_quantized_gradients",
        "zeropp_loco_param",
        "mics_shard_size",
        "mics_hierarchical_params_gather",
        "memory_efficient_linear",
        "pipeline_loading_checkpoint",
        "override_module_apply",
        "log_trace_cache_warnings",
        "prefetch_bucket_size",
        "param_persistence_threshold",
        "max_live_parameters",
        # fields DeepSpeedZeroConfig has in 0.19.8 and not in 0.16.5 (runtime/zero/config.py)
        "compute_grad_norm",
        "enable_sanity_checks",
        "leaf_module",
        "parameter_alignment",
        "save_muon_momentum_buffer_in_memory",
        "stage3_allgather_sequential",
        "zenflow",
    )
)
ALIASES = {
    "prefetch_bucket_size": "stage3_prefetch_bucket_size",
    "param_persistence_threshold": "stage3_param_persistence_threshold",
    "max_live_parameters": "stage3_max_live_parameters",
}
OFFLOAD_KNOWN = frozenset(
    (
        "device",
        "nvme_path",
        "buffer_count",
        "buffer_size",
        "max_in_cpu",
        "pin_memory",
        "pipeline_read",
        "pipeline_write",
        "fast_init",
        "ratio",
    )
)
PRECISION_KNOWN = frozenset(
    (
        "enabled",
        "loss_scale",
        "auto_cast",
        "initial_scale_power",
        "loss_scale_window",
        "hysteresis",
        "consecutive_hysteresis",
        "min_loss_scale",
        "fp16_master_weights_and_grads",
        "immediate_grad_update",
        "type",
    )
)
# DeepSpeed optimizer types (runtime/config.py DEEPSPEED_OPTIMIZERS) simdl prices as Adam.
ADAM_TYPES = ("adam", "adamw", "fusedadam", "cpuadam", "onebitadam", "zerooneadam")
