from .builder import OpBuilder


class FusedAdamBuilder(OpBuilder):
    NAME = "fused_adam"

    def __init__(self):
        super().__init__(name=self.NAME)
