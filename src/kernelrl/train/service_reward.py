"""A reward function for TRL's `GRPOTrainer` that judges completions on a `kernelrl serve` service.

    from trl import GRPOTrainer
    from kernelrl.train.service_reward import ServiceReward

    reward = ServiceReward("http://gpu-box:8000")             # token: $KERNELRL_API_TOKEN
    trainer = GRPOTrainer(model=..., reward_funcs=reward, train_dataset=dataset, ...)

The dataset needs a `task` column (a task id of the server's `--suite`) or a `reference` column (the reference's
source); TRL passes dataset columns to reward functions as keyword arguments. Each completion's program is found
by the same reply parser as everywhere in kernelrl; the batch goes to the service in one request and is judged in
parallel there; rewards are shaped as `kernelrl train` shapes them (CUDA-L1: the speedup normalised per task over
the distinct verified programs seen so far, clipped; failures and caught hacks at the bottom). A completion whose
evaluation could not run gets None (TRL leaves it out) rather than a penalty.
"""
from __future__ import annotations

import hashlib

from kernelrl.client import Client, EvaluationFailed, request
from kernelrl.task import Candidate
from kernelrl.train.contrastive_rl import completion_text
from kernelrl.train.reward import reply_program
from kernelrl.train.shaping import Outcome, RewardShaping, shape_rewards


class ServiceReward:
    """`reward(prompts, completions, task=None, reference=None, **kwargs) -> list[float | None]`."""

    __name__ = "kernelrl_service"  # TRL names the logged reward column after the function

    def __init__(self, url: str, token: str | None = None, shaping: RewardShaping = RewardShaping(),
                 policy: str | None = None, timeout: float | None = 3600.0):
        self.client = Client(url, token)
        self.shaping, self.policy, self.timeout = shaping, policy, timeout
        self.population: dict[str, dict[str, float]] = {}  # task -> candidate digest -> verified speedup

    def __call__(self, prompts, completions, task=None, reference=None, **_) -> list[float | None]:
        if task is None and reference is None:
            raise ValueError("ServiceReward needs a `task` column (task ids of the server's --suite) or a "
                             "`reference` column (reference sources) in the training dataset")
        names = list(task) if task is not None else [
            "reference:" + hashlib.sha256(r.encode()).hexdigest()[:12] for r in reference]
        programs = [reply_program(completion_text(c))[0] for c in completions]
        asked = [i for i, src in enumerate(programs) if src is not None]
        bodies = [request(programs[i], policy=self.policy,
                          **({"reference": reference[i]} if reference is not None else {"task": names[i]}))
                  for i in asked]
        verdicts = self.client.wait_many(self.client.submit_many(bodies), self.timeout, return_errors=True)
        outcomes = [Outcome(task=name, status="no_code") for name in names]
        failed = set()
        for i, v in zip(asked, verdicts):
            if isinstance(v, EvaluationFailed):
                failed.add(i)
                continue
            outcomes[i] = Outcome(task=names[i], status=v.status, speedup=v.speedup)
            if v.ok:
                self.population.setdefault(names[i], {})[Candidate(source=programs[i]).digest] = v.speedup
        population = {name: list(self.population.get(name, {}).values()) for name in set(names)}
        rewards: list[float | None] = list(shape_rewards(outcomes, population, self.shaping))
        for i in failed:
            rewards[i] = None  # the service could not judge it: no signal either way
        return rewards
