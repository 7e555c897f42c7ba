"""CUDA-L1's three training stages on TRL (SFT, self-training, contrastive RL) with the evaluator as the reward.

Entry points: `kernelrl train` (cli.py), `pipeline.run(TrainConfig)`. Heavy libraries (torch, transformers, TRL,
PEFT) are imported inside the functions that need them, so importing this package is cheap.
"""
