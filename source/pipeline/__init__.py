"""The prepare pipeline: what ``prerun_graph`` does to a model, as named stages, one module each.

    import_model            serializer/onnx (or the compiled cache) -> Graph           (at create_graph)
    inference_and_folding   a copy specialised to the bound inputs; Q/DQ fused; shapes inferred, constants folded
    passes                  device-independent rewrites (fusions) at the asked precision
    precision_plan          under int8/uint8: the int8 plan (smoothing, higher-precision and dynamic nodes)
    placement               the prepare bounds, then node -> device with reasons; the small-group policy
    split                   subgraphs (a device's split_graph or the default split), each with its precision
    calibration             activation ranges and the quantized rewrite of each subgraph
    optimize                each device's optimize_graph on its subgraphs (a failure falls back to the CPU)
    allocate_and_prerun     the scheduler: allocate and pre_run every subgraph; released on failure

Each stage is a function from typed records to a typed record; :func:`nnhal.pipeline.prepare.prepare` runs
them in order and records each one's wall time (``nnhal placement`` and ``nnhal profile`` show them). The
mixed-precision search (:mod:`nnhal.pipeline.mixed`) drives the same stages for each of its probes.

Layering: above the scheduler, the passes and the serializer; below the public surface (api, session).
"""
