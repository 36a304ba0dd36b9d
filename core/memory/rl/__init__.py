"""Memory of preference and RL post-training (DPO, GRPO, PPO) per phase: generation, scoring, the update."""
