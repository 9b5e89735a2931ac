"""`normlab bench`: kernel GB/s against `Tensor.copy_`, torch eager and `torch.compile`."""
