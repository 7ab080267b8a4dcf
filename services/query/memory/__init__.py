"""Nova items and themes, Jarvus typed memory, Navi facts, Nous decisions, checkpoints."""
