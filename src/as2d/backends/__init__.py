"""The runtimes a model runs on (`as2d.target.Backend`): one module each, imported only where
a model of that runtime loads, so a torch run never imports MNN and the command line neither.

    torch_backend   torch on the CPU or a CUDA GPU (its rounding bound by dtype)
    mnn_backend     Alibaba's MNN on the CPU (the seed's mobile engine)
"""

RUNTIMES = ("torch", "mnn")  # `Options.runtime`, `--runtime`
