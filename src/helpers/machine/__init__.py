"""What this machine is: the environment probe, its parsers and verdicts, the GPU monitor, CUDA libraries."""
