"""Runtime guards a worker applies around candidate calls: roofline floor, storage handed back again, allocator poisoning, L2."""
