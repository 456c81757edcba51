class OpBuilder:
    """DeepSpeed's base of every op's builder: ``load`` JIT-compiles the op's sources."""

    NAME = "op"

    def __init__(self, name):
        self.name = name

    def load(self, verbose=False):
        # the real load ends in torch.utils.cpp_extension.load, which needs the CUDA toolkit
        raise OSError(
            "CUDA_HOME environment variable is not set. Please set it to your CUDA install root."
        )
