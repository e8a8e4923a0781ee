"""Catalogs: declared data that the signals, the rules and the collectors read alike.

frames (stack frame -> category), kernels (kernel name -> class), stages (span name -> service
stage), gpu_specs (datasheet peaks), dcgm_fields (DCGM/dcgm-exporter field table), serving_fields
(vLLM/SGLang/Triton/TGI metric table). Pure data plus small lookups: no I/O, no third-party import.
"""
