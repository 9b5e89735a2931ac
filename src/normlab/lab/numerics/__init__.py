"""`normlab numerics`: FP16/BF16/FP32 error and overflow of the norms against float64."""
