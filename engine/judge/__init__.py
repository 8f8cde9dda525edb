"""Code-execution judge: extraction, sandboxed execution, verdicts, backends."""
