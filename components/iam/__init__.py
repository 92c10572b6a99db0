"""IAM documents shared by the units: who may assume a role, and what the roles may do."""
