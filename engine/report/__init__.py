"""Result pages: lineage and run outputs → Markdown and PNG under runs/<spec>/report/."""
