"""`python -m dryrun --stack NAME`: what `pulumi up` would declare for a stack, from the program itself
run under Pulumi's SDK mocks, with no AWS credentials, Pulumi CLI or network; with `--set KEY=VALUE`,
only what that config change changes, as a diff."""
