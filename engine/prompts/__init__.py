"""What the model is asked (prompt templates) and how its answer is read back (code extraction)."""
