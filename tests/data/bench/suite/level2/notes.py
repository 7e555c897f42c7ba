"""Not a task: a helper file without Model, which discovery skips with a reason."""
SCALE = 2.0
