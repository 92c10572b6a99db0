"""The model of the upstream endpoint picker (llm-d router v0.10): how it reads a request body,
hashes its prefix blocks, filters and scores pods, plugin by plugin from an `EndpointPickerConfig`.
Imports only `settings` and the standard library's and the toolkit's third-party packages."""
