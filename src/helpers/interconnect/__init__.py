"""Copies and collectives between devices: methods, harnesses, the NCCL binding, fits, fidelity."""
