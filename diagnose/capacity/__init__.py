"""Capacity and cost from a measured capture (the method's last step)."""
