"""vnpu: a simulated integer accelerator, the template a hardware team copies."""
