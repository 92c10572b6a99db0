"""Pulumi components: each creates resources from already-validated settings and rendered specs."""
