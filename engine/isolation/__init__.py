"""The five isolation rules and `validate_spec`, which runs them: a leaky spec is refused here."""
