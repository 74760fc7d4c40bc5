#!/usr/bin/env python3
"""Times PyTorch's own kernels at the GPU kit's template shapes (copied into the kit as
torch/torch_kernels.py): scaled_dot_product_attention in FP16 (FlashAttention-2 or
memory-efficient, as PyTorch picks; causal where the template is), its forward and
backward for the attention training template (dlc's step adds the per-channel
scaling of X into Q, K and V, the loss, the weights' gradients and their SGD update:
small element-wise and reduction kernels), LayerNorm and
softmax in FP32. Prints `TEMPLATE_I torch MS TFLOPS` per shape (TFLOP/s of the
attention's two products; `-` for the norms): the median of 100 iterations after 20
warm-up ones, the inputs random on the GPU. Keep the shapes as gpu_kit_cases.py's
TEMPLATES.

usage: python3 torch_kernels.py   (needs torch >= 2.0 with CUDA for the attention rows)
"""
import torch
import torch.nn.functional as F

from torch_bench import median_ms  # (beside it in the kit's torch/ folder)

ATTENTION = {
    "attention_fp16": ([(1, 12, 512, 64), (8, 16, 1024, 64), (4, 8, 2048, 128)], False),
    "attention_causal_fp16": ([(1, 12, 512, 64), (16, 16, 512, 128)], True),
}
# Forward and backward (the training template's attention; causal where marked).
ATTENTION_TRAINING = {"attention_train_fp16": [((4, 16, 512, 64), True)]}
ROWS = {
    "softmax": ([(128, 1000), (2048, 512), (64, 8192)], lambda x: torch.softmax(x, dim=-1)),
    "layernorm": ([(128, 768), (2048, 1024), (64, 8192)], lambda x: F.layer_norm(x, x.shape[-1:])),
}


def main():
    with torch.no_grad():
        for name, (shapes, causal) in ATTENTION.items():
            if not hasattr(F, "scaled_dot_product_attention"):
                break
            for i, (b, h, s, d) in enumerate(shapes):
                q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3))
                ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
                flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
                print(f"{name}_{i} torch {ms:.4f} {flops / (ms * 1e-3) / 1e12:.2f}", flush=True)
        for name, shapes in ATTENTION_TRAINING.items():
            if not hasattr(F, "scaled_dot_product_attention"):
                break
            for i, (shape, causal) in enumerate(shapes):
                b, h, s, d = shape
                q, k, v = (torch.randn(*shape, device="cuda", dtype=torch.float16, requires_grad=True)
                           for _ in range(3))
                r = torch.randn(*shape, device="cuda", dtype=torch.float16)

                def step():  # (gradients returned, not accumulated into .grad)
                    with torch.enable_grad():
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                        torch.autograd.grad(o, (q, k, v), r)

                ms = median_ms(step)
                # (forward 4 b h s^2 d, backward 2.5 times that)
                flops = 3.5 * 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
                print(f"{name}_{i} torch {ms:.4f} {flops / (ms * 1e-3) / 1e12:.2f}", flush=True)
        for name, (shapes, f) in ROWS.items():
            for i, shape in enumerate(shapes):
                x = torch.randn(*shape, device="cuda")
                print(f"{name}_{i} torch {median_ms(lambda: f(x)):.4f} -", flush=True)


if __name__ == "__main__":
    main()
