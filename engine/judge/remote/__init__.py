"""The SandboxFusion backend: the same test plan, one unit per HTTP request."""
