"""The actions of a scheduling cycle, in the order they run."""
