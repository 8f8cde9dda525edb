"""Code-execution judge: sandboxed execution of a program against a problem's tests, verdicts, backends."""
