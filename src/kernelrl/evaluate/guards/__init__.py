"""Runtime guards a worker applies around candidate calls: roofline floor, output poisoning, allocator poisoning, L2."""
