# A CPU-only PyTorch asked for CUDA: "Torch not compiled with CUDA enabled".
import torch
torch.zeros(1).cuda()
