"""A native writer prototype for the apply phase, measured by the bench; never shipped."""
